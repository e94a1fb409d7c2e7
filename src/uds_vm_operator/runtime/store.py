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
import struct
import zlib
from collections.abc import Mapping
from typing import Any

from uds_vm_operator.runtime.kube import Kind

_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, check_circular=False)
_DECODER = json.JSONDecoder()
DEFLATE_LEVEL = 6
MAX_DICTIONARY_BYTES = 32 * 1024
"""deflate's window: a longer preset dictionary would only be truncated."""


NO_VERSION = (1 << 64) - 1
"""Header value for an object without a numeric resourceVersion (never counts as newer or older)."""
_HEADER = struct.Struct("<QB")
"""An entry is one ``bytes``: resourceVersion (u64), uid length (u8), the uid, then the deflated JSON.

One object per stored child instead of six (a tuple, key tuple, uid string, int, bytes, name): fewer,
longer-lived small allocations, which is what keeps the heap from fragmenting at fleet scale.
"""


def _pack(uid: str | None, version: int | None, deflated: bytes) -> bytes:
    uid_bytes = (uid or "").encode()[:255]
    return _HEADER.pack(NO_VERSION if version is None else version, len(uid_bytes)) + uid_bytes + deflated


def _unpack_header(entry: bytes) -> tuple[str | None, int | None, int]:
    """(uid, resourceVersion, offset of the deflated JSON)."""
    version, uid_length = _HEADER.unpack_from(entry)
    start = _HEADER.size
    uid = entry[start : start + uid_length].decode() or None
    return uid, None if version == NO_VERSION else version, start + uid_length


def object_key(namespace: str, name: str) -> str:
    """Key of one object within its kind (names and namespaces never contain ``/``)."""
    return f"{namespace}/{name}"


def _resource_version(meta: Mapping[str, Any]) -> int | None:
    text = meta.get("resourceVersion")
    try:
        version = int(text) if text is not None else None
    except (TypeError, ValueError):
        return None
    return version if version is not None and 0 <= version < NO_VERSION else None


def _encode(obj: Mapping[str, Any]) -> bytes:
    """Compact JSON without ``managedFields``: nothing here reads them, and they are often half the size."""
    meta = obj.get("metadata")
    if isinstance(meta, Mapping) and "managedFields" in meta:
        obj = {**obj, "metadata": {key: value for key, value in meta.items() if key != "managedFields"}}
    return _ENCODER.encode(obj).encode()


class ObjectStore:
    """Latest known state per object; watched kinds only (others are read from the API server)."""

    def __init__(self, watched: set[tuple[str, str]] | None = None) -> None:
        self._kinds: dict[tuple[str, str], dict[str, bytes]] = {}
        self._dictionaries: dict[tuple[str, str], bytes] = {}
        self.watched = set(watched or ())

    def _objects(self, kind: Kind) -> dict[str, bytes]:
        return self._kinds.setdefault((kind.api_version, kind.kind), {})

    def _deflate(self, kind: Kind, encoded: bytes) -> bytes:
        """Deflate against the kind's dictionary: the first object of the kind seen (it never changes)."""
        zdict = self._dictionaries.setdefault((kind.api_version, kind.kind), encoded[-MAX_DICTIONARY_BYTES:])
        packer = zlib.compressobj(DEFLATE_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS, zdict=zdict)
        return packer.compress(encoded) + packer.flush()

    def _inflate(self, kind: Kind, packed: bytes) -> bytes:
        zdict = self._dictionaries[(kind.api_version, kind.kind)]
        unpacker = zlib.decompressobj(-zlib.MAX_WBITS, zdict=zdict)
        return unpacker.decompress(packed) + unpacker.flush()

    def is_watched(self, kind: Kind) -> bool:
        """True when watch events keep this kind up to date (a miss then means "absent")."""
        return (kind.api_version, kind.kind) in self.watched

    def get(self, kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
        """Return a fresh copy of the stored object, or ``None``."""
        entry = self._objects(kind).get(object_key(namespace, name))
        if entry is None:
            return None
        _, _, start = _unpack_header(entry)
        decoded: dict[str, Any] = _DECODER.decode(self._inflate(kind, entry[start:]).decode())
        return decoded

    def contains(self, kind: Kind, namespace: str, name: str) -> bool:
        """True when the object is known (cheaper than ``get`` when only existence matters)."""
        return object_key(namespace, name) in self._objects(kind)

    def put(self, kind: Kind, obj: Mapping[str, Any]) -> bool:
        """Store ``obj`` unless the same or a newer version of this incarnation is known; True if stored.

        False means the store already held exactly this state — typically the watch event of our own
        write, whose response was stored first — so nobody needs to look at it again.
        """
        meta = obj.get("metadata") or {}
        key = object_key(str(meta.get("namespace") or ""), str(meta.get("name")))
        uid, version = meta.get("uid"), _resource_version(meta)
        objects = self._objects(kind)
        current = objects.get(key)
        if current is not None and version is not None:
            known_uid, known_version, _ = _unpack_header(current)
            if known_uid == uid and known_version is not None and version <= known_version:
                return False
        objects[key] = _pack(uid, version, self._deflate(kind, _encode(obj)))
        return True

    def discard(self, kind: Kind, obj: Mapping[str, Any]) -> None:
        """Forget a deleted object, but not a newer incarnation created under the same name."""
        meta = obj.get("metadata") or {}
        key = object_key(str(meta.get("namespace") or ""), str(meta.get("name")))
        objects = self._objects(kind)
        current = objects.get(key)
        if current is not None and _unpack_header(current)[0] in (None, meta.get("uid")):
            del objects[key]

    def size_bytes(self) -> int:
        """Bytes held (entries and dictionaries): memory at fleet scale."""
        held = sum(len(entry) for objects in self._kinds.values() for entry in objects.values())
        return held + sum(len(zdict) for zdict in self._dictionaries.values())

    def __len__(self) -> int:
        return sum(len(objects) for objects in self._kinds.values())
