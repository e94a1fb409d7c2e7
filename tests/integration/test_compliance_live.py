"""`uds-vmctl compliance validate` against the real API server: a compliant VM's children (rendered by the
operator's renderers, created with the admin client) satisfy every control; tampering each piece of
evidence on the live objects flips exactly the matching control."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

from lightkube import Client
from lightkube.generic_resource import create_namespaced_resource
from lightkube.types import PatchType

from kube_helpers import apply_strict, as_resource, create_strict

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from compliance_fixtures import TAMPERS, chart_clusterroles, children, udsvm
from operator_fixtures import compliance_validate

UDSVM = create_namespaced_resource("uds.dev", "v1alpha1", "UDSVirtualMachine", "udsvirtualmachines")
VM = "web"


def create_compliant_vm(client: Client, namespace: str) -> list[dict[str, Any]]:
    vm = udsvm(VM, namespace)
    status = vm.pop("status")
    vm["metadata"].pop("uid")
    created = create_strict(client, vm)
    uid = created.metadata.uid
    client.patch(UDSVM.Status, VM, {"status": status}, namespace=namespace, patch_type=PatchType.MERGE)
    objects = children(VM, namespace, uid=uid)
    for obj in objects:
        create_strict(client, obj)
    for role in chart_clusterroles():
        apply_strict(client, role)
    live_vm = udsvm(VM, namespace, uid=uid)
    return [live_vm, *objects, *chart_clusterroles()]


def validate(kubeconfig: Path, namespace: str, tmp_path: Path) -> tuple[int, dict[str, str]]:
    out = tmp_path / "assessment-results.yaml"
    result = compliance_validate(kubeconfig, namespace, out)
    assert out.is_file()
    assert result.stdout.strip(), result.output
    summary = json.loads(result.stdout)
    (vm,) = summary["vms"]
    return result.exit_code, vm["controls"]


def reapply(client: Client, obj: dict[str, Any], namespace: str) -> None:
    if obj["kind"] == "UDSVirtualMachine":
        # JSON merge patch: a removed checksum must be sent as null to be deleted.
        upload = obj["spec"]["source"]["upload"] or {"checksum": None}
        client.patch(
            UDSVM,
            VM,
            {"spec": {"source": {"upload": upload}}},
            namespace=namespace,
            patch_type=PatchType.MERGE,
        )
        client.patch(
            UDSVM.Status, VM, {"status": obj["status"]}, namespace=namespace, patch_type=PatchType.MERGE
        )
        return
    # PUT the whole object: the tampered fields replace the live ones whoever owns them.
    live = client.get(
        type(as_resource(obj)), obj["metadata"]["name"], namespace=obj["metadata"].get("namespace")
    )
    body = copy.deepcopy(obj)
    body["metadata"]["resourceVersion"] = live.metadata.resourceVersion
    body["metadata"].pop("uid", None)
    res = as_resource(body)
    client.replace(res)


def test_live_evidence_satisfies_every_control_and_each_tamper_flips_one(
    control_plane: Any, kube_client: Client, namespace: str, tmp_path: Path
) -> None:
    try:
        run_tamper_matrix(control_plane, kube_client, namespace, tmp_path)
    finally:
        for role in chart_clusterroles():
            kube_client.delete(type(as_resource(role)), role["metadata"]["name"])


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
