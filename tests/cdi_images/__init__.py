"""The CDI images tier."""
