"""The revision hash of a pool template.

Members carry the hash of the template they were created from (label ``uds.dev/pool-revision``), so the
pool can tell outdated members from updated ones by a label selector, without comparing specs. The hash
must be the same on every machine and every Python run for the same template, and must change whenever
anything in the template changes: it is taken over the canonical JSON (sorted keys, no whitespace, UTF-8)
of the template, like Kubernetes' ``pod-template-hash`` but with a cryptographic digest so two different
templates never collide in practice.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

REVISION_HASH_LENGTH = 10
"""Hex characters kept: 40 bits, short enough for labels and columns, ample to never collide in a pool."""


def canonical_json(value: Any) -> bytes:
    """Serialise ``value`` to one byte string that only depends on its content, not on key order."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def revision_hash(template: Mapping[str, Any]) -> str:
    """Return the deterministic revision of a pool template (``metadata`` + ``spec`` as stored).

    Empty maps and ``None`` values are dropped first, so a template written with ``labels: {}`` and one
    without ``labels`` (which the API server may store either way) are the same revision.
    """
    digest = hashlib.sha256(canonical_json(_without_empty(dict(template)))).hexdigest()
    return digest[:REVISION_HASH_LENGTH]


def _without_empty(value: Any) -> Any:
    """Drop ``None`` and empty-map members recursively; lists keep their order and length."""
    if isinstance(value, Mapping):
        cleaned = {str(key): _without_empty(item) for key, item in value.items() if item is not None}
        return {key: item for key, item in cleaned.items() if item != {}}
    if isinstance(value, list | tuple):
        return [_without_empty(item) for item in value]
    return value
