"""Desired-versus-observed comparison: decides whether a child needs a write at all.

A resync of an unchanged object must make zero write requests, so before each server-side apply we check
whether the observed object already carries every field we would set, with the same value. The check is
a *subset* check: the API server, admission webhooks and other controllers add fields (defaults,
``status``, ``managedFields``), and those are not ours to judge. Fields we stop rendering are caught by a
hash of the whole desired manifest, kept in an annotation on the child, so removing a field from the
renderer still triggers one apply (which lets server-side apply prune it).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

APPLIED_HASH_ANNOTATION = "uds.dev/applied-hash"
"""Annotation holding the hash of the manifest last applied to a child."""

_QUANTITY_RE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")
_FACTORS = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "Ki": Decimal(1 << 10),
    "Mi": Decimal(1 << 20),
    "Gi": Decimal(1 << 30),
    "Ti": Decimal(1 << 40),
    "Pi": Decimal(1 << 50),
    "Ei": Decimal(1 << 60),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}


def manifest_hash(manifest: Mapping[str, Any]) -> str:
    """Return a short, stable hash of a manifest (key order does not matter)."""
    canonical = json.dumps(manifest, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def with_applied_hash(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """Return a copy of ``manifest`` annotated with the hash of its own content."""
    stamped = json.loads(json.dumps(manifest))
    annotations = stamped.setdefault("metadata", {}).setdefault("annotations", {})
    annotations.pop(APPLIED_HASH_ANNOTATION, None)
    annotations[APPLIED_HASH_ANNOTATION] = manifest_hash(stamped)
    return dict(stamped)


def normalise_secret(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """Turn ``stringData`` into ``data`` the way the API server stores it, so both sides compare."""
    if manifest.get("kind") != "Secret" or "stringData" not in manifest:
        return dict(manifest)
    result = dict(manifest)
    data = dict(result.get("data") or {})
    for key, value in (result.pop("stringData") or {}).items():
        data[key] = base64.b64encode(str(value).encode()).decode()
    result["data"] = data
    return result


def needs_apply(desired: Mapping[str, Any], observed: Mapping[str, Any] | None) -> bool:
    """True when applying ``desired`` would change ``observed`` (or it does not exist).

    ``desired`` is the hash-stamped manifest; its annotation must match the observed one, and every field
    it sets must already hold the same value in ``observed``.
    """
    if observed is None:
        return True
    if _extra_policy_rules(desired, observed):
        return True
    return not is_subset(normalise_secret(desired), observed)


POLICY_RULE_LISTS = ("ingress", "egress")
"""NetworkPolicy rule lists: every element is a grant, so an extra one is drift, never tolerated."""


def _extra_policy_rules(desired: Mapping[str, Any], observed: Mapping[str, Any]) -> bool:
    """True when a NetworkPolicy we own carries more rules than we render (someone widened it).

    The generic subset check tolerates extra list elements (another controller's ownerReference), which is
    right for metadata and wrong for a zero-trust policy: one foreign allow-all rule would pass as "ours".
    """
    if desired.get("kind") != "NetworkPolicy":
        return False
    wanted = desired.get("spec") or {}
    live = observed.get("spec") or {}
    return any(len(live.get(key) or []) > len(wanted.get(key) or []) for key in POLICY_RULE_LISTS)


def is_subset(desired: Any, observed: Any) -> bool:
    """Recursively check that ``observed`` carries every value of ``desired``.

    Empty containers and ``None`` in ``desired`` match an absent field (the server omits them). Lists of
    mappings match element by element in order (extra observed elements such as another controller's
    ownerReference are tolerated only after ours); lists of scalars must be equal. Quantities compare by
    value, because the API server canonicalises ``1024Mi`` to ``1Gi`` on core types.
    """
    if isinstance(desired, Mapping):
        if not isinstance(observed, Mapping):
            return _is_empty(desired) and observed is None
        return all(_field_matches(value, observed, key) for key, value in desired.items())
    if isinstance(desired, list):
        if not isinstance(observed, list):
            return not desired and observed is None
        if all(not isinstance(item, Mapping | list) for item in desired):
            return len(desired) == len(observed) and all(
                _scalar_equal(a, b) for a, b in zip(desired, observed, strict=True)
            )
        return _list_of_mappings_subset(desired, observed)
    return _scalar_equal(desired, observed)


def _field_matches(value: Any, observed: Mapping[str, Any], key: str) -> bool:
    if key not in observed:
        return _is_empty(value)
    return is_subset(value, observed[key])


def _list_of_mappings_subset(desired: list[Any], observed: list[Any]) -> bool:
    """Each desired element must match a distinct observed element, keeping the desired order."""
    position = 0
    for item in desired:
        while position < len(observed) and not is_subset(item, observed[position]):
            position += 1
        if position == len(observed):
            return False
        position += 1
    return True


def _is_empty(value: Any) -> bool:
    return value is None or (isinstance(value, Mapping | list) and len(value) == 0)


def _scalar_equal(desired: Any, observed: Any) -> bool:
    if isinstance(desired, bool) or isinstance(observed, bool):
        return desired is observed
    if desired == observed:
        return True
    if isinstance(desired, str) and isinstance(observed, str):
        left, right = _quantity_value(desired), _quantity_value(observed)
        return left is not None and left == right
    return False


def _quantity_value(text: str) -> Decimal | None:
    match = _QUANTITY_RE.match(text)
    if match is None:
        return None
    try:
        return Decimal(match.group(1)) * _FACTORS[match.group(2) or ""]
    except InvalidOperation:  # pragma: no cover - the regex only admits decimals
        return None
