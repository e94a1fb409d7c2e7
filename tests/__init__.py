"""Every test tier, one package per tier; the shared helpers sit at this level (tests/README.md)."""
