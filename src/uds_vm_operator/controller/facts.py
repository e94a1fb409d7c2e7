"""What the installed CDI supports, learned from its CRD rather than assumed.

The API server silently prunes unknown fields, so writing ``spec.source.http.checksum`` to a CDI that
predates v1.65 would *look* accepted while nothing is checked. Reading the installed
``datavolumes.cdi.kubevirt.io`` schema is the only honest way to know. The answer changes only when CDI is
upgraded, so it is cached for a while instead of being fetched on every reconcile.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from uds_vm_operator.render import ClusterFacts

DATAVOLUME_CRD = "datavolumes.cdi.kubevirt.io"
CDI_VERSION = "v1beta1"
FACTS_TTL_S = 300.0


def cdi_supports_http_checksum(crd: Mapping[str, Any] | None) -> bool:
    """True when the DataVolume CRD's v1beta1 schema has ``spec.source.http.checksum``."""
    if not crd:
        return False
    for version in (crd.get("spec") or {}).get("versions") or []:
        if version.get("name") != CDI_VERSION:
            continue
        schema = (version.get("schema") or {}).get("openAPIV3Schema") or {}
        path = ("spec", "source", "http", "checksum")
        node: Mapping[str, Any] = schema
        for key in path:
            node = (node.get("properties") or {}).get(key) or {}
            if not node:
                return False
        return True
    return False


def facts_from_crd(crd: Mapping[str, Any] | None) -> ClusterFacts:
    """Build the renderer's view of the cluster from the installed DataVolume CRD."""
    return ClusterFacts(cdi_http_checksum=cdi_supports_http_checksum(crd))


class FactsCache:
    """Cluster facts refreshed at most every ``ttl_s`` seconds (one GET, not one per reconcile)."""

    def __init__(
        self,
        fetch_crd: Callable[[], Awaitable[Mapping[str, Any] | None]],
        ttl_s: float = FACTS_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch_crd = fetch_crd
        self._ttl_s = ttl_s
        self._clock = clock
        self._facts: ClusterFacts | None = None
        self._fetched_at = 0.0
        self._lock = asyncio.Lock()

    async def get(self) -> ClusterFacts:
        """Return cached facts, refreshing them when stale (one fetch even under concurrency)."""
        async with self._lock:
            now = self._clock()
            if self._facts is None or now - self._fetched_at >= self._ttl_s:
                self._facts = facts_from_crd(await self._fetch_crd())
                self._fetched_at = now
            return self._facts

    def invalidate(self) -> None:
        """Forget the cached facts, e.g. when a CRD event shows CDI was upgraded."""
        self._facts = None
