"""Kubeconfig loading and a small synchronous JSON client for the CLI commands.

The CLI speaks to the API server through lightkube's configured HTTP client (kubeconfig, TLS, client
certificates, tokens), and turns every failure into a :class:`CliKubeError` with a message that says what
to do, so commands can print one line and exit with the right code instead of a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2


class CliKubeError(Exception):
    """A failure talking to the cluster; ``exit_code`` follows the CLI contract (1 check, 2 usage)."""

    def __init__(self, message: str, exit_code: int = EXIT_CHECK_FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class KubeClient:
    """Synchronous JSON requests against the API server of one kubeconfig context."""

    def __init__(self, kubeconfig: str | Path | None = None, *, timeout_s: float = 10.0) -> None:
        import httpx2  # noqa: PLC0415 (lazy: keeps start-up fast)
        from lightkube.config import client_adapter  # noqa: PLC0415 (lazy: keeps start-up fast)

        from uds_vm_operator.controller.errors import KubeConfigError  # noqa: PLC0415 (lazy: keeps start-up fast)
        from uds_vm_operator.controller.kube import load_kubeconfig  # noqa: PLC0415 (lazy: keeps start-up fast)

        try:
            config = load_kubeconfig(kubeconfig)
        except KubeConfigError as exc:
            raise CliKubeError(str(exc), EXIT_USAGE) from exc
        self.default_namespace: str = getattr(config, "namespace", None) or "default"
        self._http = client_adapter.Client(
            config, client_adapter.ConnectionParams(timeout=httpx2.Timeout(timeout_s))
        )

    def close(self) -> None:
        """Release the connection pool."""
        self._http.close()

    def __enter__(self) -> KubeClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
        params: Mapping[str, str] | None = None,
        what: str,
    ) -> dict[str, Any] | None:
        """Send one request; ``None`` on 404, :class:`CliKubeError` on any other failure."""
        import httpx2  # noqa: PLC0415 (lazy: keeps start-up fast)

        headers = {"Accept": "application/json"}
        content = None
        if body is not None:
            content = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        try:
            response = self._http.request(method, path, content=content, headers=headers, params=params)
        except httpx2.TransportError as exc:
            raise CliKubeError(
                f"cannot reach the API server for {what} ({exc}); check the cluster is up and the kubeconfig "
                "server URL is right"
            ) from exc
        if response.status_code == 404:
            return None
        if response.status_code >= 400:
            try:
                detail = response.json().get("message", response.text)
            except ValueError:
                detail = response.text
            raise CliKubeError(f"{what} failed: HTTP {response.status_code}: {detail}")
        decoded: dict[str, Any] = response.json() if response.content else {}
        return decoded
