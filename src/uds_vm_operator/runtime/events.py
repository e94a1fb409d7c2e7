"""Kubernetes Events (``events.k8s.io/v1``) about a UDSVirtualMachine, built as plain manifests.

Events are writes, so the reconciler emits them only on transitions (a new phase, a new error), never on
a resync that changed nothing.
"""

from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import Mapping
from typing import Any

from uds_vm_operator.apiversions import EVENTS_API_VERSION

REPORTING_CONTROLLER = "uds.dev/uds-vm-operator"
NOTE_LIMIT = 1024


def reporting_instance() -> str:
    """Identify this operator replica (pod name in a cluster, host name elsewhere)."""
    return (os.environ.get("POD_NAME") or socket.gethostname() or "uds-vm-operator")[:128]


def build_event(
    owner: Mapping[str, Any],
    *,
    event_type: str,
    reason: str,
    note: str,
    event_time: str,
    action: str = "Reconcile",
    instance: str | None = None,
) -> dict[str, Any]:
    """Return an Event regarding ``owner``; ``event_time`` is RFC 3339 with microseconds."""
    meta = owner.get("metadata") or {}
    suffix = hashlib.sha256(f"{meta.get('uid')}/{reason}/{event_time}".encode()).hexdigest()[:12]
    return {
        "apiVersion": EVENTS_API_VERSION,
        "kind": "Event",
        "metadata": {"name": f"{meta.get('name')}.{suffix}", "namespace": meta.get("namespace")},
        "eventTime": event_time,
        "type": event_type,
        "reason": reason,
        "action": action,
        "note": note[:NOTE_LIMIT],
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": instance or reporting_instance(),
        "regarding": {
            "apiVersion": owner.get("apiVersion"),
            "kind": owner.get("kind"),
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
        },
    }


def transition_event(
    previous: Mapping[str, Any] | None, current: Mapping[str, Any]
) -> tuple[str, str, str] | None:
    """Return ``(type, reason, note)`` when the phase or the Ready reason changed, else ``None``."""
    before = _summary(previous or {})
    after = _summary(current)
    if before == after:
        return None
    phase, ready_reason = after
    event_type = "Warning" if phase == "Failed" else "Normal"
    reason = str((ready_reason if phase == "Failed" else phase) or "Unknown")
    return event_type, reason, str(current.get("message") or phase)


def _summary(status: Mapping[str, Any]) -> tuple[str | None, str | None]:
    ready_reason = None
    for condition in status.get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            ready_reason = condition.get("reason")
    return status.get("phase"), ready_reason
