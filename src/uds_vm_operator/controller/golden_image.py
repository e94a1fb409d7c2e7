"""The golden-image factory: an ``iso`` Windows build VM becomes a versioned, cloneable golden image.

A UDSVirtualMachine in sysprep mode ``iso`` with ``windows.goldenImage: {name, version, keep}`` installs
Windows, and its answer file ends with ``sysprep /generalize /oobe /shutdown`` (``render.sysprep``). The
factory then runs this state machine on every reconcile, driven only by what it observes:

1. **Building** — the KubeVirt VM runs with ``runStrategy: RerunOnFailure``, so the guest's own shutdown
   is final (``Always`` would boot the freshly generalized disk again). Seeing the VM started records
   ``status.goldenImage.startedVersion``: a VM that reports ``Stopped`` before it ever ran is not a build.
2. **Cloning** — the build VM stopped after running: the operator holds it ``Halted`` and creates the
   clone DataVolume ``<golden>-v<version>`` from the system disk PVC, with an explicit size and *no*
   ownerReference, so the image outlives the build VM.
3. **Published** — once CDI reports the clone ``Succeeded``, the CDI ``DataSource`` ``<golden>`` is pointed
   at it (VMs and pools clone from the DataSource, so they pick up the new version through their template)
   and clone DataVolumes beyond ``keep`` versions are deleted, never the published one.

Bumping ``version`` starts the next build: the VM runs again (e.g. to apply updates), generalizes, stops,
and the new version is published. The decision (:func:`plan_golden_image`) is pure; only
:func:`observe_golden_image` and :func:`execute_golden_image` talk to the API server.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from uds_vm_operator import MANAGED_BY_LABEL
from uds_vm_operator.api.models import GoldenImage, UDSVirtualMachineSpec
from uds_vm_operator.render.common import Owner
from uds_vm_operator.render.goldenimage import (
    GOLDEN_LABEL,
    GOLDEN_VERSION_LABEL,
    render_clone_datavolume,
    render_data_source,
    version_name,
)
from uds_vm_operator.render.sysprep import sysprep_mode
from uds_vm_operator.runtime import kube

FACTORY_RUN_STRATEGY = "RerunOnFailure"
"""Restart only on failure: the guest's sysprep shutdown must stay a shutdown."""
HOLD = "Halted"
STARTED_STATES = frozenset({"Starting", "Running", "Stopping", "Paused", "Migrating"})
"""printableStatus values that prove the build VM ran (it is ``Stopped`` before its first start too)."""
STOPPED = "Stopped"
CLONE_DONE = "Succeeded"

Observe = Callable[[kube.Kind, str, str], Awaitable[dict[str, Any] | None]]
Emit = Callable[[str, str, str], Awaitable[bool]]


@dataclass(frozen=True)
class GoldenImagePlan:
    """What the factory wants this reconcile: a status, a run strategy, and at most a few writes."""

    golden: GoldenImage
    status: dict[str, Any]
    """``status.goldenImage`` (camelCase, no null values, so an unchanged status compares equal)."""
    run_strategy: str | None
    """Override for the KubeVirt VM's runStrategy; None keeps the user's (e.g. Halted or Manual)."""
    create_clone: dict[str, Any] | None = None
    publish: dict[str, Any] | None = None
    prune: bool = False
    events: tuple[tuple[str, str, str], ...] = field(default_factory=tuple)


# ------------------------------------------------------------------------------------------- rendering


# ------------------------------------------------------------------------------------------- decisions


def _managed(obj: Mapping[str, Any] | None, golden_name: str) -> bool:
    labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
    return (
        all(labels.get(k) == v for k, v in MANAGED_BY_LABEL.items())
        and labels.get(GOLDEN_LABEL) == golden_name
    )


def published_version(data_source: Mapping[str, Any] | None, golden_name: str, namespace: str) -> int | None:
    """The version a DataSource serves, from its ``spec.source.pvc`` (None when it serves none of ours)."""
    pvc = (((data_source or {}).get("spec") or {}).get("source") or {}).get("pvc") or {}
    if pvc.get("namespace", namespace) != namespace:
        return None
    match = re.fullmatch(re.escape(golden_name) + r"-v([0-9]+)", str(pvc.get("name") or ""))
    return int(match.group(1)) if match else None


def versions_to_prune(
    clones: Sequence[Mapping[str, Any]], keep: int, published: int | None
) -> list[Mapping[str, Any]]:
    """Clone DataVolumes beyond the ``keep`` newest versions; the published version is always kept."""
    by_version: dict[int, Mapping[str, Any]] = {}
    for clone in clones:
        text = (((clone.get("metadata") or {}).get("labels")) or {}).get(GOLDEN_VERSION_LABEL, "")
        if str(text).isdigit():
            by_version[int(text)] = clone
    kept = sorted(by_version, reverse=True)[:keep]
    if published is not None and published in by_version and published not in kept:
        kept = [*kept[: keep - 1], published]
    return [by_version[v] for v in sorted(by_version) if v not in kept]


def _status(golden: GoldenImage, phase: str, **values: Any) -> dict[str, Any]:
    status = {"name": golden.name, "phase": phase, **values}
    return {key: value for key, value in status.items() if value is not None}


def _build_strategy(spec: UDSVirtualMachineSpec) -> str | None:
    return None if spec.run_strategy in ("Halted", "Manual") else FACTORY_RUN_STRATEGY


def plan_golden_image(
    owner: Owner,
    spec: UDSVirtualMachineSpec,
    previous: Mapping[str, Any] | None,
    *,
    virtual_machine: Mapping[str, Any] | None,
    clone: Mapping[str, Any] | None,
    data_source: Mapping[str, Any] | None,
) -> GoldenImagePlan | None:
    """Decide the factory's next step from the observed world; None when the VM is no golden-image build.

    ``previous`` is the last ``status.goldenImage``; only its ``startedVersion`` is memory, everything else is
    re-derived from the KubeVirt VM, the clone DataVolume and the DataSource.
    """
    golden = spec.windows.golden_image if spec.windows is not None else None
    if golden is None:
        return None
    prev = dict(previous or {}) if (previous or {}).get("name") == golden.name else {}
    blocked = _blocked_plan(spec, golden, prev, clone=clone, data_source=data_source)
    if blocked is not None:
        return blocked
    return _progress_plan(
        owner, spec, golden, prev, virtual_machine=virtual_machine, clone=clone, data_source=data_source
    )


def _blocked_plan(
    spec: UDSVirtualMachineSpec,
    golden: GoldenImage,
    prev: Mapping[str, Any],
    *,
    clone: Mapping[str, Any] | None,
    data_source: Mapping[str, Any] | None,
) -> GoldenImagePlan | None:
    """A factory that cannot proceed (wrong sysprep mode, a foreign DataSource or clone), or None."""
    clone_name = version_name(golden.name, golden.version)
    if sysprep_mode(spec) != "iso":
        return GoldenImagePlan(
            golden,
            _status(
                golden,
                "Blocked",
                message="windows.goldenImage needs sysprep mode iso (a fresh install that is then "
                "generalized); set windows.sysprep.mode: iso and an installer ISO source",
            ),
            run_strategy=None,
        )
    if data_source is not None and not _managed(data_source, golden.name):
        return GoldenImagePlan(
            golden,
            _status(
                golden,
                "Blocked",
                startedVersion=prev.get("startedVersion"),
                message=f"DataSource {golden.name} exists and is not managed by uds-vm-operator; "
                "delete it or choose another windows.goldenImage.name",
            ),
            run_strategy=HOLD,
        )
    if clone is not None and not _managed(clone, golden.name):
        return GoldenImagePlan(
            golden,
            _status(
                golden,
                "Blocked",
                startedVersion=prev.get("startedVersion"),
                message=f"DataVolume {clone_name} exists and is not a clone made by uds-vm-operator; "
                "delete it or bump windows.goldenImage.version",
            ),
            run_strategy=HOLD,
        )
    return None


def _progress_plan(
    owner: Owner,
    spec: UDSVirtualMachineSpec,
    golden: GoldenImage,
    prev: Mapping[str, Any],
    *,
    virtual_machine: Mapping[str, Any] | None,
    clone: Mapping[str, Any] | None,
    data_source: Mapping[str, Any] | None,
) -> GoldenImagePlan:
    """The factory's next step once nothing blocks it: build, clone, publish."""
    clone_name = version_name(golden.name, golden.version)
    published = published_version(data_source, golden.name, owner.namespace)
    started = prev.get("startedVersion")
    printable = ((virtual_machine or {}).get("status") or {}).get("printableStatus")
    common = {"publishedVersion": published, "dataSource": golden.name if published else None}

    if published == golden.version:
        return GoldenImagePlan(
            golden,
            _status(golden, "Published", startedVersion=started, cloneDataVolume=clone_name, **common),
            run_strategy=HOLD,
            prune=True,
        )
    if clone is not None:
        return _publish_or_wait_plan(owner, golden, clone, started, common)
    if started == golden.version and printable == STOPPED:
        return _start_clone_plan(owner, spec, golden, started, common)
    if printable in STARTED_STATES:
        started = golden.version
    return GoldenImagePlan(
        golden,
        _status(golden, "Building", startedVersion=started, **common),
        run_strategy=_build_strategy(spec),
    )


def _publish_or_wait_plan(
    owner: Owner,
    golden: GoldenImage,
    clone: Mapping[str, Any],
    started: int | None,
    common: Mapping[str, Any],
) -> GoldenImagePlan:
    """The clone exists: publish it through the DataSource once CDI reports it done, else wait for it."""
    clone_name = version_name(golden.name, golden.version)
    if ((clone.get("status") or {}).get("phase")) == CLONE_DONE:
        return GoldenImagePlan(
            golden,
            _status(
                golden,
                "Published",
                startedVersion=started,
                cloneDataVolume=clone_name,
                publishedVersion=golden.version,
                dataSource=golden.name,
            ),
            run_strategy=HOLD,
            publish=render_data_source(owner, golden),
            prune=True,
            events=(
                (
                    "Normal",
                    "GoldenImagePublished",
                    f"DataSource {golden.name} now serves {clone_name}",
                ),
            ),
        )
    return GoldenImagePlan(
        golden,
        _status(golden, "Cloning", startedVersion=started, cloneDataVolume=clone_name, **common),
        run_strategy=HOLD,
    )


def _start_clone_plan(
    owner: Owner,
    spec: UDSVirtualMachineSpec,
    golden: GoldenImage,
    started: int | None,
    common: Mapping[str, Any],
) -> GoldenImagePlan:
    """The build of this version ran and stopped after sysprep: hold the VM and clone its system disk."""
    clone_name = version_name(golden.name, golden.version)
    return GoldenImagePlan(
        golden,
        _status(golden, "Cloning", startedVersion=started, cloneDataVolume=clone_name, **common),
        run_strategy=HOLD,
        create_clone=render_clone_datavolume(owner, spec, golden),
        events=(
            (
                "Normal",
                "GoldenImageCloning",
                f"build of version {golden.version} stopped after sysprep; cloning its system disk "
                f"into {clone_name}",
            ),
        ),
    )


def carried_status(previous: Mapping[str, Any]) -> dict[str, Any]:
    """The ``goldenImage`` status to keep when a reconcile refuses the spec and the factory did not run.

    ``startedVersion`` is the factory's only memory: dropping it while a spec is briefly invalid would
    turn a finished build (VM Stopped) back into one that never ran.
    """
    kept = previous.get("goldenImage")
    return {"goldenImage": kept} if kept else {}


# ----------------------------------------------------------------------------------------------- I/O


async def observe_golden_image(
    api: kube.KubeApi,
    observed: Observe,
    owner: Owner,
    owner_body: Mapping[str, Any],
    spec: UDSVirtualMachineSpec,
) -> GoldenImagePlan | None:
    """Read what the factory needs (VM and clone from the watch-fed store, the DataSource by GET) and plan."""
    golden = spec.windows.golden_image if spec.windows is not None else None
    if golden is None:
        return None
    namespace = owner.namespace
    virtual_machine = await observed(kube.VIRTUAL_MACHINE, namespace, owner.name)
    clone = await observed(kube.DATA_VOLUME, namespace, version_name(golden.name, golden.version))
    data_source = await api.get(kube.DATA_SOURCE, namespace, golden.name)
    previous = (owner_body.get("status") or {}).get("goldenImage")
    return plan_golden_image(
        owner, spec, previous, virtual_machine=virtual_machine, clone=clone, data_source=data_source
    )


async def execute_golden_image(
    api: kube.KubeApi, owner: Owner, plan: GoldenImagePlan | None, emit: Emit
) -> int:
    """Carry out the plan's writes (clone, DataSource, pruning) and Events; returns the number of writes."""
    if plan is None:
        return 0
    writes = 0
    if plan.create_clone is not None:
        await api.apply(plan.create_clone)
        writes += 1
    if plan.publish is not None:
        await api.apply(plan.publish)
        writes += 1
    if plan.prune:
        selector = f"{GOLDEN_LABEL}={plan.golden.name}"
        clones = [
            clone
            for clone in await api.list(kube.DATA_VOLUME, owner.namespace, label_selector=selector)
            if _managed(clone, plan.golden.name)
        ]
        published = plan.status.get("publishedVersion")
        for clone in versions_to_prune(clones, plan.golden.keep, published):
            meta = clone["metadata"]
            await api.delete(kube.DATA_VOLUME, owner.namespace, meta["name"], uid=meta.get("uid"))
            writes += 1
            await emit("Normal", "GoldenImagePruned", f"deleted {meta['name']} (keep: {plan.golden.keep})")
    for event_type, reason, message in plan.events:
        if await emit(event_type, reason, message):
            writes += 1
    return writes


__all__ = [
    "GOLDEN_LABEL",
    "GOLDEN_VERSION_LABEL",
    "GoldenImagePlan",
    "carried_status",
    "execute_golden_image",
    "observe_golden_image",
    "plan_golden_image",
    "published_version",
    "render_clone_datavolume",
    "render_data_source",
    "version_name",
    "versions_to_prune",
]
