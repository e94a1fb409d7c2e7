"""Structural counts of src/: `python -m tools.metrics.code_counts`."""
