"""Read the live objects the validations need (the only module here that talks to the API server).

Objects are listed per API resource once, across all namespaces or within the selected ones, and handed
to the pure evaluator as JSON dicts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from lightkube import ALL_NS, ApiError, Client, ConfigError, KubeConfig, SingleConfig
from lightkube.generic_resource import create_global_resource, create_namespaced_resource

from uds_vm_operator.compliance.errors import CollectionError
from uds_vm_operator.compliance.evaluate import ApiKey, Snapshot

CLUSTER_SCOPED = frozenset(
    {
        ("rbac.authorization.k8s.io", "v1", "clusterroles"),
        ("rbac.authorization.k8s.io", "v1", "clusterrolebindings"),
        ("", "v1", "namespaces"),
        ("", "v1", "nodes"),
        ("apiextensions.k8s.io", "v1", "customresourcedefinitions"),
    }
)

KINDS = {
    ("", "v1", "persistentvolumeclaims"): "PersistentVolumeClaim",
    ("", "v1", "secrets"): "Secret",
    ("cdi.kubevirt.io", "v1beta1", "datavolumes"): "DataVolume",
    ("networking.k8s.io", "v1", "networkpolicies"): "NetworkPolicy",
    ("kubevirt.io", "v1", "virtualmachines"): "VirtualMachine",
    ("rbac.authorization.k8s.io", "v1", "clusterroles"): "ClusterRole",
    ("rbac.authorization.k8s.io", "v1", "clusterrolebindings"): "ClusterRoleBinding",
    ("uds.dev", "v1alpha1", "udsvirtualmachines"): "UDSVirtualMachine",
    ("uds.dev", "v1alpha1", "udsvirtualmachinebackups"): "UDSVirtualMachineBackup",
}


def make_client(config: SingleConfig | KubeConfig | str | None) -> Client:
    """A read-only client for a loaded kubeconfig context (what ``uds-vmctl`` passes, already checked), a
    kubeconfig path, or else $KUBECONFIG / ~/.kube/config / in-cluster."""
    try:
        loaded = KubeConfig.from_file(config) if isinstance(config, str) else config
        return Client(config=loaded) if loaded else Client()
    except (ConfigError, OSError) as exc:
        raise CollectionError(
            f"cannot load a kubeconfig ({exc}); pass --kubeconfig PATH or set KUBECONFIG"
        ) from exc


_CLASSES: dict[ApiKey, Any] = {}


def _resource_class(key: ApiKey) -> Any:
    """A lightkube generic resource for ``key``, made once per process (lightkube refuses twins)."""
    if key in _CLASSES:
        return _CLASSES[key]
    group, version, plural = key
    # A kind name of our own keeps these classes apart from lightkube's typed models in its registry.
    kind = "Compliance" + "".join(part.capitalize() for part in (group.replace(".", "_"), version, plural))
    maker = create_global_resource if key in CLUSTER_SCOPED else create_namespaced_resource
    _CLASSES[key] = maker(group, version, kind, plural)
    return _CLASSES[key]


def _as_dict(obj: Any, key: ApiKey) -> dict[str, Any]:
    """The object as JSON, with apiVersion/kind filled in (list responses leave them out of each item)."""
    raw = dict(obj.to_dict() if hasattr(obj, "to_dict") else obj)
    group, version, _ = key
    raw.setdefault("apiVersion", f"{group}/{version}" if group else version)
    raw["kind"] = raw.get("kind") or KINDS.get(key, key[2])
    return raw


def collect(client: Client, keys: Iterable[ApiKey], namespaces: Sequence[str] | None) -> Snapshot:
    """List every resource in ``keys``: cluster-scoped ones globally, namespaced ones per namespace.

    ``namespaces=None`` means all namespaces. A resource whose API is not installed (no CRD) yields no
    objects, so the validations that need it report not-satisfied rather than the run failing.
    """
    snapshot: dict[ApiKey, list[dict[str, Any]]] = {}
    for key in sorted(keys):
        resource = _resource_class(key)
        scopes: Sequence[str | None] = (
            [None] if key in CLUSTER_SCOPED else (list(namespaces) if namespaces else [ALL_NS])
        )
        objects: list[dict[str, Any]] = []
        for scope in scopes:
            try:
                listing = client.list(resource) if scope is None else client.list(resource, namespace=scope)
                objects.extend(_as_dict(obj, key) for obj in listing)
            except ApiError as exc:
                if exc.status.code == 404:
                    continue
                raise CollectionError(
                    f"cannot list {key[2]} ({'/'.join(p for p in key[:2] if p)}): {exc.status.message}; "
                    "check the kubeconfig's permissions (list on that resource)"
                ) from exc
            except Exception as exc:  # httpx transport errors: the cluster is unreachable
                if isinstance(exc, CollectionError):
                    raise
                raise CollectionError(
                    f"cannot reach the API server ({exc.__class__.__name__}: {exc}); check --kubeconfig"
                ) from exc
        snapshot[key] = objects
    return snapshot
