"""Shared helpers for tests that talk to the real API server (integration tier, benchmarks, demo checks).

Strict writes: the API server's default `fieldValidation` is `Warn`, which silently prunes unknown fields, so
a typo in a manifest would pass unnoticed. Every create/apply in our tests goes through `create_strict` /
`apply_strict`, which send `fieldValidation=Strict` so an unknown or duplicate field is a 4xx error.

How: lightkube (1.0) has no `field_validation` argument. Its `Client` delegates every call to a generic client
whose `request(method, res=, obj=, name=, namespace=, headers=, params=)` already takes extra query
parameters, so we call that one method (reached as `client._client`) instead of re-implementing auth, TLS and
decoding with raw httpx. This private seam is exercised by tests/integration/test_control_plane.py (a Strict
create must fail where a default create succeeds), so a lightkube change that breaks it fails loudly, never
silently.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from lightkube import ApiError, Client, KubeConfig, codecs
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.types import PatchType

from tools.envtest.controlplane import ControlPlane

TEST_FIELD_MANAGER = "uds-vm-operator-tests"
TEST_NAMESPACE_LABEL = "uds-vm-operator.dev/test"
REUSE_ENV = "UDS_TEST_KUBECONFIG"  # reuse a plane from `make cluster-up` instead of starting one per session
STRICT = "Strict"

T = TypeVar("T")

# Generic resources for the upstream CRDs the control plane installs (same signature = same class everywhere).
DataVolume = create_namespaced_resource("cdi.kubevirt.io", "v1beta1", "DataVolume", "datavolumes")
DataSource = create_namespaced_resource("cdi.kubevirt.io", "v1beta1", "DataSource", "datasources")
DataImportCron = create_namespaced_resource("cdi.kubevirt.io", "v1beta1", "DataImportCron", "dataimportcrons")
StorageProfile = create_global_resource("cdi.kubevirt.io", "v1beta1", "StorageProfile", "storageprofiles")
CDIConfig = create_global_resource("cdi.kubevirt.io", "v1beta1", "CDIConfig", "cdiconfigs")
VirtualMachine = create_namespaced_resource("kubevirt.io", "v1", "VirtualMachine", "virtualmachines")
VirtualMachineInstance = create_namespaced_resource(
    "kubevirt.io", "v1", "VirtualMachineInstance", "virtualmachineinstances"
)
VirtualMachinePool = create_namespaced_resource(
    "pool.kubevirt.io", "v1alpha1", "VirtualMachinePool", "virtualmachinepools"
)
KubeVirt = create_namespaced_resource("kubevirt.io", "v1", "KubeVirt", "kubevirts")
HTTPRoute = create_namespaced_resource("gateway.networking.k8s.io", "v1", "HTTPRoute", "httproutes")
Gateway = create_namespaced_resource("gateway.networking.k8s.io", "v1", "Gateway", "gateways")
GatewayClass = create_global_resource("gateway.networking.k8s.io", "v1", "GatewayClass", "gatewayclasses")
ReferenceGrant = create_namespaced_resource(
    "gateway.networking.k8s.io", "v1beta1", "ReferenceGrant", "referencegrants"
)


@dataclass(frozen=True)
class ControlPlaneHandle:
    """What tests get: the admin kubeconfig, clients, and a way to mint other identities."""

    kubeconfig: Path
    plane: ControlPlane | None  # None when reusing a kubeconfig that `make cluster-up` did not write

    def client(self, *, field_manager: str = TEST_FIELD_MANAGER, kubeconfig: Path | None = None) -> Client:
        """A sync lightkube Client (admin unless another kubeconfig is given), ignoring proxy env vars."""
        config = KubeConfig.from_file(str(kubeconfig or self.kubeconfig))
        return Client(config=config, field_manager=field_manager, trust_env=False)

    def kubeconfig_for(self, user: str, groups: tuple[str, ...] = (), path: Path | None = None) -> Path:
        """A client-certificate kubeconfig for user/groups: only RBAC grants it anything."""
        if self.plane is None:
            raise RuntimeError(
                f"{REUSE_ENV} points at a kubeconfig without a control-plane state.json next to it; "
                "minting identities needs a plane started by `make cluster-up` (or unset the variable)"
            )
        return self.plane.kubeconfig_for(user, groups, path)


class WaitTimeoutError(AssertionError):
    """wait_for gave up; the message names what was awaited and the last value seen."""


def as_resource(obj: Any) -> Any:
    """Accept a lightkube object or a plain manifest dict (apiVersion + kind known to lightkube)."""
    if isinstance(obj, Mapping):
        return codecs.from_dict(dict(obj))
    return obj


def create_strict(
    client: Client,
    obj: Any,
    *,
    namespace: str | None = None,
    field_manager: str = TEST_FIELD_MANAGER,
) -> Any:
    """POST obj with fieldValidation=Strict; raises lightkube.ApiError (422/400) on unknown fields."""
    resource = as_resource(obj)
    return client._client.request(
        "post",
        obj=resource,
        namespace=namespace,
        params={"fieldValidation": STRICT, "fieldManager": field_manager},
    )


def apply_strict(
    client: Client,
    obj: Any,
    *,
    namespace: str | None = None,
    field_manager: str = TEST_FIELD_MANAGER,
    force: bool = True,
) -> Any:
    """Server-side apply obj with fieldValidation=Strict as our field manager (force takes over conflicts)."""
    resource = as_resource(obj)
    name = resource.metadata.name if resource.metadata else None
    if not name:
        raise ValueError("apply_strict needs metadata.name")
    return client._client.request(
        "patch",
        res=type(resource),
        name=name,
        namespace=namespace or (resource.metadata.namespace if resource.metadata else None),
        obj=resource,
        headers={"Content-Type": PatchType.APPLY.value},
        params={
            "fieldValidation": STRICT,
            "fieldManager": field_manager,
            "force": "true" if force else None,
        },
    )


def wait_for(
    predicate: Callable[[], T],
    timeout_s: float,
    interval_s: float = 0.5,
    *,
    what: str = "condition",
) -> T:
    """Poll predicate until it returns a truthy value and return that value; raise WaitTimeoutError at the
    deadline.

    For eventual behaviour (garbage collection, namespace finalisation): poll with generous deadlines rather
    than sleeping. Exceptions from predicate propagate, so a broken probe fails at once instead of timing out.
    """
    deadline = time.monotonic() + timeout_s
    last: T = predicate()
    while not last:
        if time.monotonic() >= deadline:
            raise WaitTimeoutError(
                f"timed out after {timeout_s:.0f} s waiting for {what}; last value: {last!r}"
            )
        time.sleep(interval_s)
        last = predicate()
    return last


def is_gone(client: Client, res: type[Any], name: str, namespace: str | None = None) -> bool:
    """True when GET returns 404 (the object is deleted, not merely terminating)."""
    try:
        if namespace is None:
            client.get(res, name)
        else:
            client.get(res, name, namespace=namespace)
    except ApiError as error:
        if error.status.code == 404:
            return True
        raise
    return False


def access_review(
    namespace: str, verb: str, resource: str, *, group: str = "", subresource: str = ""
) -> dict[str, Any]:
    """A SelfSubjectAccessReview asking whether the caller may do `verb` on `resource`: the tests prove RBAC
    by asking the real API server's authorizer, never by reading back the Role they wrote."""
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {
            "resourceAttributes": {
                "namespace": namespace,
                "verb": verb,
                "group": group,
                "resource": resource,
                "subresource": subresource,
            }
        },
    }


def api_error_text(error: ApiError) -> str:
    """The API server's message plus the field causes, for assertions on why a write was rejected."""
    status = error.status
    parts = [status.message or ""]
    details = getattr(status, "details", None)
    for cause in (getattr(details, "causes", None) or []) if details else []:
        parts.append(f"{getattr(cause, 'field', '')}: {getattr(cause, 'message', '')}")
    return "\n".join(parts)
