"""SI-7 end to end on the real control plane: upload → verifier pod → verdict → the VM may (not) run.

The namespace enforces the ``restricted`` Pod Security profile, so the API server itself proves the
verifier pod meets it (and Strict field validation, which the operator always sends, proves every field is
real). The test plays CDI (the upload succeeded) and kubelet: it runs ``uds-vm-operator verify-disk``
locally on a real file with the pod's own arguments and writes the container's terminated state (exit code
+ termination message) through the pod status subresource. A watch records every version of the KubeVirt
VM, so "never set to run before the verdict" is checked on what the API server stored, not on a poll.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.operator_fixtures import (
    api,
    condition,
    core_path,
    dv_path,
    netpol_path,
    play_kubevirt,
    status_of,
    vm_path,
    wait_phase,
)
from tests.integration.operator_harness import Api, OperatorProcess
from tests.integration.si7_play import (
    OPERATOR_IMAGE,
    VIRTUAL_SIZE,
    apply_vm,
    kv_collection,
    play_kubelet,
    recording,
    run_strategy,
    si7_metric,
    verifier_pod,
    vm_run_strategy,
)
from tests.kube_helpers import wait_for

__all__ = ["api"]


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


def assert_locked_down(api: Api, namespace: str, pod: dict[str, Any]) -> None:
    """The pod the operator made is the hardened one, and PSA really enforces `restricted` here."""
    spec = pod["spec"]
    (container,) = spec["containers"]
    assert container["image"] == OPERATOR_IMAGE, "the verifier runs the operator's own image"
    assert spec["automountServiceAccountToken"] is False and spec["restartPolicy"] == "Never"
    assert spec["activeDeadlineSeconds"] > 0
    assert spec["volumes"][0]["persistentVolumeClaim"] == {"claimName": "web-dv", "readOnly": True}
    assert container["volumeMounts"][0]["readOnly"] is True
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True and context["capabilities"] == {"drop": ["ALL"]}
    assert container["resources"]["limits"]["memory"] and container["resources"]["limits"]["cpu"]
    # A copy without the RuntimeDefault seccomp profile is refused by the same namespace: the admission
    # above was a real check, not a namespace that admits anything.
    weakened = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web-verify-weakened", "namespace": namespace},
        "spec": copy.deepcopy(spec),
    }
    weakened["spec"].pop("nodeName", None)
    weakened["spec"]["securityContext"].pop("seccompProfile")
    weakened["spec"]["containers"][0]["securityContext"].pop("seccompProfile")
    code, body = api.call(
        "POST", core_path(namespace, "pods"), weakened, params={"fieldValidation": "Strict"}, expect=(403,)
    )
    assert code == 403 and 'violates PodSecurity "restricted' in str(body)


def declared_source(kind: str, declared: str, namespace: str) -> dict[str, Any]:
    """An upload with its digest, or a golden-image clone declaring the content digest (prep's output)."""
    if kind == "upload":
        return {"upload": {"checksum": declared}}
    return {kind: {"name": "golden", "namespace": namespace, "checksum": declared}}


@pytest.mark.parametrize("kind", ["upload", "dataSource", "pvc"])
def test_match_verifies_in_cluster_and_lets_the_vm_run(  # noqa: PLR0917 (fixtures)
    api: Api,
    si7_operator: OperatorProcess,
    restricted_namespace: str,
    tmp_path: Path,
    control_plane: Any,
    kind: str,
) -> None:
    """Played: CDI's upload or clone succeeded (the real clone is in tests/node/cdi/test_cdi_golden_clone)."""
    ns = restricted_namespace
    image = os.urandom(VIRTUAL_SIZE)
    declared = "sha256:" + hashlib.sha256(image).hexdigest()
    disk = tmp_path / "disk.img"
    disk.write_bytes(image + bytes(1 << 20))  # CDI grows disk.img to the PVC
    with recording(Path(control_plane.kubeconfig), kv_collection(ns), "web", vm_run_strategy) as vm_watch:
        apply_vm(api, ns, declared_source(kind, declared, ns))

        pod = verifier_pod(api, ns)  # admitted under enforce=restricted, applied with Strict validation
        assert_locked_down(api, ns, pod)
        policy = api.get(f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies/web-verify-deny")
        assert policy is not None and policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
        assert "ingress" not in policy["spec"] and "egress" not in policy["spec"], "deny all, both ways"
        status = status_of(api, ns, "web")
        assert status["checksumVerified"] is False
        assert condition(status, "ChecksumVerified")["reason"] == "VerifierRunning"
        before_verdict = vm_watch.seen()

        verdict = play_kubelet(api, ns, pod, disk, tmp_path)
        assert verdict["result"] == "match"

        status = wait_for(
            lambda: (s := status_of(api, ns, "web")).get("checksumVerified") and s, 60, 0.2, what="verified"
        )
        wait_for(lambda: run_strategy(api, ns) == "Always", 60, 0.2, what="VM allowed to run")
        after_verdict = vm_watch.seen()
    assert before_verdict and set(before_verdict) == {"Halted"}, before_verdict
    assert after_verdict[-1] == "Always", "the user's runStrategy takes effect only after the verdict"
    assert status["verifiedBy"] == "in-cluster-verifier"
    assert status["verifiedDigest"] == declared
    assert condition(status, "ChecksumVerified")["reason"] == "InClusterVerifier"
    wait_for(
        lambda: api.get(core_path(ns, "pods", "web-verify")) is None, 60, 0.2, what="verifier pod removed"
    )
    dv = api.get(dv_path(ns, "web-dv")) or {}
    recorded = json.loads(dv["metadata"]["annotations"]["uds.dev/verification"])
    assert recorded == {"result": "match", "expected": declared, "actual": declared, "bytes": VIRTUAL_SIZE}

    play_kubevirt(api, ns, "web", "Running", True)
    status = wait_phase(api, si7_operator, ns, "web", "Ready")
    assert status["checksumVerified"] is True and status["verifiedBy"] == "in-cluster-verifier"
    events = api.items(f"/apis/events.k8s.io/v1/namespaces/{ns}/events")
    assert any(e.get("reason") == "ChecksumVerified" and e["type"] == "Normal" for e in events)
    samples = si7_metric(si7_operator.metrics(), "web")
    assert samples and all(line.rstrip().endswith(" 1.0") for line in samples), samples


def test_mismatch_fails_and_the_vm_never_runs(
    api: Api, si7_operator: OperatorProcess, restricted_namespace: str, tmp_path: Path, control_plane: Any
) -> None:
    ns = restricted_namespace
    image = bytearray(os.urandom(VIRTUAL_SIZE))
    declared = "sha256:" + hashlib.sha256(image).hexdigest()
    image[-1] ^= 0x01  # bit rot in the last byte of the virtual size
    actual = "sha256:" + hashlib.sha256(image).hexdigest()
    disk = tmp_path / "disk.img"
    disk.write_bytes(bytes(image) + bytes(1 << 20))
    with recording(Path(control_plane.kubeconfig), kv_collection(ns), "web", vm_run_strategy) as vm_watch:
        apply_vm(api, ns, {"upload": {"checksum": declared}})
        pod = verifier_pod(api, ns)
        assert play_kubelet(api, ns, pod, disk, tmp_path)["result"] == "mismatch"

        status = wait_for(
            lambda: (s := status_of(api, ns, "web")).get("phase") == "Failed" and s, 60, 0.2, what="Failed"
        )
        checksum = condition(status, "ChecksumVerified")
        assert checksum["reason"] == "ChecksumMismatch"
        assert declared in checksum["message"] and actual in checksum["message"]
        assert status["checksumVerified"] is False and status.get("verifiedBy") is None

        def mismatch_event() -> dict[str, Any] | None:
            events = api.items(f"/apis/events.k8s.io/v1/namespaces/{ns}/events")
            return next((e for e in events if e.get("reason") == "ChecksumMismatch"), None)

        event = wait_for(mismatch_event, 60, 0.2, what="ChecksumMismatch Event")
        assert event["type"] == "Warning" and declared in event["note"] and actual in event["note"]
        samples = si7_metric(si7_operator.metrics(), "web")
        assert samples and all(line.rstrip().endswith(" 0.0") for line in samples), samples
        # The disk is kept as evidence, the pod is cleaned up, and the VM stays off on later reconciles,
        # including one forced by a change to the UDSVirtualMachine (a label: no spec change).
        wait_for(lambda: api.get(core_path(ns, "pods", "web-verify")) is None, 60, 0.2, what="pod removed")
        assert api.get(dv_path(ns, "web-dv")) is not None
        before = si7_operator.reconciles()
        api.merge(
            f"/apis/uds.dev/v1alpha1/namespaces/{ns}/udsvirtualmachines/web",
            {"metadata": {"labels": {"t": "1"}}},
        )
        si7_operator.wait_quiet(minimum=before + 1)
        seen = vm_watch.seen()
    assert seen and set(seen) == {"Halted"}, f"the VM must never be set to run; saw {seen}"
    assert status_of(api, ns, "web")["phase"] == "Failed"
    assert api.get(core_path(ns, "pods", "web-verify")) is None, "a recorded mismatch is not re-verified"

    # A changed declaration is verified again (the disk kept as evidence is not trusted from memory).
    api.merge(vm_path(ns, "web"), {"spec": {"source": {"upload": {"checksum": actual}}}})
    pod = verifier_pod(api, ns)
    command = pod["spec"]["containers"][0]["command"]
    assert command[command.index("--expected") + 1] == actual
    si7_operator.wait_quiet(minimum=0)  # whatever the spec change triggers has run: the pod is still fenced
    assert api.get(netpol_path(ns, "web-verify-deny")) is not None, "the verifier must never run unfenced"
    assert play_kubelet(api, ns, pod, disk, tmp_path)["result"] == "match"
    wait_for(lambda: run_strategy(api, ns) == "Always", 60, 0.2, what="VM released after re-verification")
    status = status_of(api, ns, "web")
    assert status["checksumVerified"] is True and status["verifiedDigest"] == actual


def test_a_sites_verifier_resources_reach_the_admitted_pod_and_a_bad_value_stops_the_operator(
    api: Api, restricted_namespace: str, tmp_path: Path, control_plane: Any
) -> None:
    """The chart value verifier.resources (env UDS_VM_VERIFIER_RESOURCES): laid over the defaults, the pod
    is admitted by the real API server in a restricted namespace; a value Kubernetes would refuse stops
    the operator at start with one line naming the chart value, before it creates anything."""
    ns = restricted_namespace
    base = {**os.environ, "UDS_VM_OPERATOR_IMAGE": OPERATOR_IMAGE}
    refused = OperatorProcess(
        Path(control_plane.kubeconfig),
        ns,
        tmp_path / "logs",
        environment={**base, "UDS_VM_VERIFIER_RESOURCES": json.dumps({"requests": {"cpu": "lots"}})},
    )
    with pytest.raises(AssertionError, match="operator exited with 1") as stopped:
        refused.start()
    refused.stop()
    assert "chart value verifier.resources (operator env UDS_VM_VERIFIER_RESOURCES)" in str(stopped.value)
    assert "'lots' is not a CPU quantity" in str(stopped.value)

    site = {"requests": {"cpu": "10m"}, "limits": {"memory": "192Mi"}}
    operator = OperatorProcess(
        Path(control_plane.kubeconfig),
        ns,
        tmp_path / "logs",
        environment={**base, "UDS_VM_VERIFIER_RESOURCES": json.dumps(site)},
    )
    operator.start()
    try:
        image = os.urandom(VIRTUAL_SIZE)
        apply_vm(api, ns, {"upload": {"checksum": "sha256:" + hashlib.sha256(image).hexdigest()}})
        pod = verifier_pod(api, ns)  # admitted under enforce=restricted, applied with Strict validation
    finally:
        operator.stop()
    assert pod["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "10m", "memory": "64Mi", "ephemeral-storage": "1Mi"},
        "limits": {"cpu": "1", "memory": "192Mi", "ephemeral-storage": "16Mi"},
    }
