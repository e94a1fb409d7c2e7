"""The real-node tier's handle on the running node: API access, pods, their container PIDs, volumes.

Nothing here plays a component: pods are scheduled by kube-scheduler, started by the kubelet through
containerd, wired by the CNI bridge plugin; Services go through kube-proxy; policies through kube-router.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from tests.integration.operator_harness import Api, OperatorProcess
from tools.node import node, volumes
from tools.node import node_configs as cfg
from uds_vm_operator.controller.release import without_release

T = TypeVar("T")


def wait_until(
    what: str, probe: Callable[[], T | None], timeout_s: float = 90.0, interval_s: float = 0.5
) -> T:
    """Poll until probe returns something truthy; fail with `what` (never a bare sleep)."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what} (last: {last!r})")


@dataclass
class NodeHandle:
    """What a node test needs: the state dir, the API, the registry and the busybox image in it."""

    state_dir: Path
    paths: cfg.NodePaths
    kubeconfig: Path
    api: Api
    registry: str
    busybox: str
    created_pvs: list[str] = field(default_factory=list)

    def create(self, manifest: dict[str, Any], collection: str) -> dict[str, Any]:
        """POST with Strict field validation; anything but 201 fails the test with the API's message."""
        code, payload = self.api.call(
            "POST",
            collection,
            manifest,
            params={"fieldManager": "uds-node-tests", "fieldValidation": "Strict"},
            expect=(201,),
        )
        assert code == 201
        return dict(payload)

    # -------------------------------------------------------------------- namespaces and pods

    def namespace(self, prefix: str, labels: dict[str, str] | None = None) -> str:
        name = f"{prefix}-{secrets.token_hex(3)}"
        self.create(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": name, "labels": {"uds-vm-operator.dev/test": "true", **(labels or {})}},
            },
            "/api/v1/namespaces",
        )
        return name

    def delete_namespace(self, name: str) -> None:
        """Delete a test's namespace; first let its pool members go (the operator that would release them
        has stopped by now), or they would hold the namespace in Terminating for the rest of the run."""
        code, payload = self.api.call(
            "GET", f"/apis/uds.dev/v1alpha1/namespaces/{name}/udsvirtualmachines", expect=(200, 404)
        )
        members = (payload or {}).get("items") or [] if code == 200 else []  # 404: no CRD on this node
        for vm in members:
            remaining = without_release(vm["metadata"])
            if remaining is not None:
                self.api.call(
                    "PATCH",
                    f"/apis/uds.dev/v1alpha1/namespaces/{name}/udsvirtualmachines/{vm['metadata']['name']}",
                    {"metadata": {"finalizers": remaining}},
                    content_type="application/merge-patch+json",
                    expect=(200, 404, 409),
                )
        self.api.delete(f"/api/v1/namespaces/{name}")

    def server_pod(
        self,
        namespace: str,
        name: str,
        labels: dict[str, str],
        ports: tuple[int, ...] = (8080,),
        *,
        udp: bool = False,
    ) -> dict[str, Any]:
        """A busybox pod that accepts TCP on each port (httpd), as a target for probes."""
        script = " & ".join(f"httpd -f -p {port} -h /tmp" for port in ports) + " & wait"
        return self.run_pod(namespace, name, labels, ["sh", "-c", script], ports)

    def client_pod(self, namespace: str, name: str, labels: dict[str, str]) -> dict[str, Any]:
        """A pod that only sleeps: probes run in its network namespace from the host."""
        return self.run_pod(namespace, name, labels, ["sleep", "3600"], ())

    def run_pod(
        self, namespace: str, name: str, labels: dict[str, str], command: list[str], ports: tuple[int, ...]
    ) -> dict[str, Any]:
        pod = cfg.busybox_pod(namespace, name, labels, image=self.busybox, command=command, ports=ports)
        self.create(pod, f"/api/v1/namespaces/{namespace}/pods")
        return self.wait_running(namespace, name)

    def wait_running(self, namespace: str, name: str, timeout_s: float = 120.0) -> dict[str, Any]:
        def running() -> dict[str, Any] | None:
            pod = self.api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
            if pod is None:
                return None
            statuses = pod.get("status", {}).get("containerStatuses") or []
            if pod["status"].get("phase") == "Running" and statuses and all(s.get("ready") for s in statuses):
                return pod
            return None

        return wait_until(f"pod {namespace}/{name} Running and Ready", running, timeout_s)

    def container_pid(self, pod: dict[str, Any]) -> int:
        """The host PID of the pod's first container, from containerd's own task list."""
        return node.container_pid(self.paths, pod)

    # -------------------------------------------------------------------- volumes

    def volume(
        self,
        size_bytes: int,
        mode: Literal["Filesystem", "Block"] = "Filesystem",
        filesystem: volumes.Filesystem = "ext4",
        content: bytes | None = None,
        claim: tuple[str, str] | None = None,
    ) -> volumes.LocalVolume:
        """A real loop-backed volume offered as a static local PV (pre-bound to `claim` when given)."""
        volume = volumes.make_volume(self.paths, size_bytes, mode, filesystem, content)
        self.create(volume.persistent_volume(claim=claim), "/api/v1/persistentvolumes")
        self.created_pvs.append(volume.name)
        return volume


ROOT = Path(__file__).resolve().parents[2]


def push_operator_image(state_dir: Path, tag: str) -> str:
    """`make image` into this node's registry (built from the repo's Dockerfile; cached, so a rebuild with
    unchanged inputs only pushes); returns REGISTRY/uds-vm-operator:TAG@sha256:..."""
    env = {**os.environ, "ENVTEST_DIR": str(state_dir), "OPERATOR_IMAGE_TAG": tag}
    result = subprocess.run(
        [str(ROOT / "tools/images/image.sh")], capture_output=True, text=True, env=env, check=False
    )
    if result.returncode != 0:
        raise AssertionError(
            f"the operator image could not be built (tools/images/image.sh): {result.stderr[-3000:]}"
        )
    return pushed_operator_image(state_dir)


def pushed_operator_image(state_dir: Path) -> str:
    """The operator image the last `push_operator_image` into this node's registry pushed (no push)."""
    pinned = (state_dir / "operator-image").read_text(encoding="utf-8").strip()
    tagged = (state_dir / "operator-image-tag").read_text(encoding="utf-8").strip()
    return f"{tagged}@{pinned.split('@', 1)[1]}"


def load_handle(state_dir: Path) -> NodeHandle:
    paths = cfg.NodePaths(state_dir=state_dir.resolve(), run_dir=_run_dir(state_dir))
    return NodeHandle(
        state_dir=state_dir,
        paths=paths,
        kubeconfig=state_dir / "kubeconfig",
        api=Api(state_dir / "kubeconfig"),
        registry=(state_dir / "registry").read_text(encoding="utf-8").strip(),
        busybox=(state_dir / "busybox-image").read_text(encoding="utf-8").strip(),
    )


def _run_dir(state_dir: Path) -> Path:
    return node.paths_for(state_dir).run_dir


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=1, sort_keys=True)


@contextmanager
def running_operator(
    node: NodeHandle, namespace: str, log_dir: Path, image: str | None = None
) -> Iterator[OperatorProcess]:
    """The operator as a real host process watching `namespace`; its log is printed when the test ends.

    image: the operator image its verifier pods run (the one built in this run); without it the operator's
    default reference is used, which suits tests that never start a verifier pod.
    """
    # The node's own image servers live on its pod and service networks: the admin allowlist of the
    # operator's SSRF lock (chart value ssrf.allowedSourceHosts, ADR 0016) names them.
    environment = {**os.environ, "UDS_VM_ALLOWED_SOURCE_HOSTS": f"{cfg.POD_CIDR},{cfg.SERVICE_CIDR}"}
    if image is not None:
        environment["UDS_VM_OPERATOR_IMAGE"] = image
    process = OperatorProcess(node.kubeconfig, namespace, log_dir, environment=environment)
    process.start()
    try:
        yield process
    finally:
        process.stop()
        print(f"--- operator log ---\n{process.logs()}")
