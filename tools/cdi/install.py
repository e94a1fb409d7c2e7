"""Install the real CDI on the real node the way sites do: cdi-operator plus a `CDI` resource (ADR 0007).

Steps, each idempotent so `make cdi-up` can run again on a live cluster:
1. build (or reuse) CDI's binaries and images, and push the images into the node's loopback registry;
2. render cdi-operator's own resources with CDI's manifest-generator (our image references) and apply them
   server-side, in the `cdi` namespace;
3. hand CDI's own CRDs over to the operator: the test control plane pre-installs them (tools/envtest, with
   the field manager `uds-envtest`), and cdi-operator refuses to deploy while any resource it would create
   already exists ("Orphan object exists"), so a fresh install deletes those copies first;
4. apply the `CDI` resource whose `spec.config` is what the tests rely on (filesystem overhead, pull policy);
5. wait, bounded, until the operator reports the `CDI` resource `Deployed` and the three Deployments it
   created (controller, apiserver, uploadproxy) are available.

`--down` (`make cdi-down`) undoes it the way a site uninstalls CDI: delete the `CDI` resource (cdi-operator
removes what it deployed, workloads included: `uninstallStrategy: RemoveWorkloads`), then cdi-operator's own
resources; finally the plane gets its copies of CDI's CRDs back, so the cluster is the one the played tier
knows (a DataVolume is stored, and nothing reconciles it).
"""

from __future__ import annotations

import argparse
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from lightkube import ApiError, Client, KubeConfig, codecs
from lightkube.generic_resource import create_global_resource
from lightkube.resources.admissionregistration_v1 import (
    MutatingWebhookConfiguration,
    ValidatingWebhookConfiguration,
)
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.apiregistration_v1 import APIService
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Namespace, Pod

from tools.envtest import controlplane
from tools.envtest.fetch_crds import ensure_crds
from tools.envtest.pinned_versions import read_versions_env
from tools.laps import Laps

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

NAMESPACE = "cdi"
FIELD_MANAGER = "uds-vm-operator-cdi-up"
# The share of a Filesystem volume CDI keeps free; SPEC §4's sizing assumes CDI's default of 6 %.
FILESYSTEM_OVERHEAD = "0.06"
# The node tier's static local PVs (tools/node); CDI's scratch claims (HTTP imports) ask for this class too.
SCRATCH_STORAGE_CLASS = "udsvm-local"
COMPONENTS = ("cdi-deployment", "cdi-apiserver", "cdi-uploadproxy")
# The field manager the test control plane installs upstream CRDs with (tools/envtest/controlplane.py).
PREINSTALLED_BY = "uds-envtest"
CDI_GROUP_SUFFIX = "cdi.kubevirt.io"
OPERATOR_CRD = "cdis.cdi.kubevirt.io"
CDI_KIND = create_global_resource("cdi.kubevirt.io", "v1beta1", "CDI", "cdis")


def image_refs(registry: str, version: str) -> dict[str, str]:
    """The image reference of every CDI component, as the node's containerd pulls it from our registry."""
    names = ("operator", "controller", "apiserver", "uploadproxy", "importer", "uploadserver", "cloner")
    return {name: f"{registry}/uds-vm-operator/cdi-{name}:{version}" for name in names}


def generator_argv(generator: Path, registry: str, version: str) -> list[str]:
    """Arguments for CDI's manifest-generator: the operator's CRD, RBAC and Deployment with our images.

    CDI insists on an oVirt populator image; no oVirt import runs here, so it gets the importer's image.
    """
    refs = image_refs(registry, version)
    return [
        str(generator),
        "--resource-type=operator",
        "--resource-group=everything",
        f"--namespace={NAMESPACE}",
        f"--operator-version={version}",
        "--deploy-cluster-resources=true",
        "--pull-policy=IfNotPresent",
        "--verbosity=1",
        f"--operator-image={refs['operator']}",
        f"--controller-image={refs['controller']}",
        f"--importer-image={refs['importer']}",
        f"--cloner-image={refs['cloner']}",
        f"--ovirt-populator-image={refs['importer']}",
        f"--apiserver-image={refs['apiserver']}",
        f"--uploadproxy-image={refs['uploadproxy']}",
        f"--uploadserver-image={refs['uploadserver']}",
    ]


def cdi_resource() -> dict[str, Any]:
    """The `CDI` resource cdi-operator reconciles; its `spec.config` becomes the cluster's CDIConfig."""
    return {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "CDI",
        "metadata": {"name": "cdi"},
        "spec": {
            "imagePullPolicy": "IfNotPresent",
            "config": {
                "filesystemOverhead": {"global": FILESYSTEM_OVERHEAD},
                "scratchSpaceStorageClass": SCRATCH_STORAGE_CLASS,
            },
            # No workload survives an uninstall in a test cluster; keep `make cdi-down` simple.
            "uninstallStrategy": "RemoveWorkloads",
        },
    }


def namespace_resource() -> dict[str, Any]:
    """The `cdi` namespace; CDI's worker pods run in the workloads' namespaces, not here."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": NAMESPACE, "labels": {"cdi.kubevirt.io": ""}},
    }


def _run(argv: Sequence[str]) -> str:
    done = subprocess.run(list(argv), check=True, capture_output=True, text=True)
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


def _rendered_operator(generator: Path, registry: str, version: str) -> list[dict[str, Any]]:
    text = subprocess.run(
        generator_argv(generator, registry, version), check=True, capture_output=True, text=True
    ).stdout
    return [doc for doc in yaml.safe_load_all(text) if doc]


def _apply(client: Client, documents: Sequence[dict[str, Any]]) -> None:
    for doc in documents:
        obj = codecs.from_dict(doc)
        client.apply(obj, field_manager=FIELD_MANAGER, force=True)


def _cdi_state(client: Client) -> tuple[str, str]:
    obj = client.get(CDI_KIND, name="cdi")  # a lightkube Generic is a dict
    status = dict(obj.get("status") or {})
    phase = str(status.get("phase", ""))
    messages = [
        f"{c.get('type')}={c.get('status')}: {c.get('message', '')}" for c in status.get("conditions", [])
    ]
    return phase, "; ".join(messages)


def _available(client: Client, name: str) -> bool:
    try:
        dep = client.get(Deployment, name=name, namespace=NAMESPACE)
    except ApiError:
        return False
    status = dep.status
    return bool(status and status.availableReplicas and status.availableReplicas >= 1)


def preinstalled_cdi_crds(crds: Sequence[Any]) -> list[str]:
    """CDI CRDs that only the test control plane wrote: cdi-operator would call them orphans and stall.

    The `CDI` CRD itself comes with the operator's own manifests and stays. A CRD any other manager has
    written to (cdi-operator after a first install, or a site's installer) is never touched.
    """
    names = []
    for crd in crds:
        meta = crd.metadata
        name = str(meta.name)
        if name == OPERATOR_CRD or not str(crd.spec.group).endswith(CDI_GROUP_SUFFIX):
            continue
        managers = {entry.manager for entry in meta.managedFields or []} - {"kube-apiserver"}
        if managers == {PREINSTALLED_BY}:
            names.append(name)
    return sorted(names)


def _fresh_install(client: Client) -> bool:
    try:
        obj = client.get(CDI_KIND, name="cdi")
    except ApiError as error:
        if error.status.code == 404:
            return True
        raise
    return not (obj.get("status") or {}).get("phase")


def hand_over_crds(client: Client, timeout_s: float = 120.0) -> list[str]:
    """Delete the plane's copies of CDI's CRDs before a fresh install, so cdi-operator creates its own."""
    if not _fresh_install(client):
        return []
    names = preinstalled_cdi_crds(list(client.list(CustomResourceDefinition)))
    for name in names:
        client.delete(CustomResourceDefinition, name=name)
    deadline = time.monotonic() + timeout_s
    left = list(names)
    while left and time.monotonic() < deadline:
        present = {str(crd.metadata.name) for crd in client.list(CustomResourceDefinition)}
        left = [name for name in names if name in present]
        if left:
            time.sleep(1)
    if left:
        raise SystemExit(f"CDI CRDs still terminating after {timeout_s:.0f} s: {left}")
    return names


def wait_deployed(client: Client, timeout_s: float) -> None:
    """Wait until the operator says `Deployed` and CDI's Deployments serve; say what is missing otherwise."""
    deadline = time.monotonic() + timeout_s
    phase, detail, missing = "", "", list(COMPONENTS)
    while time.monotonic() < deadline:
        phase, detail = _cdi_state(client)
        missing = [name for name in COMPONENTS if not _available(client, name)]
        if phase == "Deployed" and not missing:
            return
        time.sleep(3)
    raise SystemExit(
        f"CDI not ready after {timeout_s:.0f} s: phase={phase!r} ({detail}); unavailable: {missing}"
    )


def _gone(client: Client, kind: Any, name: str, namespace: str | None, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            client.get(kind, name=name, namespace=namespace)
        except ApiError as error:
            if error.status.code == 404:
                return True
            raise
        time.sleep(1)
    return False


PODS_END_S = 60.0
"""How long the uninstall waits for CDI's pods to end before it deletes their namespace anyway."""


def _pods_ended(client: Client, namespace: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        running = [
            pod
            for pod in client.list(Pod, namespace=namespace)
            if pod.status is None or pod.status.phase not in ("Succeeded", "Failed")
        ]
        if not running:
            return True
        time.sleep(1)
    return False


def _delete(client: Client, kind: Any, name: str, namespace: str | None = None) -> None:
    try:
        client.delete(kind, name=name, namespace=namespace)
    except ApiError as error:
        if error.status.code != 404:
            raise


def is_cdi_hook(kind: str, item: Mapping[str, Any]) -> bool:
    """CDI's admission webhooks (``cdi-api-...``) and aggregated APIs (``v1beta1.upload.cdi.kubevirt.io``):
    left behind, they point at deleted Services and break every later request for their resources.

    Only an APIService with a ``spec.service`` is CDI's: the API server registers a local one for each CRD
    group version itself (``v1beta1.cdi.kubevirt.io``), and those stay with the plane's CRDs. The teardown
    check of the node tier asks this same question, so the two cannot drift apart.
    """
    name = str(item["metadata"]["name"])
    if kind == "APIService":
        served_by_a_service = (item.get("spec") or {}).get("service") is not None
        return served_by_a_service and name.endswith("." + CDI_GROUP_SUFFIX)
    return name.startswith("cdi-")


def plane_cdi_crds() -> list[dict[str, Any]]:
    """The CDI CRDs as the test control plane installs them (the cached upstream copies)."""
    return [
        doc
        for doc in controlplane.load_crd_documents([ensure_crds()])
        if str(doc["spec"]["group"]).endswith(CDI_GROUP_SUFFIX)
    ]


def uninstall(
    client: Client, state_dir: Path, operator_documents: Sequence[dict[str, Any]], timeout_s: float
) -> str:
    """`make cdi-down`: CDI removed by its own operator, then the operator, then the plane's CRDs back.

    Returns the seconds each step took, so a slow teardown in a CI log says which step was slow."""
    laps = Laps()
    _delete(client, CDI_KIND, "cdi")
    if not _gone(client, CDI_KIND, "cdi", None, timeout_s):
        raise SystemExit(
            f"the CDI resource is still there after {timeout_s:.0f} s (cdi-operator's finalizer)"
        )
    laps.lap("CDI resource")
    for doc in reversed(operator_documents):
        obj = codecs.from_dict(doc)
        _delete(client, type(obj), str(obj.metadata.name), obj.metadata.namespace)
    # A webhook or aggregated API left pointing at a deleted Service would break every later request for
    # DataVolumes (and namespace deletion, through discovery): whatever the operator did not remove goes here.
    for kind in (ValidatingWebhookConfiguration, MutatingWebhookConfiguration, APIService):
        for obj in client.list(kind):
            if is_cdi_hook(kind.__name__, obj.to_dict()):
                _delete(client, kind, str(obj.metadata.name))
    # The namespace goes once its pods have ended, and they are ended at once: CDI's servers outlast SIGTERM
    # until their 30 s grace period runs out (measured), and the namespace controller, finding a pod still
    # running, waits out that whole period before it looks again (the namespace took 38 s). cdi-operator
    # sometimes drops its finalizer before it has removed every Deployment (seen: cdi-apiserver and
    # cdi-uploadproxy left running), so what is left goes here; should a pod outlast PODS_END_S, the
    # namespace's deletion still ends it. This is a test installation's teardown: nothing in it is kept.
    client.deletecollection(Deployment, namespace=NAMESPACE)
    client.deletecollection(Pod, namespace=NAMESPACE, grace_period=1)
    _pods_ended(client, NAMESPACE, min(timeout_s, PODS_END_S))
    laps.lap("operator, hooks, pods")
    _delete(client, Namespace, NAMESPACE)
    # CRDs cdi-operator created for itself go too: the plane's copies carry only the plane's field manager.
    crds = plane_cdi_crds()
    names = [str(doc["metadata"]["name"]) for doc in crds]
    for name in names:
        _delete(client, CustomResourceDefinition, name)
    for name in names:
        if not _gone(client, CustomResourceDefinition, name, None, timeout_s):
            raise SystemExit(f"CRD {name} still terminating after {timeout_s:.0f} s")
    laps.lap("CRDs")
    if not _gone(client, Namespace, NAMESPACE, None, timeout_s):
        raise SystemExit(f"namespace {NAMESPACE} still terminating after {timeout_s:.0f} s")
    laps.lap("namespace")
    plane = controlplane.attach(state_dir)
    if plane is None:
        raise SystemExit(f"no control plane recorded in {state_dir}")
    controlplane.install_crds(plane, crds)
    laps.lap("the plane's CRDs")
    return laps.summary()


def main(argv: Sequence[str] | None = None) -> int:
    """`make cdi-up`: push CDI's images, install cdi-operator and a CDI resource, wait until CDI serves."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--state-dir", type=Path, default=ROOT / ".envtest")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--down", action="store_true", help="uninstall CDI; give the plane its CRDs back")
    args = parser.parse_args(argv)
    version = read_versions_env()["CDI_VERSION"]
    registry = (args.state_dir / "registry").read_text().strip()
    bin_dir = Path(_run([str(HERE / "build.sh")]))
    client = Client(KubeConfig.from_file(args.state_dir / "kubeconfig"), field_manager=FIELD_MANAGER)
    if args.down:
        start = time.monotonic()
        operator = _rendered_operator(bin_dir / "manifest-generator", registry, version)
        steps = uninstall(client, args.state_dir, operator, args.timeout)
        print(
            f"CDI {version} uninstalled in {time.monotonic() - start:.0f} s ({steps}); "
            "the plane's CDI CRDs are back"
        )
        return 0
    _run([str(HERE / "images.sh"), "--push", registry])
    _apply(client, [namespace_resource()])
    handed = hand_over_crds(client)
    if handed:
        print(f"handed CDI's CRDs to cdi-operator (removed the plane's copies: {', '.join(handed)})")
    _apply(client, _rendered_operator(bin_dir / "manifest-generator", registry, version))
    _apply(client, [cdi_resource()])
    start = time.monotonic()
    wait_deployed(client, args.timeout)
    print(f"CDI {version} deployed by cdi-operator in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
