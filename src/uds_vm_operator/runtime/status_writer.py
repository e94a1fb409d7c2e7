"""The one status writer of every controller: validate, compare by one rule, write the difference once.

Both controllers build their whole desired ``status`` from what they observed (the publish step) and hand it
here with the object as it was read (the snapshot). This module decides whether anything changed, by the one
rule a JSON merge patch obeys (a key set to ``null`` is a key absent, at any depth), checks the status
against the same pydantic model that generates the CRD's status schema (so the operator can never store
what its own schema would not describe), and writes it through the ``status`` subresource, removing keys
the new status no longer has. Conditions arrive stamped (``runtime.conditions.stamp``); nothing here reads
a clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from uds_vm_operator.runtime import kube
from uds_vm_operator.runtime.errors import TerminalError


class StatusInvalidError(TerminalError):
    """The status a controller built does not fit its own CRD's status model: nothing was written."""


def without_nulls(value: Any) -> Any:
    """``value`` as the API server stores it after a merge patch: keys whose value is ``null`` removed."""
    if isinstance(value, Mapping):
        return {key: without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [without_nulls(item) for item in value]
    return value


def status_changed(desired: Mapping[str, Any], stored: Mapping[str, Any] | None) -> bool:
    """The one "changed" rule: ``desired`` differs from the stored status once nulls mean absent.

    A resync that derives the same status therefore writes nothing (the fleet-scale write budget).
    """
    return bool(without_nulls(dict(desired)) != without_nulls(dict(stored or {})))


def status_patch(desired: Mapping[str, Any], stored: Mapping[str, Any] | None) -> dict[str, Any]:
    """The merge patch that turns ``stored`` into ``desired``: every key of either, ``null`` for the gone."""
    stored = stored or {}
    return {key: desired.get(key) for key in set(desired) | set(stored)}


class StatusWriter:
    """Writes one kind's status, validated against the model that generates its CRD's status schema."""

    def __init__(self, api: kube.KubeApi, kind: kube.Kind, model: type[BaseModel]) -> None:
        self.api = api
        self.kind = kind
        self.model = model

    def validate(self, desired: Mapping[str, Any]) -> None:
        """Refuse a status the CRD's own model would not describe (a controller bug, never user input)."""
        try:
            self.model.model_validate(without_nulls(dict(desired)))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first.get("loc", ()))
            raise StatusInvalidError(
                f"the {self.kind.kind} status the operator built does not fit its schema at "
                f"status.{where}: {first.get('msg')}; nothing was written (please report this)"
            ) from exc

    async def publish(self, snapshot: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any] | None:
        """Write ``desired`` as the status of the object ``snapshot`` (as read before the reconcile) when it
        changed; return the updated object, or ``None`` when nothing needed writing."""
        stored = snapshot.get("status") or {}
        if not status_changed(desired, stored):
            return None
        self.validate(desired)
        meta = snapshot.get("metadata") or {}
        return await self.api.merge_patch(
            self.kind,
            str(meta.get("namespace")),
            str(meta["name"]),
            {"status": status_patch(desired, stored)},
            subresource="status",
        )


__all__ = ["StatusInvalidError", "StatusWriter", "status_changed", "status_patch", "without_nulls"]
