"""Feed the Go anchor (bench/go-anchor) the Python operator's own output, so both make identical writes.

Why calibrate instead of re-deriving: what the operator applies for a new VM depends on its reconcile
(the SI-7 decision holds the VM ``Halted``; the status depends on what it observed). One calibration VM
is reconciled by the real Python operator in a scratch namespace; from it we take the VM's
``runStrategy`` and the status it wrote. Each fleet VM's children are then rendered by the Python
renderer itself (``render_children``, exact per name: the cloud-init Secret embeds the host name in
base64), with the owner's UID left as a placeholder, and the calibration proves the call reproduces the
operator: the applied-hash annotation of every re-rendered calibration child must equal the live one.

The anchor reads ``DIR/<name>.json`` per reconcile, substitutes the UID, generation and time, and computes
the same applied hash in Go (hash.go); ``tests/integration/test_go_anchor_smoke.py`` checks the result.
"""

from __future__ import annotations

import copy
import json
import tempfile
import time
from pathlib import Path
from typing import Any

UID_PLACEHOLDER = "@@OWNER_UID@@"
GENERATION_PLACEHOLDER = "@@GENERATION@@"
NOW_PLACEHOLDER = "@@NOW@@"
CALIBRATION_NAME = "anchorcalib"
PATCH_NULL_KEYS = ("verifiedBy", "verifiedDigest", "importProgress", "backupExemptions", "goldenImage")
"""Keys the operator's first status patch sends as null (absent from the stored status)."""


class CalibrationError(RuntimeError):
    """Re-rendering did not reproduce what the Python operator applied: the anchor would not be fair."""


CHILD_COLLECTIONS = {
    ("v1", "Secret"): "/api/v1/namespaces/{namespace}/secrets",
    (
        "networking.k8s.io/v1",
        "NetworkPolicy",
    ): "/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies",
    (
        "cdi.kubevirt.io/v1beta1",
        "DataVolume",
    ): "/apis/cdi.kubevirt.io/v1beta1/namespaces/{namespace}/datavolumes",
    ("kubevirt.io/v1", "VirtualMachine"): "/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachines",
}
"""The four kinds of child a fleet VM has, and where to list them."""


def children_of(api: Any, namespace: str) -> dict[tuple[str, str], dict[str, Any]]:
    """Every child in ``namespace``, by (kind, name), with the apiVersion and kind a list leaves out."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for (api_version, kind), collection in CHILD_COLLECTIONS.items():
        for item in api.items(collection.format(namespace=namespace)):
            found[(kind, item["metadata"]["name"])] = {"apiVersion": api_version, "kind": kind, **item}
    return found


def calibrate(
    kubeconfig: Path, vm_manifest: Any, environment: dict[str, str] | None = None
) -> dict[str, Any]:
    """Reconcile one VM with the real Python operator; return its ``runStrategy`` and status template.

    ``vm_manifest(name, namespace)`` builds the fleet's VM; the calibration VM is built the same way.
    """
    from tests.integration.operator_harness import Api, OperatorProcess  # noqa: PLC0415
    from uds_vm_operator.controller.compare import APPLIED_HASH_ANNOTATION, with_applied_hash  # noqa: PLC0415

    api = Api(kubeconfig)
    namespace = f"anchor-calib-{time.time_ns() % 10**9}"
    api.call("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}}, expect=(201,))
    operator = OperatorProcess(
        kubeconfig,
        namespace,
        Path(tempfile.mkdtemp(prefix="anchor-calib-")),
        extra_args=["--log-level", "WARNING"],
        environment=environment,
    )
    try:
        operator.start()
        manifest = vm_manifest(CALIBRATION_NAME, namespace)
        path = f"/apis/uds.dev/v1alpha1/namespaces/{namespace}/udsvirtualmachines/{CALIBRATION_NAME}"
        api.apply(manifest, path)
        operator.wait_quiet(minimum=1, quiet_s=2.0, timeout_s=120)
        live_vm = api.get(path) or {}
        live = children_of(api, namespace)
    finally:
        operator.stop()
        api.call("DELETE", f"/api/v1/namespaces/{namespace}", expect=(200, 202, 404))
        api.close()
    status = dict(live_vm.get("status") or {})
    if not status.get("phase"):
        raise CalibrationError(f"the Python operator wrote no status on the calibration VM: {live_vm}")
    run_strategy = next(
        (item["spec"].get("runStrategy") for (kind, _), item in live.items() if kind == "VirtualMachine"),
        None,
    )
    uid = str(live_vm["metadata"]["uid"])
    rendered = render_vm(CALIBRATION_NAME, namespace, manifest["spec"], run_strategy, uid=uid)
    for child in rendered:
        key = (child["kind"], child["metadata"]["name"])
        want = with_applied_hash(child)["metadata"]["annotations"][APPLIED_HASH_ANNOTATION]
        have = (
            ((live.get(key) or {}).get("metadata") or {}).get("annotations", {}).get(APPLIED_HASH_ANNOTATION)
        )
        if want != have:
            raise CalibrationError(f"{key}: re-rendered hash {want}, the operator applied {have}")
    if len(rendered) != len(live):
        raise CalibrationError(
            f"rendered {sorted(c['metadata']['name'] for c in rendered)}, live {sorted(live)}"
        )
    return {"run_strategy": run_strategy, "status": _status_template(status), "children": len(rendered)}


def _status_template(status: dict[str, Any]) -> dict[str, Any]:
    """The stored status with the per-VM values (name, generation, time) replaced by placeholders."""
    template = copy.deepcopy(status)
    template["observedGeneration"] = GENERATION_PLACEHOLDER
    for condition in template.get("conditions") or []:
        condition["observedGeneration"] = GENERATION_PLACEHOLDER
        condition["lastTransitionTime"] = NOW_PLACEHOLDER
    for key in PATCH_NULL_KEYS:
        template.setdefault(key, None)
    return template


def render_vm(
    name: str,
    namespace: str,
    raw_spec: dict[str, Any],
    run_strategy: str | None,
    *,
    uid: str = UID_PLACEHOLDER,
) -> list[dict[str, Any]]:
    """The children the Python renderer produces for one VM, in apply order."""
    from uds_vm_operator.api import parse_vm_spec  # noqa: PLC0415
    from uds_vm_operator.render import ClusterFacts, Owner, render_children  # noqa: PLC0415

    spec = parse_vm_spec(raw_spec)
    facts = ClusterFacts(cdi_http_checksum=True)
    return render_children(Owner(name, namespace, uid), spec, facts, run_strategy=run_strategy)


def write_rendered(
    directory: Path, namespace: str, names: list[str], vm_manifest: Any, calibration: dict[str, Any]
) -> Path:
    """Write ``directory/<name>.json`` (children + status template) for every fleet VM; returns it."""
    directory.mkdir(parents=True, exist_ok=True)
    status_text = json.dumps(calibration["status"])
    for name in names:
        raw_spec = vm_manifest(name, namespace)["spec"]
        children = render_vm(name, namespace, raw_spec, calibration["run_strategy"])
        status = json.loads(status_text.replace(CALIBRATION_NAME, name))
        (directory / f"{name}.json").write_text(json.dumps({"children": children, "status": status}))
    return directory
