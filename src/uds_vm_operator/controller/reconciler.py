"""The UDSVirtualMachine controller: observe → decide → apply → publish, one VM at a time per key.

Watch events (of the VM and of its children) only *enqueue* the VM's key (``controller/handlers.py``); the
shared controller base (``runtime/controller.py``) runs a bounded pool of workers over a de-duplicating
queue, so a burst of events for one VM costs one reconcile, two workers never reconcile the same VM at once,
and failures are retried with exponential backoff per key. One reconcile reads (observe), decides purely
what the children should be (decide), writes the difference (apply) and derives status from what it saw
(publish), all over one :class:`VmReconcile`. A spec the operator cannot honour is reported (condition +
Event) and not retried until it changes, because retrying cannot fix it. See docs/architecture.md.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from uds_vm_operator.api import SpecError, UDSVirtualMachineSpec, parse_vm_spec
from uds_vm_operator.api.models import UDSVirtualMachineStatus
from uds_vm_operator.api.quantity import parse_bytes
from uds_vm_operator.child_names import admin_secret_name, netpol_name, root_dv_name
from uds_vm_operator.controller import ssrf
from uds_vm_operator.controller.compare import is_subset, needs_apply, normalise_secret, with_applied_hash
from uds_vm_operator.controller.facts import FactsCache
from uds_vm_operator.controller.golden_image import (
    GoldenImagePlan,
    carried_status,
    execute_golden_image,
    observe_golden_image,
)
from uds_vm_operator.controller.guest_checks import CONDITION_TYPE as GUEST_CONDITION
from uds_vm_operator.controller.guest_checks import GuestChecker, GuestVerdict, carry_drift, guest_event
from uds_vm_operator.controller.platform import PackageOutcome, Platform
from uds_vm_operator.controller.platform_assess import PlatformAssessment
from uds_vm_operator.controller.pod_selection import policy_selects_vm
from uds_vm_operator.controller.pruning import ChildPruner
from uds_vm_operator.controller.references import CloneGrants
from uds_vm_operator.controller.release import RECHECK_S as RELEASE_RECHECK_S
from uds_vm_operator.controller.release import ChildRelease, holds_children
from uds_vm_operator.controller.source_dns import SourceResolver
from uds_vm_operator.controller.status import (
    REPLACING_REASON,
    Observation,
    Refusal,
    SpecRefusedError,
    derive_status,
    must_hold_vm,
)
from uds_vm_operator.controller.verification import VerificationOutcome
from uds_vm_operator.controller.verification_io import (
    execute_verification,
    observe_verification,
    verifier_image_from_env,
    verifier_resources_from_env,
)
from uds_vm_operator.metrics import OperatorMetrics
from uds_vm_operator.render import (
    ClusterFacts,
    Owner,
    expected_pvc_size,
    generate_admin_password,
    live_migration_refusal,
    render_children,
)
from uds_vm_operator.render.common import POOL_LABEL
from uds_vm_operator.render.secrets import ADMIN_PASSWORD_KEY
from uds_vm_operator.runtime import kube
from uds_vm_operator.runtime.controller import Controller, Key, ReconcileResult, rfc3339, utc_now
from uds_vm_operator.runtime.errors import KubeApiError
from uds_vm_operator.runtime.events import transition_event
from uds_vm_operator.runtime.status_writer import StatusWriter
from uds_vm_operator.runtime.store import ObjectStore
from uds_vm_operator.runtime.workqueue import MAX_BACKOFF_S
from uds_vm_operator.sizing import DEFAULT_OVERHEAD_PERCENT, pvc_mib, virtual_mib

log = logging.getLogger("uds_vm_operator.reconcile")

STATUS_MESSAGE_LIMIT = 4000
STATUS_QUANTITY_LIMIT = 32
DV_TERMINAL_WITH_DATA = frozenset({"Succeeded"})


def populated_before_rendered_access_modes(desired: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """A populated size-less clone DataVolume made before the renderer wrote ``spec.storage.accessModes``.

    Its spec differs from ours only by that field, CDI's webhook forbids adding it (DataVolume specs are
    immutable), and the disk already holds data: it is kept as it is, neither re-applied nor reported.
    """
    desired_spec = desired.get("spec") or {}
    storage = desired_spec.get("storage")
    if not isinstance(storage, Mapping) or "accessModes" not in storage:
        return False  # sized disks (spec.pvc), the reconcile's common case, stop here without copying
    current_spec = current.get("spec") or {}
    if (current.get("status") or {}).get("phase") not in DV_TERMINAL_WITH_DATA:
        return False
    if "accessModes" in (current_spec.get("storage") or {}):
        return False
    without = {key: value for key, value in storage.items() if key != "accessModes"}
    return is_subset({**desired_spec, "storage": without}, current_spec)


@dataclass
class Outcome(ReconcileResult):
    """What one reconcile did (tests and benchmarks read ``writes``) and when to look again."""

    writes: int = 0
    phase: str | None = None
    deleted: bool = False


ChildKey = tuple[str, str]
"""(kind, name) of a rendered child."""


@dataclass
class VmReconcile:
    """One reconcile of one VM: what observe read, what decide chose, what apply did (the one context)."""

    body: Mapping[str, Any]
    owner: Owner
    generation: int
    outcome: Outcome = field(default_factory=Outcome)
    spec: UDSVirtualMachineSpec | None = None
    facts: ClusterFacts | None = None
    platform: PlatformAssessment = field(default_factory=PlatformAssessment)
    datavolume: dict[str, Any] | None = None
    verification: VerificationOutcome | None = None
    golden: GoldenImagePlan | None = None
    windows_admin_password: str | None = None
    children: list[dict[str, Any]] = field(default_factory=list)
    desired: dict[ChildKey, dict[str, Any]] = field(default_factory=dict)
    observed: dict[ChildKey, dict[str, Any] | None] = field(default_factory=dict)
    disk_blocker: Refusal | None = None
    first_children: bool = True
    """None of the rendered children existed before this reconcile."""
    package: PackageOutcome = field(default_factory=PackageOutcome)
    guest: GuestVerdict | None = None
    """spec.monitoring's last guest check (controller.guest_checks); None when the VM is not monitored."""

    @classmethod
    def of(cls, body: Mapping[str, Any], namespace: str, name: str) -> VmReconcile:
        """The context for the VM ``body`` as the store holds it."""
        meta = body.get("metadata") or {}
        owner = Owner(
            name=name, namespace=namespace, uid=str(meta.get("uid")), pod_labels=member_pod_labels(meta)
        )
        return cls(body=body, owner=owner, generation=int(meta.get("generation") or 0))

    def require_spec(self) -> UDSVirtualMachineSpec:
        """The parsed spec (observe sets it before any later step runs)."""
        if self.spec is None:
            raise RuntimeError("the spec is read by the observe step first")
        return self.spec

    def require_facts(self) -> ClusterFacts:
        """The cluster facts (observe sets them before any later step runs)."""
        if self.facts is None:
            raise RuntimeError("the cluster facts are read by the observe step first")
        return self.facts


def member_pod_labels(metadata: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """A pool member's labels, for its launcher pod, so policies can select a whole pool (`uds.dev/pool`)
    or what its template names. Only members: their labels are set once by the pool controller (a new
    template makes new members), while a standalone VM's labels are the user's to edit, and carrying
    them would change a running VM's template on every edit."""
    labels = metadata.get("labels") or {}
    if POOL_LABEL not in labels:
        return ()
    return tuple(sorted((str(key), str(value)) for key, value in labels.items()))


class Reconciler(Controller):
    """The UDSVirtualMachine controller: one reconcile at a time per VM, on the shared controller base."""

    kind = kube.UDS_VM
    subject = "vm"
    queue_name = "reconcile"
    terminal_delay_s = MAX_BACKOFF_S * 5
    log = log

    def __init__(
        self,
        api: kube.KubeApi,
        store: ObjectStore,
        facts: FactsCache,
        metrics: OperatorMetrics,
        *,
        workers: int = 8,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        super().__init__(api, metrics, workers=workers, clock=clock)
        self.store = store
        self.facts = facts
        self._unverified: set[Key] = set()
        """VMs seen in the initial listing: a child missing from the store is confirmed by a GET."""
        self.verifier_image = verifier_image_from_env()
        """The operator's own image, run by SI-7 verifier pods (None: the verifier cannot run)."""
        self.verifier_resources = verifier_resources_from_env()
        """The verifier pods' requests and limits; a bad chart value stops the operator here, at start."""
        self.platform = Platform(api, vm_known=lambda ns, vm: store.contains(kube.UDS_VM, ns, vm))
        """KVM guard, CDI source allowlist, live-migration note, UDS Package rules (controller.platform)."""
        self.pruner = ChildPruner(api)
        self.release = ChildRelease(api)
        """Deletes a deleting pool member's children, then its finalizer (controller.release)."""
        self.status_writer = StatusWriter(api, kube.UDS_VM, UDSVirtualMachineStatus)
        """The one status write of a reconcile (runtime.status_writer), validated against the CRD's model."""
        self.clone_grants = CloneGrants(api)
        """Proof a cross-namespace clone source is granted to the VM's namespace (controller.references)."""
        self.source_allowlist = ssrf.source_allowlist_from_env()
        self.resolver = SourceResolver()
        """Admin allowlist of private import hosts (chart value ssrf.allowedSourceHosts; controller.ssrf)."""
        """Deletes children a spec change made obsolete (controller.pruning), in the apply step."""
        self.guest_checker = GuestChecker(api)
        """spec.monitoring: reads monitored guests on schedule, judges drift (controller.guest_checks)."""

    def register(self, registry: Any) -> None:
        """Add this controller's watch handlers to a kopf registry (``kopf.on.event`` only; see handlers)."""
        from uds_vm_operator.controller.handlers import register_vm_handlers  # noqa: PLC0415 (imports this)

        register_vm_handlers(registry, self)

    def verify_children(self, namespace: str, name: str) -> None:
        """Until a reconcile of this VM has looked at every child, confirm a store miss with one GET.

        After a (re)start kopf lists each kind separately, so a VM can be reconciled before its children
        reached the store; reading a miss as "absent" would cost a needless apply (a write on a resync).
        Only a pass that reached the apply step clears it: a reconcile that began before the VM was listed
        (enqueued by a child's listing, it found no VM) ends successfully too, but has seen no child, and
        clearing the flag then let the VM's own pass trust misses of children not listed yet (measured: 345
        needless applies on a 3,000-VM resync).
        """
        self._unverified.add((namespace, name))

    def error_subject(self, key: Key) -> Mapping[str, Any] | None:
        """A failed reconcile's Warning Event regards the VM as the store last saw it."""
        return self.store.get(kube.UDS_VM, *key)

    # -------------------------------------------------------------------------------------- reconcile

    async def reconcile(self, namespace: str, name: str) -> Outcome:
        """Bring one VM's children and status in line with its spec: observe → decide → apply → publish.

        Each step reads and writes only through ``ctx``. A spec the operator will not act on raises
        :class:`SpecRefusedError` from whichever step finds it; the refusal is published like any status.
        """
        body = self.store.get(kube.UDS_VM, namespace, name)
        if body is None:
            self.metrics.forget_vm(name=name, namespace=namespace)
            self.guest_checker.forget(namespace, name)
        if body is None or (body.get("metadata") or {}).get("deletionTimestamp"):
            writes = await self.platform.forget(namespace, name)
            outcome = Outcome(deleted=True, writes=writes)
            if body is not None and holds_children(body):
                await self._release(body, outcome)
            return outcome
        ctx = VmReconcile.of(body, namespace, name)
        try:
            await self._observe(ctx)
            self._decide(ctx)
            await self._apply(ctx)
            self._unverified.discard((namespace, name))  # every child was read: misses are trusted now
        except SpecRefusedError as refused:
            await self._publish(ctx, self._refused_observation(ctx, refused.refusal), status="invalid")
            return ctx.outcome
        golden = ctx.golden
        extra = {
            "goldenImage": golden.status if golden is not None else None,
            "guest": ctx.guest.status() if ctx.guest is not None else None,
        }
        await self._publish(ctx, self._observation(ctx), status="success", extra_status=extra)
        return ctx.outcome

    async def _release(self, body: Mapping[str, Any], outcome: Outcome) -> None:
        """A deleting pool member: delete its children ourselves, look again while any lingers."""
        progress = await self.release.release(body)
        if progress.lingering:
            outcome.requeue_after(RELEASE_RECHECK_S)
        outcome.writes += progress.deleted + int(progress.released)

    # ---------------------------------------------------------------------------------------- observe

    async def _observe(self, ctx: VmReconcile) -> None:
        """Read everything the decision needs: spec, cluster facts, platform verdict, disk, SI-7, factory."""
        try:
            ctx.spec = parse_vm_spec(ctx.body.get("spec") or {})
        except SpecError as exc:
            raise SpecRefusedError(Refusal("InvalidSpec", exc.message)) from exc
        spec, owner = ctx.spec, ctx.owner
        refusal = _storage_refusal(spec)
        ctx.facts = await self.platform.render_facts(await self.facts.get())
        if refusal is not None:
            raise SpecRefusedError(refusal)
        # Confused-deputy locks (issue 32): nothing is created for a source the VM's author could not reach.
        raw_spec = ctx.body.get("spec") or {}
        refusal = await self.clone_grants.refusal(spec, owner.namespace) or ssrf.private_source_refusal(
            raw_spec,
            self.source_allowlist,
            await self.resolver.addresses(ssrf.source_url_of(raw_spec.get("source") or {})),
        )
        if refusal is not None:
            raise SpecRefusedError(refusal)
        ctx.platform = await self.platform.assess(ctx.body, spec)
        ctx.datavolume = await self._observed(
            kube.DATA_VOLUME, owner.namespace, root_dv_name(owner.name), owner=owner.name
        )
        # SI-7 first: the verdict decides runStrategy, and is recorded before any child is applied.
        ctx.verification = await observe_verification(
            self.api,
            owner,
            owner_body=ctx.body,
            spec=spec,
            facts=ctx.facts,
            datavolume=ctx.datavolume,
            verifier_image=self.verifier_image,
            verifier_resources=self.verifier_resources,
        )
        ctx.golden = await observe_golden_image(self.api, self._observed, owner, ctx.body, spec)
        ctx.windows_admin_password = await self._windows_admin_password(spec, owner.namespace, owner.name)

    # ----------------------------------------------------------------------------------------- decide

    def _decide(self, ctx: VmReconcile) -> None:
        """Pure: the children this VM should have, given what was observed."""
        spec, facts = ctx.require_spec(), ctx.require_facts()
        preliminary = self._base_observation(
            spec, facts, ctx.generation, datavolume=ctx.datavolume, verification=ctx.verification
        )
        golden = ctx.golden
        run_strategy = "Halted" if must_hold_vm(preliminary) else (golden.run_strategy if golden else None)
        try:
            children = render_children(
                ctx.owner,
                spec,
                facts,
                run_strategy=run_strategy,
                windows_admin_password=ctx.windows_admin_password,
            )
        except SpecError as exc:
            raise SpecRefusedError(Refusal("InvalidSpec", exc.message)) from exc
        ctx.children = self.platform.filter_children(
            ctx.owner, ctx.platform, children, ctx.datavolume is not None
        )

    # ------------------------------------------------------------------------------------------ apply

    async def _apply(self, ctx: VmReconcile) -> None:
        """Carry out the decisions in order: platform Events, SI-7 actions, children, Package, pruning,
        the golden-image factory. Every write is counted in ``ctx.outcome``."""
        owner, outcome = ctx.owner, ctx.outcome
        # uds-package mode in a sidecar-mesh namespace: the annotations UDS admits (reads the mesh mode once)
        ctx.children = await self.platform.mesh_children(owner, ctx.require_spec(), ctx.children)
        await self._emit_all(ctx, ctx.platform.events)
        outcome.requeue_after(ctx.platform.requeue_after_s)
        verification = ctx.verification
        if verification is not None:
            outcome.writes += await execute_verification(self.api, owner.namespace, verification)
            await self._emit_all(ctx, [(e.type, e.reason, e.message) for e in verification.events])
        for child in ctx.children:
            await self._apply_child(ctx, child)
        ctx.package = await self.platform.sync_package(owner, ctx.require_spec(), ctx.body)
        if not (ctx.first_children and not ctx.body.get("status")):
            # A VM never reconciled before (no status, none of its children existed) cannot have stale
            # children: skipping the prune saves three LISTs per new VM at fleet scale.
            outcome.writes += await self.pruner.prune_stale(owner, ctx.body, ctx.children)
        outcome.writes += ctx.package.writes
        await self._emit_all(ctx, ctx.package.events)
        outcome.writes += await execute_golden_image(
            self.api, owner, ctx.golden, functools.partial(self.emit, ctx.body)
        )
        await self._check_guest(ctx)

    async def _check_guest(self, ctx: VmReconcile) -> None:
        """spec.monitoring: the guest's drift verdict (a fresh read only when due), and the next check."""
        owner, spec = ctx.owner, ctx.require_spec()
        if not spec.monitoring.enabled:  # no read at all: an unmonitored fleet costs nothing here
            self.guest_checker.forget(owner.namespace, owner.name)
            return
        vmi = await self._observed(kube.VIRTUAL_MACHINE_INSTANCE, owner.namespace, owner.name)
        verdict = await self.guest_checker.check(owner.namespace, owner.name, spec, vmi)
        ctx.guest = carry_drift(verdict, (ctx.body.get("status") or {}).get("guest"))
        due = self.guest_checker.due_in(owner.namespace, owner.name, spec)
        if due is not None:
            ctx.outcome.requeue_after(due)

    async def _apply_child(self, ctx: VmReconcile, child: Mapping[str, Any]) -> None:
        """Server-side apply one child when it differs from the live one (a DataVolume is settled first)."""
        owner = ctx.owner
        desired = with_applied_hash(child)
        kind = kube.kind_of(desired)
        child_name = desired["metadata"]["name"]
        key = (kind.kind, child_name)
        ctx.desired[key] = desired
        current = await self._observed(kind, owner.namespace, child_name, owner=owner.name)
        ctx.first_children = ctx.first_children and current is None
        if kind is kube.DATA_VOLUME and current is not None:
            if populated_before_rendered_access_modes(desired, current):
                ctx.observed[key] = current
                return
            blocker, current = await self._settle_datavolume(owner, desired, current, ctx.outcome)
            ctx.disk_blocker = ctx.disk_blocker or blocker
            if blocker is not None:
                ctx.observed[key] = current
                return
        if needs_apply(desired, current):
            try:
                current = await self.api.apply(desired)
            except KubeApiError as exc:
                if exc.transient:
                    raise
                # The schema let the spec through but the API server refuses the child (e.g. a CIDR
                # NetworkPolicy rejects, a zero-size PVC): retrying cannot help, so say so in status.
                message = f"The API server rejected {kind.kind} {child_name}: {exc.api_message}"[:1000]
                raise SpecRefusedError(Refusal("ChildRejected", message)) from exc
            self.store.put(kind, current)
            ctx.outcome.writes += 1
            log.info(
                "applied",
                extra={"vm": f"{owner.namespace}/{owner.name}", "child": f"{kind.kind}/{child_name}"},
            )
        ctx.observed[key] = current

    async def _emit_all(self, ctx: VmReconcile, events: Iterable[tuple[str, str, str]]) -> None:
        for event_type, reason, note in events:
            if await self.emit(ctx.body, event_type, reason, note):
                ctx.outcome.writes += 1

    # ---------------------------------------------------------------------------------------- publish

    def _observation(self, ctx: VmReconcile) -> Observation:
        """What status derivation needs after a full pass."""
        name = ctx.owner.name
        policy_in_place, selects_no_pod = _policy_selection(ctx.desired, ctx.observed, name)
        obs = self._base_observation(
            ctx.require_spec(),
            ctx.require_facts(),
            ctx.generation,
            datavolume=ctx.observed.get(("DataVolume", root_dv_name(name))),
            virtual_machine=ctx.observed.get(("VirtualMachine", name)),
            network_isolated=ctx.package.in_place or (policy_in_place and not selects_no_pod),
            hardening=_hardening(ctx.desired, ctx.observed, name),
            disk_blocker=ctx.disk_blocker,
            verification=ctx.verification,
        )
        obs = dataclasses.replace(
            obs,
            extra_conditions=ctx.platform.conditions
            + ctx.package.conditions
            + (((GUEST_CONDITION, ctx.guest.condition),) if ctx.guest is not None else ()),
            ready_blocker=ctx.platform.ready_blocker,
            network_selects_no_pod=selects_no_pod and not ctx.package.in_place,
        )
        golden = ctx.golden
        if golden is not None and golden.run_strategy is not None:  # the factory holds or runs the build VM
            obs = dataclasses.replace(obs, run_strategy=golden.run_strategy)
        return obs

    def _refused_observation(self, ctx: VmReconcile, refusal: Refusal) -> Observation:
        """A refusal: the spec's essentials when it parsed, only the refusal when it did not."""
        if ctx.spec is None or ctx.facts is None:
            return Observation(generation=ctx.generation, refusal=refusal)
        return self._base_observation(ctx.spec, ctx.facts, ctx.generation, refusal=refusal)

    # ------------------------------------------------------------------------------------------ parts

    def _base_observation(
        self,
        spec: UDSVirtualMachineSpec,
        facts: ClusterFacts,
        generation: int,
        *,
        refusal: Refusal | None = None,
        datavolume: Mapping[str, Any] | None = None,
        virtual_machine: Mapping[str, Any] | None = None,
        network_isolated: bool = False,
        hardening: tuple[str | None, bool] = (None, False),
        disk_blocker: Refusal | None = None,
        verification: VerificationOutcome | None = None,
    ) -> Observation:
        try:
            pvc_size = expected_pvc_size(spec)
        except SpecError:
            pvc_size = None
        if pvc_size is not None and len(pvc_size) > STATUS_QUANTITY_LIMIT:
            pvc_size = None  # an absurd size is refused elsewhere; the status schema would reject it
        return Observation(
            generation=generation,
            source_kind=spec.source.kind,
            declared_checksum=spec.declared_checksum,
            run_strategy=spec.run_strategy,
            cdi_http_checksum=facts.cdi_http_checksum,
            pvc_size=pvc_size,
            datavolume=datavolume,
            virtual_machine=virtual_machine,
            network_isolated=network_isolated,
            zero_trust=network_isolated and spec.network.egress != "internet",
            hardening_secret=hardening[0],
            hardening_in_place=hardening[1],
            refusal=refusal,
            disk_blocker=disk_blocker,
            verification=verification,
            backup_exemptions=tuple(
                (disk.name, disk.backup_exemption_reason or "") for disk in spec.data_disks if not disk.backup
            ),
        )

    async def _observed(
        self, kind: kube.Kind, namespace: str, name: str, *, owner: str | None = None
    ) -> dict[str, Any] | None:
        """The live object: from the watch-fed store for watched kinds, else one GET.

        ``owner``: the VM being reconciled; a store miss is confirmed by a GET while that VM is still
        unverified since a (re)start (see :meth:`verify_children`).
        """
        if self.store.is_watched(kind):
            found = self.store.get(kind, namespace, name)
            if found is not None or owner is None or (namespace, owner) not in self._unverified:
                return found
        current = await self.api.get(kind, namespace, name)
        if current is not None:
            self.store.put(kind, current)
        return current

    async def _settle_datavolume(
        self,
        owner: Owner,
        desired: dict[str, Any],
        current: dict[str, Any],
        outcome: Outcome,
    ) -> tuple[Refusal | None, dict[str, Any] | None]:
        """DataVolume specs are immutable (CDI's webhook): decide what to do when ours differs.

        A DV that has not produced data yet and that we own is replaced; a populated one, or one we do not
        own, is left alone and reported, because replacing it would destroy the disk.
        """
        if is_subset(desired.get("spec") or {}, current.get("spec") or {}):
            return None, current
        meta = current.get("metadata") or {}
        ours = any(ref.get("uid") == owner.uid for ref in meta.get("ownerReferences") or [])
        phase = (current.get("status") or {}).get("phase")
        if ours and phase not in DV_TERMINAL_WITH_DATA:
            await self.api.delete(kube.DATA_VOLUME, owner.namespace, meta["name"], uid=meta.get("uid"))
            self.store.discard(kube.DATA_VOLUME, current)
            outcome.writes += 1
            log.info(
                "replacing DataVolume", extra={"vm": f"{owner.namespace}/{owner.name}", "dv": meta["name"]}
            )
            return Refusal(REPLACING_REASON, f"Replacing {meta['name']}: its spec changed."), None
        return (
            Refusal(
                "DataVolumeSpecImmutable",
                f"DataVolume {meta['name']} was created with a different spec and CDI does not allow "
                f"changing it; to re-import, delete it "
                f"(kubectl delete dv -n {owner.namespace} {meta['name']}); its data will be lost.",
            ),
            current,
        )

    async def _windows_admin_password(
        self, spec: UDSVirtualMachineSpec, namespace: str, name: str
    ) -> str | None:
        """The Administrator password: from the referenced Secret, the generated Secret, or a new one.

        Only passed to the renderer (which puts it into Secrets); never logged or written to status.
        """
        if spec.os != "windows":
            return None
        ref = spec.windows.admin_password_secret_ref if spec.windows is not None else None
        if ref is not None:
            # A user's Secret carries none of our labels, so the watch-fed store never sees it: read it.
            user_secret = await self.api.get(kube.SECRET, namespace, ref.name)
            value = ((user_secret or {}).get("data") or {}).get(ref.key)
            return base64.b64decode(value).decode() if value else None
        existing = await self._observed(kube.SECRET, namespace, admin_secret_name(name))
        encoded = ((existing or {}).get("data") or {}).get(ADMIN_PASSWORD_KEY)
        if encoded:
            return base64.b64decode(encoded).decode()
        return generate_admin_password()

    async def _publish(
        self,
        ctx: VmReconcile,
        obs: Observation,
        *,
        status: str,
        extra_status: Mapping[str, Any] | None = None,
    ) -> None:
        """Write status (only if it changed), an Event on transitions, and the metrics."""
        owner_body, outcome = ctx.body, ctx.outcome
        meta = owner_body.get("metadata") or {}
        previous = owner_body.get("status") or {}
        desired = derive_status(obs, previous, rfc3339(self.clock()))
        # status.goldenImage comes from the golden-image factory; a refusal (no factory run) keeps the last.
        desired.update(extra_status if extra_status is not None else carried_status(previous))
        desired["message"] = str(desired.get("message") or "")[:STATUS_MESSAGE_LIMIT]
        outcome.phase = desired["phase"]
        updated = await self.status_writer.publish(owner_body, desired)
        if updated is not None:
            self.store.put(kube.UDS_VM, updated)
            outcome.writes += 1
            for event in (transition_event(previous, desired), guest_event(previous, desired)):
                if event is not None and await self.emit(owner_body, *event):
                    outcome.writes += 1
        self.metrics.reconcile_total.labels(status=status).inc()
        self.metrics.record_vm(
            name=meta["name"],
            namespace=meta.get("namespace", ""),
            phase=desired["phase"],
            controls=_controls(desired),
            overhead_ratio=_overhead_ratio(owner_body),
            guest=(desired.get("guest") or {}).get("compliant"),
        )


MAX_DISK_BYTES = (1 << 63) - 1
"""Kubernetes stores storage requests as int64 bytes: a larger disk can never be provisioned."""


def _storage_refusal(spec: UDSVirtualMachineSpec) -> Refusal | None:
    """Refuse what KubeVirt would accept but could never honour (live migration needs RWX, absurd sizes)."""
    if (spec.disk.virtual_bytes or 0) > MAX_DISK_BYTES:
        return Refusal(
            "InvalidSpec",
            "spec.disk.virtualSize is larger than Kubernetes can represent (8Ei); give the real image size.",
        )
    reason = live_migration_refusal(spec)
    if reason is None:
        return None
    return Refusal("LiveMigrationNeedsRWX", f"spec.liveMigration: {reason}. Nothing was created.")


def _in_place(
    desired: Mapping[tuple[str, str], Mapping[str, Any]],
    observed: Mapping[tuple[str, str], Mapping[str, Any] | None],
    key: tuple[str, str],
) -> bool:
    want, have = desired.get(key), observed.get(key)
    return want is not None and have is not None and is_subset(normalise_secret(want), have)


def _policy_selection(
    desired: Mapping[tuple[str, str], Mapping[str, Any]],
    observed: Mapping[tuple[str, str], Mapping[str, Any] | None],
    name: str,
) -> tuple[bool, bool]:
    """(policy in place as rendered, yet selecting no launcher pod of the VM): see pod_selection."""
    policy_key, vm_key = ("NetworkPolicy", netpol_name(name)), ("VirtualMachine", name)
    if not _in_place(desired, observed, policy_key):
        return False, False
    live_vm = observed.get(vm_key) or desired.get(vm_key)
    return True, not policy_selects_vm(observed.get(policy_key), live_vm)


def _hardening(
    desired: Mapping[tuple[str, str], Mapping[str, Any]],
    observed: Mapping[tuple[str, str], Mapping[str, Any] | None],
    name: str,
) -> tuple[str | None, bool]:
    for flavour, suffix in (("cloud-init", "cloudinit"), ("sysprep", "sysprep")):
        key = ("Secret", f"{name}-{suffix}")
        if key in desired:
            return flavour, _in_place(desired, observed, key)
    return None, False


def _controls(status: Mapping[str, Any]) -> dict[str, bool]:
    """Each control's live evidence; a control whose setting drifted inside the guest loses it."""
    conditions = {c["type"]: c.get("status") == "True" for c in status.get("conditions") or []}
    hardened = conditions.get("Hardened", False)
    drifted = {
        str(item.get("control", "")).upper() for item in (status.get("guest") or {}).get("drift") or []
    }
    return {
        "SI-7": bool(status.get("checksumVerified")),
        "SC-7": conditions.get("NetworkIsolated", False),
        "AC-3": hardened and "AC-3" not in drifted,
        "IA-5": hardened and "IA-5" not in drifted,
    }


def _overhead_ratio(owner_body: Mapping[str, Any]) -> float | None:
    disk = ((owner_body.get("spec") or {}).get("disk")) or {}
    size = disk.get("virtualSize")
    if size is None:
        return None
    try:
        virtual = virtual_mib(parse_bytes(size, field="spec.disk.virtualSize"))
        pvc = pvc_mib(virtual << 20, disk.get("overheadPercent", DEFAULT_OVERHEAD_PERCENT))
    except (SpecError, ValueError, TypeError):
        return None
    return (pvc - virtual) / virtual if virtual else None


__all__ = ["KubeApiError", "Outcome", "Reconciler", "utc_now"]
