"""The unit tier on the floor versions of the runtime dependencies: `python -m tools.deps.floors`."""
