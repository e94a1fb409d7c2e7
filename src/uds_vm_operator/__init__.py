"""uds-vm-operator: hardened, verified virtual machines on KubeVirt and CDI for air-gapped sites."""

__version__ = "0.1.0"
RECONCILER_NAME = "kopf-python"
FIELD_MANAGER = "uds-vm-operator"
MANAGED_BY_LABEL = {"app.kubernetes.io/managed-by": "uds-vm-operator"}
