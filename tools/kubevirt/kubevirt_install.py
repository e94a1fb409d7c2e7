"""Install the real KubeVirt (virt-api, virt-controller, virt-handler) on the node as virt-operator does.

The objects come from ``kubevirt-manifests`` (tools/kubevirt/manifests: virt-operator's own install strategy
and certificate code for the pinned tag); this script only chooses which of them the node runs, applies them
server-side in virt-operator's order (CRDs, RBAC, certificates, virt-api; once virt-api serves, its webhooks
and the ``v1.subresources.kubevirt.io`` APIService; then virt-controller; virt-handler, a DaemonSet on the
node, last) and waits until each answers.
Idempotent: the generated manifests (and so the certificates) are kept in ``<state>/kubevirt/install.json``
and re-applied unchanged on the next run.

Usage: python -m tools.kubevirt.kubevirt_install up --state-dir .envtest
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lightkube import ApiError, Client, KubeConfig, codecs
from lightkube.generic_resource import create_namespaced_resource
from lightkube.types import PatchType

from tools.envtest.pinned_versions import pinned_versions
from tools.node import node as node_launcher

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

NAMESPACE = "kubevirt"
FIELD_MANAGER = "uds-kubevirt-install"
READY_TIMEOUT_S = 300.0
KUBELET_DEVICE_PLUGINS = "/var/lib/kubelet/device-plugins"
KubeVirtCR = create_namespaced_resource("kubevirt.io", "v1", "KubeVirt", "kubevirts")

# Go strategy accessor -> (apiVersion, kind): the generator's objects do not all carry TypeMeta.
KINDS: dict[str, tuple[str, str]] = {
    "priorityClasses": ("scheduling.k8s.io/v1", "PriorityClass"),
    "crds": ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
    "serviceAccounts": ("v1", "ServiceAccount"),
    "clusterRoles": ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    "clusterRoleBindings": ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    "roles": ("rbac.authorization.k8s.io/v1", "Role"),
    "roleBindings": ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    "services": ("v1", "Service"),
    "configMaps": ("v1", "ConfigMap"),
    "certificateSecrets": ("v1", "Secret"),
    "validatingWebhookConfigurations": ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"),
    "mutatingWebhookConfigurations": ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"),
    "apiServices": ("apiregistration.k8s.io/v1", "APIService"),
    "apiDeployments": ("apps/v1", "Deployment"),
    "controllerDeployments": ("apps/v1", "Deployment"),
    "daemonSets": ("apps/v1", "DaemonSet"),
}
# What the node runs: virt-api, virt-controller and virt-handler (with its node labeller and device plugins).
# Left out (ADR 0008): virt-operator itself, its webhook and Service, the export proxy, the synchronization
# controller, Prometheus, and the launcher-pod mutating webhook (a feature gate).
SERVICES = ("virt-api",)
VALIDATING = ("virt-api-validator",)
MUTATING = ("virt-api-mutator",)
CONFIG_MAPS = ("kubevirt-ca",)


class InstallError(RuntimeError):
    """A step failed; the message names it and where to look."""


def _run(argv: Sequence[str]) -> str:
    result = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise InstallError(f"{argv[0]} failed: {result.stderr.strip()[-2000:]}")
    return result.stdout.strip()


def registry_of(state_dir: Path) -> str:
    """The node's loopback registry (tools/node writes it); KubeVirt's images are pushed there first."""
    path = state_dir / "registry"
    if not path.is_file():
        raise InstallError(f"{path} missing: the node is not up; run `make node-up` first")
    return path.read_text(encoding="utf-8").strip()


def generated_manifests(state_dir: Path, registry: str, version: str) -> dict[str, list[dict[str, Any]]]:
    """The install strategy for this registry and tag, generated once per state dir (stable certificates)."""
    cached = state_dir / "kubevirt" / "install.json"
    stamp = cached.with_suffix(".for")
    want = f"{registry} {version}"
    if cached.is_file() and stamp.is_file() and stamp.read_text(encoding="utf-8").strip() == want:
        loaded: dict[str, list[dict[str, Any]]] = json.loads(cached.read_text(encoding="utf-8"))
        return loaded
    bin_dir = Path(_run([str(HERE / "build.sh")]))
    text = _run(
        [str(bin_dir / "kubevirt-manifests"), "-namespace", NAMESPACE, "-registry", registry, "-tag", version]
    )
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(text, encoding="utf-8")
    cached.chmod(0o600)  # holds private keys
    stamp.write_text(want + "\n", encoding="utf-8")
    parsed: dict[str, list[dict[str, Any]]] = json.loads(text)
    return parsed


def _clean(group: str, obj: Mapping[str, Any]) -> dict[str, Any]:
    api_version, kind = KINDS[group]
    out = {key: value for key, value in obj.items() if key != "status"}
    out["apiVersion"], out["kind"] = api_version, kind
    metadata = {key: value for key, value in (out.get("metadata") or {}).items() if value is not None}
    out["metadata"] = metadata
    return out


def _named(objects: Iterable[Mapping[str, Any]], names: Sequence[str]) -> list[Mapping[str, Any]]:
    return [obj for obj in objects if (obj.get("metadata") or {}).get("name") in names]


def handler_daemonset(daemonset: dict[str, Any], host_dirs: Mapping[str, Path]) -> dict[str, Any]:
    """virt-handler's DaemonSet for this node: each hostPath volume KubeVirt points at /var/run or /var/lib is
    pointed at the node's own folder for it (``NodePaths.kubevirt_host_dirs``: the kubelet's root is not
    /var/lib/kubelet here, and node-down must find and remove all of it). Container paths stay KubeVirt's."""
    pod = daemonset["spec"]["template"]["spec"]
    for volume in pod.get("volumes") or []:
        host_path = volume.get("hostPath")
        if host_path and host_path.get("path") in host_dirs:
            host_path["path"] = str(host_dirs[host_path["path"]])
    kubelet_root = host_dirs.get("/var/lib/kubelet")
    if kubelet_root is not None and kubelet_root != Path("/var/lib/kubelet"):
        # The kubelet serves device plugins at a fixed host path whatever its root: the handler's kvm and tun
        # plugins must listen there, not under the node's kubelet root mounted at /var/lib/kubelet.
        pod["volumes"].append({"name": "device-plugins", "hostPath": {"path": KUBELET_DEVICE_PLUGINS}})
        handler = next(c for c in pod["containers"] if c["name"] == "virt-handler")
        handler["volumeMounts"].append({"name": "device-plugins", "mountPath": KUBELET_DEVICE_PLUGINS})
    return daemonset


def select(
    manifests: Mapping[str, list[dict[str, Any]]], host_dirs: Mapping[str, Path] | None = None
) -> list[list[dict[str, Any]]]:
    """The objects to apply, as ordered stages (a stage is applied whole before the next starts)."""

    def group(
        name: str, keep: Callable[[list[dict[str, Any]]], Iterable[Mapping[str, Any]]] = list
    ) -> list[dict[str, Any]]:
        return [_clean(name, obj) for obj in keep(manifests.get(name) or [])]

    def one_replica(deployments: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for deployment in deployments:
            deployment["spec"]["replicas"] = 1  # a 2-core test node; HA is not under test
        return deployments

    base = (
        group("priorityClasses")
        + group("crds")
        + group("serviceAccounts")
        + group("clusterRoles")
        + group("clusterRoleBindings")
        + group("roles")
        + group("roleBindings")
        + group("configMaps", lambda objs: _named(objs, CONFIG_MAPS))
        + group("certificateSecrets", lambda objs: [o for o in objs if o.get("data")])
        + group("services", lambda objs: _named(objs, SERVICES))
    )
    return [
        base,
        one_replica(group("apiDeployments")),
        group("validatingWebhookConfigurations", lambda objs: _named(objs, VALIDATING))
        + group("mutatingWebhookConfigurations", lambda objs: _named(objs, MUTATING))
        + group("apiServices"),
        one_replica(group("controllerDeployments")),
        [
            handler_daemonset(ds, host_dirs or {})
            for ds in group("daemonSets", lambda objs: _named(objs, ("virt-handler",)))
        ],
    ]


def kubevirt_cr() -> dict[str, Any]:
    """The KubeVirt CR virt-api, virt-controller and virt-handler read their configuration from; the node's
    /dev/kvm is PVM and runs no guest, so emulation is on (the operator's KVM guard reports it).

    The launcher pods get the container runtime's default seccomp profile: without it they violate the
    ``restricted`` Pod Security profile (measured: "seccompProfile (pod or containers "guest-console-log",
    "compute" must set ...)"), and VMs could not run in the restricted namespaces the demo and sites use."""
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "metadata": {"name": "kubevirt", "namespace": NAMESPACE},
        "spec": {
            "configuration": {
                "developerConfiguration": {"useEmulation": True},
                "seccompConfiguration": {
                    "virtualMachineInstanceProfile": {"customProfile": {"runtimeDefaultProfile": True}}
                },
            },
            "workloadUpdateStrategy": {},
        },
    }


def kubevirt_cr_status(version: str) -> dict[str, Any]:
    """The status virt-operator writes once it has deployed: virt-api and virt-controller take their cluster
    configuration (useEmulation among it) only from a KubeVirt CR whose status has a phase
    (virt-config's GetConfigFromKubeVirtCR), so without it they would run on built-in defaults.

    ``defaultArchitecture`` too: once the status has a phase, the cluster's default architecture is taken
    from it alone (virt-operator sets it to its own GOARCH). Left empty, every VMI virt-controller creates
    keeps an empty ``spec.architecture`` and virt-api's VMI create validator denies it ("unsupported
    architecture: "), so a released VM never gets a VMI (measured: the issue 16 life-cycle draft)."""
    return {
        "status": {
            "phase": "Deployed",
            "observedKubeVirtVersion": version,
            "targetKubeVirtVersion": version,
            "defaultArchitecture": go_arch(),
        }
    }


def go_arch() -> str:
    """This machine's architecture as Go (and so KubeVirt) names it; the node runs on this machine."""
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64", "s390x": "s390x"}.get(
        machine, machine
    )


def _apply(client: Client, obj: Mapping[str, Any]) -> None:
    """Server-side apply; Deployments are created or replaced instead, as virt-operator does: virt-api's
    container lists port 8443 twice (api and metrics), which server-side apply refuses as a duplicate key."""
    resource = KubeVirtCR.from_dict(dict(obj)) if obj["kind"] == "KubeVirt" else codecs.from_dict(dict(obj))
    metadata = obj["metadata"]
    if obj["kind"] == "Deployment":
        _create_or_replace(client, resource, metadata["name"], metadata["namespace"])
        return
    client._client.request(
        "patch",
        res=type(resource),
        name=metadata["name"],
        namespace=metadata.get("namespace"),
        obj=resource,
        headers={"Content-Type": PatchType.APPLY.value},
        params={"fieldManager": FIELD_MANAGER, "force": "true"},
    )


def _create_or_replace(client: Client, resource: Any, name: str, namespace: str) -> None:
    try:
        client.create(resource)
    except ApiError as error:
        if error.status.code != 409:
            raise
        current = client.get(type(resource), name, namespace=namespace)
        resource.metadata.resourceVersion = current.metadata.resourceVersion
        client.replace(resource)


def _wait(what: str, probe: Callable[[], bool], timeout_s: float = READY_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        if time.monotonic() >= deadline:
            raise InstallError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(1.0)


def _deployment_available(client: Client, name: str) -> bool:
    raw = client._client.request(
        "get", res=codecs.resource_registry.load("apps/v1", "Deployment"), name=name, namespace=NAMESPACE
    )
    conditions = (raw.status.conditions if raw.status else None) or []
    return any(c.type == "Available" and c.status == "True" for c in conditions)


def _daemonset_ready(client: Client, name: str) -> bool:
    raw = client._client.request(
        "get", res=codecs.resource_registry.load("apps/v1", "DaemonSet"), name=name, namespace=NAMESPACE
    )
    status = raw.status
    return bool(
        status and status.desiredNumberScheduled and status.numberReady == status.desiredNumberScheduled
    )


def _node_schedulable(client: Client) -> bool:
    """virt-handler's node labeller has run: every node carries ``kubevirt.io/schedulable=true``."""
    nodes = list(client.list(codecs.resource_registry.load("v1", "Node")))
    return bool(nodes) and all(
        (n.metadata.labels or {}).get("kubevirt.io/schedulable") == "true" for n in nodes
    )


def _crds_established(client: Client, names: Sequence[str]) -> bool:
    res = codecs.resource_registry.load("apiextensions.k8s.io/v1", "CustomResourceDefinition")
    for name in names:
        crd = client.get(res, name)
        conditions = (crd.status.conditions if crd.status else None) or []
        if not any(c.type == "Established" and c.status == "True" for c in conditions):
            return False
    return True


def _apiservice_available(client: Client, name: str) -> bool:
    res = codecs.resource_registry.load("apiregistration.k8s.io/v1", "APIService")
    service = client.get(res, name)
    conditions = (service.status.conditions if service.status else None) or []
    return any(c.type == "Available" and c.status == "True" for c in conditions)


def up(state_dir: Path, version: str) -> dict[str, float]:
    """Apply everything and wait for virt-api (webhooks, subresources), virt-controller and virt-handler (its
    node labelled schedulable); return timings."""
    timings: dict[str, float] = {}
    started = time.monotonic()
    registry = registry_of(state_dir)
    manifests = generated_manifests(state_dir, registry, version)
    client = Client(
        config=KubeConfig.from_file(str(state_dir / "kubeconfig")),
        field_manager=FIELD_MANAGER,
        trust_env=False,
    )
    _apply(client, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    stages = select(manifests, node_launcher.paths_for(state_dir).kubevirt_host_dirs)
    for obj in stages[0]:
        _apply(client, obj)
    crds = [obj["metadata"]["name"] for obj in stages[0] if obj["kind"] == "CustomResourceDefinition"]
    _wait("KubeVirt's CRDs to be established", lambda: _crds_established(client, crds), 60.0)
    _apply(client, kubevirt_cr())
    client._client.request(
        "patch",
        res=KubeVirtCR.Status,
        name="kubevirt",
        namespace=NAMESPACE,
        obj=kubevirt_cr_status(version),
        headers={"Content-Type": PatchType.MERGE.value},
    )
    timings["objects"] = time.monotonic() - started
    for obj in stages[1]:
        _apply(client, obj)
    _wait(
        "virt-api to become Available (see `kubectl -n kubevirt get pods`)",
        lambda: _deployment_available(client, "virt-api"),
    )
    timings["virt-api"] = time.monotonic() - started
    for obj in stages[2]:
        _apply(client, obj)
    names = [obj["metadata"]["name"] for obj in stages[2] if obj["kind"] == "APIService"]
    _wait(
        "the subresources.kubevirt.io APIService",
        lambda: all(_apiservice_available(client, n) for n in names),
    )
    for obj in stages[3]:
        _apply(client, obj)
    _wait("virt-controller to become Available", lambda: _deployment_available(client, "virt-controller"))
    timings["virt-controller"] = time.monotonic() - started
    for obj in stages[4]:
        _apply(client, obj)
    _wait(
        "virt-handler to become Ready (see `kubectl -n kubevirt logs ds/virt-handler`)",
        lambda: _daemonset_ready(client, "virt-handler"),
        READY_TIMEOUT_S * 2,
    )
    _wait("virt-handler's node labeller to mark the node schedulable", lambda: _node_schedulable(client))
    timings["virt-handler"] = time.monotonic() - started
    return timings


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: ``up``; prints the timings as JSON, or one line saying what failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("action", choices=["up"])
    parser.add_argument("--state-dir", type=Path, default=ROOT / ".envtest")
    args = parser.parse_args(argv)
    try:
        timings = up(args.state_dir.resolve(), pinned_versions().kubevirt)
    except (InstallError, ApiError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(json.dumps({key: round(value, 1) for key, value in timings.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
