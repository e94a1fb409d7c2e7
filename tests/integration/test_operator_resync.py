"""Idempotence measured by the API server: resyncs write nothing; take-over and crashes converge."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.integration.operator_fixtures import (
    api,
    core_path,
    dv_path,
    kv_path,
    netpol_path,
    operator,
    play_cdi,
    play_kubevirt,
    status_of,
    udsvm,
    vm_path,
    wait_phase,
)
from tests.integration.operator_harness import Api, OperatorProcess, apiserver_writes, terminating_namespaces
from tests.kube_helpers import wait_for
from uds_vm_operator.api import parse_vm_spec
from uds_vm_operator.render import ClusterFacts, Owner, render_children

__all__ = ["api", "operator"]  # fixtures used by name


def test_resync_of_unchanged_objects_makes_zero_write_requests(
    api: Api, operator: OperatorProcess, namespace: str
) -> None:
    names = [f"vm{i}" for i in range(4)]
    for name in names:
        api.apply(udsvm(name, namespace), vm_path(namespace, name))
    play_cdi_later = names[:2]
    for name in names:
        wait_phase(api, operator, namespace, name, "Pending")
    for name in play_cdi_later:
        play_cdi(api, namespace, f"{name}-dv", "Succeeded", "100.0%")
        wait_phase(api, operator, namespace, name, "Provisioning")
    play_kubevirt(api, namespace, "vm0", "Running", True)
    wait_phase(api, operator, namespace, "vm0", "Ready")
    operator.wait_quiet(minimum=len(names))

    # The API server's counters are cluster-wide: wait until earlier tests' namespaces are finalised, so the
    # garbage collector deleting their children cannot write during the measured windows.
    wait_for(lambda: not terminating_namespaces(api), 180, 1.0, what="no namespace left in Terminating")

    # Forced resync 1: restart the operator; it re-lists and reconciles every object.
    operator.stop()
    before = apiserver_writes(api)
    operator.start()
    reconciled = operator.wait_quiet(minimum=len(names))
    after = apiserver_writes(api)
    assert reconciled >= len(names)
    assert after - before == 0, f"{after - before} write requests during a resync\n{operator.logs()}"

    # Forced resync 2: an unrelated annotation bumps the object; only the test's own write may appear.
    count = operator.reconciles()
    before = apiserver_writes(api)
    api.merge(vm_path(namespace, "vm0"), {"metadata": {"annotations": {"team": "blue"}}})
    wait_for(lambda: operator.reconciles() > count, 30, what="a reconcile after the annotation change")
    operator.wait_quiet(minimum=count + 1)
    assert apiserver_writes(api) - before == 1
    assert status_of(api, namespace, "vm0")["phase"] == "Ready"


def test_pre_existing_children_are_adopted_without_recreation(
    api: Api, control_plane: Any, namespace: str, tmp_path: Path
) -> None:
    manifest = udsvm("legacy", namespace)
    manifest["spec"]["source"] = {"http": {"url": "https://images.site.internal/legacy.img"}}
    # Another manager (an older reconciler) created the DataVolume and VirtualMachine earlier, unowned.
    spec = parse_vm_spec(manifest["spec"])
    earlier = render_children(Owner("legacy", namespace, "0" * 8), spec, ClusterFacts(cdi_http_checksum=True))
    created: dict[str, str] = {}
    for child in earlier:
        if child["kind"] not in ("DataVolume", "VirtualMachine"):
            continue
        child["metadata"].pop("ownerReferences", None)
        child["metadata"]["labels"] = {"app": "legacy"}
        collection = dv_path(namespace) if child["kind"] == "DataVolume" else kv_path(namespace)
        code, body = api.create(child, collection, manager="legacy-tool")
        assert code == 201, body
        created[child["kind"]] = body["metadata"]["uid"]
    play_cdi(api, namespace, "legacy-dv", "Succeeded", "100.0%")
    play_kubevirt(api, namespace, "legacy", "Running", True)

    owner = api.apply(manifest, vm_path(namespace, "legacy"))
    process = OperatorProcess(Path(control_plane.kubeconfig), namespace, tmp_path / "logs")
    process.start()
    try:
        status = wait_phase(api, process, namespace, "legacy", "Ready")
        dv = api.get(dv_path(namespace, "legacy-dv"))
        vm = api.get(kv_path(namespace, "legacy"))
        assert dv is not None and vm is not None
        assert dv["metadata"]["uid"] == created["DataVolume"]
        assert vm["metadata"]["uid"] == created["VirtualMachine"]
        for child in (dv, vm):
            refs = child["metadata"]["ownerReferences"]
            assert [r["uid"] for r in refs] == [owner["metadata"]["uid"]]
            assert child["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "uds-vm-operator"
            managers = {m["manager"] for m in child["metadata"]["managedFields"]}
            assert {"legacy-tool", "uds-vm-operator"} <= managers
        assert status["reconciledBy"] == "kopf-python"
    finally:
        process.stop()
        print(process.logs())


def test_sigkill_mid_reconcile_then_restart_converges_without_duplicates(
    api: Api, control_plane: Any, namespace: str, tmp_path: Path
) -> None:
    names = [f"crash{i}" for i in range(12)]
    process = OperatorProcess(Path(control_plane.kubeconfig), namespace, tmp_path / "logs")
    process.start()
    try:
        for name in names:
            api.apply(udsvm(name, namespace), vm_path(namespace, name))
        # Kill as soon as the first child write is logged: reconciles are in flight.
        wait_for(lambda: '"message":"applied"' in process.logs(10**6), 30, 0.02, what="first apply")
        process.kill()
        partial = len(api.items(dv_path(namespace), "app.kubernetes.io/managed-by=uds-vm-operator"))
        time.sleep(0.5)
        process.start()
        for name in names:
            wait_phase(api, process, namespace, name, "Pending", timeout_s=90)
        process.wait_quiet(minimum=len(names))
    finally:
        process.stop()
        print(process.logs())
    selector = "app.kubernetes.io/managed-by=uds-vm-operator"
    expected = sorted(names)
    assert sorted(d["metadata"]["name"] for d in api.items(dv_path(namespace), selector)) == [
        f"{n}-dv" for n in expected
    ]
    assert sorted(v["metadata"]["name"] for v in api.items(kv_path(namespace), selector)) == expected
    assert sorted(p["metadata"]["name"] for p in api.items(netpol_path(namespace), selector)) == [
        f"{n}-netpol" for n in expected
    ]
    secrets = api.items(core_path(namespace, "secrets"), selector)
    assert sorted(s["metadata"]["name"] for s in secrets) == [f"{n}-cloudinit" for n in expected]
    print(f"DataVolumes present when the operator was killed: {partial} of {len(names)}")
