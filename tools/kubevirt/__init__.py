"""KubeVirt on the real node: `python -m tools.kubevirt.kubevirt_install up`."""
