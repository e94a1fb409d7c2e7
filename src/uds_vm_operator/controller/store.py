"""In-memory copy of the objects the operator watches, fed by watch events and by apply responses.

Reading children from here instead of GETting them per reconcile is what keeps a fleet-wide resync
cheap. Watch events can arrive after the response of our own write, so an older resourceVersion never
overwrites a newer one.

Memory is the constraint at fleet scale (1,000 VMs are ~6,000 objects): a decoded object costs 5-10 times
its JSON size in Python dicts and strings, and keeping the watch's dicts would also keep everything kopf
decoded alive. So each object is kept as compact JSON (``managedFields`` dropped), deflated against a
per-kind dictionary — the first object of that kind seen: children of one kind differ in little more than
names, uids and timestamps, so a 1.5 KiB object deflates to a few hundred bytes — and decoded on ``get``. A
reconcile reads a handful of objects, a fresh copy each time, so no caller can corrupt the cache by mutating
what it got.
"""

from __future__ import annotations

import json
import sys
import zlib
from collections.abc import Mapping
from typing import Any, NamedTuple

from uds_vm_operator.controller.kube import Kind

Key = tuple[str, str, str, str]  # (apiVersion, kind, namespace, name)

_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, check_circular=False)
_DECODER = json.JSONDecoder()
DEFLATE_LEVEL = 6
MAX_DICTIONARY_BYTES = 32 * 1024
"""deflate's window: a longer preset dictionary would only be truncated."""


class _Entry(NamedTuple):
    uid: str | None
    resource_version: int | None
    encoded: bytes


def key_of(kind: Kind, namespace: str, name: str) -> Key:
    """Build the store key of one object."""
    return (kind.api_version, kind.kind, namespace, name)


def _resource_version(meta: Mapping[str, Any]) -> int | None:
    text = meta.get("resourceVersion")
    try:
        return int(text) if text is not None else None
    except (TypeError, ValueError):
        return None


def _encode(obj: Mapping[str, Any]) -> bytes:
    """Compact JSON without ``managedFields``: nothing here reads them, and they are often half the size."""
    meta = obj.get("metadata")
    if isinstance(meta, Mapping) and "managedFields" in meta:
        obj = {**obj, "metadata": {key: value for key, value in meta.items() if key != "managedFields"}}
    return _ENCODER.encode(obj).encode()


class ObjectStore:
    """Latest known state per object; watched kinds only (others are read from the API server)."""

    def __init__(self, watched: set[tuple[str, str]] | None = None) -> None:
        self._objects: dict[Key, _Entry] = {}
        self._dictionaries: dict[tuple[str, str], bytes] = {}
        self.watched = set(watched or ())

    def _deflate(self, kind: Kind, encoded: bytes) -> bytes:
        """Deflate against the kind's dictionary: the first object of the kind seen (it never changes)."""
        zdict = self._dictionaries.setdefault((kind.api_version, kind.kind), encoded[-MAX_DICTIONARY_BYTES:])
        packer = zlib.compressobj(DEFLATE_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS, zdict=zdict)
        return packer.compress(encoded) + packer.flush()

    def _inflate(self, kind: Kind, packed: bytes) -> bytes:
        unpacker = zlib.decompressobj(
            -zlib.MAX_WBITS, zdict=self._dictionaries[(kind.api_version, kind.kind)]
        )
        return unpacker.decompress(packed) + unpacker.flush()

    def is_watched(self, kind: Kind) -> bool:
        """True when watch events keep this kind up to date (a miss then means "absent")."""
        return (kind.api_version, kind.kind) in self.watched

    def get(self, kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
        """Return a fresh copy of the stored object, or ``None``."""
        entry = self._objects.get(key_of(kind, namespace, name))
        if entry is None:
            return None
        decoded: dict[str, Any] = _DECODER.decode(self._inflate(kind, entry.encoded).decode())
        return decoded

    def contains(self, kind: Kind, namespace: str, name: str) -> bool:
        """True when the object is known (cheaper than ``get`` when only existence matters)."""
        return key_of(kind, namespace, name) in self._objects

    def put(self, kind: Kind, obj: Mapping[str, Any]) -> bool:
        """Store ``obj`` unless the same or a newer version of this incarnation is known; True if stored.

        False means the store already held exactly this state — typically the watch event of our own
        write, whose response was stored first — so nobody needs to look at it again.
        """
        meta = obj.get("metadata") or {}
        key = key_of(kind, sys.intern(str(meta.get("namespace") or "")), str(meta.get("name")))
        uid, version = meta.get("uid"), _resource_version(meta)
        current = self._objects.get(key)
        known = (
            current is not None
            and current.uid == uid
            and current.resource_version is not None
            and version is not None
            and version <= current.resource_version
        )
        if known:
            return False
        self._objects[key] = _Entry(uid, version, self._deflate(kind, _encode(obj)))
        return True

    def discard(self, kind: Kind, obj: Mapping[str, Any]) -> None:
        """Forget a deleted object, but not a newer incarnation created under the same name."""
        meta = obj.get("metadata") or {}
        key = key_of(kind, str(meta.get("namespace") or ""), str(meta.get("name")))
        current = self._objects.get(key)
        if current is not None and current.uid in (None, meta.get("uid")):
            del self._objects[key]

    def size_bytes(self) -> int:
        """Compressed bytes held, dictionaries included (memory at fleet scale)."""
        held = sum(len(entry.encoded) for entry in self._objects.values())
        return held + sum(len(zdict) for zdict in self._dictionaries.values())

    def __len__(self) -> int:
        return len(self._objects)
