"""The fleet bench's smoke variant: 100 VMs under our operator and under the Go anchor (issue 19).

Keeps ``bench/go-anchor`` and ``bench/fleet_anchor.py`` from rotting between ``make bench`` runs. It
asserts behaviour only, never timing: both operators converge every VM, and they write identical
children (everything but the per-object identity: namespace, owner UID and the hash that covers them),
identical statuses (but for transition times and ``reconciledBy``) and one Event per VM each.
"""

from __future__ import annotations

import copy
import secrets
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.anchor_process import AnchorProcess
from bench.anchor_render import calibrate, children_of, render_vm, write_rendered
from tests.integration.operator_fixtures import udsvm, vm_path
from tests.integration.operator_harness import Api, OperatorProcess
from tests.kube_helpers import wait_for
from uds_vm_operator.controller.compare import (
    APPLIED_HASH_ANNOTATION,
    is_subset,
    with_applied_hash,
)

ROOT = Path(__file__).resolve().parents[2]
N = 100
KOPF_FLOOR = ROOT / "bench" / "_kopf_floor_operator.py"
SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields")


@pytest.fixture
def two_namespaces(control_plane: Any) -> Iterator[tuple[Api, str, str]]:
    api = Api(Path(control_plane.kubeconfig))
    names = (f"smoke-ours-{secrets.token_hex(3)}", f"smoke-anchor-{secrets.token_hex(3)}")
    for name in names:
        api.call("POST", "/api/v1/namespaces", {"metadata": {"name": name}}, expect=(201,))
    try:
        yield api, *names
    finally:
        for name in names:
            api.call("DELETE", f"/api/v1/namespaces/{name}", expect=(200, 202, 404))
        api.close()


def _converged(api: Api, namespace: str, names: list[str]) -> dict[str, Any] | None:
    children = children_of(api, namespace)
    vms = {vm["metadata"]["name"]: vm for vm in api.items(vm_path(namespace))}
    if len(children) < 4 * len(names) or not all((vms.get(n) or {}).get("status") for n in names):
        return None
    return {"children": children, "vms": vms}


def _comparable(child: dict[str, Any]) -> dict[str, Any]:
    """A child without what differs between two namespaces by construction (identity, hash, times)."""
    body = copy.deepcopy(child)
    meta = body["metadata"]
    for key in (*SERVER_FIELDS, "namespace"):
        meta.pop(key, None)
    (meta.get("annotations") or {}).pop(APPLIED_HASH_ANNOTATION, None)
    for ref in meta.get("ownerReferences") or []:
        ref.pop("uid", None)
    if body.get("kind") == "VirtualMachine":  # the guest NIC's MAC is derived from the namespace and name
        devices = body["spec"]["template"]["spec"]["domain"]["devices"]
        for interface in devices.get("interfaces") or []:
            interface.pop("macAddress", None)
    return body


def _comparable_status(status: dict[str, Any]) -> dict[str, Any]:
    body = copy.deepcopy(status)
    body.pop("reconciledBy", None)
    for condition in body.get("conditions") or []:
        condition.pop("lastTransitionTime", None)
    return body


def _assert_children_are_the_renderers(state: dict[str, Any], namespace: str, run_strategy: Any) -> None:
    """Each live child carries every rendered field and the Python operator's applied hash."""
    for name, vm in state["vms"].items():
        spec = udsvm(name, namespace)["spec"]
        for child in render_vm(name, namespace, spec, run_strategy, uid=vm["metadata"]["uid"]):
            desired = with_applied_hash(child)
            live = state["children"][(child["kind"], child["metadata"]["name"])]
            assert is_subset(desired, live), f"{namespace}: {child['kind']} {child['metadata']['name']}"
            want = desired["metadata"]["annotations"][APPLIED_HASH_ANNOTATION]
            assert live["metadata"]["annotations"][APPLIED_HASH_ANNOTATION] == want


def test_both_operators_converge_100_vms_with_identical_writes(
    control_plane: Any, two_namespaces: tuple[Api, str, str]
) -> None:
    api, ours_ns, anchor_ns = two_namespaces
    kubeconfig = Path(control_plane.kubeconfig)
    names = [f"vm{i:04d}" for i in range(N)]
    calibration = calibrate(kubeconfig, udsvm)
    scratch = Path(tempfile.mkdtemp(prefix="anchor-smoke-"))
    rendered = write_rendered(scratch / "rendered", anchor_ns, names, udsvm, calibration)

    ours = OperatorProcess(kubeconfig, ours_ns, scratch / "logs", extra_args=["--log-level", "WARNING"])
    anchor = AnchorProcess(kubeconfig, anchor_ns, rendered, scratch / "logs")
    try:
        ours.start()
        anchor.start()
        for name in names:
            api.apply(udsvm(name, ours_ns), vm_path(ours_ns, name))
            api.apply(udsvm(name, anchor_ns), vm_path(anchor_ns, name))
        ours_state = wait_for(lambda: _converged(api, ours_ns, names), 600, 1.0, what="our operator")
        anchor_state = wait_for(lambda: _converged(api, anchor_ns, names), 600, 1.0, what="the Go anchor")
        ours.wait_quiet(minimum=N, quiet_s=2.0, timeout_s=300)
        anchor.wait_quiet(minimum=N, quiet_s=2.0, timeout_s=300)
        ours_state = _converged(api, ours_ns, names)
        anchor_state = _converged(api, anchor_ns, names)
        ours_events = api.items(f"/apis/events.k8s.io/v1/namespaces/{ours_ns}/events")
        anchor_events = api.items(f"/apis/events.k8s.io/v1/namespaces/{anchor_ns}/events")
    finally:
        ours.stop()
        anchor.stop()
        print(f"--- go-anchor log ---\n{anchor.logs()}")
    assert ours_state is not None and anchor_state is not None

    assert sorted(ours_state["children"]) == sorted(anchor_state["children"])
    assert len(anchor_state["children"]) == 4 * N
    for key, ours_child in ours_state["children"].items():
        assert _comparable(anchor_state["children"][key]) == _comparable(ours_child), key
    _assert_children_are_the_renderers(ours_state, ours_ns, calibration["run_strategy"])
    _assert_children_are_the_renderers(anchor_state, anchor_ns, calibration["run_strategy"])

    for name in names:
        ours_status = ours_state["vms"][name]["status"]
        anchor_status = anchor_state["vms"][name]["status"]
        assert anchor_status["reconciledBy"] == "go-anchor"
        assert ours_status["reconciledBy"] == "kopf-python"
        assert _comparable_status(anchor_status) == _comparable_status(ours_status), name

    def summary(events: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
        return sorted((e["regarding"]["name"], e["type"], e["reason"], e["note"]) for e in events)

    assert len(anchor_events) == N
    assert summary(anchor_events) == summary(ours_events)


def test_kopf_floor_operator_writes_the_first_status_and_nothing_else(
    control_plane: Any, two_namespaces: tuple[Api, str, str]
) -> None:
    """The start-up bench's third contender (bench/_kopf_floor_operator.py) still does its one job: the
    first status write of a VM in its namespace, no children, no Events, and a VM elsewhere untouched."""
    api, namespace, elsewhere = two_namespaces
    log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in the finally below)
    process = subprocess.Popen(
        [sys.executable, str(KOPF_FLOOR), "--kubeconfig", control_plane.kubeconfig, "--namespace", namespace],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        api.apply(udsvm("floor", namespace), vm_path(namespace, "floor"))
        api.apply(udsvm("floor", elsewhere), vm_path(elsewhere, "floor"))

        def phase() -> Any:
            assert process.poll() is None, "the kopf floor operator exited"
            return ((api.get(vm_path(namespace, "floor")) or {}).get("status") or {}).get("phase")

        assert wait_for(phase, 60, 0.2, what="the kopf floor's status write") == "Pending"
        assert children_of(api, namespace) == {}
        assert api.items(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events") == []
        assert "status" not in (api.get(vm_path(elsewhere, "floor")) or {})
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            assert process.wait(timeout=20) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            log.seek(0)
            print(f"--- kopf floor log ---\n{log.read().decode(errors='replace')[-3000:]}")
            log.close()
