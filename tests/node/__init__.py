"""The real-node tier."""
