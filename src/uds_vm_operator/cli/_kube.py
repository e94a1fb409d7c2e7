"""Kubeconfig loading and a small synchronous JSON client, shared by every command that talks to a cluster.

:func:`load_cluster_config` is the one way a command gets its cluster: the kubeconfig is checked first
(:mod:`._kubeconfig`: one line naming the file, the defect and the fix), then read by lightkube, and
:meth:`ClusterConfig.connecting` turns whatever building a client from it still raises (an SSL error on
a certificate, say) into the same kind of line. :class:`KubeClient` speaks JSON through lightkube's HTTP
client (kubeconfig, TLS, client certificates, tokens) and turns every failure into a
:class:`CliKubeError`; :mod:`._errors` prints it and picks the exit code.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from uds_vm_operator.cli._errors import EXIT_CHECK_FAILED, EXIT_USAGE, CliError
from uds_vm_operator.cli._kubeconfig import KubeconfigProblem, check_kubeconfig, resolve_kubeconfig

IN_CLUSTER = "the in-cluster service account"
T = TypeVar("T")


class CliKubeError(CliError):
    """A failure talking to the cluster; ``exit_code`` follows the CLI contract (1 check, 2 usage)."""

    def __init__(self, message: str, exit_code: int = EXIT_CHECK_FAILED) -> None:
        super().__init__(message, exit_code)


@dataclass(frozen=True)
class ClusterConfig:
    """A checked kubeconfig context (lightkube's ``SingleConfig``) and where it came from, for messages."""

    single: Any
    source: Path | None
    """The kubeconfig file, or ``None`` for the in-cluster service account."""

    @property
    def default_namespace(self) -> str:
        """The context's namespace, as kubectl would use it."""
        return getattr(self.single, "namespace", None) or "default"

    @contextmanager
    def connecting(self) -> Iterator[None]:
        """Building a client from this config: any failure is the kubeconfig's fault, said in one line."""
        try:
            yield
        except CliError:
            raise
        except Exception as exc:  # the client's own checks (SSL, files, auth) raise many kinds
            raise KubeconfigProblem(
                self.source or IN_CLUSTER,
                f"the Kubernetes client cannot use it ({type(exc).__name__}: {exc})",
            ) from exc

    def build(self, factory: Callable[[Any], T]) -> T:
        """``factory(single)`` under :meth:`connecting`."""
        with self.connecting():
            return factory(self.single)


def load_cluster_config(kubeconfig: str | Path | None) -> ClusterConfig:
    """Check and load ``kubeconfig`` (or $KUBECONFIG, ~/.kube/config, in-cluster); exit 2 when unusable."""
    from uds_vm_operator.runtime.kube import load_kubeconfig  # noqa: PLC0415 (lazy: keeps start-up fast)

    path = resolve_kubeconfig(kubeconfig)
    if path is not None:
        check_kubeconfig(path)
    config = ClusterConfig(single=None, source=path)
    with config.connecting():
        single = load_kubeconfig(path)
    return ClusterConfig(single=single, source=path)


@dataclass(frozen=True)
class Answer:
    """One answer of the API server: HTTP status, decoded JSON (``None``: empty or not JSON), raw text."""

    status: int
    body: Any
    text: str

    @property
    def message(self) -> str:
        """What the server said: a Status object's ``message``, else its raw text."""
        if isinstance(self.body, dict) and "message" in self.body:
            return str(self.body["message"])
        return self.text

    @property
    def object(self) -> dict[str, Any]:
        """The decoded body when it is a JSON object, else an empty one."""
        return self.body if isinstance(self.body, dict) else {}


class KubeClient:
    """Synchronous JSON requests against the API server of one kubeconfig context: the CLI's one client.

    :meth:`exchange` keeps the HTTP status for a caller that must tell answers apart (the upload token
    request: 403 vs 404 vs 503); :meth:`request` is the usual shape (``None`` on 404, a
    :class:`CliKubeError` on any other failure). Paths come from ``runtime.kube``'s kinds.
    """

    def __init__(
        self, kubeconfig: str | Path | None = None, *, timeout_s: float = 10.0, trust_env: bool = True
    ) -> None:
        import httpx2  # noqa: PLC0415 (lazy: keeps start-up fast)
        from lightkube.config import client_adapter  # noqa: PLC0415 (lazy: keeps start-up fast)

        config = load_cluster_config(kubeconfig)
        self.default_namespace: str = config.default_namespace
        params = client_adapter.ConnectionParams(timeout=httpx2.Timeout(timeout_s), trust_env=trust_env)
        self._http = config.build(lambda single: client_adapter.Client(single, params))

    def close(self) -> None:
        """Release the connection pool."""
        self._http.close()

    def __enter__(self) -> KubeClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def exchange(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
        params: Mapping[str, str] | None = None,
        accept: str = "application/json",
        what: str,
    ) -> Answer:
        """Send one request and return the answer whatever its status; only a request that got no answer
        raises (:class:`CliKubeError`: the credentials failed, or the server could not be reached)."""
        import httpx2  # noqa: PLC0415 (lazy: keeps start-up fast)
        from lightkube.core.exceptions import ConfigError  # noqa: PLC0415 (lazy: keeps start-up fast)

        headers = {"Accept": accept}
        content = None
        if body is not None:
            content = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        try:
            response = self._http.request(method, path, content=content, headers=headers, params=params)
        except ConfigError as exc:  # raised while authenticating: an exec plugin or token file failed
            raise CliKubeError(
                f"the kubeconfig's credentials failed for {what} ({exc}); check its user entry", EXIT_USAGE
            ) from exc
        except httpx2.TransportError as exc:
            reason = " ".join(str(exc).split())[:200]
            raise CliKubeError(
                f"cannot reach the API server for {what} ({reason}); check the cluster is up and the "
                "kubeconfig server URL is right"
            ) from exc
        try:
            decoded = response.json() if response.content else None
        except ValueError:
            decoded = None
        return Answer(response.status_code, decoded, response.text if response.content else "")

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
        params: Mapping[str, str] | None = None,
        accept: str = "application/json",
        what: str,
    ) -> dict[str, Any] | None:
        """Send one request; ``None`` on 404, :class:`CliKubeError` on any other failure."""
        answer = self.exchange(
            method, path, body=body, content_type=content_type, params=params, accept=accept, what=what
        )
        status, decoded = answer.status, answer.body
        if status == 404:
            return None
        if status >= 400:
            raise CliKubeError(f"{what} failed: HTTP {status}: {answer.message}")
        if not answer.text:
            return {}
        if decoded is None:
            raise CliKubeError(
                f"{what}: the API server answered HTTP {status} with a body that is not JSON; "
                "check the kubeconfig server URL points at a Kubernetes API server"
            )
        if not isinstance(decoded, dict):
            raise CliKubeError(f"{what}: the API server answered with JSON that is not an object")
        return decoded
