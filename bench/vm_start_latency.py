"""The real stack's start latency: N UDSVirtualMachines against N plain KubeVirt VirtualMachines, create to
VMI Running, on the real node (real CDI clones, the real verifier, the real KubeVirt v1.8.4).

Issue 35 item 3. One golden image (16 MiB raw, imported by the real CDI with its checksum) is published as a
DataSource in a golden namespace that `uds-vmctl golden-image rbac` protects. Then two batches, one after the
other on a quiet node (each in its own consumer namespace, deleted and gone before the next starts):

- `plain`: N KubeVirt VirtualMachines, each with a `dataVolumeTemplates` entry cloning the DataSource into a
  claim of exactly the operator's size (the DataVolume spec the operator renders for the same VM), one vCPU,
  128 MiB, the pod network with masquerade binding (as KubeVirt's examples; the default bridge binding
  cannot add its link on this node), `runStrategy: Always`, as a KubeVirt user writes them;
- `ours`: N UDSVirtualMachines cloning the same DataSource with the image's content digest declared (what
  `uds-vmctl prep --golden-image` writes), the same size, vCPU and memory. The operator renders the
  DataVolume, holds the VM halted, runs its verifier pod on each clone, and releases it when the digest
  matches (SI-7): that verification is the work the plain batch does not do.

All N of a batch are created at once (sequential POSTs, each one's clock starting at its own POST), and a
VM's latency ends when its VMI is first seen `Running` (the VMI list polled every 0.5 s). Each batch also
records when each clone's DataVolume was first seen `Succeeded`, so the overhead can be placed (clone vs
what follows it). Claims get real loop-backed volumes of exactly their request as a provisioner would (one
thread for both batches). The disk is not a bootable guest: `Running` is the VMI's phase (its domain
started), which is what KubeVirt's own creation-to-Running latency measures.

The result: each batch's P50/P95/max, the ratio ours/plain at P50 and P95 (goal at P95 ≤ 1.10), and the
DataVolume-Succeeded times. Overrides: BENCH_LATENCY_N (default 50), BENCH_LATENCY_ORDER (default
"plain,ours"), BENCH_LATENCY_VERIFIER_CPU (our verifier pod's CPU request, through the chart value
verifier.resources; default 10m, a tenth of its default like CDI's pods here; 100m measures the default).
Needs root and the real node (reused when healthy, else started and stopped at the end); CDI and KubeVirt
are installed on it (idempotent). About 12 min at N = 50 on 2 cores (measured).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.cdi_import_verify import ROOT, prepare_node, release_node
from tests.integration.operator_harness import OperatorProcess
from tests.node.cdi_support import (
    apply_golden_image_rbac,
    bridge_image_server,
    dv_condition,
    dv_phase,
    make_image,
    offer_volume,
)
from tests.node.node_cluster import NodeHandle, load_handle, wait_until
from uds_vm_operator.apiversions import CDI_API_VERSION
from uds_vm_operator.controller.verification_io import VERIFIER_RESOURCES_ENV
from uds_vm_operator.render.datavolume import BIND_IMMEDIATE_ANNOTATION, exact_pvc
from uds_vm_operator.render.goldenimage import data_source
from uds_vm_operator.render.verifier import verifier_labels, verifier_pod_name
from uds_vm_operator.sizing import pvc_size

N = int(os.environ.get("BENCH_LATENCY_N", "50"))
ORDER = tuple(os.environ.get("BENCH_LATENCY_ORDER", "plain,ours").split(","))
VERIFIER_CPU = os.environ.get("BENCH_LATENCY_VERIFIER_CPU", "10m")
VIRTUAL_SIZE = 16 << 20
GOLDEN = "golden"
CLASS = "udsvm-local"
MEMORY = "128Mi"
CDI_API = "/apis/cdi.kubevirt.io/v1beta1"
VM_API = "/apis/kubevirt.io/v1"
UDSVM_API = "/apis/uds.dev/v1alpha1"
BATCH_TIMEOUT_S = 2400.0
POLL_S = 0.5
VERIFIER_SELECTOR = ",".join(f"{key}={value}" for key, value in verifier_labels().items())


# ------------------------------------------------------------------------------------------ the golden image


def _golden(handle: NodeHandle, image_ns: str, work: Path, provisioner: Provisioner) -> str:
    """Import the golden image with CDI's own checksum, publish its DataSource; returns its content digest.
    The provisioner gives the import its claims (the target, and CDI's scratch claim)."""
    provisioner.namespaces.add(image_ns)
    image = make_image(work / "served", "raw", VIRTUAL_SIZE)
    manifest: dict[str, Any] = {
        "apiVersion": CDI_API_VERSION,
        "kind": "DataVolume",
        "metadata": {
            "name": GOLDEN,
            "namespace": image_ns,
            "annotations": {BIND_IMMEDIATE_ANNOTATION: "true"},
        },
        "spec": {"pvc": exact_pvc(pvc_size(VIRTUAL_SIZE), ["ReadWriteOnce"], "Filesystem", CLASS)},
    }
    with bridge_image_server(work / "served") as (base, _):
        manifest["spec"]["source"] = {
            "http": {"url": f"{base}/{image.path.name}", "checksum": "sha256:" + image.served_sha256}
        }
        handle.create(manifest, f"{CDI_API}/namespaces/{image_ns}/datavolumes")
        wait_until(
            "the golden import Succeeded", lambda: dv_phase(handle, image_ns, GOLDEN) == "Succeeded", 600
        )
    provisioner.namespaces.discard(image_ns)
    handle.create(data_source(GOLDEN, image_ns, GOLDEN), f"{CDI_API}/namespaces/{image_ns}/datasources")

    def ready() -> bool:
        ds = handle.api.get(f"{CDI_API}/namespaces/{image_ns}/datasources/{GOLDEN}") or {}
        return dv_condition(ds, "Ready").get("status") == "True"

    wait_until("the golden DataSource Ready", ready, 120)
    return "sha256:" + image.raw_sha256


# ------------------------------------------------------------------------------------------------ the VMs


def _disk_spec(image_ns: str) -> dict[str, Any]:
    """The clone the operator renders for a VM of VIRTUAL_SIZE from the golden DataSource (SPEC §4 size)."""
    return {
        "sourceRef": {"kind": "DataSource", "name": GOLDEN, "namespace": image_ns},
        "pvc": exact_pvc(pvc_size(VIRTUAL_SIZE), ["ReadWriteOnce"], "Filesystem", CLASS),
    }


def plain_vm(namespace: str, name: str, image_ns: str) -> dict[str, Any]:
    """A KubeVirt VirtualMachine as its user writes it: a DataVolume template cloning the golden image."""
    dv = f"{name}-dv"
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "runStrategy": "Always",
            "dataVolumeTemplates": [
                {
                    "metadata": {"name": dv, "annotations": {BIND_IMMEDIATE_ANNOTATION: "true"}},
                    "spec": _disk_spec(image_ns),
                }
            ],
            "template": {
                "spec": {
                    "domain": {
                        "cpu": {"cores": 1},
                        "memory": {"guest": MEMORY},
                        "devices": {
                            "disks": [{"name": "disk", "disk": {"bus": "virtio"}}],
                            "interfaces": [{"name": "default", "masquerade": {}}],
                        },
                    },
                    "networks": [{"name": "default", "pod": {}}],
                    "volumes": [{"name": "disk", "dataVolume": {"name": dv}}],
                }
            },
        },
    }


def our_vm(namespace: str, name: str, image_ns: str, digest: str) -> dict[str, Any]:
    """A UDSVirtualMachine cloning the same DataSource with its content digest declared (verified, SI-7)."""
    return {
        "apiVersion": "uds.dev/v1alpha1",
        "kind": "UDSVirtualMachine",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "source": {"dataSource": {"name": GOLDEN, "namespace": image_ns, "checksum": digest}},
            "disk": {"virtualSize": VIRTUAL_SIZE, "storageClassName": CLASS},
            "resources": {"cpu": 1, "memory": MEMORY},
        },
    }


class Provisioner:
    """Offers every unbound claim of the watched namespaces a real volume of exactly its request."""

    def __init__(self, state: Path) -> None:
        self.handle = load_handle(state)  # its own client: it runs beside the batch's polls
        self.namespaces, self.offered = set[str](), set[str]()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="provisioner", daemon=True)

    def __enter__(self) -> Provisioner:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.handle.api.close()

    def _loop(self) -> None:
        while not self._stop.wait(0.25):
            for namespace in list(self.namespaces):
                try:
                    self._offer(namespace)
                except Exception as error:  # kept and reported; the batch's wait then fails
                    self.errors.append(f"{namespace}: {error}")

    def _offer(self, namespace: str) -> None:
        for pvc in self.handle.api.items(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims"):
            uid, name = pvc["metadata"]["uid"], pvc["metadata"]["name"]
            if (
                uid in self.offered
                or pvc["spec"].get("volumeName")
                or pvc.get("status", {}).get("phase") == "Bound"
            ):
                continue
            if pvc["spec"].get("storageClassName") != CLASS or pvc["metadata"].get("deletionTimestamp"):
                continue
            self.offered.add(uid)
            offer_volume(self.handle, namespace, name)


def _percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile: the smallest value at or above `fraction` of the sorted values."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "p50_s": round(_percentile(values, 0.50), 1),
        "p95_s": round(_percentile(values, 0.95), 1),
        "max_s": round(max(values), 1),
        "min_s": round(min(values), 1),
    }


def _first_seen(timeline: dict[str, dict[str, float]], name: str, event: str, at: float) -> None:
    timeline.setdefault(name, {}).setdefault(event, at)


def _observe(handle: NodeHandle, namespace: str, created: dict[str, float]) -> dict[str, dict[str, float]]:
    """One look at the namespace: per VM, the events seen now (a DataVolume's or VMI's phase, the verifier
    pod's phase), as seconds since that VM's create."""
    now, seen = time.monotonic(), dict[str, dict[str, float]]()
    kinds = (
        ("dv", f"{CDI_API}/namespaces/{namespace}/datavolumes", None, "-dv"),
        ("vmi", f"{VM_API}/namespaces/{namespace}/virtualmachineinstances", None, ""),
        ("verifier", f"/api/v1/namespaces/{namespace}/pods", VERIFIER_SELECTOR, verifier_pod_name("")),
    )
    for kind, path, selector, suffix in kinds:
        for item in handle.api.items(path, selector):
            name = item["metadata"]["name"].removesuffix(suffix)
            phase = (item.get("status") or {}).get("phase")
            if name in created and phase:
                _first_seen(seen, name, f"{kind}:{phase}", now - created[name])
    return seen


def _watch(
    handle: NodeHandle, namespace: str, created: dict[str, float], progress: Callable[[int, int], None]
) -> dict[str, dict[str, float]]:
    """Poll until every VM's VMI is Running; per VM, when each event was first seen (seconds since its
    create): `dv:<phase>`, `vmi:<phase>`, `verifier:<phase>`."""
    timeline: dict[str, dict[str, float]] = {}
    deadline = time.monotonic() + BATCH_TIMEOUT_S
    while (done := sum("vmi:Running" in timeline.get(name, {}) for name in created)) < len(created):
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{namespace}: {done} of {len(created)} VMIs Running after {BATCH_TIMEOUT_S} s"
            )
        for name, events in _observe(handle, namespace, created).items():
            for event, at in events.items():
                _first_seen(timeline, name, event, at)
        progress(done, len(created))
        time.sleep(POLL_S)
    return timeline


def _event_medians(timeline: dict[str, dict[str, float]]) -> dict[str, float]:
    """Each event's median over the VMs that showed it, in the order they happen."""
    events = {event for events in timeline.values() for event in events}
    medians = {
        event: round(statistics.median(t[event] for t in timeline.values() if event in t), 1)
        for event in events
    }
    return dict(sorted(medians.items(), key=lambda item: item[1]))


def _gone(handle: NodeHandle, namespace: str) -> None:
    handle.delete_namespace(namespace)
    wait_until(
        f"namespace {namespace} gone",
        lambda: handle.api.get(f"/api/v1/namespaces/{namespace}") is None,
        900,
        2.0,
    )


@dataclass(frozen=True)
class Site:
    """What both batches share: the node, the golden image's namespace and digest, the volumes' provisioner,
    the operator image its verifier pods run, and a scratch folder."""

    handle: NodeHandle
    image_ns: str
    digest: str
    provisioner: Provisioner
    operator_image: str
    work: Path
    logs: Path


def _batch(site: Site, kind: str) -> dict[str, Any]:
    """Create N VMs of `kind` at once in a fresh namespace, time each to VMI Running, then remove them all."""
    handle, image_ns, digest, provisioner = site.handle, site.image_ns, site.digest, site.provisioner
    image, work = site.operator_image, site.work
    namespace = handle.namespace(f"lat-{kind}")
    operator = None
    try:
        apply_golden_image_rbac(handle, image_ns, namespace)
        provisioner.namespaces.add(namespace)
        if kind == "ours":
            environment = {
                **os.environ,
                "UDS_VM_OPERATOR_IMAGE": image,
                VERIFIER_RESOURCES_ENV: json.dumps({"requests": {"cpu": VERIFIER_CPU}}),
            }
            operator = OperatorProcess(
                handle.kubeconfig, namespace, work / f"logs-{kind}", environment=environment
            )
            operator.start()
        names = [f"{kind}-{i:03d}" for i in range(N)]
        created: dict[str, float] = {}
        load_at_start = round(os.getloadavg()[0], 2)
        started = time.monotonic()
        for name in names:
            if kind == "ours":
                manifest, path = (
                    our_vm(namespace, name, image_ns, digest),
                    f"{UDSVM_API}/namespaces/{namespace}/udsvirtualmachines",
                )
            else:
                manifest, path = (
                    plain_vm(namespace, name, image_ns),
                    f"{VM_API}/namespaces/{namespace}/virtualmachines",
                )
            created[name] = time.monotonic()
            handle.create(manifest, path)
        create_s = time.monotonic() - started
        last = [-1]

        def progress(done: int, total: int) -> None:
            if done != last[0]:
                last[0] = done
                print(
                    f"  {kind}: {done}/{total} Running at {time.monotonic() - started:.0f} s", file=sys.stderr
                )

        timeline = _watch(handle, namespace, created, progress)
        if provisioner.errors:
            raise RuntimeError(f"the provisioner failed: {provisioner.errors[:3]}")
        running = [events["vmi:Running"] for events in timeline.values()]
        cloned = [events["dv:Succeeded"] for events in timeline.values() if "dv:Succeeded" in events]
        return {
            "n": N,
            "load_average_1m_at_start_and_end": [load_at_start, round(os.getloadavg()[0], 2)],
            "create_all_s": round(create_s, 2),
            "create_to_running": _summary(running),
            "create_to_clone_succeeded": _summary(cloned) if cloned else {},
            "event_medians_s": _event_medians(timeline),
            "timeline_s": {
                name: {e: round(t, 2) for e, t in events.items()} for name, events in sorted(timeline.items())
            },
        }
    finally:
        if operator is not None:
            operator.stop()
            kept = site.logs / "vm_start_latency-operator.log"  # for a look at where its time went
            kept.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(operator.log_path, kept)
        provisioner.namespaces.discard(namespace)
        _gone(handle, namespace)


def _kubevirt(state: Path) -> None:
    """KubeVirt v1.8.4's images pushed into the node's registry and installed (what the node tier does)."""
    subprocess.run([str(ROOT / "tools/kubevirt/images.sh"), str(state)], check=True, capture_output=True)
    installer = [sys.executable, "-m", "tools.kubevirt.kubevirt_install", "up", "--state-dir", str(state)]
    subprocess.run(installer, cwd=ROOT, check=True)


KUBEVIRT_CR = "/apis/kubevirt.io/v1/namespaces/kubevirt/kubevirts/kubevirt"
CDI_CR = "/apis/cdi.kubevirt.io/v1beta1/cdis/cdi"
CPU_ALLOCATION_RATIO = 100
"""A vCPU asks the scheduler for 1/100 of a core (KubeVirt's default: 1/10). See :func:`dense_requests`."""
CDI_POD_REQUESTS = {"requests": {"cpu": "10m", "memory": "60M"}, "limits": {"cpu": "750m", "memory": "600M"}}
"""CDI's own defaults (v1.65: requests 100m CPU / 60M, limits 750m / 600M) with a tenth of the CPU request."""


@contextmanager
def dense_requests(handle: NodeHandle) -> Iterator[None]:
    """Let one 2-core node hold N VMs at once, as a site's many-core nodes would: launcher pods and CDI's
    clone pods ask for a tenth of their default CPU, through KubeVirt's `cpuAllocationRatio` and CDI's
    `podResourceRequirements`. Measured without it: at N = 50 the scheduler stopped at 8 VMIs Running
    ("Insufficient cpu"), so the batch measured the node's size, not the stacks. Both batches run under the
    same setting. Our verifier pod's request is set apart, where a site sets it (chart value
    verifier.resources, :data:`VERIFIER_CPU`); until 2026-12-04 it stayed at its 100m. Restored afterwards."""
    kubevirt = handle.api.get(KUBEVIRT_CR) or {}
    developer = dict(
        ((kubevirt.get("spec") or {}).get("configuration") or {}).get("developerConfiguration") or {}
    )
    cdi = handle.api.get(CDI_CR) or {}
    before = ((cdi.get("spec") or {}).get("config") or {}).get("podResourceRequirements")
    merge = "application/merge-patch+json"
    dense = {**developer, "cpuAllocationRatio": CPU_ALLOCATION_RATIO}
    handle.api.call("PATCH", KUBEVIRT_CR, {"spec": {"configuration": {"developerConfiguration": dense}}},
                    content_type=merge)  # fmt: skip
    handle.api.call("PATCH", CDI_CR, {"spec": {"config": {"podResourceRequirements": CDI_POD_REQUESTS}}},
                    content_type=merge)  # fmt: skip

    def applied() -> bool:
        config = handle.api.get("/apis/cdi.kubevirt.io/v1beta1/cdiconfigs/config") or {}
        return (config.get("spec") or {}).get("podResourceRequirements") == CDI_POD_REQUESTS

    wait_until("CDI's config to carry the pod requests", applied, 120)
    time.sleep(5)  # virt-controller and virt-api take a KubeVirt CR change from their informers
    try:
        yield
    finally:
        restored = {
            "spec": {"configuration": {"developerConfiguration": {"cpuAllocationRatio": None, **developer}}}
        }
        handle.api.call("PATCH", KUBEVIRT_CR, restored, content_type=merge)
        handle.api.call("PATCH", CDI_CR, {"spec": {"config": {"podResourceRequirements": before}}},
                        content_type=merge)  # fmt: skip


def run() -> dict[str, Any]:
    """N plain KubeVirt VMs, then N UDSVirtualMachines: create → VMI Running, for
    bench/results/vm_start_latency.json."""
    state, handle, started_node, image = prepare_node()
    image_ns = ""
    try:
        _kubevirt(state)
        image_ns = handle.namespace("lat-golden")
        with (
            tempfile.TemporaryDirectory(prefix="udsb-", dir="/tmp") as tmp,
            Provisioner(state) as provisioner,
            dense_requests(handle),
        ):
            work = Path(tmp)
            digest = _golden(handle, image_ns, work, provisioner)
            site = Site(handle, image_ns, digest, provisioner, image, work, state / "logs")
            batches = {kind: _batch(site, kind) for kind in ORDER}
    finally:
        release_node(state, handle, image_ns, started_node)
    ours, plain = batches["ours"]["create_to_running"], batches["plain"]["create_to_running"]
    summary = {
        "n": N,
        "order": list(ORDER),
        "verifier_cpu_request": VERIFIER_CPU,
        "plain": plain,
        "ours": ours,
        "ratio_p50": round(ours["p50_s"] / plain["p50_s"], 3),
        "ratio_p95": round(ours["p95_s"] / plain["p95_s"], 3),
        "goal": "ratio_p95 <= 1.10",
        "clone_succeeded": {kind: batches[kind]["create_to_clone_succeeded"] for kind in ORDER},
        "event_medians_s": {kind: batches[kind]["event_medians_s"] for kind in ORDER},
    }
    print(json.dumps(summary, indent=2), file=sys.stderr)
    return {"results": batches, "summary": summary}
