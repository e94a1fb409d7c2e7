"""The operator under the chart's RBAC only: a full lifecycle with no permission it was not given.

The operator runs as a real process with a client-certificate kubeconfig for its ServiceAccount user; the
only rights that user has come from the chart's own objects: the committed deploy/ manifests (cluster
flavour), and the namespaced flavour rendered by the real ``helm`` (one RoleBinding in the VM namespace
plus the cluster-scoped reads). The lifecycle touches every
kind the chart grants: an upload with an image record (ConfigMap read), the SI-7 verifier pod and its
NetworkPolicy (applied, watched, deleted), the verdict annotation on the DataVolume, status writes, Events,
stop/start, and deletion through the garbage collector. The API server's own ``apiserver_request_total``
counters prove that no request was refused (HTTP 403) while it ran.
"""

from __future__ import annotations

import random
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from release import deploy_manifests
from tests.integration.operator_fixtures import (
    api,
    await_event_reasons,
    condition,
    core_path,
    dv_path,
    kv_path,
    netpol_path,
    play_cdi,
    play_kubevirt,
    status_of,
    udsvm,
    vm_path,
    wait_phase,
)
from tests.integration.operator_harness import Api, OperatorProcess
from tests.integration.si7_play import OPERATOR_IMAGE, VIRTUAL_SIZE, play_kubelet, run_strategy, verifier_pod
from tests.integration.test_deploy_helm import helm_path
from tests.integration.test_rbac_operator import SA, install, remove, retarget
from tests.kube_helpers import wait_for
from uds_vm_operator.cli.prep import build_report
from uds_vm_operator.cli.prep_manifests import ManifestTarget, image_record, image_record_configmap
from uds_vm_operator.images import survey_image

__all__ = ["api"]

_REFUSED = (
    # Refused by the authorizer (RBAC): the filter answers 403 before the request is counted per resource.
    re.compile(r"^authorization_attempts_total\{(?P<labels>result=\"(?!allowed\")[^}]*)\} (?P<value>\S+)$"),
    # Refused later, e.g. by Pod Security admission.
    re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*code=\"403\"[^}]*)\} (?P<value>\S+)$"),
)


def refused_requests(api: Api) -> dict[str, float]:
    """Requests the API server refused (authorization or admission), by their labels, since it started."""
    found: dict[str, float] = {}
    for line in api.text("/metrics").splitlines():
        for pattern in _REFUSED:
            match = pattern.match(line)
            if match:
                found[match.group("labels")] = float(match.group("value"))
    return found


@pytest.fixture
def rbac_namespace(api: Api) -> Iterator[str]:
    """Short name (it goes into the certificate's CN) and the `restricted` Pod Security profile."""
    name = f"rbac-life-{secrets.token_hex(3)}"
    labels = {"uds-vm-operator.dev/test": "true", "pod-security.kubernetes.io/enforce": "restricted"}
    api.call("POST", "/api/v1/namespaces", {"metadata": {"name": name, "labels": labels}})
    try:
        yield name
    finally:
        api.delete(f"/api/v1/namespaces/{name}")


@pytest.fixture(params=["deploy-namespaced", "chart-cluster"])
def chart_rbac_operator(
    request: pytest.FixtureRequest,
    control_plane: Any,
    *,
    kube_client: Any,
    rbac_namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[OperatorProcess]:
    """The operator, authenticated as its ServiceAccount user, bound only by the chart's RBAC.

    ``deploy-namespaced``: the committed deploy/ manifests (what `kubectl apply` installs; its RoleBinding
    moved from the example namespace to the test's); ``chart-cluster``: `helm template` with the opt-in
    ``rbac.scope=cluster`` (one ClusterRoleBinding).
    """
    if request.param == "deploy-namespaced":
        objects = deploy_manifests.load_deploy_objects()
    else:
        objects = deploy_manifests.render_chart(helm_path(), "--set", "rbac.scope=cluster")
    kinds = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "RoleBinding")
    objects = [o for o in retarget(objects, rbac_namespace) if o["kind"] in kinds]
    deployment = next(o for o in deploy_manifests.load_deploy_objects() if o["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    deployment_env = {item["name"]: item.get("value") for item in container["env"]}
    assert "UDS_VM_OPERATOR_IMAGE" in deployment_env, "the Deployment must tell the operator its own image"
    install(kube_client, objects)
    user = f"system:serviceaccount:{rbac_namespace}:{SA}"
    groups = ("system:serviceaccounts", f"system:serviceaccounts:{rbac_namespace}", "system:authenticated")
    kubeconfig = control_plane.kubeconfig_for(user, groups, path=tmp_path / "operator-kubeconfig")
    monkeypatch.setenv("UDS_VM_OPERATOR_IMAGE", OPERATOR_IMAGE)
    process = OperatorProcess(kubeconfig, rbac_namespace, tmp_path / "logs")
    try:
        process.start()
        yield process
    finally:
        process.stop()
        print(f"--- operator log ({process.log_path}) ---\n{process.logs(20000)}")
        remove(kube_client, [o for o in objects if "namespace" not in o["metadata"]])


def sealed_image(tmp_path: Path, namespace: str) -> tuple[bytes, dict[str, Any], dict[str, Any]]:
    """A raw image 100 bytes short of whole sectors, and the record `uds-vmctl prep` writes for it."""
    payload = random.Random(11).randbytes(VIRTUAL_SIZE - 100)
    path = tmp_path / "web.raw"
    path.write_bytes(payload)
    report = build_report(survey_image(str(path)))
    target = ManifestTarget(name="web", namespace=namespace)
    return payload, report, image_record_configmap(image_record(report, target), target)


def test_operator_with_only_the_chart_rbac_completes_the_lifecycle(
    api: Api, chart_rbac_operator: OperatorProcess, rbac_namespace: str, tmp_path: Path
) -> None:
    ns, operator = rbac_namespace, chart_rbac_operator
    refused_before = refused_requests(api)
    payload, report, record = sealed_image(tmp_path, ns)
    assert report["content_sha256"] != report["sha256"], "sector padding: content differs from the file"
    api.apply(record, core_path(ns, "configmaps", record["metadata"]["name"]))
    manifest = udsvm(
        "web",
        ns,
        source={"upload": {"checksum": report["sha256"]}},
        disk={"virtualSize": report["virtual_size_bytes"]},
        imageRecord=record["metadata"]["name"],
    )
    uid = api.apply(manifest, vm_path(ns, "web"))["metadata"]["uid"]

    # Children created and owned; the VM is held until its disk is verified.
    wait_phase(api, operator, ns, "web", "Pending")
    children = [
        dv_path(ns, "web-dv"),
        kv_path(ns, "web"),
        core_path(ns, "secrets", "web-cloudinit"),
        netpol_path(ns, "web-netpol"),
    ]
    for path in children:
        child = api.get(path)
        assert child is not None, path
        assert any(ref["uid"] == uid for ref in child["metadata"]["ownerReferences"]), path
    assert run_strategy(api, ns) == "Halted"

    # CDI finishes the upload; the verifier checks the content digest sealed in the image record.
    play_cdi(api, ns, "web-dv", "Succeeded", "100.0%")
    pod = verifier_pod(api, ns)
    command = pod["spec"]["containers"][0]["command"]
    assert command[command.index("--expected") + 1] == report["content_sha256"]
    disk = tmp_path / "disk.img"
    disk.write_bytes(payload + bytes((1 << 20) + 100))  # CDI: image, then zeros up to the PVC size
    assert play_kubelet(api, ns, pod, disk, tmp_path)["result"] == "match"
    wait_for(lambda: run_strategy(api, ns) == "Always", 60, 0.2, what="VM released after verification")
    wait_for(lambda: api.get(core_path(ns, "pods", "web-verify")) is None, 60, 0.2, what="verifier removed")

    play_kubevirt(api, ns, "web", "Running", True)
    status = wait_phase(api, operator, ns, "web", "Ready")
    assert status["verifiedBy"] == "in-cluster-verifier" and status["verifiedDigest"] == report["sha256"]
    assert condition(status, "ChecksumVerified")["reason"] == "InClusterVerifier"

    # Stop and start: the user's runStrategy reaches the KubeVirt VM in place.
    vm_uid = api.get(kv_path(ns, "web"))["metadata"]["uid"]  # type: ignore[index]
    api.merge(vm_path(ns, "web"), {"spec": {"runStrategy": "Halted"}})
    wait_for(lambda: run_strategy(api, ns) == "Halted", 60, 0.2, what="VM stopped")
    play_kubevirt(api, ns, "web", "Stopped", False)
    wait_phase(api, operator, ns, "web", "Stopped")
    api.merge(vm_path(ns, "web"), {"spec": {"runStrategy": "Always"}})
    wait_for(lambda: run_strategy(api, ns) == "Always", 60, 0.2, what="VM started")
    play_kubevirt(api, ns, "web", "Running", True)
    wait_phase(api, operator, ns, "web", "Ready")
    assert api.get(kv_path(ns, "web"))["metadata"]["uid"] == vm_uid  # type: ignore[index]
    await_event_reasons(api, ns, uid, {"ChecksumVerified", "Ready", "Stopped"})

    # Delete: the garbage collector removes every owned child, the verifier's NetworkPolicy included
    # (kept until then: spec changes such as stop/start must not prune it as a stale child).
    assert api.get(netpol_path(ns, "web-verify-deny")) is not None
    api.delete(vm_path(ns, "web"))
    for path in [*children, netpol_path(ns, "web-verify-deny")]:
        wait_for(lambda p=path: api.get(p) is None, 90, 0.5, what=f"{path} collected")  # type: ignore[misc]
    assert api.get(core_path(ns, "configmaps", record["metadata"]["name"])) is not None, "records are kept"

    refused_after = refused_requests(api)
    refused = {k: v - refused_before.get(k, 0.0) for k, v in refused_after.items()}
    assert not {k: v for k, v in refused.items() if v}, f"requests refused under the chart RBAC: {refused}"
    log = operator.logs(200000)
    assert "forbidden" not in log.lower() and "reconcile failed" not in log, log
    assert status_of(api, ns, "web") == {}
