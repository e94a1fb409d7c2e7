"""Run ``uds-vm-operator`` as a real subprocess against the test control plane, and observe it from outside.

- :class:`OperatorProcess` starts ``python -m uds_vm_operator.operator_main run`` on free loopback ports,
  captures its JSON log to a file, and stops it by its own PID only (SIGTERM, or SIGKILL for crash tests).
- :func:`apiserver_writes` reads the API server's own ``apiserver_request_total`` counters, so "zero write
  requests on a resync" is measured by the server, not by the operator's opinion of itself.
- :class:`Api` is a small JSON client (Strict field validation on every write) the tests use to play the user,
  CDI and KubeVirt.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx2
from lightkube.config import client_adapter

from tests.kube_helpers import wait_for
from tests.owned_process import OwnedProcess
from tools.envtest.controlplane import free_loopback_port
from uds_vm_operator.runtime.kube import load_kubeconfig

WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION", "CREATE", "UPDATE"})
OPERATOR_RESOURCES = frozenset(
    {
        "udsvirtualmachines",
        "datavolumes",
        "virtualmachines",
        "virtualmachineinstances",
        "secrets",
        "persistentvolumeclaims",
        "networkpolicies",
        "services",
        "httproutes",
        "events",
    }
)
"""Everything the operator may write: a write to any of these during a resync is a failure."""
MERGE = "application/merge-patch+json"
APPLY = "application/apply-patch+yaml"
TEST_MANAGER = "uds-vm-operator-tests"
_SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")


class Api:
    """Synchronous JSON access as the test's admin user (a different field manager than the operator)."""

    def __init__(self, kubeconfig: Path) -> None:
        config = load_kubeconfig(kubeconfig)
        params = client_adapter.ConnectionParams(timeout=httpx2.Timeout(30.0), trust_env=False)
        self._http = client_adapter.Client(config, params)

    def close(self) -> None:
        self._http.close()

    def call(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        content_type: str = "application/json",
        params: Mapping[str, str] | None = None,
        expect: Iterable[int] = (200, 201),
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, Any]:
        """headers: extra request headers, e.g. `Impersonate-User` to act as a component's identity."""
        content = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": content_type, "Accept": "application/json", **(headers or {})}
        response = self._http.request(method, path, content=content, headers=headers, params=params)
        payload: Any = None
        if response.content:
            try:
                payload = response.json()
            except ValueError:
                payload = response.text
        if response.status_code not in set(expect):
            raise AssertionError(f"{method} {path}: HTTP {response.status_code}: {payload}")
        return response.status_code, payload

    def get(self, path: str) -> dict[str, Any] | None:
        code, payload = self.call("GET", path, expect=(200, 404))
        return payload if code == 200 else None

    def apply(self, manifest: Mapping[str, Any], path: str, *, manager: str = TEST_MANAGER) -> dict[str, Any]:
        _, payload = self.call(
            "PATCH",
            path,
            manifest,
            content_type=APPLY,
            params={"fieldManager": manager, "force": "true", "fieldValidation": "Strict"},
        )
        return dict(payload)

    def create(self, manifest: Mapping[str, Any], collection: str, *, manager: str = TEST_MANAGER) -> Any:
        return self.call(
            "POST",
            collection,
            manifest,
            params={"fieldManager": manager, "fieldValidation": "Strict"},
            expect=(200, 201, 400, 422),
        )

    def merge(self, path: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        _, payload = self.call(
            "PATCH",
            path,
            patch,
            content_type=MERGE,
            params={"fieldManager": TEST_MANAGER, "fieldValidation": "Strict"},
        )
        return dict(payload)

    def delete(self, path: str) -> None:
        self.call("DELETE", path, {"propagationPolicy": "Background"}, expect=(200, 202, 404))

    def items(self, path: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        params = {"labelSelector": label_selector} if label_selector else None
        _, payload = self.call("GET", path, params=params)
        return list(payload.get("items") or [])

    def text(self, path: str) -> str:
        response = self._http.get(path)
        response.raise_for_status()
        return str(response.text)


def terminating_namespaces(api: Api) -> list[str]:
    """Namespaces still being emptied (by earlier tests): their finalisation writes to the kinds we count."""
    return [
        ns["metadata"]["name"]
        for ns in api.items("/api/v1/namespaces")
        if (ns.get("status") or {}).get("phase") == "Terminating"
    ]


def apiserver_writes(api: Api, resources: Iterable[str] = OPERATOR_RESOURCES) -> int:
    """Sum of write requests the API server has served for ``resources`` since it started.

    Collection deletes (``scope="namespace"``) are left out: they are the namespace controller finalising the
    namespaces of earlier tests, and the operator never deletes a collection. Every other write to the kinds
    the operator touches counts, whoever made it, so a test must not write during the measured window.
    """
    wanted = set(resources)
    total = 0.0
    for labels, value in apiserver_request_samples(api):
        collection_delete = labels.get("verb") == "DELETE" and labels.get("scope") == "namespace"
        if labels.get("verb") in WRITE_VERBS and labels.get("resource") in wanted and not collection_delete:
            total += value
    return int(total)


def apiserver_request_samples(api: Api) -> Iterator[tuple[dict[str, str], float]]:
    """Every ``apiserver_request_total`` sample the API server reports now: (its labels, its count).

    The one parser of those counters, for :func:`apiserver_writes` and the benchmarks' request tallies.
    """
    for line in api.text("/metrics").splitlines():
        match = _SAMPLE.match(line)
        if match is None:
            continue
        yield dict(re.findall(r'(\w+)="([^"]*)"', match.group("labels"))), float(match.group("value"))


class OperatorProcess(OwnedProcess):
    """One operator subprocess serving one namespace (standalone: no peering objects)."""

    what = "operator"

    def __init__(
        self,
        kubeconfig: Path,
        namespace: str,
        log_dir: Path,
        *,
        extra_args: Iterable[str] = (),
        peering: str | None = None,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        self.environment = environment
        """The operator's environment (default: this process's)."""
        self.peering = peering
        """Run with ``--peering NAME`` (replicas coordinate) instead of ``--standalone``."""
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.log_dir = log_dir
        self.extra_args = list(extra_args)
        self.metrics_port = 0
        self.health_port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"operator-{self.namespace}-{id(self):x}-{self.starts}.log"

    def start(self) -> None:
        assert self.process is None, "already running"
        self.starts += 1
        self.metrics_port, self.health_port = free_loopback_port(), free_loopback_port()
        argv = [
            sys.executable,
            "-m",
            "uds_vm_operator.operator_main",
            "run",
            "--kubeconfig",
            str(self.kubeconfig),
            "--namespace",
            self.namespace,
            *(["--peering", self.peering] if self.peering else ["--standalone"]),
            "--bind-address",
            "127.0.0.1",
            "--metrics-port",
            str(self.metrics_port),
            "--health-port",
            str(self.health_port),
            *self.extra_args,
        ]
        env = {
            **(os.environ if self.environment is None else self.environment),
            "NO_PROXY": "*",
            "no_proxy": "*",
        }
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        wait_for(self.ready, 60, 0.2, what=f"operator /readyz (log: {self.log_path})")

    def _get(self, port: int, path: str) -> tuple[int, str]:
        try:
            response = httpx2.get(f"http://127.0.0.1:{port}{path}", timeout=10.0, trust_env=False)
        except httpx2.TransportError:
            return 0, ""
        return response.status_code, response.text

    def ready(self) -> bool:
        if self.process is None or self.process.poll() is not None:
            raise AssertionError(
                f"operator exited with {self.process and self.process.returncode}: {self.logs()}"
            )
        return self._get(self.health_port, "/readyz")[0] == 200

    def healthy(self) -> bool:
        return self._get(self.health_port, "/healthz")[0] == 200

    def metrics(self) -> str:
        code, text = self._get(self.metrics_port, "/metrics")
        assert code == 200, f"operator /metrics answered {code}"
        return text

    def reconciles(self) -> int:
        """Finished reconciles (any outcome) since this process started."""
        total = 0.0
        for line in self.metrics().splitlines():
            if line.startswith("uds_vm_reconcile_total{"):
                total += float(line.rsplit(" ", 1)[1])
        return int(total)

    def kill(self) -> None:
        """SIGKILL our own PID (crash simulation)."""
        if self.process is None:
            return
        process, self.process = self.process, None
        process.kill()
        process.wait(timeout=10)
