"""The operator as a real process against the real API server: a VM from apply to Ready, and back off.

The test plays CDI and KubeVirt by writing the status their controllers would write; everything else
(children, ownership, status, Events) is the operator's own work.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.integration.operator_fixtures import (
    SHA,
    api,
    await_event_reasons,
    condition,
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
from tests.integration.operator_harness import Api, OperatorProcess
from tests.kube_helpers import wait_for

__all__ = ["api", "operator"]  # fixtures used by name


def owned_by(obj: dict[str, Any], uid: str) -> bool:
    refs = obj["metadata"].get("ownerReferences") or []
    return any(ref["uid"] == uid and ref.get("controller") for ref in refs)


def test_http_vm_goes_from_apply_to_ready_with_cdi_verified_digest(
    api: Api, operator: OperatorProcess, namespace: str
) -> None:
    created = api.apply(udsvm("web", namespace), vm_path(namespace, "web"))
    uid = created["metadata"]["uid"]

    status = wait_phase(api, operator, namespace, "web", "Pending")
    assert status["reconciledBy"] == "kopf-python"
    assert status["pvcSize"] == "300Mi"
    assert status["source"] == "http"
    assert status["checksumVerified"] is False
    assert status["observedGeneration"] == created["metadata"]["generation"]

    dv = api.get(dv_path(namespace, "web-dv"))
    vm = api.get(kv_path(namespace, "web"))
    secret = api.get(core_path(namespace, "secrets", "web-cloudinit"))
    policy = api.get(netpol_path(namespace, "web-netpol"))
    for child in (dv, vm, secret, policy):
        assert child is not None
        assert owned_by(child, uid)
        assert child["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "uds-vm-operator"
    assert dv is not None and vm is not None
    assert (
        dv["spec"]["source"]["http"]["checksum"] == SHA
    )  # the control plane's CDI CRD (v1.65) has the field
    assert "300Mi" in json.dumps(dv["spec"])
    assert vm["spec"]["runStrategy"] == "Halted"  # verified before activation
    assert condition(status, "NetworkIsolated")["status"] == "True"
    assert condition(status, "Hardened")["status"] == "True"
    assert status["zeroTrust"] is True

    play_cdi(api, namespace, "web-dv", "ImportInProgress", "45.20%")
    status = wait_phase(api, operator, namespace, "web", "Importing")
    assert status["importProgress"] == "45.20%"
    assert api.get(kv_path(namespace, "web"))["spec"]["runStrategy"] == "Halted"

    play_cdi(api, namespace, "web-dv", "Succeeded", "100.0%")
    status = wait_phase(api, operator, namespace, "web", "Provisioning")
    assert status["checksumVerified"] is True
    assert status["verifiedBy"] == "cdi-http-checksum"
    assert status["verifiedDigest"] == SHA
    assert condition(status, "ChecksumVerified")["reason"] == "CDIHTTPChecksum"
    assert api.get(kv_path(namespace, "web"))["spec"]["runStrategy"] == "Always"  # released after the check

    play_kubevirt(api, namespace, "web", "Running", True)
    status = wait_phase(api, operator, namespace, "web", "Ready")
    ready = condition(status, "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "VirtualMachineRunning")
    assert condition(status, "DiskReady")["status"] == "True"

    events = await_event_reasons(api, namespace, uid, {"Pending", "Importing", "Provisioning", "Ready"})
    assert all(e["reportingController"] == "uds.dev/uds-vm-operator" for e in events)

    metrics = operator.metrics()
    assert f'uds_vm_phase{{namespace="{namespace}",phase="Ready",vm="web"}} 1.0' in metrics
    assert f'uds_vm_compliance_verified{{control="SI-7",namespace="{namespace}",vm="web"}} 1.0' in metrics
    assert 'phase="Importing"' not in metrics


def test_upload_disk_stays_verifying_and_the_vm_stays_halted(
    api: Api, operator: OperatorProcess, namespace: str
) -> None:
    api.apply(udsvm("up", namespace, source={"upload": {"checksum": SHA}}), vm_path(namespace, "up"))
    wait_phase(api, operator, namespace, "up", "Pending")
    play_cdi(api, namespace, "up-dv", "UploadReady")
    wait_phase(api, operator, namespace, "up", "WaitingForUpload")
    play_cdi(api, namespace, "up-dv", "Succeeded", "100.0%")
    status = wait_phase(api, operator, namespace, "up", "Verifying")
    assert status["checksumVerified"] is False
    assert status.get("verifiedBy") is None
    checksum = condition(status, "ChecksumVerified")
    # Pending, or unavailable when no verifier image is configured: either way not verified, VM held.
    assert checksum["status"] == "False" and checksum["reason"].startswith("Verifier"), checksum
    assert api.get(kv_path(namespace, "up"))["spec"]["runStrategy"] == "Halted"
    dv = api.get(dv_path(namespace, "up-dv"))
    assert dv is not None and "checksum" not in json.dumps(dv["spec"])  # CDI has no upload checksum


def test_power_stop_and_start_flip_run_strategy_in_place(
    api: Api, operator: OperatorProcess, namespace: str, control_plane: Any
) -> None:
    manifest = udsvm("pw", namespace)
    manifest["spec"]["source"] = {"http": {"url": "https://images.site.internal/plain.img"}}  # no digest
    api.apply(manifest, vm_path(namespace, "pw"))
    wait_phase(api, operator, namespace, "pw", "Pending")
    play_cdi(api, namespace, "pw-dv", "Succeeded", "100.0%")
    play_kubevirt(api, namespace, "pw", "Running", True)
    wait_phase(api, operator, namespace, "pw", "Ready")
    vm_uid = api.get(kv_path(namespace, "pw"))["metadata"]["uid"]

    def vmctl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "uds_vm_operator.cli.main",
                *args,
                "--kubeconfig",
                str(control_plane.kubeconfig),
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )

    stop = vmctl("power", "stop", "pw", "-n", namespace)
    assert stop.returncode == 0, stop.stderr
    assert api.get(vm_path(namespace, "pw"))["spec"]["runStrategy"] == "Halted"
    wait_for(
        lambda: api.get(kv_path(namespace, "pw"))["spec"]["runStrategy"] == "Halted",
        30,
        what="KubeVirt VM halted",
    )
    play_kubevirt(api, namespace, "pw", "Stopped", False)
    status = wait_phase(api, operator, namespace, "pw", "Stopped")
    assert condition(status, "Ready")["reason"] == "Stopped"

    start = vmctl("power", "start", "pw", "-n", namespace)
    assert start.returncode == 0, start.stderr
    wait_for(
        lambda: api.get(kv_path(namespace, "pw"))["spec"]["runStrategy"] == "Always",
        30,
        what="KubeVirt VM started",
    )
    play_kubevirt(api, namespace, "pw", "Running", True)
    wait_phase(api, operator, namespace, "pw", "Ready")
    assert (
        api.get(kv_path(namespace, "pw"))["metadata"]["uid"] == vm_uid
    )  # updated in place, never re-created

    restart = vmctl("power", "restart", "pw", "-n", namespace)
    assert restart.returncode == 1
    assert "restart API" in restart.stderr and "Traceback" not in restart.stderr
    assert api.get(kv_path(namespace, "pw"))["metadata"]["uid"] == vm_uid

    missing = vmctl("power", "stop", "nope", "-n", namespace)
    assert missing.returncode == 1 and "not found" in missing.stderr

    listing = vmctl("inventory", "-n", namespace, "--json")
    assert listing.returncode == 0, listing.stderr
    rows = json.loads(listing.stdout)
    assert [(r["name"], r["phase"], r["reconciledBy"], r["pvcSize"]) for r in rows] == [
        ("pw", "Ready", "kopf-python", "300Mi")
    ]
    table = vmctl("inventory", "-A")
    assert table.returncode == 0 and "CHECKSUM-VERIFIED" in table.stdout and "pw" in table.stdout
    assert status_of(api, namespace, "pw")["checksumVerified"] is False  # no digest declared: nothing claimed


def test_sigterm_ends_the_operator_cleanly_without_kopf_waiting_on_leftover_tasks(
    api: Api, control_plane: Any, namespace: str, tmp_path: Path
) -> None:
    """A pod's SIGTERM (a rollout, a drain) ends the operator with exit code 0 and nothing left for kopf to
    wait out: kopf gives tasks still running after its root tasks 5 s each stop, and before the fix our
    reconcile workers and kopf's own stop-flag waiter were such tasks, so every stop took 5 s longer."""
    process = OperatorProcess(
        Path(control_plane.kubeconfig), namespace, tmp_path, extra_args=["--log-level", "DEBUG"]
    )
    process.start()
    try:
        api.apply(udsvm("term", namespace), vm_path(namespace, "term"))
        wait_for(lambda: status_of(api, namespace, "term").get("phase"), 60, what="the VM's first status")
    finally:
        code = process.stop()
    log = process.logs(limit=20000)
    assert code == 0, log[-3000:]
    assert "Hung tasks stopping is skipped: no tasks given." in log, log[-3000:]
    assert '"message":"operator stopped"' in log
