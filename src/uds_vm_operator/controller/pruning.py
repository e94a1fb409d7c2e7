"""Children a spec change made obsolete are deleted: a removed ``expose[]`` entry must close its port.

Part of the reconcile's apply step. Only objects carrying the VM's ownerReference and our labels are touched,
each deleted with a UID precondition; the SI-7 verifier's own NetworkPolicy is never a candidate.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from uds_vm_operator import MANAGED_BY_LABEL
from uds_vm_operator.render import Owner
from uds_vm_operator.render.common import ROLE_LABEL, VM_LABEL
from uds_vm_operator.render.verifier import VERIFIER_ROLE
from uds_vm_operator.runtime import kube
from uds_vm_operator.runtime.errors import KubeApiError

log = logging.getLogger("uds_vm_operator.pruning")

PRUNABLE_KINDS = (kube.SERVICE, kube.HTTP_ROUTE, kube.NETWORK_POLICY)
"""Children a spec change can make obsolete (an exposed port removed, a switch to uds-package mode)."""


class ChildPruner:
    """Deletes a VM's Services, HTTPRoutes and NetworkPolicy that its spec no longer renders."""

    def __init__(self, api: kube.KubeApi) -> None:
        self.api = api
        self._prune_denied: set[str] = set()

    async def prune_stale(
        self, owner: Owner, owner_body: Mapping[str, Any], children: Sequence[Mapping[str, Any]]
    ) -> int:
        """Delete our Services, HTTPRoutes and NetworkPolicy the spec no longer asks for.

        A removed ``expose[]`` entry must close the port, not leave a route behind. Only runs when the spec
        changed since the last status (``observedGeneration``), so a resync costs nothing; only objects
        carrying this VM's ownerReference are touched, each deleted with a UID precondition.
        """
        meta = owner_body.get("metadata") or {}
        if (owner_body.get("status") or {}).get("observedGeneration") == meta.get("generation"):
            return 0
        desired = {(str(c.get("kind")), str((c.get("metadata") or {}).get("name"))) for c in children}
        selector = ",".join(f"{k}={v}" for k, v in {VM_LABEL: owner.name, **MANAGED_BY_LABEL}.items())
        # The SI-7 verifier's deny-all NetworkPolicy is not a rendered child: verification_io owns it, and
        # pruning it would leave a running verifier pod unfenced.
        selector += f",{ROLE_LABEL}!={VERIFIER_ROLE}"
        writes = 0
        for kind in PRUNABLE_KINDS:
            try:
                writes += await self._prune_kind(kind, owner, selector, desired)
            except KubeApiError as exc:
                if exc.code != 403:
                    raise
                # RBAC without list/delete on this kind: say so once, do not fail every spec change.
                if kind.plural not in self._prune_denied:
                    self._prune_denied.add(kind.plural)
                    log.warning("cannot prune stale children", extra={"kind": kind.plural, "error": str(exc)})
        return writes

    async def _prune_kind(
        self, kind: kube.Kind, owner: Owner, selector: str, desired: set[tuple[str, str]]
    ) -> int:
        writes = 0
        for obj in await self.api.list(kind, owner.namespace, label_selector=selector):
            obj_meta = obj.get("metadata") or {}
            ours = any(ref.get("uid") == owner.uid for ref in obj_meta.get("ownerReferences") or [])
            if not ours or (kind.kind, str(obj_meta.get("name"))) in desired:
                continue
            await self.api.delete(kind, owner.namespace, str(obj_meta["name"]), uid=obj_meta.get("uid"))
            log.info("pruned", extra={"vm": f"{owner.namespace}/{owner.name}", "child": obj_meta["name"]})
            writes += 1
        return writes
