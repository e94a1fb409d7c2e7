"""What the installed CDI supports, learned from its CRD rather than assumed.

The API server silently prunes unknown fields, so writing ``spec.source.http.checksum`` to a CDI that
predates v1.65 would *look* accepted while nothing is checked. Reading the installed
``datavolumes.cdi.kubevirt.io`` schema is the only honest way to know. The answer changes only when CDI is
upgraded, so it is cached for a while instead of being fetched on every reconcile.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from uds_vm_operator.render import ClusterFacts
from uds_vm_operator.runtime.ttl_cache import TtlCache

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


PROMETHEUS_NAMESPACE_ENV = "UDS_VM_PROMETHEUS_NAMESPACE"


def deployment_facts(environ: Mapping[str, str] = os.environ) -> ClusterFacts:
    """What the operator's own Deployment says (read once at start): where its pods and Prometheus run, the
    two peers a monitored guest's policy admits (``POD_NAMESPACE``; networkPolicy.monitoringNamespace)."""
    return ClusterFacts(
        operator_namespace=environ.get("POD_NAMESPACE") or ClusterFacts.operator_namespace,
        prometheus_namespace=environ.get(PROMETHEUS_NAMESPACE_ENV) or ClusterFacts.prometheus_namespace,
    )


DEFAULT_FACTS = ClusterFacts()


def facts_from_crd(crd: Mapping[str, Any] | None, base: ClusterFacts = DEFAULT_FACTS) -> ClusterFacts:
    """Build the renderer's view of the cluster from the installed DataVolume CRD (on top of ``base``)."""
    return dataclasses.replace(base, cdi_http_checksum=cdi_supports_http_checksum(crd))


class FactsCache(TtlCache[ClusterFacts]):
    """The renderer's cluster facts from the DataVolume CRD, read at most every ``ttl_s`` seconds."""

    def __init__(
        self,
        fetch_crd: Callable[[], Awaitable[Mapping[str, Any] | None]],
        ttl_s: float = FACTS_TTL_S,
        clock: Callable[[], float] = time.monotonic,
        base: ClusterFacts = DEFAULT_FACTS,
    ) -> None:
        async def fetch() -> ClusterFacts:
            return facts_from_crd(await fetch_crd(), base)

        super().__init__(fetch, ttl_s, clock)
