"""SI-7 end to end on the real control plane: upload → verifier pod → verdict → the VM may (not) run.

The namespace enforces the ``restricted`` Pod Security profile, so the API server itself proves the
verifier pod meets it (and Strict field validation proves every field is real). The test plays kubelet:
it runs ``uds-vm-operator verify-disk`` locally on a real file with the pod's own arguments and writes the
container's terminated state (exit code + termination message) through the pod status subresource.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from operator_fixtures import api, core_path, dv_path, kv_path, status_of, udsvm, vm_path
from operator_harness import Api, OperatorProcess

from kube_helpers import wait_for

__all__ = ["api"]

VIRTUAL_SIZE = 10 * 1024 * 1024
OPERATOR_IMAGE = "registry.local/uds-vm-operator:test"


@pytest.fixture
def si7_operator(
    control_plane: Any, restricted_namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[OperatorProcess]:
    monkeypatch.setenv("UDS_VM_OPERATOR_IMAGE", OPERATOR_IMAGE)
    process = OperatorProcess(Path(control_plane.kubeconfig), restricted_namespace, tmp_path / "logs")
    process.start()
    try:
        yield process
    finally:
        process.stop()
        print(f"--- operator log ({process.log_path}) ---\n{process.logs()}")


def play_kubelet(api: Api, namespace: str, pod: dict[str, Any], disk: Path, tmp_path: Path) -> dict[str, Any]:
    """Run the pod's verify-disk command on ``disk`` and report its end as kubelet would."""
    container = pod["spec"]["containers"][0]
    command = list(container["command"])
    command[command.index("--path") + 1] = str(disk)
    log = tmp_path / "termination-log"
    command[command.index("--termination-log") + 1] = str(log)
    exe = Path(sys.executable).with_name(command[0])
    proc = subprocess.run([str(exe), *command[1:]], capture_output=True, text=True, check=False)
    message = log.read_text()
    now = "2026-01-01T00:00:00Z"
    api.merge(
        core_path(namespace, "pods", pod["metadata"]["name"]) + "/status",
        {
            "status": {
                "phase": "Succeeded" if proc.returncode == 0 else "Failed",
                "containerStatuses": [
                    {
                        "name": container["name"],
                        "image": container["image"],
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "state": {
                            "terminated": {
                                "exitCode": proc.returncode,
                                "reason": "Completed" if proc.returncode == 0 else "Error",
                                "message": message,
                                "startedAt": now,
                                "finishedAt": now,
                            }
                        },
                    }
                ],
            }
        },
    )
    return json.loads(message)


def upload_vm(api: Api, namespace: str, declared: str) -> dict[str, Any]:
    manifest = udsvm(
        "web", namespace, source={"upload": {"checksum": declared}}, disk={"virtualSize": VIRTUAL_SIZE}
    )
    return api.apply(manifest, vm_path(namespace, "web"))


def verifier_pod(api: Api, namespace: str) -> dict[str, Any]:
    try:
        return wait_for(
            lambda: api.get(core_path(namespace, "pods", "web-verify")),
            60,
            0.2,
            what="verifier pod web-verify",
        )
    except AssertionError as error:
        events = [e.get("note") for e in api.items(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")]
        raise AssertionError(
            f"{error}\nstatus: {status_of(api, namespace, 'web')}\nevents: {events}"
        ) from None


def run_strategy(api: Api, namespace: str) -> str | None:
    vm = api.get(kv_path(namespace, "web")) or {}
    return (vm.get("spec") or {}).get("runStrategy")


def test_match_verifies_in_cluster_and_lets_the_vm_run(
    api: Api, si7_operator: OperatorProcess, restricted_namespace: str, tmp_path: Path
) -> None:
    ns = restricted_namespace
    image = os.urandom(VIRTUAL_SIZE)
    declared = "sha256:" + hashlib.sha256(image).hexdigest()
    disk = tmp_path / "disk.img"
    disk.write_bytes(image + bytes(1 << 20))  # CDI grows disk.img to the PVC
    upload_vm(api, ns, declared)

    pod = verifier_pod(api, ns)  # admitted under enforce=restricted, applied with Strict validation
    assert api.get(core_path(ns, "pods", "web-verify")) is not None
    policy = api.get(f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies/web-verify-deny")
    assert policy is not None and policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert run_strategy(api, ns) == "Halted"
    assert status_of(api, ns, "web")["checksumVerified"] is False

    verdict = play_kubelet(api, ns, pod, disk, tmp_path)
    assert verdict["result"] == "match"

    status = wait_for(
        lambda: (s := status_of(api, ns, "web")).get("checksumVerified") and s,
        60,
        0.2,
        what="verified status",
    )
    assert status["verifiedBy"] == "in-cluster-verifier"
    assert status["verifiedDigest"] == declared
    wait_for(lambda: run_strategy(api, ns) == "Always", 60, 0.2, what="VM allowed to run")
    wait_for(
        lambda: api.get(core_path(ns, "pods", "web-verify")) is None, 60, 0.2, what="verifier pod removed"
    )
    dv = api.get(dv_path(ns, "web-dv")) or {}
    recorded = json.loads(dv["metadata"]["annotations"]["uds.dev/verification"])
    assert recorded == {"result": "match", "expected": declared, "actual": declared, "bytes": VIRTUAL_SIZE}


def test_mismatch_fails_and_the_vm_never_runs(
    api: Api, si7_operator: OperatorProcess, restricted_namespace: str, tmp_path: Path
) -> None:
    ns = restricted_namespace
    image = bytearray(os.urandom(VIRTUAL_SIZE))
    declared = "sha256:" + hashlib.sha256(image).hexdigest()
    image[-1] ^= 0x01  # bit rot in the last byte of the virtual size
    actual = "sha256:" + hashlib.sha256(image).hexdigest()
    disk = tmp_path / "disk.img"
    disk.write_bytes(bytes(image))
    upload_vm(api, ns, declared)
    pod = verifier_pod(api, ns)
    assert play_kubelet(api, ns, pod, disk, tmp_path)["result"] == "mismatch"

    status = wait_for(
        lambda: (s := status_of(api, ns, "web")).get("phase") == "Failed" and s, 60, 0.2, what="Failed phase"
    )
    checksum = next(c for c in status["conditions"] if c["type"] == "ChecksumVerified")
    assert checksum["reason"] == "ChecksumMismatch"
    assert declared in checksum["message"] and actual in checksum["message"]
    assert status["checksumVerified"] is False and status.get("verifiedBy") is None
    assert run_strategy(api, ns) == "Halted"

    def mismatch_event() -> dict[str, Any] | None:
        events = api.items(f"/apis/events.k8s.io/v1/namespaces/{ns}/events")
        return next((e for e in events if e.get("reason") == "ChecksumMismatch"), None)

    event = wait_for(mismatch_event, 60, 0.2, what="ChecksumMismatch Event")
    assert event["type"] == "Warning" and declared in event["note"] and actual in event["note"]
    metrics = si7_operator.metrics()
    si7_lines = [
        line
        for line in metrics.splitlines()
        if line.startswith("uds_vm_compliance_verified{") and 'control="SI-7"' in line and 'vm="web"' in line
    ]
    assert si7_lines and all(line.rstrip().endswith(" 0.0") for line in si7_lines), si7_lines
    # The disk is kept as evidence, and the VM stays off on later resyncs.
    assert api.get(dv_path(ns, "web-dv")) is not None
    si7_operator.wait_quiet(minimum=0)
    assert run_strategy(api, ns) == "Halted"
