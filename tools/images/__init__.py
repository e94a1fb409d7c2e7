"""The operator image's hash locks: `python -m tools.images.lock compile|check`."""
