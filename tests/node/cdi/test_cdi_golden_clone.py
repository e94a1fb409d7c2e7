"""Issue 15 item 6: golden images for real. A golden DataVolume and a DataSource live in a namespace
set up by `uds-vmctl golden-image rbac`; a consumer UDSVirtualMachine in another namespace clones from that
DataSource, CDI clones it host-assisted (this node has no CSI driver, so no snapshot or CSI clone), the
clone's bytes are the golden image's, and the consumer identity is refused every write by the real
authorizer, while CDI's own webhook admits its clone only because of the `datavolumes/source` grant.

What CDI v1.65.0 does here, read from its code:
- `udsvm-local` is `kubernetes.io/no-provisioner`, for which no CSIDriver exists, so the DataVolume
  controller does not use volume populators (`shouldUseCDIPopulator`, pkg/controller/datavolume/
  controller-base.go) and takes the legacy host-assisted path: the target claim `<vm>-dv` carries
  `k8s.io/CloneRequest: <golden ns>/<pvc>` and the DataVolume `cdi.kubevirt.io/cloneType: copy`
  (`fallbackToHostAssisted`, pvc-clone-controller.go).
- Claims: only the target. A clone target gets no scratch claim (`createScratchPvcNameFromPvc` returns ""
  for clone targets, pkg/controller/upload-controller.go), and the legacy path makes no temporary claim
  (that is the populator path's `tmp-pvc-...`).
- Pods: an upload server `cdi-upload-<vm>-dv` (plus its Service) in the consumer namespace mounting the
  target (upload-controller.go), and a `cdi-cloner` source pod `<target claim uid>-source-pod` in the golden
  namespace mounting the golden PVC read-only (pkg/controller/clone-controller.go,
  `MakeCloneSourcePodSpec`). The source pod is only created once the golden PVC is populated and no other pod
  uses it (CloneSourceInUse, retried every 2 s by CDI).
- Without a declared size (`spec.storage`, no request) CDI first runs a pod `size-detection-<golden pvc
  uid>` (importer image) in the golden namespace and sizes the target itself (`detectCloneSize`,
  pvc-clone-controller.go); the target claim appears only after it.
- The cross-namespace grant is checked at admission: CDI's mutating webhook sends a SubjectAccessReview for
  `create datavolumes/source` in the source namespace for the requesting user and only then adds the clone
  token (`AuthorizeUser`, staging/.../core/v1beta1/authorize.go; pkg/apiserver/webhooks/datavolume-mutate.go).
  The operator runs as the admin here, so the consumer identity's grant is proven by a dry-run create.

What the operator claims for a clone depends on the declaration. Without `spec.source.dataSource.checksum`
verification is `not-declared` (controller/verification.py): `checksumVerified: false`, condition
`ChecksumVerified` reason `NoChecksumDeclared`, no verifier pod, the VM not held for a digest; the test
itself proves the bytes. With the golden image's raw-content digest declared (what `uds-vmctl prep
--golden-image` writes), the operator's verifier pod, running the image built in this run, hashes the real
clone on the node: the right digest releases the VM (`verifiedBy: in-cluster-verifier`), a digest of other
content fails it with `ChecksumMismatch` and the VM never runs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.integration.operator_harness import Api, OperatorProcess
from tests.kube_helpers import access_review
from tests.node.cdi_support import (
    CDI_API,
    MIB,
    RESTRICTED,
    UDSVM_API,
    DiskImage,
    apply_golden_image_rbac,
    await_import,
    bridge_image_server,
    claim_request,
    datavolume,
    diagnose,
    disk_size_on,
    dv_condition,
    landed_bytes,
    make_image,
    offer_volume,
    running_operator,
    vm_status,
)
from tests.node.node_cluster import NodeHandle, wait_until
from tools.envtest import controlplane
from uds_vm_operator.apiversions import CDI_API_VERSION
from uds_vm_operator.controller.verification import VERIFICATION_ANNOTATION
from uds_vm_operator.render.datavolume import BIND_IMMEDIATE_ANNOTATION, exact_pvc
from uds_vm_operator.render.goldenimage import data_source
from uds_vm_operator.render.verifier import verifier_pod_name
from uds_vm_operator.sizing import pvc_mib, pvc_size

VIRTUAL_SIZE = 16 * MIB
GOLDEN = "debian-golden"  # the golden DataVolume, its PVC and the DataSource share this name
CLASS = "udsvm-local"
CDI_GROUP = "cdi.kubevirt.io"
PVC_SIZE = pvc_size(VIRTUAL_SIZE)
HOST_ASSISTED = "copy"  # CDI's CloneStrategyHostAssisted
CLONE_TYPE = "cdi.kubevirt.io/cloneType"
CLONE_TOKEN = "cdi.kubevirt.io/storage.clone.token"
CLONE_REQUEST = "k8s.io/CloneRequest"
CLONE_OF = "k8s.io/CloneOf"
SOURCE_POD = "cdi.kubevirt.io/storage.sourceClonePodName"
# What CDI's size-detection pod found, kept on the source claim (spelled so upstream: pvc-clone-controller.go)
DETECTED_SIZE = "cdi.Kubervirt.io/virtualSize"
UPLOAD_POD = "cdi.kubevirt.io/storage.uploadPodName"
INSUFFICIENT = "insufficient permissions in clone source namespace"  # CDI's webhook, authorize_utils.go
CLONE_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Golden:
    """The protected namespace with an imported golden image, and the consumer namespace allowed to clone."""

    namespace: str
    consumer: str
    image: DiskImage
    volume: Any


# ------------------------------------------------------------------------------------------------ helpers


def golden_datavolume(namespace: str, url: str, digest: str) -> dict[str, Any]:
    """The golden image's DataVolume: an HTTP import with CDI's own checksum, sized exactly by SPEC §4."""
    return {
        "apiVersion": CDI_API_VERSION,
        "kind": "DataVolume",
        "metadata": {
            "name": GOLDEN,
            "namespace": namespace,
            "annotations": {BIND_IMMEDIATE_ANNOTATION: "true"},
        },
        "spec": {
            "source": {"http": {"url": url, "checksum": digest}},
            "pvc": exact_pvc(PVC_SIZE, ["ReadWriteOnce"], "Filesystem", CLASS),
        },
    }


def consumer_udsvm(
    golden: Golden, name: str, disk: dict[str, Any], checksum: str | None = None, kind: str = "dataSource"
) -> dict[str, Any]:
    """A UDSVirtualMachine cloning the golden DataSource (as `uds-vmctl prep --golden-image` writes it, there
    with the content digest as `checksum`), or with kind "pvc" the golden claim itself, held Halted so
    nothing tries to boot it on this node."""
    clone = {"name": GOLDEN, "namespace": golden.namespace}
    if checksum is not None:
        clone["checksum"] = checksum
    return {
        "apiVersion": "uds.dev/v1alpha1",
        "kind": "UDSVirtualMachine",
        "metadata": {"name": name, "namespace": golden.consumer},
        "spec": {
            "source": {kind: clone},
            "disk": {"storageClassName": CLASS, **disk},
            "runStrategy": "Halted",
        },
    }


def claim(node: NodeHandle, namespace: str, name: str) -> dict[str, Any]:
    pvc = node.api.get(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}")
    assert pvc is not None, f"claim {namespace}/{name} is gone"
    return dict(pvc)


def marked_cloned(node: NodeHandle, namespace: str, name: str) -> dict[str, Any]:
    """The target claim once CDI's clone controller has marked it `k8s.io/CloneOf: "true"`.

    Bounded wait, not a read: the DataVolume controller turns the DataVolume Succeeded from the upload pod's
    phase, while the clone controller adds CloneOf only once it also sees the source pod finished
    (`updatePvcFromPod`, pkg/controller/clone-controller.go), so the DataVolume may be Succeeded first
    (seen in a cold CI run).
    """

    def marked() -> dict[str, Any] | None:
        pvc = claim(node, namespace, name)
        return pvc if (pvc["metadata"].get("annotations") or {}).get(CLONE_OF) == "true" else None

    return wait_until(f"CDI's clone controller to mark {namespace}/{name} CloneOf", marked, 60)


def claim_names(node: NodeHandle, namespace: str) -> set[str]:
    return {
        p["metadata"]["name"]
        for p in node.api.items(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims")
    }


def data_source_ready(node: NodeHandle, namespace: str) -> dict[str, Any] | None:
    ds = node.api.get(f"{CDI_API}/namespaces/{namespace}/datasources/{GOLDEN}") or {}
    return ds if dv_condition(ds, "Ready").get("status") == "True" else None


def await_clone(
    node: NodeHandle, golden: Golden, dv_name: str
) -> tuple[Any, dict[str, Any], dict[str, set[str]]]:
    """Give CDI's target claim a real volume of exactly its request and wait, bounded, until the clone ends.

    Returns (target volume, DataVolume, names of the pods seen in each namespace while waiting). No other
    claim is offered: a host-assisted clone target has no scratch claim (see the module docstring), so one
    asked for would leave this wait to time out and show it in the diagnosis.
    """
    target = offer_volume(node, golden.consumer, dv_name)
    seen: dict[str, set[str]] = {golden.namespace: set(), golden.consumer: set()}

    def finished() -> dict[str, Any] | None:
        for namespace, names in seen.items():
            names.update(
                p["metadata"]["name"] for p in node.api.items(f"/api/v1/namespaces/{namespace}/pods")
            )
        dv = datavolume(node, golden.consumer, dv_name) or {}
        return dv if (dv.get("status") or {}).get("phase") in ("Succeeded", "Failed") else None

    try:
        dv = wait_until(f"CDI to finish cloning into {dv_name}", finished, CLONE_TIMEOUT_S, 1.0)
    except AssertionError as error:
        detail = "\n".join(f"--- {ns} ---\n{diagnose(node, ns)}" for ns in seen)
        raise AssertionError(f"{error}\npods seen: {seen}\n{detail}") from None
    print(f"pods seen during the clone of {dv_name}: {json.dumps({k: sorted(v) for k, v in seen.items()})}")
    return target, dv, seen


def status_in(
    node: NodeHandle, namespace: str, name: str, phases: tuple[str, ...], timeout_s: float
) -> dict[str, Any]:
    """The operator's status once its phase is one of `phases` (bounded; on timeout, the namespace's pods)."""

    def reached() -> dict[str, Any] | None:
        status = vm_status(node, namespace, name)
        return status if status.get("phase") in phases else None

    try:
        return wait_until(f"{name} in phase {'/'.join(phases)}", reached, timeout_s)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{diagnose(node, namespace)}") from None


def stopped_status(node: NodeHandle, namespace: str, name: str) -> dict[str, Any]:
    """The operator's status once it derived it from the finished clone (Halted, disk ready: Stopped)."""
    return status_in(node, namespace, name, ("Stopped",), 90)


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((dict(c) for c in status.get("conditions") or [] if c.get("type") == kind), {})


def identity_api(node: NodeHandle, user: str, groups: tuple[str, ...]) -> Api:
    """A JSON client that is `user` in `groups` as far as the authorizer can tell (a client certificate)."""
    plane = controlplane.attach(node.state_dir)
    assert plane is not None, f"no control plane recorded in {node.state_dir}"
    return Api(plane.kubeconfig_for(user, groups))


def consumer_identity(namespace: str) -> tuple[str, tuple[str, ...]]:
    """What a service-account token of `namespace` resolves to (so only RBAC bindings grant it anything)."""
    return (
        f"system:serviceaccount:{namespace}:default",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"),
    )


def allowed(api: Api, namespace: str, verb: str, resource: str, *, group: str, subresource: str = "") -> bool:
    review = access_review(namespace, verb, resource, group=group, subresource=subresource)
    _, payload = api.call("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review)
    return bool((payload.get("status") or {}).get("allowed"))


# ----------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def golden(cdi: NodeHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Golden]:
    """The golden namespace (protected by the CLI's RBAC) holding an imported, CDI-checksummed image and its
    DataSource, and the consumer namespace. Shared by the module: one import serves every test."""
    consumer = cdi.namespace("cdi-clone", RESTRICTED)
    image_ns = cdi.namespace("golden", RESTRICTED)
    try:
        apply_golden_image_rbac(cdi, image_ns, consumer)
        served = tmp_path_factory.mktemp("golden-srv")
        image = make_image(served, "qcow2", VIRTUAL_SIZE)  # qcow2: CDI converts, so the raw content differs
        digest = "sha256:" + image.served_sha256
        with bridge_image_server(served) as (base, _):
            cdi.create(
                golden_datavolume(image_ns, f"{base}/{image.path.name}", digest),
                f"{CDI_API}/namespaces/{image_ns}/datavolumes",
            )
            volume, dv = await_import(cdi, image_ns, GOLDEN)
        assert dv["status"]["phase"] == "Succeeded", (
            f"golden import: {dv['status']}\n{diagnose(cdi, image_ns)}"
        )
        assert landed_bytes(volume, VIRTUAL_SIZE) == image.raw, (
            "the golden disk holds the image's raw content"
        )
        cdi.create(data_source(GOLDEN, image_ns, GOLDEN), f"{CDI_API}/namespaces/{image_ns}/datasources")
        wait_until("the golden DataSource Ready", lambda: data_source_ready(cdi, image_ns), 60)
        yield Golden(image_ns, consumer, image, volume)
    finally:
        for name in (consumer, image_ns):
            cdi.delete_namespace(name)


@pytest.fixture(scope="module")
def operator(
    cdi: NodeHandle, golden: Golden, operator_image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """The operator as a host process; its verifier pods run the image built in this run, on the node."""
    logs = tmp_path_factory.mktemp("operator-logs")
    with running_operator(cdi, golden.consumer, logs, operator_image) as process:
        yield process


# -------------------------------------------------------------------------------------------------- tests


def test_a_consumer_vm_is_cloned_host_assisted_and_gets_the_golden_bytes(
    cdi: NodeHandle, golden: Golden, operator: OperatorProcess
) -> None:
    vm, dv_name = "app", "app-dv"
    cdi.api.apply(
        consumer_udsvm(golden, vm, {"virtualSize": VIRTUAL_SIZE}),
        f"{UDSVM_API}/namespaces/{golden.consumer}/udsvirtualmachines/{vm}",
    )
    target, dv, seen = await_clone(cdi, golden, dv_name)
    assert dv["status"]["phase"] == "Succeeded", dv["status"]

    # What the operator rendered, as CDI stored it: a sourceRef across namespaces, the SPEC §4 size.
    assert dv["spec"]["sourceRef"] == {"kind": "DataSource", "name": GOLDEN, "namespace": golden.namespace}
    assert dv["spec"]["pvc"]["resources"]["requests"]["storage"] == PVC_SIZE
    annotations = dv["metadata"].get("annotations") or {}
    assert annotations.get(CLONE_TOKEN), "CDI's webhook authorized the cross-namespace clone (token added)"
    assert annotations.get(CLONE_TYPE) == HOST_ASSISTED, annotations

    # How CDI did it: host-assisted, one claim, a cloner pod in the golden namespace, an upload pod here.
    target_claim = marked_cloned(cdi, golden.consumer, dv_name)
    assert claim_request(target_claim) == pvc_mib(VIRTUAL_SIZE) * MIB, (
        "the target is exactly the SPEC §4 size"
    )
    claim_notes = target_claim["metadata"].get("annotations") or {}
    assert claim_notes.get(CLONE_REQUEST) == f"{golden.namespace}/{GOLDEN}", claim_notes
    assert claim_notes.get(CLONE_OF) == "true", claim_notes
    assert claim_notes.get(SOURCE_POD) == f"{target_claim['metadata']['uid']}-source-pod", claim_notes
    assert claim_notes.get(UPLOAD_POD) == f"cdi-upload-{dv_name}", claim_notes
    assert claim_names(cdi, golden.consumer) == {dv_name}, "no scratch or temporary claim for the clone"
    assert claim_names(cdi, golden.namespace) - {GOLDEN} <= {f"{GOLDEN}-scratch"}, "nothing new in golden"
    assert verifier_pod_name(vm) not in seen[golden.consumer], "no verifier runs for an undeclared digest"

    # The bytes: the clone holds exactly what the golden disk holds, which is the image's raw content.
    cloned = landed_bytes(target, VIRTUAL_SIZE)
    assert cloned == golden.image.raw, "the clone holds the golden image's raw content"
    assert landed_bytes(golden.volume, VIRTUAL_SIZE) == golden.image.raw, "the golden disk is unchanged"

    # What the operator says: the disk is ready and nothing was verified by it (no digest is declared).
    status = stopped_status(cdi, golden.consumer, vm)
    assert status["source"] == "dataSource" and status["pvcSize"] == PVC_SIZE, status
    assert status["checksumVerified"] is False and not status.get("verifiedBy"), status
    assert condition(status, "ChecksumVerified").get("reason") == "NoChecksumDeclared", status
    assert condition(status, "DiskReady").get("status") == "True", status
    assert data_source_ready(cdi, golden.namespace), "the golden DataSource still serves"


@pytest.mark.parametrize(
    ("declared", "vm", "kind"),
    [
        ("golden-content", "si7-golden", "dataSource"),
        ("other-content", "si7-other", "dataSource"),
        ("golden-content", "si7-pvc", "pvc"),  # a PVC-to-PVC clone: the same check, no DataSource between
    ],
)
def test_a_declared_content_digest_is_verified_on_the_real_clone_before_the_vm_may_run(
    cdi: NodeHandle, golden: Golden, operator: OperatorProcess, declared: str, vm: str, *, kind: str
) -> None:
    dv_name = f"{vm}-dv"
    right = "sha256:" + golden.image.raw_sha256
    other = "sha256:" + hashlib.sha256(golden.image.raw[:-1] + b"\x01").hexdigest()
    digest = right if declared == "golden-content" else other
    cdi.api.apply(
        consumer_udsvm(golden, vm, {"virtualSize": VIRTUAL_SIZE}, checksum=digest, kind=kind),
        f"{UDSVM_API}/namespaces/{golden.consumer}/udsvirtualmachines/{vm}",
    )
    target, dv, _ = await_clone(cdi, golden, dv_name)
    assert dv["status"]["phase"] == "Succeeded", dv["status"]
    if kind == "pvc":
        assert dv["spec"]["source"] == {"pvc": {"name": GOLDEN, "namespace": golden.namespace}}, dv["spec"]
    assert landed_bytes(target, VIRTUAL_SIZE) == golden.image.raw, "CDI cloned the golden bytes either way"
    assert "checksum" not in json.dumps(dv["spec"]), "CDI's clone source has no digest: the operator checks"

    status = status_in(cdi, golden.consumer, vm, ("Stopped", "Failed"), 180)  # the verdict is in
    dv_annotations = _annotations(cdi, golden.consumer, dv_name)
    verdict = json.loads(dv_annotations.get(VERIFICATION_ANNOTATION, "{}"))
    kubevirt_vm = cdi.api.get(f"/apis/kubevirt.io/v1/namespaces/{golden.consumer}/virtualmachines/{vm}")
    if declared == "golden-content":
        assert status["phase"] == "Stopped" and status["checksumVerified"] is True, status
        assert status["verifiedBy"] == "in-cluster-verifier" and status["verifiedDigest"] == right, status
        assert condition(status, "ChecksumVerified").get("reason") == "InClusterVerifier", status
        assert verdict == {"result": "match", "expected": right, "actual": right, "bytes": VIRTUAL_SIZE}
    else:
        assert status["phase"] == "Failed" and status["checksumVerified"] is False, status
        mismatch = condition(status, "ChecksumVerified")
        assert mismatch.get("reason") == "ChecksumMismatch", status
        assert other in mismatch["message"] and right in mismatch["message"], mismatch
        assert verdict["result"] == "mismatch" and verdict["actual"] == right, dv_annotations
        assert not status.get("verifiedBy"), status
    if kubevirt_vm is not None:
        assert kubevirt_vm["spec"]["runStrategy"] == "Halted", "never set to run on an unverified clone"
    wait_until(
        f"{vm}'s verifier pod removed",
        lambda: cdi.api.get(f"/api/v1/namespaces/{golden.consumer}/pods/{verifier_pod_name(vm)}") is None,
        60,
    )


def test_a_clone_that_names_no_size_is_sized_by_cdis_size_detection_pod(
    cdi: NodeHandle, golden: Golden, operator: OperatorProcess
) -> None:
    """No `disk.virtualSize`: the operator renders `spec.storage` with access modes and no request, and CDI's
    size-detection pod (qemu-img info on the golden disk, run from the importer image) sizes the target.

    The access modes are always rendered: CDI could only take them from the class's StorageProfile, which is
    empty for `kubernetes.io/no-provisioner` (`getDefaultAccessModes`, pkg/controller/datavolume/util.go).
    """
    vm, dv_name = "app-auto", "app-auto-dv"
    cdi.api.apply(
        consumer_udsvm(golden, vm, {}),
        f"{UDSVM_API}/namespaces/{golden.consumer}/udsvirtualmachines/{vm}",
    )
    target, dv, _ = await_clone(cdi, golden, dv_name)
    assert dv["status"]["phase"] == "Succeeded", dv["status"]
    assert "pvc" not in dv["spec"], dv["spec"]
    storage = dv["spec"]["storage"]
    assert storage["accessModes"] == ["ReadWriteOnce"], storage
    assert "storage" not in (storage.get("resources") or {}).get("requests", {}), "the operator named no size"
    assert dv["metadata"]["annotations"].get(CLONE_TYPE) == HOST_ASSISTED, dv["metadata"]
    # The golden disk's size as qemu-img reads it: CDI's import grew disk.img to the golden claim's space.
    golden_disk = disk_size_on(golden.volume)
    source_notes = claim(cdi, golden.namespace, GOLDEN)["metadata"].get("annotations") or {}
    assert source_notes.get(DETECTED_SIZE) == str(golden_disk), "the size-detection pod read the golden disk"
    request = claim_request(marked_cloned(cdi, golden.consumer, dv_name))
    assert request >= golden_disk, f"CDI sized the target at {request} bytes, under the golden {golden_disk}"
    print(f"CDI sized the size-less clone at {request} bytes (golden disk.img: {golden_disk} bytes)")
    assert landed_bytes(target, VIRTUAL_SIZE) == golden.image.raw, "the clone holds the golden bytes"
    status = stopped_status(cdi, golden.consumer, vm)
    assert status["checksumVerified"] is False, status
    assert condition(status, "DiskReady").get("status") == "True", status


def _annotations(node: NodeHandle, namespace: str, name: str) -> dict[str, str]:
    return dict(((datavolume(node, namespace, name) or {}).get("metadata") or {}).get("annotations") or {})


def test_the_consumer_is_refused_every_write_to_the_golden_image(cdi: NodeHandle, golden: Golden) -> None:
    user, groups = consumer_identity(golden.consumer)
    consumer = identity_api(cdi, user, groups)
    ns = golden.namespace
    paths = {
        "datavolume": f"{CDI_API}/namespaces/{ns}/datavolumes/{GOLDEN}",
        "claim": f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{GOLDEN}",
        "datasource": f"{CDI_API}/namespaces/{ns}/datasources/{GOLDEN}",
    }
    before: dict[str, dict[str, Any]] = {}
    for what, path in paths.items():
        current = cdi.api.get(path)
        assert current is not None, f"the golden {what} exists before the test"
        before[what] = current
    try:
        may_clone = allowed(consumer, ns, "create", "datavolumes", group=CDI_GROUP, subresource="source")
        assert may_clone, "the consumer may clone from the golden namespace"
        assert allowed(consumer, ns, "get", "datasources", group=CDI_GROUP), "may see what to clone"
        for what, path in paths.items():
            label = {"metadata": {"labels": {"stolen": "yes"}}}
            consumer.call("PATCH", path, label, content_type="application/merge-patch+json", expect=(403,))
            replaced = json.loads(json.dumps(before[what]))
            replaced["metadata"].setdefault("labels", {})["stolen"] = "yes"
            consumer.call("PUT", path, replaced, expect=(403,))
            consumer.call("DELETE", path, expect=(403,))
        repointed = data_source("stolen", ns, "elsewhere")
        consumer.call("POST", f"{CDI_API}/namespaces/{ns}/datasources", repointed, expect=(403,))
        blank = {
            "apiVersion": CDI_API_VERSION,
            "kind": "DataVolume",
            "metadata": {"name": "stolen", "namespace": ns},
            "spec": {
                "source": {"blank": {}},
                "pvc": exact_pvc("1Mi", ["ReadWriteOnce"], "Filesystem", CLASS),
            },
        }
        consumer.call("POST", f"{CDI_API}/namespaces/{ns}/datavolumes", blank, expect=(403,))
        consumer.call(
            "POST", f"/api/v1/namespaces/{ns}/pods", {"apiVersion": "v1", "kind": "Pod"}, expect=(403,)
        )
    finally:
        consumer.close()
    for what, path in paths.items():
        after = cdi.api.get(path) or {}
        assert after["metadata"]["uid"] == before[what]["metadata"]["uid"], f"{what} is the same object"
        assert "stolen" not in (after["metadata"].get("labels") or {}), f"{what} was not changed"
    assert landed_bytes(golden.volume, VIRTUAL_SIZE) == golden.image.raw, "the golden disk is unchanged"


def test_cdis_webhook_admits_a_clone_only_for_identities_granted_in_the_golden_namespace(
    cdi: NodeHandle, golden: Golden
) -> None:
    """Dry-run creates (CDI's webhooks declare no side effects, so they run): the consumer's clone request
    is admitted with a clone token; an identity that may create DataVolumes in the consumer namespace but
    holds no `datavolumes/source` grant in the golden namespace is refused by CDI's SubjectAccessReview."""
    consumer_user, consumer_groups = consumer_identity(golden.consumer)
    outsider_user, outsider_groups = consumer_identity("elsewhere")
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    cdi.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "dv-creator", "namespace": golden.consumer},
            "rules": [{"apiGroups": ["cdi.kubevirt.io"], "resources": ["datavolumes"], "verbs": ["create"]}],
        },
        f"{rbac}/namespaces/{golden.consumer}/roles",
    )
    cdi.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "dv-creator", "namespace": golden.consumer},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "dv-creator"},
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": consumer_user},
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": outsider_user},
            ],
        },
        f"{rbac}/namespaces/{golden.consumer}/rolebindings",
    )
    request = {
        "apiVersion": CDI_API_VERSION,
        "kind": "DataVolume",
        "metadata": {"name": "probe", "namespace": golden.consumer},
        "spec": {
            "sourceRef": {"kind": "DataSource", "name": GOLDEN, "namespace": golden.namespace},
            "pvc": exact_pvc(PVC_SIZE, ["ReadWriteOnce"], "Filesystem", CLASS),
        },
    }
    collection = f"{CDI_API}/namespaces/{golden.consumer}/datavolumes"
    params = {"dryRun": "All", "fieldValidation": "Strict", "fieldManager": "uds-node-tests"}
    consumer = identity_api(cdi, consumer_user, consumer_groups)
    outsider = identity_api(cdi, outsider_user, outsider_groups)
    try:
        # RBAC is eventually consistent only within the API server's own cache: bound the first attempt.
        def admit() -> dict[str, Any] | None:
            code, payload = consumer.call("POST", collection, request, params=params, expect=(201, 403))
            return dict(payload) if code == 201 else None

        # The golden RoleBinding was written when the module started; the authorizer's cache is bounded.
        admitted = wait_until("the consumer's dry-run clone admitted", admit, 30)
        assert (admitted["metadata"].get("annotations") or {}).get(CLONE_TOKEN), admitted["metadata"]
        _, refused = outsider.call("POST", collection, request, params=params, expect=(400, 403, 422))
        assert INSUFFICIENT in json.dumps(refused), refused
    finally:
        consumer.close()
        outsider.close()
    assert datavolume(cdi, golden.consumer, "probe") is None, "dry runs store nothing"
