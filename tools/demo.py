"""``make demo``: the product's whole promise on real components: an image in, a hardened VM up, evidence out.

Every stage runs a real component and says which (nothing is played): the control plane and one real node
(kubelet, containerd, CNI, kube-proxy, CoreDNS, kube-router, a loopback registry: tools/node/); KubeVirt
v1.8.4 (virt-api, virt-controller, virt-handler with its node labeller and device plugins) and CDI v1.65.0
(cdi-operator, its controller and upload proxy); the operator's image built from the repo's Dockerfile and
installed with its chart into a namespace that enforces the `restricted` Pod Security profile. Then the
field engineer's path: `uds-vmctl prep` of the project's Debian guest image → apply of what prep wrote →
`uds-vmctl upload` through CDI's real upload proxy → the operator's verifier pod hashes the bytes that landed
→ KubeVirt boots the guest under software emulation → SSH as the declared user works, password and root
logins are refused → the VM's NetworkPolicy proven by packets → `uds-vmctl verify`, `inventory` and
`compliance validate` → a tampered image refused before a byte leaves the machine. The node's provisioner
role (a static local volume for each claim CDI makes) is the demo's. Everything the demo started is removed
at the end unless ``--keep`` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import yaml
from rich.console import Console
from rich.table import Table

from tools.envtest.pinned_versions import pinned_versions
from tools.kubevirt import kubevirt_install
from tools.laps import Laps
from tools.node import guest_ssh, probes, volumes
from tools.node import node as node_launcher
from tools.node import node_configs as cfg
from uds_vm_operator.api.quantity import parse_bytes
from uds_vm_operator.child_names import netpol_name, root_dv_name
from uds_vm_operator.cli._errors import CliError
from uds_vm_operator.cli._kube import KubeClient
from uds_vm_operator.cli.inventory import human_age
from uds_vm_operator.render.verifier import verifier_pod_name
from uds_vm_operator.runtime import kube

ROOT = Path(__file__).resolve().parents[1]

NAMESPACE = "demo"
OUTSIDER_NAMESPACE = "demo-outsider"
OPERATOR_NAMESPACE = "uds-vm-operator"
VM_NAME = "web"
DV_NAME = root_dv_name(VM_NAME)
# What the field engineer preps and uploads: the qcow2 form of the guest image, as images are usually shipped
# (535 MB for a 2 GiB disk). CDI's upload server converts it to raw; the verifier checks the raw content
# against the content digest in prep's image record. prep reads a quarter of the bytes of the raw form.
GUEST_IMAGE = ROOT / ".envtest" / "guest" / "debian-12.qcow2"
# The tampered copy is made from the raw form: one byte changed anywhere is still a well-formed image.
GUEST_RAW = GUEST_IMAGE.with_suffix(".raw")
UPLOAD_PROXY_NAME = "cdi-uploadproxy.cdi.svc"  # a name in the proxy's certificate (CDI's cert manager)
API_SERVER_SERVICE = "10.0.0.1"
KUBE_DNS_NAME = "kube-dns.kube-system.svc.cluster.local"
MERGE = "application/merge-patch+json"
STRICT = {"fieldManager": "uds-demo", "fieldValidation": "Strict"}
# API paths come from runtime/kube's kind registry, like the CLI's; the demo adds the two cluster-scoped kinds
# only it writes (the operator never touches namespaces or volumes).
NAMESPACES = kube.register_kind(kube.Kind("v1", "Namespace", "namespaces", namespaced=False))
PERSISTENT_VOLUMES = kube.register_kind(
    kube.Kind("v1", "PersistentVolume", "persistentvolumes", namespaced=False)
)
LAUNCHER_PODS = {"labelSelector": "kubevirt.io=virt-launcher"}
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
HOSTILE_PASSWORD = "hunter2"
HOSTILE_USER_DATA = f"""\
ssh_pwauth: true
disable_root: false
chpasswd: {{expire: false, list: ["root:{HOSTILE_PASSWORD}", "ops:{HOSTILE_PASSWORD}"]}}
"""
T = TypeVar("T")
console = Console(highlight=False, width=max(120, Console().width))
timings: list[tuple[str, float]] = []
DEMO_STARTED = time.monotonic()


class DemoError(RuntimeError):
    """A stage failed; the message names the component and quotes what it said."""


def say(message: str) -> None:
    console.print(f"[bold cyan]\\[demo][/] {message}")


def real(component: str, message: str) -> None:
    console.print(f"[bold green]\\[demo] {component}:[/] {message}")


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Time one stage; the table at the end shows where the minutes go."""
    started = time.monotonic()
    console.rule(f"[bold]{name}[/] [dim](at {started - DEMO_STARTED:.0f} s)")
    try:
        yield
    finally:
        timings.append((name, time.monotonic() - started))


def wait(predicate: Callable[[], T | None], timeout_s: float, what: str) -> T:
    """Poll (bounded) with a live spinner, so no minute passes silently."""
    deadline = time.monotonic() + timeout_s
    started = time.monotonic()
    with console.status(f"waiting for {what}") as status:
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            status.update(f"waiting for {what} ({time.monotonic() - started:.0f} s)")
            time.sleep(1.0)
    raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def command(
    argv: list[str],
    what: str,
    *,
    timeout_s: float = 3600.0,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> str:
    """Run one of the project's tools; on failure raise with its own last words."""
    result = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=cwd, check=False
    )
    if result.returncode != 0:
        raise DemoError(
            f"{what} failed (exit {result.returncode}): {(result.stderr or result.stdout)[-3000:]}"
        )
    return result.stdout


def vmctl(*args: str) -> subprocess.CompletedProcess[str]:
    """`uds-vmctl` as the field engineer runs it: a new process, judged by its exit code."""
    return subprocess.run(
        [sys.executable, "-m", "uds_vm_operator.cli.main", *args], capture_output=True, text=True, check=False
    )


class Demo:
    """The demo's calls against the node's API server (admin kubeconfig of the test plane)."""

    def __init__(self, state_dir: Path, client: KubeClient, workdir: Path) -> None:
        self.state_dir = state_dir
        self.kubeconfig = state_dir / "kubeconfig"
        self.paths = node_launcher.paths_for(state_dir)
        self.client = client
        self.workdir = workdir

    def get(self, path: str, params: dict[str, str] | None = None) -> dict[str, Any] | None:
        body = self.client.request("GET", path, params=params, what=f"read {path}")
        return dict(body) if body else None

    def post(self, manifest: dict[str, Any], collection: str) -> dict[str, Any]:
        return dict(
            self.client.request("POST", collection, body=manifest, params=STRICT, what="create") or {}
        )

    def apply(self, manifest: dict[str, Any], path: str) -> None:
        self.client.request(
            "PATCH",
            path,
            body=manifest,
            content_type=kube.APPLY_CONTENT_TYPE,
            params={**STRICT, "force": "true"},
            what="apply",
        )

    def namespace(self, name: str, labels: dict[str, str]) -> None:
        """Create the namespace; one still being deleted (an earlier run's teardown, a test's) is waited for
        first, since nothing can be created in it ("it is being terminated")."""
        existing = self.get(NAMESPACES.path(name=name))
        if existing is not None and "deletionTimestamp" in existing["metadata"]:
            say(f"namespace {name} is still being deleted (an earlier run's); waiting for it to go")
            wait(lambda: self.get(NAMESPACES.path(name=name)) is None, 300, f"namespace {name} to be deleted")
            existing = None
        if existing is None:
            self.post(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}},
                NAMESPACES.path(),
            )

    def udsvm(self) -> dict[str, Any]:
        return self.get(kube.UDS_VM.path(NAMESPACE, VM_NAME)) or {}

    def vm_status(self) -> dict[str, Any]:
        return dict(self.udsvm().get("status") or {})

    def vmi(self) -> dict[str, Any]:
        return self.get(kube.VIRTUAL_MACHINE_INSTANCE.path(NAMESPACE, VM_NAME)) or {}

    def datavolume(self) -> dict[str, Any]:
        return self.get(kube.DATA_VOLUME.path(NAMESPACE, DV_NAME)) or {}

    def busybox_pod(self, namespace: str, name: str, labels: dict[str, str]) -> int:
        """A sleeping busybox pod (image from the node's registry); returns its container's host PID once
        Ready. Probes and the SSH client run in its network namespace."""
        image = (self.state_dir / "busybox-image").read_text(encoding="utf-8").strip()
        pod = cfg.busybox_pod(namespace, name, labels, image=image, command=["sleep", "3600"])
        self.post(pod, kube.POD.path(namespace))

        def ready() -> dict[str, Any] | None:
            body = self.get(kube.POD.path(namespace, name)) or {}
            statuses = body.get("status", {}).get("containerStatuses") or []
            return body if statuses and statuses[0].get("ready") else None

        body = wait(ready, 120, f"pod {namespace}/{name}")
        return node_launcher.container_pid(self.paths, body)

    def serial_console(self, launcher_pod: str, lines: int = 40) -> str:
        """The last lines of the guest's serial console (KubeVirt's guest-console-log container): what a
        guest that never answers was doing, kept in the failure's message since the node goes with the run."""
        answer = self.client.exchange(
            "GET",
            kube.POD.path(NAMESPACE, launcher_pod, "log"),
            params={"container": "guest-console-log", "tailLines": str(lines)},
            accept="*/*",  # the log endpoint answers text; an Accept of text/plain alone gets HTTP 406
            what="read the guest's serial console",
        )
        return answer.text if answer.status == 200 else f"(unread: HTTP {answer.status} {answer.text[:200]})"

    def launcher_pid(self) -> int:
        """The host PID of the VM's virt-launcher pod: its network namespace is where the guest's traffic
        leaves, masqueraded, and where the VM's NetworkPolicy applies."""
        pods = (self.get(kube.POD.path(NAMESPACE), LAUNCHER_PODS) or {}).get("items") or []
        if not pods:
            raise DemoError("KubeVirt made no virt-launcher pod for the VM")
        return node_launcher.container_pid(self.paths, pods[0])

    def provision(self, claim: str) -> volumes.LocalVolume:
        """The node's provisioner: a real loop-backed volume of exactly the size CDI's claim asks for, as a
        static local PV bound to it."""
        pvc = wait(
            lambda: self.get(kube.PVC.path(NAMESPACE, claim)),
            120,
            f"CDI's claim {claim}",
        )
        size = parse_bytes(str(pvc["spec"]["resources"]["requests"]["storage"]), field=f"PVC {claim}")
        mode = pvc["spec"].get("volumeMode") or "Filesystem"
        volume = volumes.make_volume(self.paths, size, mode, "ext4")
        self.post(volume.persistent_volume(claim=(NAMESPACE, claim)), PERSISTENT_VOLUMES.path())
        return volume


def helm_binary() -> str:
    return command([str(ROOT / "tools/helm/build.sh")], "building helm").strip()


def build_image(state_dir: Path) -> str:
    env = {**os.environ, "ENVTEST_DIR": str(state_dir), "OPERATOR_IMAGE_TAG": "demo"}
    command([str(ROOT / "tools/images/image.sh")], "the operator image build", env=env)
    return (state_dir / "operator-image").read_text(encoding="utf-8").strip()


def install_chart(demo: Demo, helm: str, image: str) -> None:
    demo.namespace(OPERATOR_NAMESPACE, RESTRICTED)
    repository, digest = image.split("@", 1)  # REGISTRY/uds-vm-operator@sha256:... (make image)
    command(
        [
            helm, "--kubeconfig", str(demo.kubeconfig), "upgrade", "--install", "uds-vm-operator",
            str(ROOT / "chart"), "-n", OPERATOR_NAMESPACE,
            "--set", f"image.repository={repository}", "--set", "image.tag=demo",
            "--set", f"image.digest={digest}",
            # ADR 0016: the operator manages the namespaces it is given (Secret and pod rights only there);
            # the node's import networks are the only HTTP sources it accepts.
            "--set", f"watchNamespaces={{{NAMESPACE}}}",
            "--set", "networkPolicy.enabled=false",
        ],
        "helm install",
    )  # fmt: skip

    def ready() -> dict[str, Any] | None:
        listing = (
            demo.get(
                kube.POD.path(OPERATOR_NAMESPACE), {"labelSelector": "app.kubernetes.io/name=uds-vm-operator"}
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
        "operator",
        f"pod {pod['metadata']['name']} Ready on {pod['spec']['nodeName']} (restricted PSS), "
        f"image {status['imageID']}",
    )


def prep_and_apply(demo: Demo, keys: tuple[Path, str]) -> dict[str, Any]:
    """`uds-vmctl prep` the guest image, then apply what it wrote, with the declared user's key."""
    out = demo.workdir / "prep"
    done = vmctl("prep", str(GUEST_IMAGE), "--name", VM_NAME, "-n", NAMESPACE, "-o", str(out), "--json")
    if done.returncode != 0:
        raise DemoError(f"uds-vmctl prep failed: {done.stderr[-2000:]}")
    report = dict(json.loads(done.stdout))
    real("uds-vmctl prep", f"{report['format']} image, {report['sha256'][:23]}..., PVC {report['pvc_size']}")
    record = yaml.safe_load((out / f"{VM_NAME}.image-record.configmap.yaml").read_text(encoding="utf-8"))
    demo.apply(record, kube.CONFIG_MAP.path(NAMESPACE, record["metadata"]["name"]))
    vm = yaml.safe_load((out / f"{VM_NAME}.udsvm.yaml").read_text(encoding="utf-8"))
    vm["spec"]["disk"].update({"storageClassName": "udsvm-local", "volumeMode": "Filesystem"})
    # No resources declared: the operator's Linux default (one vCPU, 1Gi), as every node test guest boots.
    # Two vCPUs were tried (faster boots under software emulation) and withdrawn: in CI a two-vCPU guest's
    # kernel stalled with its second vCPU's timer never firing (RCU stall, QEMU idle) and never came up
    # (ADR 0017).
    vm["spec"]["cloudInit"] = {
        "flavor": "debian",
        "users": [{"name": guest_ssh.GUEST_USER, "sshAuthorizedKeys": [keys[1]], "sudo": True}],
        "userData": HOSTILE_USER_DATA,  # asks for password and root logins: the operator's hardening wins
    }
    vm["spec"]["network"] = {
        "allow": [
            {
                "direction": "Ingress",
                "podSelector": {"matchLabels": {"app": "admin"}},
                "ports": [{"port": 22}],
            }
        ]
    }
    demo.apply(vm, kube.UDS_VM.path(NAMESPACE, VM_NAME))
    say(f"applied UDSVirtualMachine {NAMESPACE}/{VM_NAME} (upload, declared {report['sha256'][:23]}...)")
    return report


def upload(demo: Demo) -> None:
    """Volumes for CDI's claims, then `uds-vmctl upload` through CDI's real upload proxy."""
    demo.provision(DV_NAME)
    scratch: list[volumes.LocalVolume] = []

    def upload_ready() -> bool:
        if not scratch and demo.get(kube.PVC.path(NAMESPACE, f"{DV_NAME}-scratch")):
            scratch.append(demo.provision(f"{DV_NAME}-scratch"))
        return (demo.datavolume().get("status") or {}).get("phase") == "UploadReady"

    wait(upload_ready, 300, f"CDI's upload server for {DV_NAME} (DataVolume UploadReady)")
    service = demo.get(kube.SERVICE.path("cdi", "cdi-uploadproxy")) or {}
    bundle = demo.get(kube.CONFIG_MAP.path("cdi", "cdi-uploadproxy-signer-bundle")) or {}
    ca = demo.workdir / "uploadproxy-ca.pem"
    ca.write_text(bundle["data"]["ca-bundle.crt"], encoding="utf-8")
    url = f"https://{service['spec']['clusterIP']}:443"
    started = time.monotonic()
    done = vmctl(
        "upload", str(GUEST_IMAGE), "--name", VM_NAME, "-n", NAMESPACE, "--kubeconfig", str(demo.kubeconfig),
        "--uploadproxy-url", url, "--ca-file", str(ca), "--tls-server-name", UPLOAD_PROXY_NAME,
    )  # fmt: skip
    if done.returncode != 0:
        raise DemoError(f"uds-vmctl upload failed: {done.stderr[-2000:]}")
    real("uds-vmctl upload", f"{GUEST_IMAGE.name} streamed to {url} (TLS checked against CDI's CA)")
    wait(
        lambda: (demo.datavolume().get("status") or {}).get("phase") == "Succeeded",
        600,
        "DataVolume Succeeded",
    )
    real("CDI", f"DataVolume {DV_NAME} Succeeded {time.monotonic() - started:.0f} s after the upload began")


def watch_verifier(demo: Demo) -> None:
    def terminated() -> dict[str, Any] | None:
        pod = demo.get(kube.POD.path(NAMESPACE, verifier_pod_name(VM_NAME))) or {}
        statuses = pod.get("status", {}).get("containerStatuses") or []
        return pod if statuses and "terminated" in statuses[0].get("state", {}) else None

    pod = wait(terminated, 600, "the verifier pod to finish")
    state = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    verdict = json.loads(state["message"])
    real(
        "verifier pod",
        f"ran on {pod['spec']['nodeName']} (restricted PSS, read-only PVC, no network): "
        f"{verdict['result']}, {verdict['bytes']} bytes hashed",
    )
    status = wait(lambda: (s := demo.vm_status()).get("checksumVerified") and s, 120, "checksumVerified")
    real("operator", f"status.checksumVerified = true by {status.get('verifiedBy')}")


def boot(demo: Demo, admin: int, key: Path, applied_at: float) -> str:
    """KubeVirt boots the guest; return its address once the declared user logs in.

    The boot's own breakdown is printed too: verified → the VMI Running (virt-controller, the launcher pod,
    virt-handler, libvirt), Running → the first login, and the guest kernel's uptime at that login (the rest
    of the wait is QEMU starting and the firmware).
    """
    verified_at = time.monotonic()
    wait(lambda: (demo.vmi().get("status") or {}).get("phase") == "Running", 600, "KubeVirt's VMI Running")
    running_at = time.monotonic()
    vmi = demo.vmi()
    real(
        "KubeVirt", f"VMI {VM_NAME} Running on {vmi['status'].get('nodeName')} (virt-handler, virt-launcher)"
    )
    pods = (demo.get(kube.POD.path(NAMESPACE), LAUNCHER_PODS) or {}).get("items") or []
    address = str(pods[0]["status"]["podIP"])
    with console.status("waiting for the guest's sshd, then cloud-init's final stage (QEMU emulation)"):
        asked_at = time.monotonic()
        try:
            login_s = guest_ssh.wait_for_login(admin, address, key)
        except AssertionError as exc:
            pod = str(pods[0]["metadata"]["name"])
            tail = demo.serial_console(pod)
            raise DemoError(f"{exc}\nthe guest's serial console, last lines:\n{tail}") from exc
    logged_in_at = asked_at + login_s
    real(
        "guest",
        f"{guest_ssh.GUEST_USER} logged in over SSH at {address}, "
        f"{logged_in_at - applied_at:.0f} s after apply; cloud-init finished "
        f"{time.monotonic() - applied_at:.0f} s after apply",
    )
    uptime = guest_ssh.ssh(admin, address, guest_ssh.GUEST_USER, key, "cut -d' ' -f1 /proc/uptime")
    read_at = time.monotonic()
    guest_uptime = (
        f"{float(uptime.stdout.split()[0]) - (read_at - logged_in_at):.1f} s"
        if uptime.returncode == 0
        else "unread"
    )
    real(
        "KubeVirt",
        f"boot breakdown: verified → VMI Running {running_at - verified_at:.1f} s, Running → first login "
        f"{logged_in_at - running_at:.1f} s (the guest kernel's uptime at the login: {guest_uptime})",
    )
    return address


def hardening(demo: Demo, admin: int, address: str, keys: tuple[Path, str], stranger: Path) -> None:
    who = guest_ssh.ssh(
        admin, address, guest_ssh.GUEST_USER, keys[0], "id -un; systemctl is-active qemu-guest-agent"
    )
    real("guest", f"as the declared key: {' / '.join(who.stdout.split())}")
    attempts = {
        "ops by password": guest_ssh.ssh(
            admin, address, "ops", None, password=HOSTILE_PASSWORD, workdir=demo.workdir
        ),
        "root by password": guest_ssh.ssh(
            admin, address, "root", None, password=HOSTILE_PASSWORD, workdir=demo.workdir
        ),
        "root with the declared key": guest_ssh.ssh(admin, address, "root", keys[0]),
        "ops with an undeclared key": guest_ssh.ssh(admin, address, "ops", stranger),
    }
    for attempt, result in attempts.items():
        refused = result.returncode == 255 and "Permission denied" in result.stderr
        if not refused:
            raise DemoError(f"hardening: {attempt} was not refused: {result}")
        real("guest sshd", f"{attempt} -> refused (Permission denied)")


def packets(demo: Demo, admin: int, address: str, key: Path) -> None:
    demo.namespace(OUTSIDER_NAMESPACE, {})
    outsider = demo.busybox_pod(OUTSIDER_NAMESPACE, "outsider", {"app": "outsider"})
    if not probes.tcp_blocked(outsider, address, 22):
        raise DemoError(f"a pod in {OUTSIDER_NAMESPACE} reached the guest's sshd")
    real("kube-router", f"{OUTSIDER_NAMESPACE}/outsider -> {address}:22 blocked ({netpol_name(VM_NAME)})")
    real(
        "kube-router",
        f"{NAMESPACE}/admin -> {address}:22 {probes.tcp(admin, address, 22)} (the declared allow)",
    )
    at_pod = probes.dns(demo.launcher_pid(), KUBE_DNS_NAME, cfg.CLUSTER_DNS_IP)
    if at_pod.get("addresses") != [cfg.CLUSTER_DNS_IP]:
        raise DemoError(f"DNS from the VM's launcher pod to {cfg.CLUSTER_DNS_IP}: {at_pod}")
    real("kube-router", f"DNS from the VM's launcher pod -> {at_pod.get('addresses')} (egress: DNS only)")
    dns = guest_ssh.guest_dns_lookup(admin, address, key, KUBE_DNS_NAME, cfg.CLUSTER_DNS_IP)
    real("guest", f"DNS query from inside the guest to {cfg.CLUSTER_DNS_IP} -> {dns}")
    api = guest_ssh.guest_tcp(admin, address, key, API_SERVER_SERVICE, 443)
    if api == "connected":
        raise DemoError("the guest reached the API server")
    real("guest", f"TCP from inside the guest to the API server {API_SERVER_SERVICE}:443 -> {api}")


def evidence(demo: Demo) -> None:
    kube = ("--kubeconfig", str(demo.kubeconfig))
    verify = vmctl("verify", VM_NAME, "-n", NAMESPACE, "--json", *kube)
    if verify.returncode != 0:
        raise DemoError(f"uds-vmctl verify: {verify.stdout}{verify.stderr}")
    verdict = json.loads(verify.stdout)
    real("uds-vmctl verify", f"exit 0, {json.dumps({k: verdict[k] for k in list(verdict)[:4]})}")
    inventory = vmctl("inventory", "-n", NAMESPACE, *kube)
    console.print(inventory.stdout.rstrip())
    results = demo.workdir / "assessment-results.yaml"
    compliance = vmctl("compliance", "validate", "-n", NAMESPACE, "-o", str(results), "--json", *kube)
    if compliance.returncode not in (0, 1) or not compliance.stdout.strip():  # 1: a control not satisfied
        raise DemoError(
            f"uds-vmctl compliance validate: {compliance.stdout[-2000:]}{compliance.stderr[-2000:]}"
        )
    summary = json.loads(compliance.stdout)
    table = Table(
        title=f"uds-vmctl compliance validate -n {NAMESPACE} (OSCAL results: {results.name})", box=None
    )
    for column in ("control", "result", "why not"):
        table.add_column(column)
    for vm in summary["vms"]:
        for control, result in vm["controls"].items():
            reasons = "; ".join(vm.get("messages", {}).get(control, []))
            colour = "green" if result == "satisfied" else "yellow"
            table.add_row(control.upper(), f"[{colour}]{result}[/]", reasons)
    console.print(table)
    satisfied = sum(r == "satisfied" for vm in summary["vms"] for r in vm["controls"].values())
    total = sum(len(vm["controls"]) for vm in summary["vms"])
    real(
        "uds-vmctl compliance validate",
        f"{satisfied} of {total} controls satisfied by the live objects (exit {compliance.returncode}); "
        "the rest are what this demo VM does not declare (a BIOS Debian image: no secure boot, no FIPS mode, "
        "no auto-updates, no Retain data disk, no spec.backup for CP-9/CP-10), each reason above",
    )


def tampered(demo: Demo) -> None:
    """One byte changed in a copy of the image: `uds-vmctl upload` refuses it before a byte is sent."""
    copy = demo.workdir / "tampered.raw"
    subprocess.run(["cp", "--sparse=always", str(GUEST_RAW), str(copy)], check=True, timeout=300)
    with copy.open("r+b") as handle:
        handle.seek(1 << 20)
        byte = handle.read(1)
        handle.seek(1 << 20)
        handle.write(bytes([byte[0] ^ 0xFF]))
    done = vmctl(
        "upload", str(copy), "--name", VM_NAME, "-n", NAMESPACE, "--kubeconfig", str(demo.kubeconfig),
        "--uploadproxy-url", "https://127.0.0.1:9", "--tls-server-name", UPLOAD_PROXY_NAME,
    )  # fmt: skip
    if done.returncode == 0 or "nothing was sent" not in done.stderr:
        raise DemoError(f"a tampered image was not refused: exit {done.returncode}: {done.stderr[-1500:]}")
    real(
        "uds-vmctl upload",
        f"tampered copy refused, exit {done.returncode}: {done.stderr.strip().splitlines()[-1][:200]}",
    )
    copy.unlink()


def remove_demo(state_dir: Path) -> str:
    """Undo the demo on a node it did not start: its namespaces, the chart's release, CDI. Return the seconds
    each step took, for the teardown's line (the teardown was half of the demo's time in the node tier).

    A namespace is deleted only once its pods are gone. The namespace controller, finding a pod that still
    runs, waits out that pod's whole termination grace period before it looks again, even when the pod ends
    a second later (measured: the demo's namespace took 48 s, though its last pod was gone after 14 s)."""
    laps = Laps()
    with KubeClient(state_dir / "kubeconfig", timeout_s=30.0) as client:
        # The operator still runs: it lets the VM go (its finalizer), and KubeVirt shuts the guest down.
        client.request(
            "DELETE",
            kube.UDS_VM.path(NAMESPACE),
            what="delete the demo's VMs",
        )
        for namespace in (NAMESPACE, OUTSIDER_NAMESPACE):
            client.request(
                "DELETE",
                kube.POD.path(namespace),
                params={"labelSelector": "!kubevirt.io"},  # the probe pods; the launcher goes with its VM
                what="delete the demo's probe pods",
            )
        wait(lambda: no_pods(client, NAMESPACE, OUTSIDER_NAMESPACE), 300, "the demo's VM and pods to stop")
        laps.lap("VM stopped")
        for namespace in (NAMESPACE, OUTSIDER_NAMESPACE):
            client.request("DELETE", NAMESPACES.path(name=namespace), what="delete namespace")
        kubeconfig = str(state_dir / "kubeconfig")
        helm = helm_binary()
        command(
            [
                helm,
                "--kubeconfig",
                kubeconfig,
                "uninstall",
                "uds-vm-operator",
                "-n",
                OPERATOR_NAMESPACE,
                "--wait",
                "--ignore-not-found",  # a demo that failed before its helm install has no release
            ],
            "helm uninstall",
        )
        wait(lambda: no_pods(client, OPERATOR_NAMESPACE), 300, "the operator's pods to stop")
        client.request("DELETE", NAMESPACES.path(name=OPERATOR_NAMESPACE), what="delete namespace")
        laps.lap("helm uninstall")

        def gone() -> bool:
            return all(
                client.request("GET", NAMESPACES.path(name=n), what="namespace") is None
                for n in (NAMESPACE, OUTSIDER_NAMESPACE, OPERATOR_NAMESPACE)
            )

        wait(gone, 300, "the demo's namespaces to be deleted")
        laps.lap("namespaces gone")
    said = command(
        [sys.executable, "-m", "tools.cdi.install", "--state-dir", str(state_dir), "--down"],
        "CDI down",
        cwd=ROOT,
    )
    laps.lap("CDI down")
    cdi_steps = said.strip().splitlines()[-1] if said.strip() else ""  # its own steps' seconds
    return laps.summary() + (f"; {cdi_steps}" if cdi_steps else "")


def no_pods(client: KubeClient, *namespaces: str) -> bool:
    """True once none of the namespaces holds a pod that has not ended."""
    for namespace in namespaces:
        listing = client.request("GET", kube.POD.path(namespace), what="list pods") or {}
        for pod in listing.get("items") or []:
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                return False
    return True


def print_table(demo: Demo) -> None:
    listing = demo.get(kube.UDS_VM.path(NAMESPACE)) or {}
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


def run(state_dir: Path, workdir: Path, *, reuse_node: bool) -> None:
    versions = pinned_versions()
    with stage("control plane + real node"):
        if reuse_node:
            if not node_launcher.status(state_dir, quiet=True):
                raise DemoError(f"--reuse-node: no healthy node in {state_dir} (make node-up)")
            real("node", f"reusing the running node in {state_dir}")
        else:
            _, node_timings = node_launcher.up(state_dir)
            real("node", ", ".join(f"{k} {v:.1f} s" for k, v in node_timings.items()))
    with stage("images: operator, KubeVirt, Debian guest"):
        image = build_image(state_dir)
        real("buildah", f"operator image {image}")
        command([str(ROOT / "tools/kubevirt/images.sh"), str(state_dir)], "KubeVirt's images")
        command([str(ROOT / "tools/guest/image.sh")], "the Debian guest image")
        real(
            "registry",
            f"virt-api, virt-controller, virt-handler, virt-launcher {versions.kubevirt}; "
            f"guest {GUEST_IMAGE.name}",
        )
    # CDI first: virt-api restarts whenever CDI's DataSource API appears or goes (KubeVirt watches it).
    with stage("CDI: operator, controller, upload proxy"):
        out = command(
            [sys.executable, "-m", "tools.cdi.install", "--state-dir", str(state_dir)],
            "CDI install",
            cwd=ROOT,
        )
        real("CDI", out.strip().splitlines()[-1])
    with stage(f"KubeVirt {versions.kubevirt}: api, controller, handler"):
        kubevirt_timings = kubevirt_install.up(state_dir, versions.kubevirt)
        real("KubeVirt", ", ".join(f"{k} {v:.1f} s" for k, v in kubevirt_timings.items()))
    with KubeClient(state_dir / "kubeconfig", timeout_s=30.0) as client:
        demo = Demo(state_dir, client, workdir)
        with stage("helm install (restricted namespace)"):
            demo.namespace(
                NAMESPACE, RESTRICTED
            )  # the chart grants the operator its rights in the namespaces it manages
            install_chart(demo, helm_binary(), image)
        keys = guest_ssh.keypair(workdir, "ops")
        stranger, _ = guest_ssh.keypair(workdir, "stranger")
        with stage("uds-vmctl prep + apply"):
            applied_at = time.monotonic()
            prep_and_apply(demo, keys)
        with stage("uds-vmctl upload through CDI's upload proxy"):
            upload(demo)
        with stage("SI-7: the verifier pod on the landed bytes"):
            watch_verifier(demo)
        with stage("KubeVirt boots the guest (software emulation)"):
            admin = demo.busybox_pod(NAMESPACE, "admin", {"app": "admin"})
            address = boot(demo, admin, keys[0], applied_at)
        with stage("IA-2/AC-17: the guest's hardening"):
            hardening(demo, admin, address, keys, stranger)
        with stage("SC-7: the VM's policy proven by packets"):
            packets(demo, admin, address, keys[0])
        with stage("evidence: verify, inventory, compliance"):
            wait(lambda: demo.vm_status().get("phase") == "Ready", 180, "the UDSVirtualMachine Ready")
            evidence(demo)
        with stage("SI-7: a tampered image"):
            tampered(demo)
        print_table(demo)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--state-dir", type=Path, default=ROOT / ".envtest", help="plane and node state (default .envtest)"
    )
    parser.add_argument(
        "--keep", action="store_true", help="leave the node, the plane and the demo running afterwards"
    )
    parser.add_argument(
        "--reuse-node",
        action="store_true",
        help="run on the node already up in --state-dir (make node-up; the test tier's node) and afterwards "
        "remove only what the demo added (its namespaces, the chart, CDI), not the node",
    )
    args = parser.parse_args(argv)
    state_dir = args.state_dir.resolve()
    workdir = Path(tempfile.mkdtemp(prefix="uds-demo-"))
    code = 0
    try:
        run(state_dir, workdir, reuse_node=args.reuse_node)
    except Exception as error:  # every failure: the stage, the component's own words, and where to look
        failed = timings[-1][0] if timings else "start"
        kind = (
            ""
            if isinstance(error, DemoError | CliError | TimeoutError | node_launcher.NodeError)
            else (f" ({type(error).__name__})")
        )
        console.print(f"[red]demo failed in stage '{failed}'{kind}:[/] {error}")
        console.print(
            f"look: logs in {state_dir / 'logs'}; run `make demo DEMO_ARGS=--keep` and "
            f"`export KUBECONFIG={state_dir / 'kubeconfig'}` to inspect the cluster afterwards"
        )
        code = 1
    finally:
        if args.keep:
            say(f"left running: export KUBECONFIG={state_dir / 'kubeconfig'}  (stop: make cluster-down)")
        elif args.reuse_node:
            with stage("teardown (what the demo added)"):
                try:
                    steps = remove_demo(state_dir)
                    say(f"demo namespaces, the chart and CDI removed ({steps}); the node keeps running")
                except (DemoError, TimeoutError) as error:
                    console.print(f"[red]demo teardown failed:[/] {error}")
                    code = 1
        else:
            with stage("teardown (make cluster-down)"):
                removed = node_launcher.down(state_dir, stop_plane=True)
                say(f"node and plane stopped; {len(removed)} host objects removed")
            shutil.rmtree(workdir, ignore_errors=True)
        print_timings()
    return code


if __name__ == "__main__":
    sys.exit(main())
