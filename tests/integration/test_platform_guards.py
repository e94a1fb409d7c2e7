"""Platform guards on the real API server: the KVM guard (Node objects with and without KVM capacity, a
KubeVirt CR with and without useEmulation), CDI's private-address protection (the pinned CDI, and a CDIConfig
CRD that has allowedSourceURLs), and the live-migration choice. Strict field validation on every write.

Nodes are cluster-scoped and shared by every test of the session, so this module creates its own (named
``h8-*``, labelled) and deletes them afterwards; with zero nodes (a bare control plane) the guard judges
nothing, so other tests never see a KVM condition.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.operator_fixtures import (
    api,
    condition,
    dv_path,
    kv_path,
    status_of,
    udsvm,
    vm_path,
    wait_phase,
)
from tests.integration.operator_harness import Api, OperatorProcess
from tests.kube_helpers import wait_for

__all__ = ["api"]  # fixtures used by name

TTL_ENV = "UDS_VM_PLATFORM_FACTS_TTL_S"
KVM = "devices.kubevirt.io/kvm"
NODE_LABEL = "uds-vm-operator.dev/test-node"
NODES = "/api/v1/nodes"
CDI_CONFIG_CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/cdiconfigs.cdi.kubevirt.io"
CDI_CONFIG = "/apis/cdi.kubevirt.io/v1beta1/cdiconfigs/config"
JSON_PATCH = "application/json-patch+json"
PRIVATE_URL = "http://192.168.7.20/images/ubuntu.qcow2"
ALLOWLIST_ENV = "UDS_VM_ALLOWED_SOURCE_HOSTS"


@pytest.fixture
def operator(
    control_plane: Any, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[OperatorProcess]:
    """The operator with a 1 s platform-facts interval, so node and CDIConfig changes show up quickly, and
    the LAN image server in the admin allowlist of the operator's own SSRF lock (what CDI then says is
    what these tests are about)."""
    monkeypatch.setenv(TTL_ENV, "1")
    monkeypatch.setenv(ALLOWLIST_ENV, "192.168.7.0/24")
    process = OperatorProcess(Path(control_plane.kubeconfig), namespace, tmp_path / "logs")
    process.start()
    try:
        yield process
    finally:
        process.stop()
        print(f"--- operator log ({process.log_path}) ---\n{process.logs()}")


@pytest.fixture
def make_node(api: Api) -> Iterator[Any]:
    """Create Node objects (status written through the status subresource); all deleted afterwards."""
    created: list[str] = []

    def make(kvm: str | None) -> str:
        name = f"h8-{secrets.token_hex(3)}"
        api.create(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {NODE_LABEL: "true"}}},
            NODES,
        )
        created.append(name)
        set_kvm(api, name, kvm)
        return name

    yield make
    for name in created:
        api.delete(f"{NODES}/{name}")


def set_kvm(api: Api, node: str, kvm: str | None) -> None:
    resources = {"cpu": "4", "memory": "8Gi", "pods": "110"}
    if kvm is not None:
        resources[KVM] = kvm
    api.merge(f"{NODES}/{node}/status", {"status": {"capacity": resources, "allocatable": resources}})


def kubevirt_cr(namespace: str, emulation: bool) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "metadata": {"name": "kubevirt", "namespace": namespace},
        "spec": {"configuration": {"developerConfiguration": {"useEmulation": emulation}}},
    }


def kubevirt_path(namespace: str) -> str:
    return f"/apis/kubevirt.io/v1/namespaces/{namespace}/kubevirts/kubevirt"


def wait_condition(
    api: Api, operator: OperatorProcess, namespace: str, name: str, want: tuple[str, str]
) -> dict[str, Any]:
    cond_type, reason = want

    def reached() -> dict[str, Any] | None:
        status = status_of(api, namespace, name)
        found = [c for c in status.get("conditions") or [] if c["type"] == cond_type]
        return status if found and found[0]["reason"] == reason else None

    try:
        return wait_for(reached, 60, 0.3, what=f"{namespace}/{name} {cond_type}={reason}")
    except AssertionError as error:
        raise AssertionError(
            f"{error}\nstatus: {status_of(api, namespace, name)}\n{operator.logs()}"
        ) from None


def warnings_for(api: Api, namespace: str, uid: str) -> list[str]:
    events = api.items(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
    return [e["reason"] for e in events if e["regarding"]["uid"] == uid and e["type"] == "Warning"]


# ---------------------------------------------------------------------------------------------- KVM guard


def test_no_kvm_node_fails_loudly_emulation_is_only_reported_and_a_kvm_node_clears_it(
    api: Api, operator: OperatorProcess, namespace: str, make_node: Any
) -> None:
    node = make_node(None)
    make_node("0")
    created = api.apply(udsvm("nokvm", namespace), vm_path(namespace, "nokvm"))
    uid = created["metadata"]["uid"]

    status = wait_condition(api, operator, namespace, "nokvm", ("KVMAvailable", "NoKVM"))
    kvm = condition(status, "KVMAvailable")
    assert kvm["status"] == "False" and "2 schedulable nodes" in kvm["message"]
    ready = condition(status, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "NoKVM")
    assert "NoKVM" in warnings_for(api, namespace, uid)
    assert api.items(f"/apis/kubevirt.io/v1/namespaces/{namespace}/kubevirts") == []  # never enabled by us

    # An admin enables emulation: recorded (visible, not silent), no longer a blocker.
    code, payload = api.create(
        kubevirt_cr(namespace, True), f"/apis/kubevirt.io/v1/namespaces/{namespace}/kubevirts"
    )
    assert code == 201, payload
    status = wait_condition(api, operator, namespace, "nokvm", ("KVMAvailable", "SoftwareEmulation"))
    assert condition(status, "Ready")["reason"] != "NoKVM"
    assert f"{namespace}/kubevirt" in condition(status, "KVMAvailable")["message"]
    assert api.get(kubevirt_path(namespace))["spec"]["configuration"]["developerConfiguration"] == {
        "useEmulation": True
    }  # the operator wrote nothing into the KubeVirt CR

    # Emulation off again, then a node gains KVM: available.
    api.merge(
        kubevirt_path(namespace),
        {"spec": {"configuration": {"developerConfiguration": {"useEmulation": False}}}},
    )
    wait_condition(api, operator, namespace, "nokvm", ("KVMAvailable", "NoKVM"))
    set_kvm(api, node, "1k")
    status = wait_condition(api, operator, namespace, "nokvm", ("KVMAvailable", "KVMNodesAvailable"))
    assert condition(status, "KVMAvailable")["status"] == "True"
    assert condition(status, "Ready")["reason"] != "NoKVM"
    api.delete(kubevirt_path(namespace))


# ------------------------------------------------------------------------------------------ SSRF / CDIConfig


def test_pinned_cdi_without_allowlist_field_says_so_and_imports(
    api: Api, operator: OperatorProcess, namespace: str
) -> None:
    crd = api.get(CDI_CONFIG_CRD)
    assert crd is not None
    versions = {v["name"]: v for v in crd["spec"]["versions"]}
    spec_props = versions["v1beta1"]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert "allowedSourceURLs" not in spec_props  # CDI v1.65.0, as pinned in versions.env

    manifest = udsvm("lan", namespace)
    manifest["spec"]["source"]["http"]["url"] = PRIVATE_URL
    api.apply(manifest, vm_path(namespace, "lan"))
    status = wait_condition(
        api, operator, namespace, "lan", ("ImportSourceAllowed", "CDIHasNoPrivateAddressBlock")
    )
    cond = condition(status, "ImportSourceAllowed")
    assert cond["status"] == "True"
    assert "no spec.allowedSourceURLs" in cond["message"] and "'192.168.7.20'" in cond["message"]
    assert api.get(dv_path(namespace, "lan-dv")) is not None  # this CDI does not block: import proceeds


@pytest.fixture
def cdi_with_allowlist(api: Api) -> Iterator[None]:
    """Make the installed CDIConfig CRD look like a CDI with SSRF protection (adds spec.allowedSourceURLs),
    with a CDIConfig ``config`` allowing only 10.0.0.0/8; both are restored afterwards."""
    crd = api.get(CDI_CONFIG_CRD)
    assert crd is not None
    index = [v["name"] for v in crd["spec"]["versions"]].index("v1beta1")
    pointer = f"/spec/versions/{index}/schema/openAPIV3Schema/properties/spec/properties/allowedSourceURLs"
    add = [{"op": "add", "path": pointer, "value": {"type": "array", "items": {"type": "string"}}}]
    api.call("PATCH", CDI_CONFIG_CRD, add, content_type=JSON_PATCH)  # type: ignore[arg-type]
    existing = api.get(CDI_CONFIG)

    def accepts_field() -> bool:
        body = {
            "apiVersion": "cdi.kubevirt.io/v1beta1",
            "kind": "CDIConfig",
            "metadata": {"name": "config"},
            "spec": {"allowedSourceURLs": ["10.0.0.0/8"]},
        }
        code, _ = api.call(
            "PATCH",
            CDI_CONFIG,
            body,
            content_type="application/apply-patch+yaml",
            params={"fieldManager": "uds-vm-operator-tests", "force": "true", "fieldValidation": "Strict"},
            # 429: storage re-initialising after the CRD change; 500 "field not declared in schema": the
            # server-side-apply type converter has not caught up with the new schema yet (seen under load)
            expect=(200, 201, 400, 409, 422, 429, 500),
        )
        return code in (200, 201)

    wait_for(accepts_field, 30, 0.5, what="the CDIConfig CRD serving spec.allowedSourceURLs")
    try:
        yield
    finally:
        if existing is None:
            api.delete(CDI_CONFIG)
        else:
            api.merge(CDI_CONFIG, {"spec": {"allowedSourceURLs": None}})
        remove = [{"op": "remove", "path": pointer}]
        api.call("PATCH", CDI_CONFIG_CRD, remove, content_type=JSON_PATCH)  # type: ignore[arg-type]


def test_blocked_private_source_names_the_allowlist_entry_and_waits_for_it(
    api: Api, operator: OperatorProcess, namespace: str, cdi_with_allowlist: None
) -> None:
    manifest = udsvm("lan", namespace)
    manifest["spec"]["source"]["http"]["url"] = PRIVATE_URL
    created = api.apply(manifest, vm_path(namespace, "lan"))
    status = wait_condition(
        api, operator, namespace, "lan", ("ImportSourceAllowed", "BlockedByCDISSRFProtection")
    )
    cond = condition(status, "ImportSourceAllowed")
    assert cond["status"] == "False"
    assert "add '192.168.7.20' to CDIConfig.spec.allowedSourceURLs" in cond["message"]
    ready = condition(status, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "BlockedByCDISSRFProtection")
    assert api.get(dv_path(namespace, "lan-dv")) is None  # no stuck import to clean up by hand
    assert "BlockedByCDISSRFProtection" in warnings_for(api, namespace, created["metadata"]["uid"])
    assert api.get(kv_path(namespace, "lan"))["spec"]["runStrategy"] == "Halted"

    api.merge(CDI_CONFIG, {"spec": {"allowedSourceURLs": ["10.0.0.0/8", "192.168.7.20"]}})  # the admin's fix
    status = wait_condition(api, operator, namespace, "lan", ("ImportSourceAllowed", "AllowedByCDIConfig"))
    wait_for(
        lambda: api.get(dv_path(namespace, "lan-dv")) is not None, 30, 0.3, what="the DataVolume created"
    )
    dv = api.get(dv_path(namespace, "lan-dv"))
    assert dv is not None and dv["spec"]["source"]["http"]["url"] == PRIVATE_URL
    wait_phase(api, operator, namespace, "lan", "Pending")
    assert condition(status_of(api, namespace, "lan"), "Ready")["reason"] != "BlockedByCDISSRFProtection"


def test_private_source_outside_the_admin_allowlist_is_refused_naming_the_entry(
    api: Api, operator: OperatorProcess, namespace: str
) -> None:
    """The operator's own lock, whatever CDI does: 192.168.8.x is not in the allowlist (192.168.7.0/24)."""
    manifest = udsvm("other-lan", namespace)
    manifest["spec"]["source"]["http"]["url"] = "http://192.168.8.5/images/ubuntu.qcow2"
    api.apply(manifest, vm_path(namespace, "other-lan"))
    status = wait_phase(api, operator, namespace, "other-lan", "Failed")
    ready = condition(status, "Ready")
    assert ready["reason"] == "PrivateSourceRefused"
    assert "adds '192.168.8.5' to the chart value ssrf.allowedSourceHosts" in ready["message"]
    assert api.get(dv_path(namespace, "other-lan-dv")) is None
    assert api.get(kv_path(namespace, "other-lan")) is None


# ----------------------------------------------------------------------------------------- live migration


def test_live_migration_is_chosen_by_the_disks_and_explained(
    api: Api, operator: OperatorProcess, namespace: str
) -> None:
    rwx = {"virtualSize": "10Mi", "accessModes": ["ReadWriteMany"]}
    data_rwx = [{"name": "d", "size": "1Gi", "accessModes": ["ReadWriteMany"]}]
    api.apply(
        udsvm("mig", namespace, liveMigration=True, disk=rwx, dataDisks=data_rwx), vm_path(namespace, "mig")
    )
    api.apply(
        udsvm("maybe", namespace, liveMigration=True, allowLiveMigrateIfPossible=True),
        vm_path(namespace, "maybe"),
    )
    refused = api.apply(udsvm("nomig", namespace, liveMigration=True), vm_path(namespace, "nomig"))

    status = wait_condition(api, operator, namespace, "mig", ("LiveMigration", "LiveMigrate"))
    assert condition(status, "LiveMigration")["status"] == "True"
    assert api.get(kv_path(namespace, "mig"))["spec"]["template"]["spec"]["evictionStrategy"] == "LiveMigrate"

    status = wait_condition(api, operator, namespace, "maybe", ("LiveMigration", "LiveMigrateIfPossible"))
    cond = condition(status, "LiveMigration")
    assert cond["status"] == "False" and "spec.disk" in cond["message"]
    vm = api.get(kv_path(namespace, "maybe"))
    assert vm["spec"]["template"]["spec"]["evictionStrategy"] == "LiveMigrateIfPossible"
    maybe_uid = api.get(vm_path(namespace, "maybe"))["metadata"]["uid"]
    assert "LiveMigrateIfPossible" in warnings_for(api, namespace, maybe_uid)

    status = wait_phase(api, operator, namespace, "nomig", "Failed")
    ready = condition(status, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "LiveMigrationNeedsRWX")
    assert "allowLiveMigrateIfPossible" in ready["message"]
    assert api.get(kv_path(namespace, "nomig")) is None  # refused: nothing that would wedge a node drain
    assert "LiveMigrationNeedsRWX" in warnings_for(api, namespace, refused["metadata"]["uid"])

    # Play the pvc-protection controller (not part of this control plane) so the namespace can finalise;
    # the operator stops first, or it would re-create the released data disk PVC.
    operator.stop()
    for pvc in api.items(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims"):
        remaining = [
            f for f in pvc["metadata"].get("finalizers") or [] if f != "kubernetes.io/pvc-protection"
        ]
        path = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{pvc['metadata']['name']}"
        api.merge(path, {"metadata": {"finalizers": remaining or None}})
