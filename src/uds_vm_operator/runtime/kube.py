"""The operator's only door to the API server: JSON requests addressed through an open kind registry.

Every kind the operator touches is a :class:`Kind` registered here (:func:`register_kind`; a controller
registers its own kinds at import), and every request the operator makes is one of :class:`KubeApi`'s
methods: no module outside ``runtime/`` builds a URL or a query string. Requests go over kopf's aiohttp
stack (:mod:`.transport`, ADR 0004), or lightkube's httpx client for a kubeconfig that needs an ``exec``
plugin; bodies are plain JSON dicts, because everything we send is already a rendered manifest. Two
request parameters matter for correctness and are always set here: ``fieldManager`` (one owner for every
field we write) and ``fieldValidation=Strict`` (an unknown field is an error, never a silent prune).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from uds_vm_operator import FIELD_MANAGER
from uds_vm_operator.apiversions import (
    APIEXTENSIONS_API_VERSION,
    CDI_API_VERSION,
    CDI_UPLOAD_API_VERSION,
    EVENTS_API_VERSION,
    GATEWAY_API_VERSION,
    KOPF_API_VERSION,
    KUBEVIRT_API_VERSION,
    KUBEVIRT_SUBRESOURCES_API_VERSION,
    NETWORKING_API_VERSION,
    UDS_API_VERSION,
)
from uds_vm_operator.runtime.errors import KubeApiError, KubeConfigError, KubeUnreachableError

APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
MERGE_CONTENT_TYPE = "application/merge-patch+json"


@dataclass(frozen=True)
class Kind:
    """Where a kind lives in the API: enough to build its URL."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool = True

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """Return the REST path; ``namespace=None`` on a namespaced kind means all namespaces."""
        parts = [discovery_path(self.api_version)]
        if self.namespaced and namespace is not None:
            parts.append(f"namespaces/{namespace}")
        parts.append(self.plural)
        if name is not None:
            parts.append(name)
        if subresource is not None:
            parts.append(subresource)
        return "/".join(parts)


KINDS: dict[tuple[str, str], Kind] = {}
"""The registry: ``(apiVersion, kind)`` → :class:`Kind`. Open: controllers add their own kinds."""


def register_kind(kind: Kind) -> Kind:
    """Add ``kind`` to the registry and return it (so a module can write ``X = register_kind(Kind(...))``).

    Registering the same kind twice is harmless; a second, different plural for one kind is a programming
    error, because requests for it would go to two URLs.
    """
    key = (kind.api_version, kind.kind)
    known = KINDS.setdefault(key, kind)
    if known != kind:
        raise ValueError(f"{kind.api_version} {kind.kind} is already registered as {known}")
    return known


UDS_VM = register_kind(Kind(UDS_API_VERSION, "UDSVirtualMachine", "udsvirtualmachines"))
UDS_VM_BACKUP = register_kind(Kind(UDS_API_VERSION, "UDSVirtualMachineBackup", "udsvirtualmachinebackups"))
DATA_VOLUME = register_kind(Kind(CDI_API_VERSION, "DataVolume", "datavolumes"))
DATA_SOURCE = register_kind(Kind(CDI_API_VERSION, "DataSource", "datasources"))
VIRTUAL_MACHINE = register_kind(Kind(KUBEVIRT_API_VERSION, "VirtualMachine", "virtualmachines"))
VIRTUAL_MACHINE_INSTANCE = register_kind(
    Kind(KUBEVIRT_API_VERSION, "VirtualMachineInstance", "virtualmachineinstances")
)
SECRET = register_kind(Kind("v1", "Secret", "secrets"))
PVC = register_kind(Kind("v1", "PersistentVolumeClaim", "persistentvolumeclaims"))
SERVICE = register_kind(Kind("v1", "Service", "services"))
POD = register_kind(Kind("v1", "Pod", "pods"))
CONFIG_MAP = register_kind(Kind("v1", "ConfigMap", "configmaps"))
NODE = register_kind(Kind("v1", "Node", "nodes", namespaced=False))
NETWORK_POLICY = register_kind(Kind(NETWORKING_API_VERSION, "NetworkPolicy", "networkpolicies"))
HTTP_ROUTE = register_kind(Kind(GATEWAY_API_VERSION, "HTTPRoute", "httproutes"))
EVENT = register_kind(Kind(EVENTS_API_VERSION, "Event", "events"))
KOPF_PEERING = register_kind(Kind(KOPF_API_VERSION, "KopfPeering", "kopfpeerings"))
CLUSTER_KOPF_PEERING = register_kind(
    Kind(KOPF_API_VERSION, "ClusterKopfPeering", "clusterkopfpeerings", namespaced=False)
)
CDI_CONFIG = register_kind(Kind(CDI_API_VERSION, "CDIConfig", "cdiconfigs", namespaced=False))
UPLOAD_TOKEN_REQUEST = register_kind(
    Kind(CDI_UPLOAD_API_VERSION, "UploadTokenRequest", "uploadtokenrequests")
)
VIRTUAL_MACHINE_ACTIONS = Kind(KUBEVIRT_SUBRESOURCES_API_VERSION, "VirtualMachine", "virtualmachines")
"""Where virt-api serves a VirtualMachine's actions (``restart``, ``start``, ``stop``): its own API group.
Not registered: it names no stored kind, only the path of those subresources."""
VIRTUAL_MACHINE_INSTANCE_ACTIONS = Kind(
    KUBEVIRT_SUBRESOURCES_API_VERSION, "VirtualMachineInstance", "virtualmachineinstances"
)
"""Where virt-api serves a running guest's agent actions (``freeze``, ``unfreeze``, ``userlist``)."""
ANY_RESPONSE = "application/json, */*"
"""The Accept header for virt-api's actions (restart, freeze, unfreeze): their routes declare no
response type, so a bare ``application/json`` gets 406 Not Acceptable (measured, virt-api v1.8.4); virtctl
sends */*."""
CRD = register_kind(
    Kind(APIEXTENSIONS_API_VERSION, "CustomResourceDefinition", "customresourcedefinitions", namespaced=False)
)


def discovery_path(api_version: str) -> str:
    """The discovery document of one group-version (``v1`` is the core group)."""
    return "/api/v1" if api_version == "v1" else f"/apis/{api_version}"


def kind_of(manifest: Mapping[str, Any]) -> Kind:
    """Look up the :class:`Kind` of a manifest; an unknown kind is a programming error."""
    key = (str(manifest.get("apiVersion")), str(manifest.get("kind")))
    if key not in KINDS:
        raise KeyError(
            f"no API path known for {key[0]} {key[1]}; register it with runtime.kube.register_kind"
        )
    return KINDS[key]


def load_kubeconfig(path: str | Path | None) -> Any:
    """Return lightkube's SingleConfig for ``path``, or the in-cluster / $KUBECONFIG / ~/.kube default."""
    from lightkube.config.kubeconfig import KubeConfig  # noqa: PLC0415 (lazy: keeps start-up fast)
    from lightkube.core.exceptions import ConfigError  # noqa: PLC0415 (lazy: keeps start-up fast)

    try:
        config = KubeConfig.from_file(path) if path else KubeConfig.from_env()
        single = config.get()
    except (ConfigError, OSError, ValueError, KeyError) as exc:
        where = str(path) if path else "the in-cluster service account, $KUBECONFIG or ~/.kube/config"
        raise KubeConfigError(
            f"cannot load a kubeconfig from {where} ({exc}); pass --kubeconfig PATH or set KUBECONFIG"
        ) from exc
    if single is None:
        raise KubeConfigError(f"the kubeconfig {path} has no current context; set current-context in it")
    return single


class KubeApi:
    """Async JSON access to the API server, with the error handling the reconciler relies on."""

    def __init__(self, http: Any, field_manager: str = FIELD_MANAGER) -> None:
        self._http = http
        self.field_manager = field_manager

    @classmethod
    def from_kubeconfig(
        cls, path: str | Path | None, *, timeout_s: float = 10.0, max_connections: int = 0
    ) -> KubeApi:
        """Build a client from a kubeconfig, the in-cluster service account or ``$KUBECONFIG``.

        Requests go over aiohttp (already loaded by kopf; see :mod:`.transport`); only a kubeconfig that
        needs an ``exec`` plugin or an auth provider is served by lightkube's httpx client.
        ``max_connections`` (0: unbounded) caps open connections: each TLS connection holds its buffers.
        """
        from uds_vm_operator.runtime import transport  # noqa: PLC0415 (lazy: the CLI never needs it)

        if path is None or not transport.needs_exec_plugin(path):
            return cls(transport.build_client(path, timeout_s, max_connections=max_connections))
        return cls.from_kubeconfig_with_lightkube(path, timeout_s=timeout_s)

    @classmethod
    def from_kubeconfig_with_lightkube(cls, path: str | Path | None, *, timeout_s: float = 10.0) -> KubeApi:
        """Build a client over lightkube's httpx client (every kubeconfig feature, ~6 MiB more memory)."""
        import httpx2  # noqa: PLC0415 (lazy: keeps start-up fast)
        from lightkube.config import client_adapter  # noqa: PLC0415 (lazy: keeps start-up fast)

        params = client_adapter.ConnectionParams(timeout=httpx2.Timeout(timeout_s))
        return cls(client_adapter.AsyncClient(load_kubeconfig(path), params))

    async def close(self) -> None:
        """Release the connection pool."""
        await self._http.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        accept: str = "application/json",
        what: str,
    ) -> dict[str, Any] | None:
        """Send one request; return the decoded body, ``None`` on 404, raise on other errors.

        ``accept``: virt-api's guest-agent actions (freeze, unfreeze) declare no response type and answer a
        bare ``application/json`` with 406; they are sent ``application/json, */*`` as virtctl does.
        """
        headers = {"Accept": accept}
        content = None
        if body is not None:
            content = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        try:
            response = await self._http.request(method, path, content=content, params=params, headers=headers)
        except _transport_errors(self._http) as exc:
            raise KubeUnreachableError(
                f"{what}: the API server is unreachable ({exc}); check the kubeconfig server URL"
            ) from exc
        if response.status_code == 404 and method in ("GET", "DELETE"):
            return None
        if response.status_code >= 400:
            reason, message = _error_of(response)
            raise KubeApiError(response.status_code, reason, message, what=what)
        if not response.content:
            return {}
        if accept != "application/json" and "json" not in response.headers.get("content-type", ""):
            return {}  # an action's plain-text acknowledgement: success is the status code
        decoded: dict[str, Any] = response.json()
        return decoded

    async def get(self, kind: Kind, namespace: str | None, name: str) -> dict[str, Any] | None:
        """Return the object, or ``None`` when it does not exist."""
        return await self.request(
            "GET", kind.path(namespace, name), what=f"get {kind.kind} {namespace}/{name}"
        )

    async def list(
        self, kind: Kind, namespace: str | None = None, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        """List objects (all namespaces when ``namespace`` is None), following pagination."""
        items: list[dict[str, Any]] = []
        params: dict[str, str] = {"limit": "500"}
        if label_selector:
            params["labelSelector"] = label_selector
        while True:
            page = await self.request("GET", kind.path(namespace), params=params, what=f"list {kind.plural}")
            page = page or {}
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items
            params["continue"] = token

    def _write_params(self, field_manager: str | None = None) -> dict[str, str]:
        """The two parameters every write carries: one owner for its fields, and Strict field validation."""
        return {"fieldManager": field_manager or self.field_manager, "fieldValidation": "Strict"}

    async def apply(self, manifest: Mapping[str, Any], *, force: bool = True) -> dict[str, Any]:
        """Server-side apply ``manifest`` under our field manager with Strict field validation."""
        kind = kind_of(manifest)
        meta = manifest["metadata"]
        what = f"apply {kind.kind} {meta.get('namespace')}/{meta['name']}"
        result = await self.request(
            "PATCH",
            kind.path(meta.get("namespace"), meta["name"]),
            body=manifest,
            content_type=APPLY_CONTENT_TYPE,
            params={**self._write_params(), "force": "true" if force else "false"},
            what=what,
        )
        return result or {}

    async def create(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Create an object (Events); Strict validation as everywhere else."""
        kind = kind_of(manifest)
        namespace = manifest["metadata"].get("namespace")
        result = await self.request(
            "POST",
            kind.path(namespace),
            body=manifest,
            params=self._write_params(),
            what=f"create {kind.kind} in {namespace}",
        )
        return result or {}

    async def merge_patch(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        patch: Mapping[str, Any],
        *,
        subresource: str | None = None,
        field_manager: str | None = None,
    ) -> dict[str, Any]:
        """JSON merge patch (status, where we own the whole object; annotations another manager owns).

        ``field_manager`` (default: ours) names a different owner for the patched fields, as the SI-7
        verdict annotations do so that our own server-side applies never remove them.
        """
        result = await self.request(
            "PATCH",
            kind.path(namespace, name, subresource),
            body=patch,
            content_type=MERGE_CONTENT_TYPE,
            params=self._write_params(field_manager),
            what=f"patch {kind.kind} {namespace}/{name}{'/' + subresource if subresource else ''}",
        )
        return result or {}

    async def delete(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        propagation: str | None = "Background",
    ) -> dict[str, Any] | None:
        """Delete; return the API server's answer, ``None`` when the object was already gone.

        With ``uid`` only that exact incarnation (never a newer one of the same name), with
        ``resource_version`` only if nobody changed it since it was read. ``propagation`` is the
        ``propagationPolicy`` (``None``: the kind's default).
        """
        body: dict[str, Any] = {}
        if propagation is not None:
            body["propagationPolicy"] = propagation
        preconditions = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v}
        if preconditions:
            body["preconditions"] = preconditions
        return await self.request(
            "DELETE", kind.path(namespace, name), body=body, what=f"delete {kind.kind} {namespace}/{name}"
        )

    async def discover(self, api_version: str) -> dict[str, Any]:
        """The discovery document of one group-version (``v1`` is the core group); ``{}`` when not served."""
        return await self.request("GET", discovery_path(api_version), what=f"discover {api_version}") or {}


def _transport_errors(http: Any) -> tuple[type[BaseException], ...]:
    """The exceptions that mean "could not talk to the API server" for this HTTP client."""
    errors: tuple[type[BaseException], ...] | None = getattr(http, "transport_errors", None)
    if errors is not None:
        return errors
    import httpx2  # noqa: PLC0415 (lazy: only the lightkube/httpx client needs it)

    return (httpx2.TransportError,)


def _error_of(response: Any) -> tuple[str, str]:
    try:
        payload = response.json()
    except ValueError:
        return response.reason_phrase or "Error", response.text[:500]
    if isinstance(payload, dict):
        return str(payload.get("reason") or response.reason_phrase), str(payload.get("message") or payload)
    return str(response.reason_phrase), str(payload)[:500]
