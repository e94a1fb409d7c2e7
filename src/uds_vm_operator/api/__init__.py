"""The UDSVirtualMachine API: pydantic models (the source of truth), errors and the CRD generator."""

from uds_vm_operator.api.errors import SpecError
from uds_vm_operator.api.models import (
    API_GROUP,
    API_VERSION,
    VM_API_VERSION,
    VM_KIND,
    VM_PLURAL,
    Condition,
    UDSVirtualMachineSpec,
    UDSVirtualMachineStatus,
    netbios_problem,
    parse_vm_spec,
    validate_vm_name,
)

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "VM_API_VERSION",
    "VM_KIND",
    "VM_PLURAL",
    "Condition",
    "SpecError",
    "UDSVirtualMachineSpec",
    "UDSVirtualMachineStatus",
    "netbios_problem",
    "parse_vm_spec",
    "validate_vm_name",
]
