"""The operator's HTTP transport: aiohttp, which kopf has already loaded for its watches.

A second HTTP stack (httpx + h2 + lightkube's client, ~150 modules) cost the operator ~6 MiB of resident
memory and a noticeable share of its cold start for nothing kopf's stack cannot do. The credentials are
read the way kopf reads them (kubeconfig: CA, client certificate, token; in-cluster: the service account),
so the operator's own requests and kopf's watches always authenticate alike. A kubeconfig that needs an
``exec`` plugin or an auth provider is left to lightkube's client (see :mod:`.kube`).

:class:`AiohttpClient` offers the small part of ``httpx.AsyncClient`` that :class:`~.kube.KubeApi` uses.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import kopf

from uds_vm_operator.runtime.errors import KubeConfigError
from uds_vm_operator.runtime.kubeconfig import current_entries

TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (aiohttp.ClientError, asyncio.TimeoutError, OSError)


@dataclass(frozen=True)
class Response:
    """What :class:`~.kube.KubeApi` reads from a response (the httpx names)."""

    status_code: int
    content: bytes
    reason_phrase: str

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


def needs_exec_plugin(path: str | Path) -> bool:
    """True when the kubeconfig's current user authenticates by ``exec`` or an auth provider."""
    _, _, user = current_entries(path)
    return bool(user.get("exec") or (user.get("auth-provider") and not user.get("token")))


def connection_info(path: str | Path | None) -> kopf.ConnectionInfo:
    """Credentials from ``path``, else the in-cluster service account, else ``$KUBECONFIG``/~/.kube/config."""
    if path is None:
        settings = kopf.OperatorSettings()
        info = kopf.login_with_service_account(settings=settings)
        info = info or kopf.login_with_kubeconfig(settings=settings)
        if info is None:
            raise KubeConfigError(
                "no credentials: not in a cluster and no kubeconfig; pass --kubeconfig PATH or set KUBECONFIG"
            )
        return info
    context, cluster, user = current_entries(path)
    base = Path(path).resolve().parent

    def file(value: str | None) -> str | None:
        return None if value is None else str(base / value)

    return kopf.ConnectionInfo(
        server=str(cluster.get("server")),
        ca_path=file(cluster.get("certificate-authority")),
        ca_data=cluster.get("certificate-authority-data"),
        insecure=cluster.get("insecure-skip-tls-verify"),
        certificate_path=file(user.get("client-certificate")),
        certificate_data=user.get("client-certificate-data"),
        private_key_path=file(user.get("client-key")),
        private_key_data=user.get("client-key-data"),
        username=user.get("username"),
        password=user.get("password"),
        token=user.get("token"),
        default_namespace=context.get("namespace"),
    )


class AiohttpClient:
    """Just enough of ``httpx.AsyncClient`` for :class:`~.kube.KubeApi`, over one aiohttp session."""

    transport_errors = TRANSPORT_ERRORS

    def __init__(
        self,
        info: kopf.ConnectionInfo,
        *,
        timeout_s: float,
        relogin: Callable[[], kopf.ConnectionInfo],
        max_connections: int = 0,
    ) -> None:
        self._server = info.server.rstrip("/")
        self._ssl = info.as_ssl_context()
        self._auth = info.as_http_headers()
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._relogin = relogin
        self._session: aiohttp.ClientSession | None = None
        self._max_connections = max_connections

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:  # created lazily: a session binds to the running event loop
            connector = aiohttp.TCPConnector(ssl=self._ssl, limit=self._max_connections)
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout, trust_env=False)
        return self._session

    async def request(
        self,
        method: str,
        path: str,
        *,
        content: bytes | None = None,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        """Send one request; on 401 re-read the credentials once (a rotated service-account token)."""
        response = await self._send(method, path, content, params, headers)
        if response.status_code == 401:
            self._auth = self._relogin().as_http_headers()
            response = await self._send(method, path, content, params, headers)
        return response

    async def _send(
        self,
        method: str,
        path: str,
        content: bytes | None,
        params: Mapping[str, str] | None,
        headers: Mapping[str, str] | None,
    ) -> Response:
        merged = {**self._auth, **(headers or {})}
        url = self._server + path
        async with self._open().request(method, url, data=content, params=params, headers=merged) as response:
            body = await response.read()
            return Response(response.status, body, response.reason or "")

    async def aclose(self) -> None:
        """Close the session (and its connections)."""
        if self._session is not None:
            await self._session.close()
            self._session = None


def build_client(path: str | Path | None, timeout_s: float, *, max_connections: int = 0) -> AiohttpClient:
    """An :class:`AiohttpClient` for the kubeconfig at ``path`` (or in-cluster / $KUBECONFIG)."""
    info = connection_info(path)
    return AiohttpClient(
        info, timeout_s=timeout_s, relogin=lambda: connection_info(path), max_connections=max_connections
    )
