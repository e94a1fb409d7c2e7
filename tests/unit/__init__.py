"""The unit tier."""
