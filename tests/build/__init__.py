"""The build tier."""
