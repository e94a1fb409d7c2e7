"""What the cluster around the VMs offers: KVM on the nodes, CDI's source allowlist, the VM-state class.

Read with one LIST/GET each at most every ``UDS_VM_PLATFORM_FACTS_TTL_S`` seconds (default 60), not per
reconcile (:class:`~uds_vm_operator.runtime.ttl_cache.TtlCache`). A fact the operator may not read (RBAC) or
cannot read (outage) is unknown, logged once, and never fails a reconcile.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from uds_vm_operator.apiversions import KUBEVIRT_API_VERSION
from uds_vm_operator.controller import kvm_guard, ssrf
from uds_vm_operator.runtime import kube
from uds_vm_operator.runtime.errors import ControllerError
from uds_vm_operator.runtime.ttl_cache import TtlCache

log = logging.getLogger("uds_vm_operator.platform")

NODE = kube.NODE
KUBEVIRT = kube.register_kind(kube.Kind(KUBEVIRT_API_VERSION, "KubeVirt", "kubevirts"))
CDI_CONFIG = kube.CDI_CONFIG
TTL_ENV = "UDS_VM_PLATFORM_FACTS_TTL_S"
DEFAULT_TTL_S = 60.0


@dataclass(frozen=True)
class PlatformFacts:
    """What the cluster around the VMs offers; ``kvm`` is None when the nodes could not be read."""

    kvm: kvm_guard.KvmVerdict | None = None
    cdi_allowlist_field: bool = False
    cdi_allowlist: tuple[str, ...] = ()
    vm_state_storage_class: str | None = None
    """KubeVirt's ``spec.configuration.vmStateStorageClass``: with it, EFI variables and TPM state persist."""


def vm_state_storage_class(kubevirts: Sequence[Mapping[str, Any]]) -> str | None:
    """The VM-state storage class a KubeVirt CR configures, if any.

    A persistent TPM (BitLocker, Windows 11) and persistent EFI variables need KubeVirt to keep VM state in a
    PVC of this class; without it, asking for persistence makes KubeVirt refuse the VM, so the renderer only
    asks when the cluster says it can.
    """
    for kubevirt in kubevirts:
        configured = ((kubevirt.get("spec") or {}).get("configuration") or {}).get("vmStateStorageClass")
        if configured:
            return str(configured)
    return None


def facts_ttl_from_env() -> float:
    """The facts cache interval; a bad value falls back to the default instead of crashing the operator."""
    try:
        value = float(os.environ.get(TTL_ENV, DEFAULT_TTL_S))
    except ValueError:
        return DEFAULT_TTL_S
    return value if value > 0 else DEFAULT_TTL_S


class PlatformFactsReader:
    """Reads the platform facts; remembers which facts it already reported unavailable (one log line each)."""

    def __init__(self, api: kube.KubeApi) -> None:
        self.api = api
        self._reported: set[str] = set()

    async def _read(self, what: str, fetch: Callable[[], Any]) -> Any:
        """One read; a refusal (RBAC) or outage makes that fact unknown and is logged once, not raised."""
        try:
            return await fetch()
        except ControllerError as exc:
            if what not in self._reported:
                self._reported.add(what)
                log.warning("platform fact unavailable", extra={"fact": what, "error": str(exc)})
            return None

    async def fetch(self) -> PlatformFacts:
        """One read of every fact (four requests)."""
        nodes = await self._read("nodes", lambda: self.api.list(NODE))
        kubevirts = await self._read("kubevirts", lambda: self.api.list(KUBEVIRT))
        crd = await self._read("cdiconfig-crd", lambda: self.api.get(kube.CRD, None, ssrf.CDI_CONFIG_CRD))
        config = await self._read("cdiconfig", lambda: self.api.get(CDI_CONFIG, None, ssrf.CDI_CONFIG_NAME))
        allowlist = ((config or {}).get("spec") or {}).get(ssrf.ALLOWLIST_FIELD) or []
        return PlatformFacts(
            kvm=kvm_guard.kvm_verdict(nodes, kubevirts or []) if nodes is not None else None,
            cdi_allowlist_field=ssrf.cdi_has_allowlist(crd),
            cdi_allowlist=tuple(str(entry) for entry in allowlist),
            vm_state_storage_class=vm_state_storage_class(kubevirts or []),
        )


def platform_facts_cache(api: kube.KubeApi, ttl_s: float) -> TtlCache[PlatformFacts]:
    """The platform facts, read at most once per ``ttl_s`` (one read even under concurrency)."""
    return TtlCache(PlatformFactsReader(api).fetch, ttl_s)
