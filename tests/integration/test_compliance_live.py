"""`uds-vmctl compliance validate` against the real API server: a compliant VM's children (rendered by the
operator's renderers, created with the admin client) and its backup evidence (UDSVirtualMachineBackups, a VM
restored from one of them) satisfy every control; tampering each piece of evidence on the live objects flips
exactly the matching control."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lightkube import Client
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.core_v1 import PersistentVolumeClaim
from lightkube.types import PatchType

from tests.integration.operator_fixtures import compliance_validate
from tests.kube_helpers import apply_strict, as_resource, create_strict
from tests.unit.compliance_fixtures import TAMPERS, chart_clusterroles, compliant_objects

UDSVM = create_namespaced_resource("uds.dev", "v1alpha1", "UDSVirtualMachine", "udsvirtualmachines")
UDSVM_BACKUP = create_namespaced_resource(
    "uds.dev", "v1alpha1", "UDSVirtualMachineBackup", "udsvirtualmachinebackups"
)
WITH_STATUS = {"UDSVirtualMachine": UDSVM, "UDSVirtualMachineBackup": UDSVM_BACKUP}
VM = "web"
RESTORED = f"{VM}-restored"


def create_with_status(client: Client, obj: dict[str, Any]) -> str:
    """Create a uds.dev object, then write its status through the status subresource; its uid."""
    body = copy.deepcopy(obj)
    status = body.pop("status")
    body["metadata"].pop("uid", None)
    created = create_strict(client, body)
    resource = WITH_STATUS[obj["kind"]]
    client.patch(
        resource.Status,
        obj["metadata"]["name"],
        {"status": status},
        namespace=obj["metadata"]["namespace"],
        patch_type=PatchType.MERGE,
    )
    return str(created.metadata.uid)


def create_compliant_vm(client: Client, namespace: str) -> list[dict[str, Any]]:
    """Both VMs first (their children's ownerReferences need the uids the server gives), then the rest."""
    now = datetime.now(UTC)
    sketch = compliant_objects(VM, namespace, now=now)
    uids = {
        obj["metadata"]["name"]: create_with_status(client, obj)
        for obj in sketch
        if obj["kind"] == "UDSVirtualMachine"
    }
    objects = compliant_objects(VM, namespace, uid=uids[VM], now=now, restored_uid=uids[RESTORED])
    for obj in objects:
        if obj["kind"] == "UDSVirtualMachineBackup":
            create_with_status(client, obj)
        elif obj["kind"] != "UDSVirtualMachine":
            create_strict(client, obj)
    for role in chart_clusterroles():
        apply_strict(client, role)
    return [*objects, *chart_clusterroles()]


def validate(kubeconfig: Path, namespace: str, tmp_path: Path) -> tuple[int, dict[str, str]]:
    """The exit code, and the controls of ``web`` (the restored VM is judged too, not asserted here)."""
    out = tmp_path / "assessment-results.yaml"
    result = compliance_validate(kubeconfig, namespace, out)
    assert out.is_file()
    assert result.stdout.strip(), result.output
    summary = json.loads(result.stdout)
    assert sorted(vm["name"] for vm in summary["vms"]) == [VM, RESTORED]
    (vm,) = [vm for vm in summary["vms"] if vm["name"] == VM]
    return result.exit_code, vm["controls"]


def reapply(client: Client, obj: dict[str, Any], namespace: str) -> None:
    """PUT the whole object (the tampered fields replace the live ones whoever owns them); for a uds.dev
    object also its status, through the status subresource, clearing fields the object no longer has."""
    resource = type(as_resource(obj))
    name = obj["metadata"]["name"]
    live = client.get(resource, name, namespace=obj["metadata"].get("namespace"))
    body = copy.deepcopy(obj)
    body["metadata"]["resourceVersion"] = live.metadata.resourceVersion
    body["metadata"].pop("uid", None)
    client.replace(as_resource(body))
    if obj["kind"] in WITH_STATUS:
        live_status = dict(live.status or {})
        status = {key: None for key in live_status if key not in obj["status"]} | obj["status"]
        client.patch(
            WITH_STATUS[obj["kind"]].Status,
            name,
            {"status": status},
            namespace=namespace,
            patch_type=PatchType.MERGE,
        )


def test_live_evidence_satisfies_every_control_and_each_tamper_flips_one(
    control_plane: Any, kube_client: Client, namespace: str, tmp_path: Path
) -> None:
    try:
        run_tamper_matrix(control_plane, kube_client, namespace, tmp_path)
    finally:
        for role in chart_clusterroles():
            kube_client.delete(type(as_resource(role)), role["metadata"]["name"])
        release_claims(kube_client, namespace)


def release_claims(client: Client, namespace: str) -> None:
    """Play the pvc-protection controller (absent from this control plane): the data-disk claims would
    otherwise hold the namespace in Terminating for every later test."""
    for pvc in client.list(PersistentVolumeClaim, namespace=namespace):
        if pvc.metadata.finalizers:
            client.patch(
                PersistentVolumeClaim,
                pvc.metadata.name,
                {"metadata": {"finalizers": None}},
                namespace=namespace,
                patch_type=PatchType.MERGE,
            )


def run_tamper_matrix(control_plane: Any, kube_client: Client, namespace: str, tmp_path: Path) -> None:
    compliant = create_compliant_vm(kube_client, namespace)
    code, controls = validate(control_plane.kubeconfig, namespace, tmp_path)
    assert code == 0 and set(controls.values()) == {"satisfied"}, controls
    for name, (control_id, tamper) in sorted(TAMPERS.items()):
        tampered = copy.deepcopy(compliant)
        tamper(tampered, VM)
        changed = [t for t, c in zip(tampered, compliant, strict=True) if t != c]
        for obj in changed:
            reapply(kube_client, obj, namespace)
        code, controls = validate(control_plane.kubeconfig, namespace, tmp_path)
        flipped = sorted(c for c, s in controls.items() if s != "satisfied")
        assert (code, flipped) == (1, [control_id]), name
        for obj in [c for t, c in zip(tampered, compliant, strict=True) if t != c]:
            reapply(kube_client, obj, namespace)
        code, controls = validate(control_plane.kubeconfig, namespace, tmp_path)
        assert code == 0, f"restoring after {name} left {controls}"
