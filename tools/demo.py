"""``make demo``: a UDSVirtualMachine on a real node, its disk verified by a real verifier pod, its network
isolation shown by real packets — and, said plainly, what is still played.

Stages (each timed): the control plane and one real node (kubelet, containerd, CNI, kube-proxy, CoreDNS,
kube-router, a loopback registry: tools/node/); the operator's image built from the repo's Dockerfile with
buildah and pushed into that registry; `helm install` of chart/ into a namespace that enforces the
`restricted` Pod Security profile; a VM whose disk was "uploaded" (the demo plays CDI: it writes the bytes
onto a real loop-backed volume and creates the PVC CDI would create); the operator's verifier pod hashing
that volume on the node; the VM's NetworkPolicy enforced against a pod with a virt-launcher pod's labels
(the demo plays KubeVirt's launcher); KubeVirt's "Running" status played last. Everything the demo started
is removed at the end unless ``--keep`` is given.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools" / "envtest"))
sys.path.insert(0, str(ROOT / "tools" / "node"))

import node_configs as cfg  # noqa: E402
import probes  # noqa: E402
import volumes  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import node as node_launcher  # noqa: E402
from uds_vm_operator.api.quantity import parse_bytes  # noqa: E402
from uds_vm_operator.cli._errors import CliError  # noqa: E402
from uds_vm_operator.cli._kube import KubeClient  # noqa: E402
from uds_vm_operator.cli.inventory import human_age  # noqa: E402

NAMESPACE = "demo"
OPERATOR_NAMESPACE = "uds-vm-operator"
VM_NAME = "web"
DISK_BYTES = 64 * 1024 * 1024
MERGE = "application/merge-patch+json"
APPLY = "application/apply-patch+yaml"
STRICT = {"fieldManager": "uds-demo", "fieldValidation": "Strict"}
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
T = TypeVar("T")
console = Console(highlight=False, width=max(120, Console().width))
timings: list[tuple[str, float]] = []


def say(message: str) -> None:
    console.print(f"[bold cyan]\\[demo][/] {message}")


def play(message: str) -> None:
    console.print(f"[bold magenta]\\[demo] PLAYED (no real component yet):[/] {message}")


def real(message: str) -> None:
    console.print(f"[bold green]\\[demo] real:[/] {message}")


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Time one stage; the table at the end shows where the minutes go."""
    console.rule(f"[bold]{name}")
    started = time.monotonic()
    try:
        yield
    finally:
        timings.append((name, time.monotonic() - started))


def wait(predicate: Callable[[], T | None], timeout_s: float, what: str) -> T:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def demo_vm(digest: str) -> dict[str, Any]:
    return {
        "apiVersion": "uds.dev/v1alpha1",
        "kind": "UDSVirtualMachine",
        "metadata": {"name": VM_NAME, "namespace": NAMESPACE},
        "spec": {
            "os": "linux",
            "source": {"upload": {"checksum": digest}},
            "disk": {"virtualSize": DISK_BYTES, "storageClassName": "udsvm-local"},
            "resources": {"cpu": 2, "memory": "2Gi"},
            "runStrategy": "Always",
            "cloudInit": {
                "flavor": "debian",
                "sshAuthorizedKeys": [
                    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDemoDemoDemoDemoDemoDemoDemoDemoDemoDemoDemo0 "
                    "ops@site"
                ],
            },
            "network": {"egress": "dns"},
        },
    }


class Demo:
    """The demo's calls against the node's API server (admin kubeconfig of the test plane)."""

    def __init__(self, state_dir: Path, client: KubeClient) -> None:
        self.state_dir = state_dir
        self.paths = node_launcher.paths_for(state_dir)
        self.client = client

    def get(self, path: str) -> dict[str, Any] | None:
        body = self.client.request("GET", path, what=f"read {path}")
        return dict(body) if body else None

    def post(self, manifest: dict[str, Any], collection: str) -> dict[str, Any]:
        return dict(
            self.client.request("POST", collection, body=manifest, params=STRICT, what="create") or {}
        )

    def namespace(self, name: str, labels: dict[str, str]) -> None:
        if self.get(f"/api/v1/namespaces/{name}") is None:
            self.post(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}},
                "/api/v1/namespaces",
            )

    def vm_status(self) -> dict[str, Any]:
        vm = self.get(f"/apis/uds.dev/v1alpha1/namespaces/{NAMESPACE}/udsvirtualmachines/{VM_NAME}") or {}
        return dict(vm.get("status") or {})

    def busybox_pod(self, namespace: str, name: str, labels: dict[str, str], command: list[str]) -> int:
        """A busybox pod (image from the node's registry); returns its container's host PID once Ready."""
        image = (self.state_dir / "busybox-image").read_text(encoding="utf-8").strip()
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "automountServiceAccountToken": False,
                "containers": [
                    {
                        "name": "main",
                        "image": image,
                        "command": command,
                        "securityContext": {
                            "allowPrivilegeEscalation": False,
                            "runAsNonRoot": True,
                            "runAsUser": 65532,
                            "capabilities": {"drop": ["ALL"]},
                            "seccompProfile": {"type": "RuntimeDefault"},
                        },
                    }
                ],
            },
        }
        self.post(pod, f"/api/v1/namespaces/{namespace}/pods")

        def ready() -> dict[str, Any] | None:
            body = self.get(f"/api/v1/namespaces/{namespace}/pods/{name}") or {}
            statuses = body.get("status", {}).get("containerStatuses") or []
            return body if statuses and statuses[0].get("ready") else None

        body = wait(ready, 120, f"pod {namespace}/{name}")
        return node_launcher.container_pid(self.paths, body)


def helm_binary() -> str:
    result = subprocess.run([str(ROOT / "tools/helm/build.sh")], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"helm could not be built: {result.stderr[-2000:]}")
    return result.stdout.strip()


def build_image(state_dir: Path) -> str:
    env = {**os.environ, "ENVTEST_DIR": str(state_dir), "OPERATOR_IMAGE_TAG": "demo"}
    result = subprocess.run(
        [str(ROOT / "tools/images/image.sh")], capture_output=True, text=True, env=env, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"the operator image did not build: {result.stderr[-3000:]}")
    pinned = (state_dir / "operator-image").read_text(encoding="utf-8").strip()
    return pinned


def install_chart(demo: Demo, helm: str, image: str) -> None:
    demo.namespace(OPERATOR_NAMESPACE, RESTRICTED)
    repository, digest = image.split("@", 1)  # REGISTRY/uds-vm-operator@sha256:... (make image)
    argv = [
        helm,
        "--kubeconfig",
        str(demo.state_dir / "kubeconfig"),
        "upgrade",
        "--install",
        "uds-vm-operator",
        str(ROOT / "chart"),
        "-n",
        OPERATOR_NAMESPACE,
        "--set",
        f"image.repository={repository}",
        "--set",
        "image.tag=demo",
        "--set",
        f"image.digest={digest}",
        # ADR 0016: the operator manages the namespaces it is given (Secret and pod rights only there); its
        # NetworkPolicy stays off on the demo node (API server on a random port).
        "--set",
        f"watchNamespaces={{{NAMESPACE}}}",
        "--set",
        "networkPolicy.enabled=false",
    ]
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"helm install failed: {result.stderr}")

    def ready() -> dict[str, Any] | None:
        listing = (
            demo.get(
                f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/pods?labelSelector=app.kubernetes.io/name%3Duds-vm-operator"
            )
            or {}
        )
        for pod in listing.get("items") or []:
            statuses = pod.get("status", {}).get("containerStatuses") or []
            if statuses and statuses[0].get("ready") and pod["metadata"].get("deletionTimestamp") is None:
                return dict(pod)
        return None

    pod = wait(ready, 240, "the operator pod to be Ready")
    status = pod["status"]["containerStatuses"][0]
    real(
        f"operator pod {pod['metadata']['name']} Ready on {pod['spec']['nodeName']}, "
        f"image {status['imageID']}"
    )


def upload_disk(demo: Demo, disk: bytes) -> None:
    """Play CDI's upload: the disk on a real volume, in the PVC CDI would create for the DataVolume."""
    dv = wait(
        lambda: demo.get(f"/apis/cdi.kubevirt.io/v1beta1/namespaces/{NAMESPACE}/datavolumes/{VM_NAME}-dv"),
        60,
        "the DataVolume",
    )
    pvc_spec = dv["spec"]["pvc"]
    size = parse_bytes(pvc_spec["resources"]["requests"]["storage"], field="DataVolume spec.pvc")
    room = volumes.filesystem_size_for(len(disk), size)  # ext4 keeps ~8 %: see volumes.filesystem_size_for
    volume = volumes.make_volume(demo.paths, room, "Filesystem", "ext4")
    assert volume.mount_point is not None
    target = volume.mount_point / "disk.img"
    target.write_bytes(disk)
    os.chown(target, 107, 107)
    demo.post(volume.persistent_volume(claim=(NAMESPACE, f"{VM_NAME}-dv")), "/api/v1/persistentvolumes")
    demo.post(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": f"{VM_NAME}-dv", "namespace": NAMESPACE},
            "spec": pvc_spec,
        },
        f"/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims",
    )
    demo.client.request(
        "PATCH",
        f"/apis/cdi.kubevirt.io/v1beta1/namespaces/{NAMESPACE}/datavolumes/{VM_NAME}-dv/status",
        body={"status": {"phase": "Succeeded", "progress": "100.0%"}},
        content_type=MERGE,
        params=STRICT,
        what="dv status",
    )
    play(
        f"CDI upload: {len(disk) >> 20} MiB written to {volume.device} "
        f"(ext4 PV of {room >> 20} MiB, claim {size >> 20} MiB), PVC {VM_NAME}-dv bound, DataVolume Succeeded"
    )


def watch_verifier(demo: Demo) -> None:
    def terminated() -> dict[str, Any] | None:
        pod = demo.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{VM_NAME}-verify") or {}
        statuses = pod.get("status", {}).get("containerStatuses") or []
        return pod if statuses and "terminated" in statuses[0].get("state", {}) else None

    pod = wait(terminated, 180, "the verifier pod to finish")
    state = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    verdict = json.loads(state["message"])
    real(
        f"verifier pod ran on {pod['spec']['nodeName']} (restricted PSS, read-only PVC, no network): "
        f"{verdict['result']}, {verdict['bytes']} bytes hashed"
    )
    status = wait(lambda: (s := demo.vm_status()).get("checksumVerified") and s, 90, "checksumVerified")
    real(
        f"status.checksumVerified = true by {status.get('verifiedBy')}; "
        f"digest {status.get('verifiedDigest', '')[:30]}..."
    )


def show_policy(demo: Demo, outsider_ns: str) -> None:
    labels = {
        "uds.dev/vm": VM_NAME,
        "app.kubernetes.io/managed-by": "uds-vm-operator",
        "kubevirt.io": "virt-launcher",
    }
    vm_pid = demo.busybox_pod(
        NAMESPACE, "virt-launcher-web-demo", labels, ["sh", "-c", "httpd -f -p 8080 -h /tmp"]
    )
    play(
        "KubeVirt's virt-launcher pod: a busybox pod with the labels the launcher carries, listening on 8080"
    )
    pod = demo.get(f"/api/v1/namespaces/{NAMESPACE}/pods/virt-launcher-web-demo") or {}
    vm_ip = pod["status"]["podIP"]
    outsider = demo.busybox_pod(outsider_ns, "outsider", {"app": "outsider"}, ["sleep", "3600"])
    outcome = wait(
        lambda: (o := probes.tcp(outsider, vm_ip, 8080)) in ("refused", "timeout") and o,
        45,
        "policy enforced",
    )
    real(
        f"from namespace {outsider_ns} to the VM {vm_ip}:8080 -> {outcome} "
        f"(kube-router enforcing {VM_NAME}-netpol)"
    )
    answer = probes.dns(vm_pid, "kube-dns.kube-system.svc.cluster.local", cfg.CLUSTER_DNS_IP)
    real(f"from the VM, DNS to kube-dns -> {answer.get('addresses')} (the only egress allowed)")
    real(f"from the VM to the API server 10.0.0.1:443 -> {probes.tcp(vm_pid, '10.0.0.1', 443)}")


def print_table(demo: Demo) -> None:
    listing = demo.get(f"/apis/uds.dev/v1alpha1/namespaces/{NAMESPACE}/udsvirtualmachines") or {}
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("NAME", "PHASE", "SOURCE", "PVC-SIZE", "CHECKSUM-VERIFIED", "ZERO-TRUST", "AGE"):
        table.add_column(column)
    now = datetime.now(UTC)
    for item in listing.get("items") or []:
        status = item.get("status") or {}
        table.add_row(
            item["metadata"]["name"],
            str(status.get("phase", "")),
            str(status.get("source", "")),
            str(status.get("pvcSize", "")),
            str(bool(status.get("checksumVerified"))).lower(),
            str(bool(status.get("zeroTrust"))).lower(),
            human_age(item["metadata"].get("creationTimestamp"), now),
        )
    console.print(f"\n$ kubectl get udsvm -n {NAMESPACE} -o wide")
    console.print(table)


def print_timings() -> None:
    table = Table(title="time per stage", box=None, header_style="bold")
    table.add_column("stage")
    table.add_column("seconds", justify="right")
    for name, seconds in timings:
        table.add_row(name, f"{seconds:.1f}")
    table.add_row("[bold]total", f"[bold]{sum(s for _, s in timings):.1f}")
    console.print(table)


def run(state_dir: Path) -> None:
    with stage("control plane + real node"):
        _, node_timings = node_launcher.up(state_dir)
        real("node: " + ", ".join(f"{k} {v:.1f} s" for k, v in node_timings.items()))
    with stage("operator image (repo Dockerfile, buildah, offline)"):
        image = build_image(state_dir)
        real(f"built and pushed {image}")
    with KubeClient(state_dir / "kubeconfig", timeout_s=30.0) as client:
        demo = Demo(state_dir, client)
        with stage("helm install (restricted namespace)"):
            install_chart(demo, helm_binary(), image)
        disk = os.urandom(DISK_BYTES)
        digest = "sha256:" + hashlib.sha256(disk).hexdigest()
        with stage("VM applied, disk uploaded"):
            demo.namespace(NAMESPACE, RESTRICTED)
            client.request(
                "PATCH",
                f"/apis/uds.dev/v1alpha1/namespaces/{NAMESPACE}/udsvirtualmachines/{VM_NAME}",
                body=demo_vm(digest),
                content_type=APPLY,
                params={**STRICT, "force": "true"},
                what="apply",
            )
            say(f"applied UDSVirtualMachine {NAMESPACE}/{VM_NAME} (upload, declared {digest[:23]}...)")
            upload_disk(demo, disk)
        with stage("SI-7: real verifier pod on a real volume"):
            watch_verifier(demo)
            wait(
                lambda: (
                    (demo.get(f"/apis/kubevirt.io/v1/namespaces/{NAMESPACE}/virtualmachines/{VM_NAME}") or {})
                    .get("spec", {})
                    .get("runStrategy")
                    == "Always"
                ),
                60,
                "the VM to be released",
            )
            real("KubeVirt VM runStrategy = Always (released only after the verdict)")
        with stage("SC-7: policy proven by packets"):
            demo.namespace("demo-outsider", {})
            show_policy(demo, "demo-outsider")
        with stage("KubeVirt reports Running"):
            play("KubeVirt started the VM (VirtualMachine printableStatus Running, ready true)")
            client.request(
                "PATCH",
                f"/apis/kubevirt.io/v1/namespaces/{NAMESPACE}/virtualmachines/{VM_NAME}/status",
                body={"status": {"printableStatus": "Running", "ready": True, "created": True}},
                content_type=MERGE,
                params=STRICT,
                what="vm status",
            )
            wait(lambda: demo.vm_status().get("phase") == "Ready", 60, "phase Ready")
            real("status.phase = Ready (reconciled by the operator pod)")
        print_table(demo)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--state-dir", type=Path, default=ROOT / ".envtest", help="plane and node state (default .envtest)"
    )
    parser.add_argument(
        "--keep", action="store_true", help="leave the node, the plane and the demo running afterwards"
    )
    args = parser.parse_args(argv)
    state_dir = args.state_dir.resolve()
    code = 0
    try:
        run(state_dir)
    except (
        node_launcher.NodeError,
        CliError,
        TimeoutError,
        RuntimeError,
        *node_launcher.controlplane.LAUNCH_ERRORS,
    ) as error:
        console.print(f"[red]demo failed:[/] {error}\nlogs: {state_dir / 'logs'}")
        code = 1
    except Exception as error:  # a bug: still one line, the logs say the rest
        console.print(
            f"[red]demo failed (unexpected {type(error).__name__}):[/] {error}\nlogs: {state_dir / 'logs'}"
        )
        code = 1
    finally:
        if args.keep:
            say(f"left running: export KUBECONFIG={state_dir / 'kubeconfig'}  (stop: make cluster-down)")
        else:
            with stage("teardown (make cluster-down)"):
                removed = node_launcher.down(state_dir, stop_plane=True)
                say(f"node and plane stopped; {len(removed)} host objects removed")
        print_timings()
    return code


if __name__ == "__main__":
    sys.exit(main())
