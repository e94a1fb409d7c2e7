"""kubeconform and checkov on the rendered chart: `python -m tools.scan.chart_scan`."""
