"""Benchmarks (`make bench`): each `run()` returns figures plus the anchor measured in the same run."""
