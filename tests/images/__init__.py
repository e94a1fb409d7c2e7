"""The image tier."""
