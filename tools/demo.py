"""``make demo``: a UDSVirtualMachine reconciled to Ready on a local control plane, in about half a minute.

Steps: start (or reuse) the local kube-apiserver + etcd + kube-controller-manager with the upstream CDI and
KubeVirt CRDs and ours, start ``uds-vm-operator run`` as a subprocess, apply a VM whose disk comes over HTTP
with a declared SHA-256, then — because no CDI or KubeVirt controllers run here — write the status *they*
would write (clearly printed as "[demo] playing CDI/KubeVirt"), and show the VM reach ``Ready`` with its
digest verified by CDI's own checksum path. Everything the demo started is stopped at the end unless
``--keep`` is given.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools" / "envtest"))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from controlplane import (  # noqa: E402 (the launcher lives next to this script)
    ControlPlane,
    ControlPlaneError,
    attach,
    default_crd_folders,
    install_crds,
    load_crd_documents,
    start,
)
from uds_vm_operator.cli._kube import CliKubeError, KubeClient  # noqa: E402
from uds_vm_operator.cli.inventory import human_age  # noqa: E402

NAMESPACE = "demo"
VM_NAME = "web"
DIGEST = "sha256:" + "3f" * 32
MERGE = "application/merge-patch+json"
APPLY = "application/apply-patch+yaml"
T = TypeVar("T")
console = Console(highlight=False, width=max(120, Console().width))

DEMO_VM: dict[str, Any] = {
    "apiVersion": "uds.dev/v1alpha1",
    "kind": "UDSVirtualMachine",
    "metadata": {"name": VM_NAME, "namespace": NAMESPACE},
    "spec": {
        "os": "linux",
        "source": {"http": {"url": "https://images.site.internal/ubuntu-24.04.img", "checksum": DIGEST}},
        "disk": {"virtualSize": "10Gi"},
        "resources": {"cpu": 2, "memory": "2Gi"},
        "runStrategy": "Always",
        "cloudInit": {
            "sshAuthorizedKeys": [
                "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDemoDemoDemoDemoDemoDemoDemoDemoDemoDemoDemo0 ops@site"
            ]
        },
        "network": {"egress": "dns"},
    },
}


def say(message: str) -> None:
    console.print(f"[bold cyan]\\[demo][/] {message}")


def play(message: str) -> None:
    console.print(f"[bold magenta]\\[demo] playing CDI/KubeVirt:[/] {message}")


def wait(predicate: Callable[[], T | None], timeout_s: float, what: str) -> T:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ensure_plane(state_dir: Path) -> tuple[ControlPlane, bool]:
    """Reuse a healthy plane recorded in state_dir, else start one; returns (plane, started_here)."""
    existing = attach(state_dir)
    if existing is not None and existing.is_healthy():
        say(f"reusing the control plane in {state_dir} ({existing.server})")
        install_crds(existing, load_crd_documents(default_crd_folders()))
        return existing, False
    if existing is not None:
        say("found a stale control plane record; stopping it first")
        existing.stop()
    say("starting kube-apiserver + etcd + kube-controller-manager (upstream CDI/KubeVirt CRDs and ours)")
    plane = start(state_dir)
    say(f"control plane up in {plane.timings.get('total', 0):.1f} s: {plane.server}")
    return plane, True


def start_operator(kubeconfig: Path, log_path: Path) -> tuple[subprocess.Popen[bytes], int]:
    metrics_port, health_port = free_port(), free_port()
    argv = [
        sys.executable,
        "-m",
        "uds_vm_operator.operator_main",
        "run",
        "--kubeconfig",
        str(kubeconfig),
        "--namespace",
        NAMESPACE,
        "--standalone",
        "--bind-address",
        "127.0.0.1",
        "--metrics-port",
        str(metrics_port),
        "--health-port",
        str(health_port),
    ]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "NO_PROXY": "*"}
        )
    return process, health_port


def operator_ready(process: subprocess.Popen[bytes], health_port: int, log_path: Path) -> bool:
    if process.poll() is not None:
        raise RuntimeError(f"the operator exited with {process.returncode}; see {log_path}")
    try:
        with socket.create_connection(("127.0.0.1", health_port), timeout=1) as sock:
            sock.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
            return sock.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def vm_status(client: KubeClient) -> dict[str, Any]:
    """The demo VM's status (empty until the operator wrote one)."""
    body = client.request(
        "GET", f"/apis/uds.dev/v1alpha1/namespaces/{NAMESPACE}/udsvirtualmachines/{VM_NAME}", what="read"
    )
    return dict((body or {}).get("status") or {})


def wait_phase(client: KubeClient, phase: str, timeout_s: float = 60) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        status = vm_status(client)
        return status if status.get("phase") == phase else None

    status = wait(reached, timeout_s, f"phase {phase}")
    say(f"status.phase = [bold]{phase}[/]  {status.get('message', '')}")
    return status


def print_wide_table(client: KubeClient) -> None:
    listing = client.request(
        "GET", f"/apis/uds.dev/v1alpha1/namespaces/{NAMESPACE}/udsvirtualmachines", what="list"
    )
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in (
        "NAME",
        "PHASE",
        "SOURCE",
        "PVC-SIZE",
        "CHECKSUM-VERIFIED",
        "ZERO-TRUST",
        "RECONCILER",
        "AGE",
        "OS",
    ):
        table.add_column(column)
    now = datetime.now(UTC)
    for item in (listing or {}).get("items") or []:
        status = item.get("status") or {}
        table.add_row(
            item["metadata"]["name"],
            str(status.get("phase", "")),
            str(status.get("source", "")),
            str(status.get("pvcSize", "")),
            str(bool(status.get("checksumVerified"))).lower(),
            str(bool(status.get("zeroTrust"))).lower(),
            str(status.get("reconciledBy", "")),
            human_age(item["metadata"].get("creationTimestamp"), now),
            str(item["spec"].get("os", "linux")),
        )
    console.print(f"\n$ kubectl get udsvm -n {NAMESPACE} -o wide")
    console.print(table)


def remove_earlier_demo(client: KubeClient) -> None:
    """On a reused control plane, delete the VM of an earlier run and wait until its children are gone."""
    paths = [
        f"/apis/uds.dev/v1alpha1/namespaces/{NAMESPACE}/udsvirtualmachines/{VM_NAME}",
        f"/apis/cdi.kubevirt.io/v1beta1/namespaces/{NAMESPACE}/datavolumes/{VM_NAME}-dv",
        f"/apis/kubevirt.io/v1/namespaces/{NAMESPACE}/virtualmachines/{VM_NAME}",
    ]
    if all(client.request("GET", path, what="look for an earlier demo") is None for path in paths):
        return
    say("removing the VM of an earlier demo run")
    for path in paths:
        client.request(
            "DELETE", path, body={"propagationPolicy": "Background"}, what="delete an earlier demo"
        )
    wait(
        lambda: all(client.request("GET", path, what="wait for deletion") is None for path in paths),
        60,
        "the earlier demo VM to be deleted",
    )


def run_demo(client: KubeClient) -> None:
    base = f"/apis/uds.dev/v1alpha1/namespaces/{NAMESPACE}/udsvirtualmachines/{VM_NAME}"
    dv = f"/apis/cdi.kubevirt.io/v1beta1/namespaces/{NAMESPACE}/datavolumes/{VM_NAME}-dv"
    vm = f"/apis/kubevirt.io/v1/namespaces/{NAMESPACE}/virtualmachines/{VM_NAME}"
    strict = {"fieldManager": "uds-demo", "fieldValidation": "Strict"}
    say(f"applying UDSVirtualMachine {NAMESPACE}/{VM_NAME} (http source, digest {DIGEST[:20]}..., 10Gi disk)")
    client.request(
        "PATCH", base, body=DEMO_VM, content_type=APPLY, params={**strict, "force": "true"}, what="apply"
    )
    wait_phase(client, "Pending")
    children = {
        "DataVolume": client.request("GET", dv, what="dv"),
        "VirtualMachine": client.request("GET", vm, what="vm"),
        "NetworkPolicy": client.request(
            "GET",
            f"/apis/networking.k8s.io/v1/namespaces/{NAMESPACE}/networkpolicies/{VM_NAME}-netpol",
            what="np",
        ),
        "Secret": client.request(
            "GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/{VM_NAME}-cloudinit", what="s"
        ),
    }
    for kind, body in children.items():
        say(f"operator created {kind} {body['metadata']['name'] if body else '(missing!)'}")
    run_strategy = (children["VirtualMachine"] or {}).get("spec", {}).get("runStrategy")
    say(f"KubeVirt VM runStrategy = {run_strategy} (held until the digest is verified)")

    play("CDI starts importing over HTTP (DataVolume phase ImportInProgress, 42.0%)")
    client.request(
        "PATCH",
        dv + "/status",
        body={"status": {"phase": "ImportInProgress", "progress": "42.0%"}},
        content_type=MERGE,
        params=strict,
        what="dv status",
    )
    status = wait_phase(client, "Importing")
    say(f"status.importProgress = {status.get('importProgress')}")
    play("CDI finished; its spec.source.http.checksum check passed (DataVolume phase Succeeded, 100.0%)")
    client.request(
        "PATCH",
        dv + "/status",
        body={"status": {"phase": "Succeeded", "progress": "100.0%"}},
        content_type=MERGE,
        params=strict,
        what="dv status",
    )
    status = wait_phase(client, "Provisioning")
    say(f"checksumVerified = {status.get('checksumVerified')} by {status.get('verifiedBy')}")
    wait(
        lambda: (client.request("GET", vm, what="vm") or {}).get("spec", {}).get("runStrategy") == "Always",
        30,
        "the VM to be released",
    )
    say("KubeVirt VM runStrategy = Always (released after verification)")
    play("KubeVirt started the VM (VirtualMachine printableStatus Running, ready true)")
    client.request(
        "PATCH",
        vm + "/status",
        body={"status": {"printableStatus": "Running", "ready": True, "created": True}},
        content_type=MERGE,
        params=strict,
        what="vm status",
    )
    wait_phase(client, "Ready")
    print_wide_table(client)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--state-dir", type=Path, default=ROOT / ".envtest", help="control-plane state (default .envtest)"
    )
    parser.add_argument("--keep", action="store_true", help="leave the control plane running afterwards")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        plane, started_plane = ensure_plane(args.state_dir)
    except ControlPlaneError as error:
        console.print(
            f"[red]error:[/] {error}\n(run `make envtest-bins` to build the control-plane binaries)"
        )
        return 1
    log_path = args.state_dir / "logs" / "demo-operator.log"
    operator: subprocess.Popen[bytes] | None = None
    try:
        with KubeClient(plane.kubeconfig) as client:
            if client.request("GET", f"/api/v1/namespaces/{NAMESPACE}", what="read the namespace") is None:
                namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
                client.request("POST", "/api/v1/namespaces", body=namespace, what="create the namespace")
            remove_earlier_demo(client)
            say(f"starting uds-vm-operator (log: {log_path})")
            operator, health_port = start_operator(plane.kubeconfig, log_path)
            wait(lambda: operator_ready(operator, health_port, log_path), 60, "the operator to be ready")
            run_demo(client)
        say(f"done in {time.monotonic() - started:.1f} s")
        return 0
    except (CliKubeError, TimeoutError, RuntimeError) as error:
        console.print(f"[red]demo failed:[/] {error}\nsee the operator log: {log_path}")
        return 1
    finally:
        if operator is not None and operator.poll() is None:
            operator.send_signal(signal.SIGTERM)
            try:
                operator.wait(timeout=20)
            except subprocess.TimeoutExpired:
                operator.kill()
                operator.wait()
        if started_plane and not args.keep:
            say("stopping the control plane this demo started (use --keep to leave it running)")
            plane.stop()
        elif started_plane:
            say(
                f"control plane left running: export KUBECONFIG={plane.kubeconfig}  (stop: make cluster-down)"
            )


if __name__ == "__main__":
    sys.exit(main())
