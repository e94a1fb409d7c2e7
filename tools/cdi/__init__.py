"""CDI on the real node: `python -m tools.cdi.install`."""
