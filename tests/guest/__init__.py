"""The guest tier."""
