"""The verifier pod and its NetworkPolicy: restricted, read-only, offline, owned, deterministic."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from uds_vm_operator.render.common import Owner
from uds_vm_operator.render.verifier import (
    BLOCK_DEVICE_PATH,
    DEADLINE_FLOOR_SECONDS,
    DISK_UID_ANNOTATION,
    EXPECTED_DIGEST_ANNOTATION,
    FILESYSTEM_DISK_PATH,
    VIRTUAL_SIZE_ANNOTATION,
    VerifierRequest,
    render_verifier,
    render_verifier_pod,
    verifier_deadline_seconds,
)

OWNER = Owner(name="web", namespace="apps", uid="1b4e28ba-2fa1-11d2-883f-0016d3cca427")
DIGEST = "sha256:" + "ab" * 32
REQUEST = VerifierRequest(
    pvc_name="web-dv",
    volume_mode="Filesystem",
    virtual_size_bytes=10 * 1024 * 1024,
    expected_digest=DIGEST,
    disk_uid="5f0c6f7e-0000-4000-8000-000000000001",
    image="registry.local/uds-vm-operator:0.1.0",
)


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """The Pod Security Standard 'restricted' rules (v1.34) that apply to this pod, checked field by field."""
    spec = pod["spec"]
    pod_sc = spec.get("securityContext", {})
    problems = []
    allowed_volume_kinds = {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
    for volume in spec.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= allowed_volume_kinds:
            problems.append(f"volume type {kinds}")
    if spec.get("hostNetwork") or spec.get("hostPID") or spec.get("hostIPC"):
        problems.append("host namespaces")
    for container in spec.get("containers", []) + spec.get("initContainers", []):
        sc = container.get("securityContext", {})
        if sc.get("privileged"):
            problems.append("privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append("allowPrivilegeEscalation must be false")
        if "ALL" not in sc.get("capabilities", {}).get("drop", []):
            problems.append("capabilities must drop ALL")
        if set(sc.get("capabilities", {}).get("add", [])) - {"NET_BIND_SERVICE"}:
            problems.append("capabilities added")
        if sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is not True:
            problems.append("runAsNonRoot")
        if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
            problems.append("runAsUser 0")
        seccomp = sc.get("seccompProfile", pod_sc.get("seccompProfile", {}))
        if seccomp.get("type") not in ("RuntimeDefault", "Localhost"):
            problems.append("seccomp")
        if container.get("ports"):
            problems.append("host ports")
    return problems


def test_pod_meets_the_restricted_pod_security_standard() -> None:
    assert restricted_violations(render_verifier_pod(OWNER, REQUEST)) == []


def test_the_checker_catches_a_weakened_pod() -> None:
    pod = render_verifier_pod(OWNER, REQUEST)
    weak = copy.deepcopy(pod)
    weak["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    del weak["spec"]["containers"][0]["securityContext"]["capabilities"]
    assert len(restricted_violations(weak)) == 2


def test_pod_is_hardened_beyond_restricted() -> None:
    pod = render_verifier_pod(OWNER, REQUEST)
    spec = pod["spec"]
    container = spec["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["runAsUser"] == 65532
    assert spec["securityContext"]["runAsUser"] == 65532
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    assert spec["restartPolicy"] == "Never"
    assert spec["activeDeadlineSeconds"] >= DEADLINE_FLOOR_SECONDS
    assert container["resources"]["limits"]["cpu"] and container["resources"]["limits"]["memory"]
    assert container["terminationMessagePolicy"] == "File"
    assert container["terminationMessagePath"] == "/dev/termination-log"
    assert "fsGroup" not in spec["securityContext"], "fsGroup could chown the evidence volume"


def test_filesystem_pvc_is_mounted_read_only_and_disk_img_is_verified() -> None:
    pod = render_verifier_pod(OWNER, REQUEST)
    container = pod["spec"]["containers"][0]
    assert pod["spec"]["volumes"] == [
        {"name": "disk", "persistentVolumeClaim": {"claimName": "web-dv", "readOnly": True}}
    ]
    assert container["volumeMounts"] == [{"name": "disk", "mountPath": "/disk", "readOnly": True}]
    assert "volumeDevices" not in container
    command = container["command"]
    assert command[:2] == ["uds-vm-operator", "verify-disk"]
    assert command[command.index("--path") + 1] == FILESYSTEM_DISK_PATH
    assert command[command.index("--virtual-size") + 1] == str(10 * 1024 * 1024)
    assert command[command.index("--expected") + 1] == DIGEST
    assert container["image"] == REQUEST.image


def test_block_pvc_is_a_read_only_volume_device() -> None:
    request = VerifierRequest(**{**REQUEST.__dict__, "volume_mode": "Block"})
    pod = render_verifier_pod(OWNER, request)
    container = pod["spec"]["containers"][0]
    assert container["volumeDevices"] == [{"name": "disk", "devicePath": BLOCK_DEVICE_PATH}]
    assert "volumeMounts" not in container
    assert pod["spec"]["volumes"][0]["persistentVolumeClaim"]["readOnly"] is True
    assert container["command"][container["command"].index("--path") + 1] == BLOCK_DEVICE_PATH


def test_names_labels_owner_and_annotations() -> None:
    policy, pod = render_verifier(OWNER, REQUEST)
    assert policy["kind"] == "NetworkPolicy", "the fence is applied before the pod"
    assert policy["metadata"]["name"] == "web-verify-deny"
    assert pod["metadata"]["name"] == "web-verify"
    for child in (policy, pod):
        meta = child["metadata"]
        assert meta["namespace"] == "apps"
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "uds-vm-operator"
        assert meta["labels"]["uds.dev/vm"] == "web"
        assert meta["labels"]["uds.dev/role"] == "verifier"
        (ref,) = meta["ownerReferences"]
        assert ref["uid"] == OWNER.uid and ref["kind"] == "UDSVirtualMachine" and ref["controller"] is True
    assert pod["metadata"]["annotations"] == {
        DISK_UID_ANNOTATION: REQUEST.disk_uid,
        EXPECTED_DIGEST_ANNOTATION: DIGEST,
        VIRTUAL_SIZE_ANNOTATION: "10485760",
    }


def test_network_policy_denies_everything_for_exactly_the_verifier() -> None:
    policy, pod = render_verifier(OWNER, REQUEST)
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert "ingress" not in spec and "egress" not in spec
    selector = spec["podSelector"]["matchLabels"]
    assert selector == {"uds.dev/vm": "web", "uds.dev/role": "verifier"}
    assert selector.items() <= pod["metadata"]["labels"].items()


def test_rendering_is_deterministic() -> None:
    assert render_verifier(OWNER, REQUEST) == render_verifier(OWNER, REQUEST)


@pytest.mark.parametrize(
    ("size", "deadline"),
    [
        (1, DEADLINE_FLOOR_SECONDS + 1),
        (20 << 20, DEADLINE_FLOOR_SECONDS + 1),
        (200 << 30, DEADLINE_FLOOR_SECONDS + 10240),
    ],
)
def test_deadline_grows_with_the_disk(size: int, deadline: int) -> None:
    assert verifier_deadline_seconds(size) == deadline


def test_non_positive_size_is_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        render_verifier_pod(OWNER, VerifierRequest(**{**REQUEST.__dict__, "virtual_size_bytes": 0}))
