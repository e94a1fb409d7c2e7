"""deploy/ rendered from the Helm chart: `python -m tools.deploy.render [--check]`."""
