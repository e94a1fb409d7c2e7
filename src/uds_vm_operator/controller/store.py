"""In-memory copy of the objects the operator watches, fed by watch events and by apply responses.

Reading children from here instead of GETting them per reconcile is what keeps a fleet-wide resync
cheap. Watch events can arrive after the response of our own write, so an older resourceVersion never
overwrites a newer one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from uds_vm_operator.controller.kube import Kind

Key = tuple[str, str, str, str]  # (apiVersion, kind, namespace, name)


def key_of(kind: Kind, namespace: str, name: str) -> Key:
    """Build the store key of one object."""
    return (kind.api_version, kind.kind, namespace, name)


def _resource_version(obj: Mapping[str, Any]) -> int | None:
    text = (obj.get("metadata") or {}).get("resourceVersion")
    try:
        return int(text) if text is not None else None
    except (TypeError, ValueError):
        return None


def _slim(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Drop ``managedFields``: nothing here reads them, and they are often half an object's size."""
    slim = dict(obj)
    meta = slim.get("metadata")
    if isinstance(meta, Mapping) and "managedFields" in meta:
        slim["metadata"] = {key: value for key, value in meta.items() if key != "managedFields"}
    return slim


class ObjectStore:
    """Latest known state per object; watched kinds only (others are read from the API server)."""

    def __init__(self, watched: set[tuple[str, str]] | None = None) -> None:
        self._objects: dict[Key, dict[str, Any]] = {}
        self.watched = set(watched or ())

    def is_watched(self, kind: Kind) -> bool:
        """True when watch events keep this kind up to date (a miss then means "absent")."""
        return (kind.api_version, kind.kind) in self.watched

    def get(self, kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
        """Return the stored object or ``None``."""
        return self._objects.get(key_of(kind, namespace, name))

    def put(self, kind: Kind, obj: Mapping[str, Any]) -> None:
        """Store ``obj`` unless a newer version of the same incarnation is already known."""
        meta = obj.get("metadata") or {}
        key = key_of(kind, str(meta.get("namespace") or ""), str(meta.get("name")))
        current = self._objects.get(key)
        if current is not None and (current.get("metadata") or {}).get("uid") == meta.get("uid"):
            old, new = _resource_version(current), _resource_version(obj)
            if old is not None and new is not None and new < old:
                return
        self._objects[key] = _slim(obj)

    def discard(self, kind: Kind, obj: Mapping[str, Any]) -> None:
        """Forget a deleted object, but not a newer incarnation created under the same name."""
        meta = obj.get("metadata") or {}
        key = key_of(kind, str(meta.get("namespace") or ""), str(meta.get("name")))
        current = self._objects.get(key)
        if current is not None and (current.get("metadata") or {}).get("uid") in (None, meta.get("uid")):
            del self._objects[key]

    def __len__(self) -> int:
        return len(self._objects)
