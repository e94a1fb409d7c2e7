"""SI-7 on a CDI without ``spec.source.http.checksum``: the operator verifies in-cluster, never claims CDI.

A dedicated control plane (so the session's shared one keeps the v1.65 CRD) gets a DataVolume CRD whose
http schema lacks ``checksum``, as CDI before v1.65 ships it. The API server would prune the field
silently; the operator must learn that from the installed CRD (it is started after the patch, so its facts
cache sees it), fall back to the verifier pod, and record ``in-cluster-verifier``. A watch on the
UDSVirtualMachine checks every stored status: none ever says ``cdi-http-checksum``.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.operator_fixtures import condition, core_path, dv_path, status_of
from tests.integration.operator_harness import Api, OperatorProcess
from tests.integration.si7_play import (
    OPERATOR_IMAGE,
    VIRTUAL_SIZE,
    apply_vm,
    kv_collection,
    play_kubelet,
    recording,
    run_strategy,
    udsvm_collection,
    verifier_pod,
    vm_run_strategy,
)
from tests.kube_helpers import wait_for
from tools.envtest.controlplane import LAUNCH_ERRORS, running_control_plane

DV_CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/datavolumes.cdi.kubevirt.io"
HTTP_PROPERTIES = "/schema/openAPIV3Schema/properties/spec/properties/source/properties/http/properties"


def remove_http_checksum(api: Api) -> None:
    """Make the installed DataVolume CRD look like CDI before v1.65 (no ``http.checksum``)."""
    crd = api.get(DV_CRD)
    assert crd is not None, "the control plane has no DataVolume CRD; run `make envtest-bins`"
    index = next(i for i, v in enumerate(crd["spec"]["versions"]) if v["name"] == "v1beta1")
    patch = [{"op": "remove", "path": f"/spec/versions/{index}{HTTP_PROPERTIES}/checksum"}]
    api.call("PATCH", DV_CRD, patch, content_type="application/json-patch+json")
    node: Any = (api.get(DV_CRD) or {})["spec"]["versions"][index]
    for key in HTTP_PROPERTIES.strip("/").split("/"):
        node = node[key]
    assert "url" in node and "checksum" not in node, f"the patch did not take: {sorted(node)}"


@pytest.fixture(scope="module")
def old_cdi_plane() -> Iterator[Any]:
    """A private control plane whose DataVolume CRD predates ``http.checksum``."""
    try:
        context = running_control_plane()
        plane = context.__enter__()
    except LAUNCH_ERRORS as error:
        pytest.fail(f"could not start a dedicated control plane: {error}", pytrace=False)
    try:
        api = Api(plane.kubeconfig)
        try:
            remove_http_checksum(api)
        finally:
            api.close()
        yield plane
    finally:
        context.__exit__(None, None, None)


@pytest.fixture
def old_api(old_cdi_plane: Any) -> Iterator[Api]:
    client = Api(old_cdi_plane.kubeconfig)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def old_namespace(old_api: Api) -> Iterator[str]:
    name = f"si7-old-cdi-{secrets.token_hex(3)}"
    labels = {"pod-security.kubernetes.io/enforce": "restricted", "uds-vm-operator.dev/test": "true"}
    old_api.call("POST", "/api/v1/namespaces", {"metadata": {"name": name, "labels": labels}})
    try:
        yield name
    finally:
        old_api.delete(f"/api/v1/namespaces/{name}")


@pytest.fixture
def old_cdi_operator(
    old_cdi_plane: Any, old_namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[OperatorProcess]:
    monkeypatch.setenv("UDS_VM_OPERATOR_IMAGE", OPERATOR_IMAGE)
    process = OperatorProcess(Path(old_cdi_plane.kubeconfig), old_namespace, tmp_path / "logs")
    process.start()  # after the CRD patch: the facts cache reads the old schema
    try:
        yield process
    finally:
        process.stop()
        print(f"--- operator log ({process.log_path}) ---\n{process.logs()}")


def verified_by(obj: dict[str, Any]) -> tuple[Any, Any]:
    status = obj.get("status") or {}
    reasons = [c.get("reason") for c in status.get("conditions") or [] if c.get("type") == "ChecksumVerified"]
    return status.get("verifiedBy"), (reasons or [None])[0]


def test_http_on_old_cdi_falls_back_to_the_verifier_and_never_claims_cdi(
    old_cdi_plane: Any, old_api: Api, old_cdi_operator: OperatorProcess, old_namespace: str, tmp_path: Path
) -> None:
    api, ns = old_api, old_namespace
    image = os.urandom(VIRTUAL_SIZE)
    declared = "sha256:" + hashlib.sha256(image).hexdigest()
    disk = tmp_path / "disk.img"
    disk.write_bytes(image + bytes(1 << 20))
    kubeconfig = Path(old_cdi_plane.kubeconfig)
    source = {"http": {"url": "https://images.site.internal/web.img", "checksum": declared}}
    with (
        recording(kubeconfig, udsvm_collection(ns), "web", verified_by) as claims,
        recording(kubeconfig, kv_collection(ns), "web", vm_run_strategy) as vm_watch,
    ):
        apply_vm(api, ns, source)
        dv = api.get(dv_path(ns, "web-dv")) or {}
        assert "checksum" not in dv["spec"]["source"]["http"], "this CDI cannot check it: nothing is claimed"

        pod = verifier_pod(api, ns)  # the import "succeeded", but only the verifier can vouch for the bytes
        command = pod["spec"]["containers"][0]["command"]
        assert command[command.index("--expected") + 1] == declared
        status = status_of(api, ns, "web")
        assert status["checksumVerified"] is False and status.get("verifiedBy") is None
        assert run_strategy(api, ns) == "Halted"

        assert play_kubelet(api, ns, pod, disk, tmp_path)["result"] == "match"
        status = wait_for(
            lambda: (s := status_of(api, ns, "web")).get("checksumVerified") and s, 60, 0.2, what="verified"
        )
        wait_for(lambda: run_strategy(api, ns) == "Always", 60, 0.2, what="VM allowed to run")
        wait_for(lambda: api.get(core_path(ns, "pods", "web-verify")) is None, 60, 0.2, what="pod removed")
        history, strategies = claims.seen(), vm_watch.seen()
    assert status["verifiedBy"] == "in-cluster-verifier"
    assert condition(status, "ChecksumVerified")["reason"] == "InClusterVerifier"
    assert history, "the watch saw the UDSVirtualMachine"
    assert all(by != "cdi-http-checksum" and reason != "CDIHTTPChecksum" for by, reason in history), history
    assert strategies[0] == "Halted" and strategies[-1] == "Always"
