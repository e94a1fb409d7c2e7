"""SIGKILL the operator at random moments while 100 VMs reconcile; after every restart it must converge with
exactly one of each child, and no Retain data disk may ever be deleted or replaced.

The kill points are drawn from a seeded RNG (printed, so a failure can be replayed with
``UDS_FAULT_SEED``). Between kills the test keeps work in flight by changing the spec of ten VMs, so the
operator is killed mid-reconcile, mid-apply or mid-status-write rather than when idle.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tests.integration.operator_fixtures import (
    api,
    core_path,
    dv_path,
    kv_path,
    netpol_path,
    release_pvcs,
    udsvm,
    vm_path,
)
from tests.integration.operator_harness import Api, OperatorProcess
from tests.kube_helpers import wait_for

__all__ = ["api"]  # fixture used by name

VMS = 100
KILLS = 10
MANAGED = "app.kubernetes.io/managed-by=uds-vm-operator"
RETAIN_DISK = {"name": "data", "size": "1Gi", "retentionPolicy": "Retain"}


def _vm(name: str, namespace: str, memory: str = "1Gi") -> dict[str, Any]:
    return udsvm(name, namespace, dataDisks=[RETAIN_DISK], resources={"cpu": 1, "memory": memory})


def _retained_pvcs(api: Api, namespace: str) -> dict[str, str]:
    """name → uid of every Retain data disk PVC that exists now."""
    return {
        pvc["metadata"]["name"]: pvc["metadata"]["uid"]
        for pvc in api.items(core_path(namespace, "persistentvolumeclaims"))
        if pvc["metadata"]["name"].endswith("-data-data")
    }


def _converged(api: Api, namespace: str, names: list[str]) -> bool:
    vms = {vm["metadata"]["name"]: vm for vm in api.items(vm_path(namespace))}
    for name in names:
        vm = vms.get(name)
        status = (vm or {}).get("status") or {}
        if vm is None or status.get("observedGeneration") != vm["metadata"]["generation"]:
            return False
    return True


def test_sigkill_ten_times_while_100_vms_reconcile_converges_without_duplicates_or_lost_disks(
    api: Api, control_plane: Any, namespace: str, tmp_path: Path
) -> None:
    seed = int(os.environ.get("UDS_FAULT_SEED") or random.SystemRandom().randrange(1 << 30))
    rng = random.Random(seed)
    print(f"UDS_FAULT_SEED={seed}")
    names = [f"crash{i:03d}" for i in range(VMS)]
    memory = dict.fromkeys(names, "1Gi")
    process = OperatorProcess(
        Path(control_plane.kubeconfig), namespace, tmp_path / "logs", extra_args=["--log-level", "WARNING"]
    )
    ever_seen: dict[str, str] = {}
    try:
        process.start()
        for name in names:
            api.apply(_vm(name, namespace), vm_path(namespace, name))
        for kill in range(KILLS):
            # Keep work in flight: ten VMs get a new spec right before the kill window opens.
            for name in rng.sample(names, 10):
                memory[name] = "2Gi" if memory[name] == "1Gi" else "1Gi"
                api.apply(_vm(name, namespace, memory[name]), vm_path(namespace, name))
            time.sleep(rng.uniform(0.05, 1.5))
            process.kill()
            for name, uid in _retained_pvcs(api, namespace).items():
                assert ever_seen.setdefault(name, uid) == uid, (
                    f"Retain disk {name} was replaced (kill {kill})"
                )
            process.start()
        wait_for(
            lambda: _converged(api, namespace, names), 110, 0.5, what="every VM reconciled after the kills"
        )
        process.wait_quiet(minimum=1, quiet_s=2.0)
    finally:
        process.stop()
        print(process.logs())
    try:
        _check_children(api, namespace, names, memory, ever_seen)
    finally:
        release_pvcs(api, namespace)


def _check_children(
    api: Api, namespace: str, names: list[str], memory: dict[str, str], ever_seen: dict[str, str]
) -> None:
    def children(path: str) -> list[dict[str, Any]]:
        return api.items(path, MANAGED)

    expected = {
        dv_path(namespace): [f"{n}-dv" for n in names],
        kv_path(namespace): names,
        netpol_path(namespace): [f"{n}-netpol" for n in names],
        core_path(namespace, "secrets"): [f"{n}-cloudinit" for n in names],
        core_path(namespace, "persistentvolumeclaims"): [f"{n}-data-data" for n in names],
    }
    vm_uids = {vm["metadata"]["name"]: vm["metadata"]["uid"] for vm in api.items(vm_path(namespace))}
    for path, wanted in expected.items():
        items = children(path)
        counts = Counter(item["metadata"]["name"] for item in items)
        assert sorted(counts) == sorted(wanted), f"{path}: unexpected set of children"
        assert max(counts.values()) == 1, f"{path}: duplicates {[n for n, c in counts.items() if c > 1]}"
        for item in items:
            assert not item["metadata"].get("deletionTimestamp"), (
                f"{item['metadata']['name']} is being deleted"
            )
            refs = [r for r in item["metadata"].get("ownerReferences") or [] if r.get("controller")]
            if path.endswith("persistentvolumeclaims"):
                assert refs == [], "a Retain disk must not be owned (the garbage collector would take it)"
            else:
                owner = item["metadata"]["labels"]["uds.dev/vm"]
                assert [r["uid"] for r in refs] == [vm_uids[owner]], f"{item['metadata']['name']} owner"
    final = _retained_pvcs(api, namespace)
    assert all(final[name] == uid for name, uid in ever_seen.items()), (
        "a Retain disk was deleted and re-created"
    )
    for vm in api.items(kv_path(namespace), MANAGED):
        name = vm["metadata"]["name"]
        guest = vm["spec"]["template"]["spec"]["domain"]["memory"]["guest"]
        assert guest == memory[name], f"{name} did not converge to its last spec ({guest} != {memory[name]})"
