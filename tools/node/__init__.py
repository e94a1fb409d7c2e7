"""One real node joined to the test control plane: `python -m tools.node.node up|down|status`."""
