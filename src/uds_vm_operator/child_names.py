"""The names of a VM's children, defined once: the renderers make them, the release and the CLI find them.

Light on purpose (no pydantic, no HTTP): ``uds-vmctl`` imports it at start-up.
"""

from __future__ import annotations


def root_dv_name(vm_name: str) -> str:
    """``<name>-dv``: the DataVolume holding the imported source image."""
    return f"{vm_name}-dv"


def system_dv_name(vm_name: str) -> str:
    """``<name>-system``: the blank disk a Windows ISO installation writes to."""
    return f"{vm_name}-system"


def drivers_dv_name(vm_name: str) -> str:
    """``<name>-drivers``: a clone of the virtio-win driver media DataSource."""
    return f"{vm_name}-drivers"


def cloudinit_secret_name(vm_name: str) -> str:
    """``<name>-cloudinit``: the NoCloud user data."""
    return f"{vm_name}-cloudinit"


def sysprep_secret_name(vm_name: str) -> str:
    """``<name>-sysprep``: the Windows unattend files."""
    return f"{vm_name}-sysprep"


def admin_secret_name(vm_name: str) -> str:
    """``<name>-admin``: the generated Windows Administrator password."""
    return f"{vm_name}-admin"


def netpol_name(vm_name: str) -> str:
    """``<name>-netpol``: the VM's NetworkPolicy."""
    return f"{vm_name}-netpol"


def metrics_service_name(vm_name: str) -> str:
    """``<name>-metrics``: the Service in front of a monitored guest's node exporter (spec.monitoring)."""
    return f"{vm_name}-metrics"


def data_disk_pvc_name(vm_name: str, disk_name: str) -> str:
    """``<name>-data-<disk>``: a data disk PVC; stable so a Retain disk is re-attached by name."""
    return f"{vm_name}-data-{disk_name}"


def service_name(vm_name: str, port: int) -> str:
    """``<name>-<port>``: the Service of one exposed port."""
    return f"{vm_name}-{port}"
