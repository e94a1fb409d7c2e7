"""The verifier pod's requests and limits: the operator's defaults, and a site's overrides laid over them.

A site sets them through the chart value ``verifier.resources`` (operator env ``UDS_VM_VERIFIER_RESOURCES``,
JSON). A namespace whose LimitRange or ResourceQuota refuses the defaults would refuse every verifier pod, so
every VM there would stay off; and a node whose CPU is all requested cannot schedule one. (It is not what
made SI-7 slow at 50 VMs at once: ADR 0021 measured a 10m request against 100m, with no gain.) Overrides
are checked when the operator starts, so a bad value stops the operator with the setting's name instead of
failing every verification.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from uds_vm_operator.api.errors import SpecError
from uds_vm_operator.api.quantity import parse_bytes, parse_millicores

Resources = dict[str, dict[str, str]]

DEFAULT_RESOURCES: Resources = {
    "requests": {"cpu": "100m", "memory": "64Mi", "ephemeral-storage": "1Mi"},
    "limits": {"cpu": "1", "memory": "256Mi", "ephemeral-storage": "16Mi"},
}

SETTING = "chart value verifier.resources (operator env UDS_VM_VERIFIER_RESOURCES)"


def default_resources() -> Resources:
    """A fresh copy of the defaults, for a pod manifest the caller may change."""
    return {kind: dict(values) for kind, values in DEFAULT_RESOURCES.items()}


def verifier_resources(overrides: Mapping[str, Any]) -> Resources:
    """The defaults with ``overrides`` laid over them, one resource at a time (so ``requests.cpu: 10m``
    alone keeps every other default); :class:`SpecError` names the setting and the fix when a kind, a
    resource or a quantity is not one Kubernetes takes, or a request exceeds its limit."""
    merged = default_resources()
    for kind, values in overrides.items():
        if kind not in merged:
            raise SpecError(f"{SETTING}: {kind!r} is not requests or limits")
        if not isinstance(values, Mapping):
            raise SpecError(f"{SETTING}: {kind} must map cpu, memory or ephemeral-storage to quantities")
        for resource, quantity in values.items():
            if resource not in merged[kind]:
                raise SpecError(f"{SETTING}: {kind}.{resource} is not cpu, memory or ephemeral-storage")
            _amount(resource, quantity, f"{SETTING}: {kind}.{resource}")
            merged[kind][resource] = str(quantity).strip()
    for resource, request in merged["requests"].items():
        field = f"{SETTING}: requests.{resource}"
        if _amount(resource, request, field) > _amount(resource, merged["limits"][resource], field):
            raise SpecError(
                f"{field} {request} is above its limit {merged['limits'][resource]}; "
                f"Kubernetes refuses such a pod: raise limits.{resource} or lower requests.{resource}"
            )
    return merged


def _amount(resource: str, quantity: Any, field: str) -> int:
    if resource == "cpu":
        return parse_millicores(quantity, field=field)
    if not isinstance(quantity, int | str):
        raise SpecError(f"{field}: expected a size such as 64Mi, got {quantity!r}")
    return parse_bytes(quantity, field=field)
