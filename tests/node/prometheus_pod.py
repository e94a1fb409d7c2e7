"""A real Prometheus in a pod on the node: Debian bookworm's `prometheus` package (tools/prometheus/image.sh),
pulled by containerd from the node's loopback registry, scraping what a test names.

    from tests.node.prometheus_pod import run_prometheus

    prom = run_prometheus(node, monitoring_ns, [
        {"job_name": "guest", "static_configs": [{"targets": [f"{vm_pod_ip}:9100"]}]},
    ])
    up = prom.wait_for('up{job="guest"} == 1')   # [{"metric": {...}, "value": [ts, "1"]}]
    prom.targets()                               # /api/v1/targets' activeTargets (health, lastError, ...)

Its scrapes leave from the pod's own address with the pod's labels (`app.kubernetes.io/name: prometheus`, in
the test's namespace), so a NetworkPolicy in front of the target decides them as it would a site's Prometheus.
The test reads Prometheus' HTTP API from inside the Prometheus pod's network namespace on 127.0.0.1
(probes.py, the tier's way of reaching pods), so no policy the test applies stands between the test and its
Prometheus.
"""

from __future__ import annotations

import functools
import json
import subprocess
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.node.node_cluster import NodeHandle, wait_until
from tools.node import probes
from tools.node.node_configs import RESTRICTED_CONTEXT

ROOT = Path(__file__).resolve().parents[2]
PORT = 9090
LABELS = {"app.kubernetes.io/name": "prometheus"}
SCRAPE_INTERVAL = "5s"
ARGS = (
    "--config.file=/etc/prometheus/prometheus.yml",
    "--storage.tsdb.path=/prometheus",
    f"--web.listen-address=:{PORT}",
)


@functools.cache
def prometheus_image(registry: str) -> str:
    """Build (or reuse, from ~/.cache) the Prometheus image and push it into the node's registry, once per
    registry and session; returns REGISTRY/uds-test/prometheus:<Debian version>@sha256:..., pinned by digest
    as containerd pulls it (the same registry the node's busybox and the operator image are pushed to)."""
    result = subprocess.run(
        [str(ROOT / "tools/prometheus/image.sh"), "--push", registry],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise AssertionError(
            f"the Prometheus image could not be built or pushed (tools/prometheus/image.sh): "
            f"{result.stderr[-3000:]}"
        )
    return result.stdout.strip().splitlines()[-1]


def prometheus_config(scrape_configs: list[dict[str, Any]]) -> str:
    """prometheus.yml: every job every 5 s, unless a scrape config sets its own interval."""
    config = {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
        "scrape_configs": scrape_configs,
    }
    return str(yaml.safe_dump(config, sort_keys=False))


@dataclass
class Prometheus:
    """A running Prometheus pod; its API answers from inside its own network namespace."""

    node: NodeHandle
    namespace: str
    name: str
    pod: dict[str, Any]
    pid: int

    @property
    def pod_ip(self) -> str:
        """The address its scrapes leave from (what a NetworkPolicy sees)."""
        return str(self.pod["status"]["podIP"])

    def api(self, path: str, params: dict[str, str] | None = None) -> Any:
        """GET Prometheus' HTTP API (path like /api/v1/query); returns its `data`, fails on anything else."""
        url = path + ("?" + urllib.parse.urlencode(params) if params else "")
        code, body = probes.http_get(self.pid, "127.0.0.1", PORT, url)
        if code != 200:
            raise AssertionError(f"Prometheus GET {url}: HTTP {code}: {body[-2000:]}")
        answer = json.loads(body)
        if answer.get("status") != "success":
            raise AssertionError(f"Prometheus GET {url}: {answer}")
        return answer["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query: the result vector, e.g. [{"metric": {"job": ...}, "value": [ts, "1"]}]."""
        return list(self.api("/api/v1/query", {"query": promql})["result"])

    def targets(self) -> list[dict[str, Any]]:
        """/api/v1/targets' activeTargets: scrapeUrl, health ("up", "down", "unknown"), lastError, labels.

        Empty for the first few seconds after start (discovery runs every 5 s); the first sample of a target
        lands within ~10 s of Ready (measured 5-9 s), so prefer wait_for('up{job="..."} == 1') (or `== 0`)."""
        return list(self.api("/api/v1/targets", {"state": "active"})["activeTargets"])

    def wait_for(self, promql: str, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        """Poll an instant query until its result is non-empty (the targets in the failure message)."""
        try:
            return wait_until(f"Prometheus to answer {promql!r}", lambda: self.query(promql), timeout_s, 1.0)
        except AssertionError as error:
            try:
                targets: Any = self.targets()
            except AssertionError as unreadable:
                targets = f"(unreadable: {unreadable})"
            raise AssertionError(f"{error}\ntargets: {targets}") from None

    def logs(self, lines: int = 50) -> str:
        """The last lines of Prometheus' own log, for a failing test's message."""
        return self.node.api.text(
            f"/api/v1/namespaces/{self.namespace}/pods/{self.name}/log?tailLines={lines}"
        )


def run_prometheus(
    node: NodeHandle,
    namespace: str,
    scrape_configs: list[dict[str, Any]],
    *,
    name: str = "prometheus",
    labels: dict[str, str] | None = None,
    timeout_s: float = 120.0,
) -> Prometheus:
    """A ConfigMap with prometheus.yml and a Pod running Prometheus on it, labelled
    app.kubernetes.io/name=prometheus (plus `labels`); returns once the pod is Ready (/-/ready answers).

    scrape_configs: Prometheus' own scrape_config entries (static_configs: the pod has no API token).
    """
    image = prometheus_image(node.registry)
    config_map = f"{name}-config"
    node.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": config_map, "namespace": namespace},
            "data": {"prometheus.yml": prometheus_config(scrape_configs)},
        },
        f"/api/v1/namespaces/{namespace}/configmaps",
    )
    # The restricted profile as the image's own user (Debian's `prometheus`, numeric: runAsNonRoot checks it).
    context = {key: value for key, value in RESTRICTED_CONTEXT.items() if key != "runAsUser"}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {**LABELS, **(labels or {})}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "prometheus",
                    "image": image,
                    "args": list(ARGS),
                    "ports": [{"name": "web", "containerPort": PORT}],
                    "readinessProbe": {
                        "httpGet": {"path": "/-/ready", "port": PORT},
                        "periodSeconds": 1,
                        "failureThreshold": 3,
                    },
                    "securityContext": context,
                    "volumeMounts": [
                        {"name": "config", "mountPath": "/etc/prometheus", "readOnly": True},
                        {"name": "data", "mountPath": "/prometheus"},
                    ],
                }
            ],
            "volumes": [
                {"name": "config", "configMap": {"name": config_map}},
                {"name": "data", "emptyDir": {}},
            ],
        },
    }
    node.create(pod, f"/api/v1/namespaces/{namespace}/pods")
    try:
        running = node.wait_running(namespace, name, timeout_s)
    except AssertionError as error:
        current = node.api.get(f"/api/v1/namespaces/{namespace}/pods/{name}") or {}
        raise AssertionError(f"{error}\nstatus: {current.get('status')}") from None
    return Prometheus(node, namespace, name, running, node.container_pid(running))
