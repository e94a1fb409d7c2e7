"""Notice when a watched kind's API appears or disappears, so the operator restarts and watches it.

kopf's run-time CRD scanning lists and watches *every* CustomResourceDefinition in the cluster (with
KubeVirt, CDI and the Gateway API that is ~1.7 MB of JSON decoded at start and again on each CRD change:
~11 MiB of peak memory) only to learn whether the handful of kinds we watch are served. The operator turns
that scanning off and instead reads the small discovery document of each group-version it watches (a
couple of KiB) once a minute. If the set of served kinds changes — CDI installed after the operator, a CRD
version removed — the operator stops with a clear message and its Deployment starts it again, now
watching exactly what is served. Before that, reconciles report the missing API in a condition as usual.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from uds_vm_operator.runtime.errors import ControllerError
from uds_vm_operator.runtime.kube import Kind, KubeApi

CHECK_INTERVAL_S = 60.0
CONFIRM_S = 10.0


class ServedKindsChangedError(ControllerError):
    """The API server now serves a different set of the kinds this process watches: restart to follow."""


async def served_kinds(api: KubeApi, kinds: Iterable[Kind]) -> frozenset[Kind]:
    """The subset of ``kinds`` the API server serves right now (one discovery GET per group-version)."""
    wanted = list(kinds)
    served: set[Kind] = set()
    for api_version in sorted({kind.api_version for kind in wanted}):
        document = await api.discover(api_version)
        plurals = {str(item.get("name")) for item in document.get("resources") or []}
        served.update(kind for kind in wanted if kind.api_version == api_version and kind.plural in plurals)
    return frozenset(served)


def describe_change(before: frozenset[Kind], after: frozenset[Kind]) -> str:
    """One line naming what appeared and what vanished."""
    parts = []
    appeared = sorted(f"{k.plural}.{k.api_version}" for k in after - before)
    vanished = sorted(f"{k.plural}.{k.api_version}" for k in before - after)
    if appeared:
        parts.append(f"now served: {', '.join(appeared)}")
    if vanished:
        parts.append(f"no longer served: {', '.join(vanished)}")
    return "; ".join(parts)


async def wait_for_change(
    api: KubeApi,
    kinds: Iterable[Kind],
    initial: frozenset[Kind],
    interval_s: float = CHECK_INTERVAL_S,
    confirm_s: float = CONFIRM_S,
) -> str:
    """Return (a description) once the served set differs from ``initial`` on two checks in a row.

    The second look, ``confirm_s`` later, keeps a restarting API server — whose discovery briefly omits
    CRDs that are not yet re-established — from looking like a removed API. Unreachable is not a change.
    """
    wanted = list(kinds)
    while True:
        await asyncio.sleep(interval_s)
        first = await _served_or_none(api, wanted)
        if first is None or first == initial:
            continue
        await asyncio.sleep(confirm_s)
        if await _served_or_none(api, wanted) == first:
            return describe_change(initial, first)


async def _served_or_none(api: KubeApi, kinds: list[Kind]) -> frozenset[Kind] | None:
    try:
        return await served_kinds(api, kinds)
    except ControllerError:
        return None
