"""The UDSVirtualMachinePool API (``uds.dev/v1alpha1``): a fleet of identical UDSVirtualMachines.

A pool holds ``replicas`` members made from ``template`` (a UDSVirtualMachine spec plus labels and
annotations). A template change rolls the fleet surge-first and readiness-gated (``fleet/planner.py``);
a member that misses ``progressDeadlineSeconds`` halts the rollout, and with ``rollbackOnFailure`` the pool
returns to the revision it last completed. The CRD is generated from these models like the VM's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import ConfigDict, Field, model_validator

from uds_vm_operator.api.errors import SpecError
from uds_vm_operator.api.models import (
    API_GROUP,
    API_VERSION,
    MAX_VM_NAME_LENGTH,
    ApiModel,
    Condition,
    UDSVirtualMachineSpec,
    parse_spec_mapping,
)

POOL_KIND = "UDSVirtualMachinePool"
POOL_PLURAL = "udsvirtualmachinepools"
POOL_SINGULAR = "udsvirtualmachinepool"
POOL_SHORT_NAMES = ("udsvmpool",)
POOL_API_VERSION = f"{API_GROUP}/{API_VERSION}"

MAX_REPLICAS = 1000
MAX_ORDINAL_DIGITS = 4
"""Ordinals stay below 10,000 (at most ``2 * MAX_REPLICAS`` members exist during a surge)."""
MAX_POOL_NAME_LENGTH = MAX_VM_NAME_LENGTH - 1 - MAX_ORDINAL_DIGITS
"""``<pool>-<ordinal>`` must itself be a valid UDSVirtualMachine name."""

INT_OR_PERCENT_PATTERN = r"^(100|[1-9]?[0-9])%$"
_INT_OR_PERCENT = re.compile(INT_OR_PERCENT_PATTERN)
_LABEL_VALUE_MAX = 63

IntOrPercent = Annotated[
    int | str,
    Field(
        json_schema_extra={
            "x-kubernetes-int-or-string": True,
            "x-kubernetes-validations": [
                {
                    "rule": f"type(self) == int ? (self >= 0 && self <= {MAX_REPLICAS}) : "
                    f"string(self).matches('{INT_OR_PERCENT_PATTERN}')",
                    "message": "must be a member count such as 1 or a percentage such as '25%'",
                }
            ],
        },
        description="A member count (1) or a percentage of replicas ('25%').",
    ),
]


def _check_int_or_percent(value: int | str, field: str) -> None:
    if isinstance(value, bool):
        raise SpecError(f"{field}: expected a count such as 1 or a percentage such as '25%', got {value!r}")
    if isinstance(value, int):
        if not 0 <= value <= MAX_REPLICAS:
            raise SpecError(f"{field}: {value} is out of range; use 0..{MAX_REPLICAS} or a percentage")
        return
    if not _INT_OR_PERCENT.match(value):
        raise SpecError(f"{field}: {value!r} is neither a count nor a percentage; write e.g. 1 or '25%'")


class RollingUpdate(ApiModel):
    """How far a rollout may go beyond ``replicas`` (surge) and below it (unavailable)."""

    max_surge: IntOrPercent = 1
    max_unavailable: IntOrPercent = 0


class PoolStrategy(ApiModel):
    """The update strategy; only rolling updates exist (surge-first, readiness-gated)."""

    rolling_update: RollingUpdate = Field(default_factory=RollingUpdate)


class TemplateMetadata(ApiModel):
    """Labels and annotations every member carries (the pool's own labels win on conflicts)."""

    labels: (
        Annotated[dict[str, Annotated[str, Field(max_length=_LABEL_VALUE_MAX)]], Field(max_length=64)] | None
    ) = None
    annotations: Annotated[dict[str, str], Field(max_length=64)] | None = None


class PoolTemplate(ApiModel):
    """What each member is made from: a UDSVirtualMachine spec and metadata."""

    metadata: TemplateMetadata = Field(default_factory=TemplateMetadata)
    spec: UDSVirtualMachineSpec


class UDSVirtualMachinePoolSpec(ApiModel):
    """A fleet of identical VMs with health-gated, surge-first rolling updates."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.template.spec.source.upload)",
                    "message": "spec.template.spec.source.upload: pool members cannot wait for manual "
                    "uploads; publish the image as a golden image and use source.dataSource",
                }
            ]
        }
    )

    replicas: Annotated[int, Field(ge=0, le=MAX_REPLICAS)] = 1
    template: PoolTemplate
    strategy: PoolStrategy = Field(default_factory=PoolStrategy)
    progress_deadline_seconds: Annotated[int, Field(ge=1, le=86400)] = Field(
        default=600, description="How long a new member may take to become Ready before the rollout halts."
    )
    rollback_on_failure: bool = Field(
        default=False, description="When a rollout halts, return the pool to the revision it last completed."
    )

    @model_validator(mode="after")
    def _pool_rules(self) -> UDSVirtualMachinePoolSpec:
        rolling = self.strategy.rolling_update
        _check_int_or_percent(rolling.max_surge, "spec.strategy.rollingUpdate.maxSurge")
        _check_int_or_percent(rolling.max_unavailable, "spec.strategy.rollingUpdate.maxUnavailable")
        if _is_zero(rolling.max_surge) and _is_zero(rolling.max_unavailable):
            raise SpecError(
                "spec.strategy.rollingUpdate: maxSurge and maxUnavailable cannot both be 0 (the pool could "
                "never change); use maxSurge: 1"
            )
        if self.template.spec.source.kind == "upload":
            raise SpecError(
                "spec.template.spec.source.upload: pool members cannot wait for manual uploads; publish "
                "the image as a golden image and use source.dataSource"
            )
        return self


def _is_zero(value: int | str) -> bool:
    return value == 0 or (isinstance(value, str) and value.strip() == "0%")


class UDSVirtualMachinePoolStatus(ApiModel):
    """What the pool controller observed; written through the status subresource only."""

    replicas: Annotated[int, Field(ge=0)] = 0
    ready_replicas: Annotated[int, Field(ge=0)] = 0
    updated_replicas: Annotated[int, Field(ge=0)] = 0
    outdated_replicas: Annotated[int, Field(ge=0)] = 0
    current_revision: Annotated[str, Field(max_length=64)] | None = Field(
        default=None, description="The revision every member had when the last rollout completed."
    )
    update_revision: Annotated[str, Field(max_length=64)] | None = Field(
        default=None, description="The revision members are being moved to."
    )
    failed_revision: Annotated[str, Field(max_length=64)] | None = Field(
        default=None, description="A template revision that stalled and was rolled back; not retried."
    )
    label_selector: Annotated[str, Field(max_length=512)] | None = Field(
        default=None, description="Selector of the members (for the scale subresource)."
    )
    observed_generation: Annotated[int, Field(ge=0)] | None = None
    conditions: Annotated[list[Condition], Field(max_length=16)] = Field(default_factory=list)


POOL_PRINTER_COLUMNS: tuple[dict[str, str], ...] = (
    {"name": "DESIRED", "type": "integer", "json_path": ".spec.replicas", "description": "Members wanted"},
    {
        "name": "READY",
        "type": "integer",
        "json_path": ".status.readyReplicas",
        "description": "Members Ready",
    },
    {
        "name": "UPDATED",
        "type": "integer",
        "json_path": ".status.updatedReplicas",
        "description": "Members of the update revision",
    },
    {
        "name": "OUTDATED",
        "type": "integer",
        "json_path": ".status.outdatedReplicas",
        "description": "Members of an older revision",
    },
    {
        "name": "REVISION",
        "type": "string",
        "json_path": ".status.updateRevision",
        "description": "Template revision members are moved to",
    },
    {
        "name": "AGE",
        "type": "date",
        "json_path": ".metadata.creationTimestamp",
        "description": "Time since creation",
    },
)
"""``kubectl get udsvmpool`` columns (fields of ``crdgen.PrinterColumn``)."""

POOL_SCALE_SUBRESOURCE = {
    "specReplicasPath": ".spec.replicas",
    "statusReplicasPath": ".status.replicas",
    "labelSelectorPath": ".status.labelSelector",
}

POOL_NAME_VALIDATIONS = (
    {
        "rule": f"self.metadata.name.size() <= {MAX_POOL_NAME_LENGTH}",
        "message": f"metadata.name must be at most {MAX_POOL_NAME_LENGTH} characters so member names "
        "<pool>-<ordinal> stay valid UDSVirtualMachine names",
    },
    {
        "rule": "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
        "message": "metadata.name must start with a letter and use lower-case letters, digits and hyphens",
    },
)
"""CEL rules on the object root: the pool name is the prefix of every member name."""


def parse_pool_spec(raw: Mapping[str, Any]) -> UDSVirtualMachinePoolSpec:
    """Parse a pool ``spec`` mapping, or raise :class:`SpecError` naming the field and the fix."""
    return parse_spec_mapping(UDSVirtualMachinePoolSpec, raw)


def validate_pool_name(name: str) -> None:
    """Refuse pool names whose member names ``<pool>-<ordinal>`` would not be valid VM names."""
    if len(name) > MAX_POOL_NAME_LENGTH:
        raise SpecError(
            f"metadata.name {name!r} is {len(name)} characters; use at most {MAX_POOL_NAME_LENGTH} so member "
            "names <pool>-<ordinal> stay valid"
        )
    if not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name):
        raise SpecError(
            f"metadata.name {name!r} must start with a letter and use lower-case letters, digits and hyphens"
        )
