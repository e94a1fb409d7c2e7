"""Pool members: their names, how the pool sees them, and the manifest of a new one.

A member is an ordinary UDSVirtualMachine named ``<pool>-<ordinal>``. The ordinal is stable: when a member
is removed and the same ordinal comes back, it gets the same name, so the UDSVirtualMachine controller
re-attaches its ``Retain`` data disks (``<pool>-<ordinal>-data-<disk>``, which carry no ownerReference and
survive the member). Everything here is pure; the controller reads and writes the objects.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from uds_vm_operator import MANAGED_BY_LABEL
from uds_vm_operator.apiversions import UDS_API_VERSION
from uds_vm_operator.render.common import POOL_LABEL, RELEASE_FINALIZER
from uds_vm_operator.runtime.timestamps import parse_rfc3339

POOL_API_VERSION = UDS_API_VERSION
POOL_KIND = "UDSVirtualMachinePool"
MEMBER_API_VERSION = UDS_API_VERSION
MEMBER_KIND = "UDSVirtualMachine"

REVISION_LABEL = "uds.dev/pool-revision"
ORDINAL_LABEL = "uds.dev/pool-ordinal"

NETBIOS_MAX = 15
"""Windows computer names are NetBIOS names: at most 15 characters."""

_ORDINAL_SUFFIX = re.compile(r"-(0|[1-9][0-9]*)$")
_NOT_NETBIOS = re.compile(r"[^A-Z0-9-]+")


@dataclass(frozen=True)
class PoolRef:
    """Identity of the pool that owns its members (for names, labels and the ownerReference)."""

    name: str
    namespace: str
    uid: str

    def owner_reference(self) -> dict[str, Any]:
        """The controller ownerReference members carry, so deleting the pool deletes its members."""
        return {
            "apiVersion": POOL_API_VERSION,
            "kind": POOL_KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


@dataclass(frozen=True)
class MemberView:
    """What the planner needs to know about one member; built from the live object by ``member_view``."""

    name: str
    ordinal: int
    revision: str | None
    ready: bool
    created_at: datetime
    deleting: bool = False
    failed: bool = False
    """The member reports ``phase: Failed`` (e.g. ChecksumMismatch): waiting for the deadline is pointless."""
    releases_children: bool = True
    """The member carries :data:`RELEASE_FINALIZER`: the operator deletes its children, so the member itself
    is deleted in the background. A member made before that finalizer existed waits on the collector."""


def member_name(pool: str, ordinal: int) -> str:
    """The name of the member with ``ordinal``: stable, so a returning ordinal finds its Retain disks."""
    if ordinal < 0:
        raise ValueError(f"ordinal must not be negative, got {ordinal}")
    return f"{pool}-{ordinal}"


def ordinal_of(pool: str, name: str) -> int | None:
    """Return the ordinal encoded in a member name, or None when the name is not ``<pool>-<n>``."""
    if not name.startswith(f"{pool}-"):
        return None
    match = _ORDINAL_SUFFIX.search(name)
    if match is None or match.start() != len(pool):
        return None
    return int(match.group(1))


def member_view(pool: str, obj: Mapping[str, Any]) -> MemberView | None:
    """Summarise a live member object for the planner; None when it is not a member of ``pool``.

    Readiness comes only from the member's own status (``phase: Ready`` and, when present, a ``Ready``
    condition that is ``True``), i.e. from what the UDSVirtualMachine controller observed in the cluster.
    """
    metadata = obj.get("metadata") or {}
    labels = metadata.get("labels") or {}
    name = str(metadata.get("name") or "")
    if labels.get(POOL_LABEL) != pool:
        return None
    ordinal = ordinal_of(pool, name)
    if ordinal is None:
        return None
    status = obj.get("status") or {}
    return MemberView(
        name=name,
        ordinal=ordinal,
        revision=labels.get(REVISION_LABEL),
        ready=_is_ready(status),
        created_at=parse_timestamp(metadata.get("creationTimestamp")),
        deleting=bool(metadata.get("deletionTimestamp")),
        failed=status.get("phase") == "Failed",
        releases_children=RELEASE_FINALIZER in (metadata.get("finalizers") or ()),
    )


def _is_ready(status: Mapping[str, Any]) -> bool:
    if status.get("phase") != "Ready":
        return False
    for condition in status.get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return True


def parse_timestamp(value: Any) -> datetime:
    """A Kubernetes RFC 3339 timestamp; a missing one counts as 'created just now' (epoch max)."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return parse_rfc3339(value) or datetime.max.replace(tzinfo=UTC)


def windows_computer_name(prefix: str, ordinal: int) -> str:
    """A unique NetBIOS name per member: ``<PREFIX>-<ordinal>`` in at most 15 characters.

    Two Windows machines with the same computer name break domain joins and name resolution, so each
    member gets its own. The prefix is upper-cased, stripped of characters NetBIOS refuses and shortened
    so the ordinal always fits.
    """
    suffix = f"-{ordinal}"
    cleaned = _NOT_NETBIOS.sub("-", prefix.upper()).strip("-")
    cleaned = cleaned[: NETBIOS_MAX - len(suffix)].rstrip("-") or "VM"
    return f"{cleaned}{suffix}"


def render_member(
    pool: PoolRef,
    template: Mapping[str, Any],
    *,
    ordinal: int,
    revision: str,
) -> dict[str, Any]:
    """Build the UDSVirtualMachine of member ``ordinal`` from the pool template (a pure function).

    The template's labels and annotations are kept; the pool's own labels win over them so a template
    cannot make a member look like part of another pool or revision.
    """
    metadata = template.get("metadata") or {}
    labels = {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}
    labels.update(MANAGED_BY_LABEL)
    labels.update({POOL_LABEL: pool.name, REVISION_LABEL: revision, ORDINAL_LABEL: str(ordinal)})
    member_metadata: dict[str, Any] = {
        "name": member_name(pool.name, ordinal),
        "namespace": pool.namespace,
        "labels": labels,
        "ownerReferences": [pool.owner_reference()],
        "finalizers": [RELEASE_FINALIZER],
    }
    annotations = metadata.get("annotations") or {}
    if annotations:
        member_metadata["annotations"] = {str(k): str(v) for k, v in annotations.items()}
    spec = copy.deepcopy(dict(template.get("spec") or {}))
    if spec.get("os") == "windows":
        windows = dict(spec.get("windows") or {})
        windows["computerName"] = windows_computer_name(
            str(windows.get("computerName") or pool.name), ordinal
        )
        spec["windows"] = windows
    return {
        "apiVersion": MEMBER_API_VERSION,
        "kind": MEMBER_KIND,
        "metadata": member_metadata,
        "spec": spec,
    }
