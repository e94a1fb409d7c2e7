"""One real node joined to the test control plane: `python -m tools.node.node up|down|status --state-dir DIR`.

`up` (idempotent) starts, in order: the loopback OCI registry (Debian's docker-registry) with the node's own
images pushed into it; the pod bridge with the node address (the API server listens there, so pods reach it);
the control plane (tools/envtest/controlplane.py, node mode) unless a node-mode plane already runs in DIR;
containerd + runc + the Debian CNI plugins; the kubelet; kube-scheduler; kube-proxy; kube-router
(firewall only: the NetworkPolicy engine, ADR 0009); CoreDNS as a Deployment behind the `kube-dns` Service.
Every process is recorded by PID (with its kernel start time), every host change is recorded against a
baseline taken first, and `down` stops the processes and removes exactly what is new: mounts, network
namespaces, veths, the bridge, loop devices, iptables chains and rules, ipsets, cgroups.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from tools.envtest import controlplane
from tools.envtest.pinned_versions import REPO_ROOT, cache_root, read_versions_env
from tools.envtest.processes import ProcessRecord, spawn, stop
from tools.node import host_baseline, node_images
from tools.node import node_configs as cfg

HERE = Path(__file__).resolve().parent

MACHINE_LOCK = Path("/run/uds-vm-operator-node.lock")
OWNER_FILE = Path("/run/uds-vm-operator-node.owner")
SYSCTLS = ("net.ipv4.ip_forward",)
ISOLATION_CHAIN = "UDSVM-ISOLATE"
NODE_COMPONENTS = ("registry", "containerd", "kubelet", "kube-scheduler", "kube-proxy", "kube-router")
READY_TIMEOUT_S = 120.0


class NodeError(RuntimeError):
    """The node could not start or stop; the message says why and what to run next."""


def _versions() -> dict[str, str]:
    return read_versions_env()


def node_bin_dir() -> Path:
    """Where tools/node/build.sh puts kubelet, kube-scheduler, kube-proxy, coredns and kube-router."""
    v = _versions()
    folder = (
        cache_root()
        / f"node-{v['K8S_VERSION']}-coredns-{v['COREDNS_VERSION']}-kuberouter-{v['KUBE_ROUTER_VERSION']}"
        / "bin"
    )
    missing = [
        name
        for name in ("kubelet", "kube-scheduler", "kube-proxy", "coredns", "kube-router")
        if not os.access(folder / name, os.X_OK)
    ]
    if missing:
        raise NodeError(f"missing node binaries {', '.join(missing)} in {folder}; run `make node-bins`")
    return folder


def _run_dir(state_dir: Path) -> Path:
    """Sockets live in a short folder (a unix socket path has at most 107 bytes), keyed by the state dir."""
    key = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:10]
    return Path("/run") / f"udsvm-{key}"


def paths_for(state_dir: Path) -> cfg.NodePaths:
    return cfg.NodePaths(state_dir=state_dir.resolve(), run_dir=_run_dir(state_dir))


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise NodeError(f"`{' '.join(argv)}` failed: {result.stderr.strip() or result.stdout.strip()}")
    return result


def _free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        return int(probe.getsockname()[1])


def _child_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("KUBECONFIG") and k.lower() not in ("http_proxy", "https_proxy")
    }
    return env | {"NO_PROXY": "*", "no_proxy": "*"}


# ---------------------------------------------------------------------------------------------- records


def _load_records(paths: cfg.NodePaths) -> list[ProcessRecord]:
    if not paths.pids.is_file():
        return []
    return [ProcessRecord.from_json(item) for item in json.loads(paths.pids.read_text(encoding="utf-8"))]


def _save_records(paths: cfg.NodePaths, records: Sequence[ProcessRecord]) -> None:
    paths.pids.write_text(json.dumps([r.as_json() for r in records], indent=2) + "\n", encoding="utf-8")


def _launch(
    paths: cfg.NodePaths, records: list[ProcessRecord], name: str, argv: list[str], tie: bool
) -> ProcessRecord:
    log = paths.log_dir / f"{name}.log"
    log.unlink(missing_ok=True)
    _, record = spawn(name, argv, log, _child_env(), tie_to_parent=tie)
    records.append(record)
    _save_records(paths, records)
    return record


def _wait(
    what: str,
    probe: Callable[[], bool],
    record: ProcessRecord | None,
    log: Path,
    timeout_s: float = READY_TIMEOUT_S,
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if record is not None and not record.is_alive():
            raise NodeError(f"{what} exited during start-up; last log lines ({log}):\n{log_tail(log)}")
        with contextlib.suppress(Exception):
            if probe():
                return
        time.sleep(0.25)
    raise NodeError(f"{what} not ready after {timeout_s:.0f} s; last log lines ({log}):\n{log_tail(log)}")


def log_tail(path: Path, lines: int = 30) -> str:
    """The last lines of a component's log, for an error message that must say what the component said."""
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _http_ok(url: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=2.0) as response:
        return bool(200 <= response.status < 300)


# ---------------------------------------------------------------------------------------------- machine lock


@contextlib.contextmanager
def _machine_lock() -> Iterator[None]:
    """One node per machine: kube-proxy's and kube-router's iptables chains are machine-wide names."""
    MACHINE_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(MACHINE_LOCK, "w", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _owner() -> Path | None:
    with contextlib.suppress(OSError):
        text = OWNER_FILE.read_text(encoding="utf-8").strip()
        return Path(text) if text else None
    return None


def _claim(paths: cfg.NodePaths) -> None:
    owner = _owner()
    if owner is not None and owner != paths.state_dir and _node_alive(cfg.NodePaths(owner, _run_dir(owner))):
        raise NodeError(
            f"a node of another checkout runs on this machine ({owner}); run `make node-down` there first "
            f"(one node per machine: its iptables chains and bridge have machine-wide names)"
        )
    OWNER_FILE.write_text(str(paths.state_dir) + "\n", encoding="utf-8")


def _wait_for_machine(paths: cfg.NodePaths) -> None:
    """With UDS_NODE_WAIT_S set, wait (outside the lock) for another checkout's node to go away first."""
    deadline = time.monotonic() + float(os.environ.get("UDS_NODE_WAIT_S", "0") or 0)
    announced = False
    while time.monotonic() < deadline:
        owner = _owner()
        if owner is None or owner == paths.state_dir:
            return
        if not _node_alive(cfg.NodePaths(owner, _run_dir(owner))):
            return
        if not announced:
            print(f"waiting for the node of {owner} to stop (UDS_NODE_WAIT_S)", file=sys.stderr)
            announced = True
        time.sleep(5)


def _node_alive(paths: cfg.NodePaths) -> bool:
    with contextlib.suppress(Exception):
        return any(r.is_alive() for r in _load_records(paths))
    return False


# ---------------------------------------------------------------------------------------------- host network


def _ensure_bridge() -> None:
    """The pod bridge exists before the API server starts: the server listens on its address."""
    if _sh("ip", "link", "show", cfg.BRIDGE, check=False).returncode != 0:
        _sh("ip", "link", "add", cfg.BRIDGE, "type", "bridge")
    addresses = _sh("ip", "-o", "-4", "addr", "show", "dev", cfg.BRIDGE).stdout
    if f" {cfg.NODE_ADDRESS}/" not in addresses:
        prefix = cfg.POD_CIDR.split("/")[1]
        _sh("ip", "addr", "add", f"{cfg.NODE_ADDRESS}/{prefix}", "dev", cfg.BRIDGE)
    _sh("ip", "link", "set", cfg.BRIDGE, "up")


def _share_mounts(paths: cfg.NodePaths) -> None:
    """Make the folders virt-handler mounts Bidirectional shared mounts of their own (a bind onto itself, then
    rshared), so mount propagation works without changing the host's root mount; node-down unmounts them
    with everything else under the node's folders."""
    for folder in paths.shared_mounts:
        folder.mkdir(parents=True, exist_ok=True)
        if str(folder.resolve()) not in host_baseline.mounts_under(folder):
            _sh("mount", "--bind", str(folder), str(folder))
        _sh("mount", "--make-rshared", str(folder))
    for folder in paths.kubevirt_host_dirs.values():
        folder.mkdir(parents=True, exist_ok=True)


def _isolate_pods() -> None:
    """Belt and braces for 'no route off the machine': drop anything forwarded between the pod bridge and any
    other interface, in mangle (before every filter-table ACCEPT that kube-proxy or kube-router may add)."""
    tool = "iptables"
    if _sh(tool, "-w", "-t", "mangle", "-S", ISOLATION_CHAIN, check=False).returncode != 0:
        _sh(tool, "-w", "-t", "mangle", "-N", ISOLATION_CHAIN)
        _sh(
            tool,
            "-w",
            "-t",
            "mangle",
            "-A",
            ISOLATION_CHAIN,
            "-i",
            cfg.BRIDGE,
            "!",
            "-o",
            cfg.BRIDGE,
            "-j",
            "DROP",
        )
        _sh(
            tool,
            "-w",
            "-t",
            "mangle",
            "-A",
            ISOLATION_CHAIN,
            "!",
            "-i",
            cfg.BRIDGE,
            "-o",
            cfg.BRIDGE,
            "-j",
            "DROP",
        )
    if _sh(tool, "-w", "-t", "mangle", "-C", "FORWARD", "-j", ISOLATION_CHAIN, check=False).returncode != 0:
        _sh(tool, "-w", "-t", "mangle", "-I", "FORWARD", "1", "-j", ISOLATION_CHAIN)
    # Pods reach Services through kube-proxy's DNAT, which routes between bridge ports: forwarding on, but
    # only ever from the bridge back to the bridge (the chain above).
    host_baseline.write_sysctl("net.ipv4.ip_forward", "1")


# ---------------------------------------------------------------------------------------------- registry


def _start_registry(paths: cfg.NodePaths, records: list[ProcessRecord], tie: bool) -> str:
    port = _free_port()
    address = f"127.0.0.1:{port}"
    paths.registry_data.mkdir(parents=True, exist_ok=True)
    paths.registry_config.write_text(
        "\n".join(
            [
                "version: 0.1",
                "log: {level: warn}",
                f"storage: {{filesystem: {{rootdirectory: {paths.registry_data}}},"
                " delete: {enabled: true}}",
                f"http: {{addr: '{address}'}}",
                "",
            ]
        ),
        encoding="utf-8",
    )
    binary = shutil.which("docker-registry")
    if binary is None:
        raise NodeError("docker-registry not found; run `make node-deps` (Debian package docker-registry)")
    record = _launch(paths, records, "registry", [binary, "serve", str(paths.registry_config)], tie)
    _wait("registry", lambda: _http_ok(f"http://{address}/v2/"), record, paths.log_dir / "registry.log", 30.0)
    (paths.state_dir / "registry").write_text(address + "\n", encoding="utf-8")
    return address


def _push_node_images(paths: cfg.NodePaths, registry: str, bins: Path) -> dict[str, str]:
    v = _versions()
    images = node_images.node_images(
        bins, cache_root() / "node-images", v["K8S_VERSION"], v["COREDNS_VERSION"]
    )
    refs = {}
    for role, image in images.items():
        local = node_images.build_static_image(image)
        refs[role] = node_images.push(local, registry, image.repository, image.tag)
    (paths.state_dir / "busybox-image").write_text(refs["busybox"] + "\n", encoding="utf-8")
    (paths.state_dir / "pause-image").write_text(refs["pause"] + "\n", encoding="utf-8")
    return refs


# ---------------------------------------------------------------------------------------------- components


def _write_runtime_configs(paths: cfg.NodePaths, registry: str, pause_ref: str) -> None:
    for folder in (
        paths.containerd_root,
        paths.containerd_state,
        paths.cni_conf_dir,
        paths.cni_ipam_dir,
        paths.kubelet_root,
        paths.pod_logs,
        paths.registry_hosts_dir / registry,
        paths.volumes_dir,
    ):
        folder.mkdir(parents=True, exist_ok=True)
    # The sandbox image by tag: containerd's CRI resolves sandbox_image by name.
    paths.containerd_config.write_text(
        cfg.containerd_config(paths, pause_ref.split("@", maxsplit=1)[0]), encoding="utf-8"
    )
    (paths.registry_hosts_dir / registry / "hosts.toml").write_text(
        cfg.registry_hosts_toml(registry), encoding="utf-8"
    )
    (paths.cni_conf_dir / "10-udsvm.conflist").write_text(
        json.dumps(cfg.cni_conflist(paths), indent=2) + "\n", encoding="utf-8"
    )
    paths.resolv_conf.write_text(
        "# pods resolve through CoreDNS only (clusterDNS); nothing upstream\n", encoding="utf-8"
    )


def _start_containerd(paths: cfg.NodePaths, records: list[ProcessRecord], tie: bool) -> None:
    binary = shutil.which("containerd")
    if binary is None:
        raise NodeError("containerd not found; run `make node-deps` (Debian packages containerd runc)")
    # containerd (and so every pod, hostPID ones included) runs in a PID namespace of the node's own, whose
    # PID 1 exposes the host's mounts and root to virt-handler (tools/node/pid_namespace_init.py).
    argv = [
        sys.executable,
        str(HERE / "pid_namespace_init.py"),
        binary,
        "--config",
        str(paths.containerd_config),
    ]
    record = _launch(paths, records, "containerd", argv, tie)
    _wait("containerd", paths.containerd_socket.exists, record, paths.log_dir / "containerd.log", 30.0)
    ctr = ["ctr", "--address", str(paths.containerd_socket)]
    _wait(
        "containerd",
        lambda: _sh(*ctr, "version", check=False).returncode == 0,
        record,
        paths.log_dir / "containerd.log",
        30.0,
    )


def _start_kubelet(
    paths: cfg.NodePaths,
    plane: controlplane.ControlPlane,
    records: list[ProcessRecord],
    bins: Path,
    tie: bool,
) -> None:
    healthz = _free_port()
    paths.kubelet_config.write_text(
        cfg.dumps(cfg.kubelet_config(paths, plane.layout.client_ca_cert, healthz)), encoding="utf-8"
    )
    argv = [
        str(bins / "kubelet"),
        f"--config={paths.kubelet_config}",
        f"--kubeconfig={plane.kubeconfig}",
        f"--root-dir={paths.kubelet_root}",
        f"--cert-dir={paths.kubelet_root / 'pki'}",
        f"--hostname-override={cfg.NODE_NAME}",
        f"--node-ip={cfg.NODE_ADDRESS}",
        "--v=1",
    ]
    record = _launch(paths, records, "kubelet", argv, tie)
    _wait(
        "kubelet",
        lambda: _http_ok(f"http://127.0.0.1:{healthz}/healthz"),
        record,
        paths.log_dir / "kubelet.log",
    )


def _start_scheduler(
    paths: cfg.NodePaths,
    plane: controlplane.ControlPlane,
    records: list[ProcessRecord],
    bins: Path,
    tie: bool,
) -> None:
    port = _free_port()
    argv = [
        str(bins / "kube-scheduler"),
        f"--kubeconfig={plane.kubeconfig}",
        f"--authentication-kubeconfig={plane.kubeconfig}",
        f"--authorization-kubeconfig={plane.kubeconfig}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        "--v=1",
    ]
    record = _launch(paths, records, "kube-scheduler", argv, tie)
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE

    def healthy() -> bool:
        with urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
        ).open(f"https://127.0.0.1:{port}/healthz", timeout=2.0) as response:
            return bool(response.read() == b"ok")

    _wait("kube-scheduler", healthy, record, paths.log_dir / "kube-scheduler.log")


def _start_kube_proxy(
    paths: cfg.NodePaths,
    plane: controlplane.ControlPlane,
    records: list[ProcessRecord],
    bins: Path,
    tie: bool,
) -> None:
    healthz, metrics = _free_port(), _free_port()
    paths.kube_proxy_config.write_text(
        cfg.dumps(cfg.kube_proxy_config(plane.kubeconfig, healthz, metrics)), encoding="utf-8"
    )
    record = _launch(
        paths,
        records,
        "kube-proxy",
        [str(bins / "kube-proxy"), f"--config={paths.kube_proxy_config}", "--v=1"],
        tie,
    )
    _wait(
        "kube-proxy",
        lambda: _http_ok(f"http://127.0.0.1:{healthz}/livez"),
        record,
        paths.log_dir / "kube-proxy.log",
    )


def _start_kube_router(
    paths: cfg.NodePaths,
    plane: controlplane.ControlPlane,
    records: list[ProcessRecord],
    bins: Path,
    tie: bool,
) -> None:
    health = _free_port()
    argv = [
        str(bins / "kube-router"),
        f"--kubeconfig={plane.kubeconfig}",
        f"--hostname-override={cfg.NODE_NAME}",
        "--run-firewall=true",
        "--run-router=false",
        "--run-service-proxy=false",
        "--run-loadbalancer=false",
        "--enable-cni=false",
        "--metrics-port=0",
        f"--health-port={health}",
        "--iptables-sync-period=5s",
        "--v=1",
    ]
    record = _launch(paths, records, "kube-router", argv, tie)
    _wait(
        "kube-router",
        lambda: _http_ok(f"http://127.0.0.1:{health}/healthz"),
        record,
        paths.log_dir / "kube-router.log",
    )


# ---------------------------------------------------------------------------------------------- API objects


def _apply(plane: controlplane.ControlPlane, document: dict[str, Any]) -> None:
    """Server-side apply through the plane's admin client (stdlib only)."""
    kind = document["kind"]
    api = document["apiVersion"]
    name = document["metadata"]["name"]
    namespace = document["metadata"].get("namespace")
    plural = {
        "ServiceAccount": "serviceaccounts",
        "ClusterRole": "clusterroles",
        "ClusterRoleBinding": "clusterrolebindings",
        "ConfigMap": "configmaps",
        "Deployment": "deployments",
        "Service": "services",
        "StorageClass": "storageclasses",
    }[kind]
    prefix = "/api/v1" if api == "v1" else f"/apis/{api}"
    scope = f"/namespaces/{namespace}" if namespace else ""
    path = f"{prefix}{scope}/{plural}/{name}?fieldManager=uds-node&force=true&fieldValidation=Strict"
    plane.request("PATCH", path, json.dumps(document).encode(), "application/apply-patch+yaml")


def _node_ready(plane: controlplane.ControlPlane) -> bool:
    node = plane.request("GET", f"/api/v1/nodes/{cfg.NODE_NAME}")
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in node.get("status", {}).get("conditions", [])
    )


def _set_pod_cidr(plane: controlplane.ControlPlane) -> None:
    """kube-router's firewall reads the node's podCIDR (the controller manager allocates none here)."""
    node = plane.request("GET", f"/api/v1/nodes/{cfg.NODE_NAME}")
    if node.get("spec", {}).get("podCIDR") == cfg.POD_CIDR:
        return
    patch = {"spec": {"podCIDR": cfg.POD_CIDR, "podCIDRs": [cfg.POD_CIDR]}}
    plane.request(
        "PATCH", f"/api/v1/nodes/{cfg.NODE_NAME}", json.dumps(patch).encode(), "application/merge-patch+json"
    )


def _coredns_ready(plane: controlplane.ControlPlane) -> bool:
    deployment = plane.request("GET", "/apis/apps/v1/namespaces/kube-system/deployments/coredns")
    return int(deployment.get("status", {}).get("readyReplicas") or 0) >= 1


def _default_service_account_ready(plane: controlplane.ControlPlane) -> bool:
    plane.request("GET", "/api/v1/namespaces/kube-system/serviceaccounts/default")
    plane.request("GET", "/api/v1/namespaces/kube-system/configmaps/kube-root-ca.crt")
    return True


# ---------------------------------------------------------------------------------------------- up / down


def _ensure_plane(state_dir: Path, tie: bool) -> controlplane.ControlPlane:
    existing = controlplane.attach(state_dir)
    if existing is not None:
        if existing.is_healthy() and existing.layout.node_address == cfg.NODE_ADDRESS:
            return existing
        print(
            "stopping the control plane recorded there (it cannot host a node: loopback only, or unhealthy)",
            file=sys.stderr,
        )
        existing.stop()
    return controlplane.start(state_dir, tie_to_parent=tie, node_address=cfg.NODE_ADDRESS)


def up(state_dir: Path, *, tie_to_parent: bool = False) -> tuple[controlplane.ControlPlane, dict[str, float]]:
    """Bring the plane and the node up (idempotent); return the plane and the seconds each stage took."""
    if os.geteuid() != 0:
        raise NodeError("the real node needs root (containerd, the kubelet, iptables, loop devices)")
    state_dir = state_dir.resolve()
    paths = paths_for(state_dir)
    timings: dict[str, float] = {}
    _wait_for_machine(paths)
    with _machine_lock():
        if status(state_dir, quiet=True):
            plane = controlplane.attach(state_dir)
            assert plane is not None
            return plane, {"already-running": 0.0}
        if _load_records(paths) or paths.host_state.is_file():
            print("found a stale or partial node; cleaning it up first", file=sys.stderr)
            _down_locked(state_dir, stop_plane=False)
        _clean_up_after_crashed_owner(paths)
        _claim(paths)
        bins = node_bin_dir()
        paths.node_dir.mkdir(parents=True, exist_ok=True)
        paths.run_dir.mkdir(parents=True, exist_ok=True)
        host_baseline.HostBaseline.capture(SYSCTLS).save(paths.host_state)
        records: list[ProcessRecord] = []
        started = time.monotonic()

        def stage(name: str, action: Callable[[], Any]) -> Any:
            begun = time.monotonic()
            result = action()
            timings[name] = round(time.monotonic() - begun, 2)
            return result

        try:
            registry = stage("registry", lambda: _start_registry(paths, records, tie_to_parent))
            refs = stage("node images", lambda: _push_node_images(paths, registry, bins))
            stage("bridge", _ensure_bridge)
            stage("isolation", _isolate_pods)
            plane = stage("control plane", lambda: _ensure_plane(state_dir, tie_to_parent))
            stage("configs", lambda: _write_runtime_configs(paths, registry, refs["pause"]))
            stage("shared mounts", lambda: _share_mounts(paths))
            stage("containerd", lambda: _start_containerd(paths, records, tie_to_parent))
            stage("kubelet", lambda: _start_kubelet(paths, plane, records, bins, tie_to_parent))
            stage(
                "node Ready",
                lambda: _wait("node Ready", lambda: _node_ready(plane), None, paths.log_dir / "kubelet.log"),
            )
            stage("podCIDR", lambda: _set_pod_cidr(plane))
            stage("kube-scheduler", lambda: _start_scheduler(paths, plane, records, bins, tie_to_parent))
            stage("kube-proxy", lambda: _start_kube_proxy(paths, plane, records, bins, tie_to_parent))
            stage("kube-router", lambda: _start_kube_router(paths, plane, records, bins, tie_to_parent))
            stage(
                "service accounts",
                lambda: _wait(
                    "kube-system default ServiceAccount",
                    lambda: _default_service_account_ready(plane),
                    None,
                    plane.layout.log_dir / "kube-controller-manager.log",
                ),
            )
            for document in [*cfg.coredns_manifests(refs["coredns"]), cfg.local_storage_class()]:
                _apply(plane, document)
            stage(
                "CoreDNS",
                lambda: _wait(
                    "CoreDNS", lambda: _coredns_ready(plane), None, paths.log_dir / "kubelet.log", 180.0
                ),
            )
        except BaseException:
            with contextlib.suppress(Exception):
                _down_locked(state_dir, stop_plane=False)
            raise
        timings["total"] = round(time.monotonic() - started, 2)
        (paths.node_dir / "timings.json").write_text(json.dumps(timings, indent=2) + "\n", encoding="utf-8")
        return plane, timings


def status(state_dir: Path, *, quiet: bool = False) -> bool:
    """True when the plane is healthy, every node process runs and the node is Ready."""
    paths = paths_for(state_dir)
    records = _load_records(paths)
    plane = controlplane.attach(state_dir)
    alive = {r.name: r.is_alive() for r in records}
    healthy = bool(records) and all(alive.values()) and set(alive) == set(NODE_COMPONENTS)
    ready = False
    if healthy and plane is not None and plane.is_healthy():
        with contextlib.suppress(Exception):
            ready = _node_ready(plane)
    if not quiet:
        for record in records:
            print(f"{record.name:<16} pid {record.pid:<8} {'running' if record.is_alive() else 'GONE'}")
        print(f"node {cfg.NODE_NAME} {'Ready' if ready else 'NOT ready (run `make node-down node-up`)'}")
    return healthy and ready


def container_pid(paths: cfg.NodePaths, pod: dict[str, Any]) -> int:
    """The host PID of a pod's first container, from this node's containerd task list.

    Lets the host run probes inside the pod's network namespace (`nsenter -t PID -n`) without kubectl exec.
    """
    container_id = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    listing = _sh("ctr", "--address", str(paths.containerd_socket), "-n", "k8s.io", "tasks", "ls").stdout
    for line in listing.splitlines()[1:]:
        fields = line.split()
        if fields and fields[0] == container_id:
            return _host_pid(paths, int(fields[1]))
    raise NodeError(f"containerd on this node runs no task {container_id}")


def _host_pid(paths: cfg.NodePaths, node_pid: int) -> int:
    """The host PID of a process containerd reports by its PID in the node's PID namespace.

    The node's processes descend from the recorded containerd launcher; among them, the one whose NSpid (host,
    node, ...) names node_pid at the node's level is the one.
    """
    launcher = next((r.pid for r in _load_records(paths) if r.name == "containerd"), None)
    if launcher is None:
        raise NodeError("no containerd recorded for this node")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError):
            status = (entry / "status").read_text(encoding="utf-8")
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            nspids = fields.get("NSpid", "").split()
            if len(nspids) >= 2 and int(nspids[1]) == node_pid and _descends_from(int(entry.name), launcher):
                return int(entry.name)
    raise NodeError(f"no process of this node has PID {node_pid} in its PID namespace")


def _descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
        pid = int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))
    return False


def _shim_pids(paths: cfg.NodePaths) -> set[int]:
    """containerd-shim processes serving our containerd (they outlive it by design): found by our socket."""
    pids = set()
    needle = str(paths.containerd_socket).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmdline = (entry / "cmdline").read_bytes()
            if b"containerd-shim" in cmdline and needle in cmdline:
                pids.add(int(entry.name))
    return pids


def _down_locked(state_dir: Path, *, stop_plane: bool) -> list[str]:
    paths = paths_for(state_dir)
    removed: list[str] = []
    records = _load_records(paths)
    baseline = host_baseline.HostBaseline.load(paths.host_state)
    # 1. Stop the kubelet first so nothing restarts containers, then the containers, shims and daemons.
    order = ["kube-router", "kube-proxy", "kube-scheduler", "kubelet"]
    stop([r for name in reversed(order) for r in records if r.name == name], timeout_s=10.0)
    if baseline is not None:
        host_baseline.kill_pids(host_baseline.kubepods_pids(baseline))
    host_baseline.kill_pids(_shim_pids(paths))
    stop([r for r in records if r.name in ("containerd", "registry")], timeout_s=10.0)
    time.sleep(0.2)
    # A process that would not die must not stop the clean-up: its marks go anyway, and we say so at the end.
    still = [r.name for r in records if r.is_alive()]
    # 2. Mounts (kubelet volumes, containerd's overlays and shm), then network namespaces and veths.
    removed += host_baseline.unmount_under(paths.node_dir, paths.run_dir)
    if baseline is not None:
        removed += host_baseline.remove_new_netns(baseline)
    # 3. Loop devices made for volumes.
    removed += _detach_loops(paths)
    # 4. The bridge, iptables, ipsets, cgroups, shim sockets, sysctls.
    # Only a node recorded here made the bridge and the host changes (never another checkout's node).
    if baseline is not None and _sh("ip", "link", "show", cfg.BRIDGE, check=False).returncode == 0:
        _sh("ip", "link", "delete", cfg.BRIDGE, check=False)
        removed.append(cfg.BRIDGE)
    if baseline is not None:
        removed += host_baseline.remove_new_iptables(baseline)
        removed += host_baseline.remove_new_ipsets(baseline)
        removed += host_baseline.remove_new_kubepods(baseline)
        removed += host_baseline.remove_new_shim_sockets(baseline)
        removed += host_baseline.restore_device_modes(baseline)
        removed += host_baseline.remove_new_fixed_dirs(baseline)
        for name, value in baseline.sysctls.items():
            with contextlib.suppress(OSError):
                host_baseline.write_sysctl(name, value)
    if stop_plane:
        plane = controlplane.attach(state_dir)
        if plane is not None:
            plane.stop()
    shutil.rmtree(paths.node_dir, ignore_errors=True)
    shutil.rmtree(paths.run_dir, ignore_errors=True)
    for name in ("registry", "busybox-image", "pause-image"):
        (state_dir / name).unlink(missing_ok=True)
    if _owner() == paths.state_dir:
        OWNER_FILE.unlink(missing_ok=True)
    if still:
        raise NodeError(f"could not stop {', '.join(still)} (everything else the node made is removed)")
    return removed


def _clean_up_after_crashed_owner(paths: cfg.NodePaths) -> None:
    """Remove what a node that died without `node-down` left on the machine, before another node starts.

    A test run killed by CI's timeout (or a reboot-less OOM) kills our processes through PDEATHSIG but runs no
    clean-up: pod sandboxes, their veths and network namespaces, kubelet mounts and iptables chains stay. The
    next run, usually in a new temporary state dir, finds the dead node through the owner file.
    """
    owner = _owner()
    if owner is None or owner == paths.state_dir:
        return
    crashed = cfg.NodePaths(owner, _run_dir(owner))
    if _node_alive(crashed):
        return  # a live node of another checkout: _claim refuses to start beside it
    if crashed.host_state.is_file() or host_baseline.mounts_under(crashed.node_dir, crashed.run_dir):
        print(f"the node of {owner} died without node-down; removing what it left first", file=sys.stderr)
        with contextlib.suppress(NodeError):
            _down_locked(owner, stop_plane=False)
        _remove_dead_plane(owner)


def _remove_dead_plane(state_dir: Path) -> None:
    """A crashed node's plane died with it: remove its run folder (etcd data, certificates; ~130 MB in /tmp)
    and runtime files, which no one else would. A plane with any live process is left alone."""
    with contextlib.suppress(*controlplane.LAUNCH_ERRORS):
        plane = controlplane.attach(state_dir)
        if plane is not None and not any(record.is_alive() for record in plane.records):
            plane.stop()  # nothing left to signal: it only deletes the files


def _detach_loops(paths: cfg.NodePaths) -> list[str]:
    if not paths.loops.is_file():
        return []
    detached = []
    for entry in json.loads(paths.loops.read_text(encoding="utf-8")):
        device, backing = entry["device"], entry["backing"]
        listing = _sh("losetup", "--noheadings", "-O", "BACK-FILE", device, check=False).stdout.strip()
        if listing and Path(listing.split(" (")[0]).resolve() == Path(backing).resolve():
            _sh("losetup", "-d", device, check=False)
            detached.append(device)
    return detached


def down(state_dir: Path, *, stop_plane: bool = False) -> list[str]:
    """Stop the node (and the plane when asked) and remove everything the node added to the host."""
    state_dir = state_dir.resolve()
    with _machine_lock():
        return _down_locked(state_dir, stop_plane=stop_plane)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="One real node (kubelet + containerd) joined to the test plane."
    )
    parser.add_argument("command", choices=("up", "down", "status"))
    parser.add_argument("--state-dir", type=Path, default=REPO_ROOT / ".envtest")
    parser.add_argument("--with-plane", action="store_true", help="down: also stop the control plane")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            plane, timings = up(args.state_dir)
            registry = (args.state_dir / "registry").read_text(encoding="utf-8").strip()
            print("node up: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))
            print(f"node {cfg.NODE_NAME} Ready at {cfg.NODE_ADDRESS}; API server {plane.server}")
            print(f"registry {registry} (written to {args.state_dir / 'registry'})")
            print(f"export KUBECONFIG={plane.kubeconfig.resolve()}")
            return 0
        if args.command == "down":
            removed = down(args.state_dir, stop_plane=args.with_plane)
            print(
                f"node stopped; removed {len(removed)} host objects it had made"
                + (" and the control plane" if args.with_plane else "")
            )
            return 0
        return 0 if status(args.state_dir) else 1
    except (NodeError, node_images.ImageBuildError, *controlplane.LAUNCH_ERRORS) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
