"""A real Kubernetes control plane (etcd + kube-apiserver + kube-controller-manager) on loopback, for tests
and demo.

We have no container runtime, so we do what controller-runtime's envtest does: run the real binaries (built by
tools/envtest/build.sh), with throwaway certificates, random free loopback ports, RBAC on, and only the
garbage collector and namespace controllers. The upstream CDI, KubeVirt and Gateway API CRDs (fetch_crds.py)
and the project's own CRDs (deploy/crds) are installed and awaited until Established.

Two ways in:
- `with running_control_plane() as plane:` (the pytest session fixture) tears everything down on exit.
- CLI: `python -m tools.envtest.controlplane up|down|status --state-dir DIR` (`make cluster-up/cluster-down`);
  `up` leaves the processes running in the background and records their PIDs in DIR/pids.json.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import hashlib
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tools.envtest.cert_authority import (
    CertificateAuthority,
    service_account_signing_key,
    write_kubeconfig,
)
from tools.envtest.fetch_crds import FetchError, crd_files, ensure_crds
from tools.envtest.go_raw_strings import GoSourceError
from tools.envtest.kubevirt_crd_wrappers import KubevirtWrapperError
from tools.envtest.pinned_versions import REPO_ROOT, VersionsError, bin_dir
from tools.envtest.processes import ProcessRecord, spawn, stop

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager")
PROJECT_CRD_DIR = REPO_ROOT / "deploy" / "crds"
ADMIN_USER = "envtest-admin"
ADMIN_GROUPS = ("system:masters",)
KCM_USER = "uds-envtest-kube-controller-manager"
CRD_FIELD_MANAGER = "uds-envtest"
LOOPBACK = "127.0.0.1"
READY_TIMEOUT_S = 90.0
_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
CRD_TIMEOUT_S = 120.0


class ControlPlaneError(RuntimeError):
    """The control plane could not start or stop; the message says why and what to run next."""

    def __init__(self, message: str, *, port_conflict: bool = False) -> None:
        super().__init__(message)
        self.port_conflict = port_conflict


# Everything the launcher reports as "cannot start, here is why" (anything else is a bug).
LAUNCH_ERRORS: tuple[type[Exception], ...] = (
    ControlPlaneError,
    FetchError,
    VersionsError,
    GoSourceError,
    KubevirtWrapperError,
)


def find_bin_dir() -> Path:
    """Folder with etcd, kube-apiserver, kube-controller-manager: $ENVTEST_BIN_DIR or the pinned cache."""
    override = os.environ.get("ENVTEST_BIN_DIR")
    folder = Path(override) if override else bin_dir()
    missing = [name for name in BINARIES if not os.access(folder / name, os.X_OK)]
    if missing:
        raise ControlPlaneError(
            f"missing control-plane binaries {', '.join(missing)} in {folder}; run `make envtest-bins` "
            "(builds them with Go into the cache; a cold build takes minutes)"
        )
    return folder


def free_loopback_port() -> int:
    """Ask the kernel for an unused loopback port (a later bind can race; `start` retries on conflict)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class Layout:
    """Where one run keeps its files. state_dir persists (kubeconfig, pids, logs); run_dir is a temp dir.

    node_address: None for the played tier's loopback-only plane; for the real-node tier, the address (on the
    node's own bridge) the API server listens on, so pods (the operator, CoreDNS, ...) can reach it.
    """

    state_dir: Path
    run_dir: Path
    node_address: str | None = None

    @property
    def api_address(self) -> str:
        return self.node_address or LOOPBACK

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def pids_file(self) -> Path:
        return self.state_dir / "pids.json"

    @property
    def state_file(self) -> Path:
        return self.state_dir / "state.json"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def cert_dir(self) -> Path:
        return self.run_dir / "certs"

    @property
    def client_ca_cert(self) -> Path:
        return self.cert_dir / "client-ca.crt"

    @property
    def client_ca_key(self) -> Path:
        return self.cert_dir / "client-ca.key"

    @property
    def serving_ca_cert(self) -> Path:
        return self.cert_dir / "serving-ca.crt"

    @property
    def admin_cert(self) -> Path:
        return self.cert_dir / "admin.crt"

    @property
    def admin_key(self) -> Path:
        return self.cert_dir / "admin.key"


@dataclass
class ControlPlane:
    """A running (or attached) control plane: its endpoints, credentials and processes."""

    layout: Layout
    server: str
    records: list[ProcessRecord] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    crds: list[str] = field(default_factory=list)
    _handles: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)
    _ssl: ssl.SSLContext | None = field(default=None, repr=False)
    _relaunch: dict[str, Callable[[], None]] = field(default_factory=dict, repr=False)

    @property
    def kubeconfig(self) -> Path:
        return self.layout.kubeconfig

    @property
    def state_dir(self) -> Path:
        return self.layout.state_dir

    def kubeconfig_for(self, user: str, groups: Sequence[str] = (), path: Path | None = None) -> Path:
        """Mint a client-certificate kubeconfig for any user/groups, e.g. to run the operator with RBAC only.

        The identity has no permissions beyond what RBAC bindings grant it (unless a group is system:masters).
        """
        ca = CertificateAuthority.load(self.layout.client_ca_cert, self.layout.client_ca_key)
        identity = hashlib.sha256("\n".join((user, *groups)).encode("utf-8")).hexdigest()[:8]
        target = path or self.layout.state_dir / f"kubeconfig-{_slug(user)[:80]}-{identity}"
        client = ca.issue(user, organizations=tuple(groups))
        return write_kubeconfig(
            target, server=self.server, ca_pem=self._serving_ca_pem(), client=client, user=user
        )

    def _serving_ca_pem(self) -> bytes:
        return self.layout.serving_ca_cert.read_bytes()

    def is_healthy(self) -> bool:
        """Every recorded process runs and the API server answers /readyz."""
        if not self.records or not all(record.is_alive() for record in self.records):
            return False
        try:
            return _https_get(self, "/readyz", timeout_s=5.0) == b"ok"
        except (OSError, ssl.SSLError):
            return False

    def request(self, method: str, path: str, body: bytes | None = None, content_type: str = "") -> Any:
        """Admin HTTPS call to the API server (stdlib only, so the launcher needs no client library)."""
        return json.loads(_https(self, method, path, body, content_type, timeout_s=60.0))

    def stop(self) -> None:
        """Stop every recorded process (reverse order) and delete the temp run dir and the runtime files."""
        stop(self.records, reap=self._reap)
        still = [record.name for record in self.records if record.is_alive()]
        if still:
            raise ControlPlaneError(f"could not stop {', '.join(still)}; see {self.layout.log_dir}")
        shutil.rmtree(self.layout.run_dir, ignore_errors=True)
        for path in (self.layout.pids_file, self.layout.state_file, self.layout.kubeconfig):
            path.unlink(missing_ok=True)
        for extra in self.layout.state_dir.glob("kubeconfig-*"):
            extra.unlink(missing_ok=True)
        self.records.clear()

    def stop_component(self, name: str) -> None:
        """Stop one process of this plane (fault tests: the API server or etcd going away)."""
        record = next((r for r in self.records if r.name == name), None)
        if record is None:
            names = [r.name for r in self.records]
            raise ControlPlaneError(f"no {name} in this control plane (it runs {names})")
        stop([record], reap=self._reap)

    def start_component(self, name: str) -> None:
        """Start a stopped process again with its original arguments and ports; return once it is ready."""
        relaunch = self._relaunch.get(name)
        if relaunch is None:
            raise ControlPlaneError(f"{name} cannot be restarted: this plane was attached, not started here")
        relaunch()

    def restart_apiserver(self, down_s: float = 0.0) -> None:
        """Stop kube-apiserver, stay down for ``down_s``, start it again (same port, same etcd)."""
        self.stop_component("kube-apiserver")
        time.sleep(down_s)
        self.start_component("kube-apiserver")

    def restart_etcd(self, down_s: float = 0.0) -> None:
        """Stop etcd (the API server stays up and fails its storage calls), then start it on its data dir."""
        self.stop_component("etcd")
        time.sleep(down_s)
        self.start_component("etcd")

    def _reap(self, pid: int) -> None:
        handle = self._handles.get(pid)
        if handle is not None:
            handle.poll()

    def _save(self) -> None:
        """Persist what `down`/`status`/`attach` need; rewritten after every process start."""
        self.layout.pids_file.write_text(
            json.dumps([record.as_json() for record in self.records], indent=2) + "\n", encoding="utf-8"
        )
        state = {
            "server": self.server,
            "run_dir": str(self.layout.run_dir),
            "kubeconfig": str(self.layout.kubeconfig),
            "timings_s": self.timings,
            "crds": self.crds,
            "node_address": self.layout.node_address,
        }
        self.layout.state_file.write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")


def _slug(text: str) -> str:
    return "".join(char if char.isalnum() else "-" for char in text).strip("-").lower() or "user"


def _ssl_context(plane: ControlPlane) -> ssl.SSLContext:
    """Admin TLS context (trusts only this run's serving CA); built once per plane."""
    if plane._ssl is None:
        context = ssl.create_default_context(cafile=str(plane.layout.serving_ca_cert))
        context.load_cert_chain(str(plane.layout.admin_cert), str(plane.layout.admin_key))
        plane._ssl = context
    return plane._ssl


def _loopback_open(
    request: urllib.request.Request | str, context: ssl.SSLContext | None, timeout_s: float
) -> Any:
    """urlopen that never uses a proxy from the environment: every endpoint here is on loopback."""
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    return urllib.request.build_opener(*handlers).open(request, timeout=timeout_s)


def _https(
    plane: ControlPlane, method: str, path: str, body: bytes | None, content_type: str, *, timeout_s: float
) -> bytes:
    request = urllib.request.Request(plane.server + path, data=body, method=method)
    if content_type:
        request.add_header("Content-Type", content_type)
    request.add_header("Accept", "application/json")
    try:
        with _loopback_open(request, _ssl_context(plane), timeout_s) as response:
            data: bytes = response.read()
            return data
    except urllib.error.HTTPError as error:
        detail = error.read().decode("utf-8", errors="replace")
        with contextlib.suppress(json.JSONDecodeError, AttributeError):
            detail = json.loads(detail).get("message", detail)
        raise ControlPlaneError(f"{method} {path} failed with HTTP {error.code}: {detail}") from error


def _https_get(plane: ControlPlane, path: str, timeout_s: float) -> bytes:
    return _https(plane, "GET", path, None, "", timeout_s=timeout_s)


def _log_tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:])


def _wait(
    what: str,
    probe: Callable[[], bool],
    record: ProcessRecord,
    log_path: Path,
    timeout_s: float = READY_TIMEOUT_S,
) -> None:
    """Poll probe until true; fail fast with the log tail if the process dies meanwhile."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not record.is_alive():
            tail = _log_tail(log_path)
            conflict = "address already in use" in tail
            raise ControlPlaneError(
                f"{what} exited during start-up; last log lines ({log_path}):\n{tail}", port_conflict=conflict
            )
        with contextlib.suppress(Exception):
            if probe():
                return
        time.sleep(0.1)
    raise ControlPlaneError(
        f"{what} not ready after {timeout_s:.0f} s; last log lines ({log_path}):\n{_log_tail(log_path)}"
    )


def _child_env() -> dict[str, str]:
    """The children's environment: ours minus variables that would reconfigure them behind our back."""
    return {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("ETCD_", "KUBECONFIG"))
        and key not in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy")
    } | {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


# In-cluster clients reach the API server as the `kubernetes` Service (its first ClusterIP) or by these names.
SERVICE_CIDR = "10.0.0.0/24"
KUBERNETES_SERVICE_IP = "10.0.0.1"
_IN_CLUSTER_NAMES = (
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
KUBELET_CLIENT_USER = "uds-envtest-kube-apiserver-kubelet-client"


def _write_pki(layout: Layout, server: str) -> None:
    """Fresh CAs, serving certs (SANs 127.0.0.1/localhost), the admin kubeconfig and the SA signing key.

    With a node, the API server's certificate also names the node address and the `kubernetes` Service, and
    the API server gets a client certificate for the kubelet (logs, exec, port-forward).
    """
    layout.cert_dir.mkdir(parents=True, mode=0o700)
    serving_ca = CertificateAuthority.create("uds-envtest-serving-ca")
    serving_ca.write(layout.serving_ca_cert, layout.cert_dir / "serving-ca.key")
    client_ca = CertificateAuthority.create("uds-envtest-client-ca")
    client_ca.write(layout.client_ca_cert, layout.client_ca_key)
    names: tuple[str, ...] = ("localhost",)
    addresses: tuple[str, ...] = (LOOPBACK,)
    if layout.node_address:
        names += _IN_CLUSTER_NAMES
        addresses += (layout.node_address, KUBERNETES_SERVICE_IP)
        kubelet_client = client_ca.issue(KUBELET_CLIENT_USER, organizations=ADMIN_GROUPS)
        kubelet_client.write(layout.cert_dir / "kubelet-client.crt", layout.cert_dir / "kubelet-client.key")
    for name, stem in (("kube-apiserver", "apiserver"), ("kube-controller-manager", "kcm")):
        serving = serving_ca.issue(name, dns_names=names, ip_addresses=addresses, server=True)
        serving.write(layout.cert_dir / f"{stem}.crt", layout.cert_dir / f"{stem}.key")
    admin = client_ca.issue(ADMIN_USER, organizations=ADMIN_GROUPS)
    admin.write(layout.admin_cert, layout.admin_key)
    service_account_signing_key().write(layout.cert_dir / "sa.pub", layout.cert_dir / "sa.key")
    write_kubeconfig(
        layout.kubeconfig, server=server, ca_pem=serving_ca.cert_pem, client=admin, user=ADMIN_USER
    )
    _write_front_proxy_pki(layout)
    kcm_client = client_ca.issue(KCM_USER, organizations=ADMIN_GROUPS)
    write_kubeconfig(
        layout.run_dir / "kcm.kubeconfig",
        server=server,
        ca_pem=serving_ca.cert_pem,
        client=kcm_client,
        user=KCM_USER,
    )


FRONT_PROXY_CLIENT = "front-proxy-client"


def _write_front_proxy_pki(layout: Layout) -> None:
    """The aggregation layer's own CA and client certificate (as kubeadm makes them): the API server proxies
    aggregated APIs such as KubeVirt's ``subresources.kubevirt.io`` with it, and virt-api refuses to start
    without the request-header CA it finds in ``kube-system/extension-apiserver-authentication``."""
    front_proxy_ca = CertificateAuthority.create("uds-envtest-front-proxy-ca")
    front_proxy_ca.write(layout.cert_dir / "front-proxy-ca.crt", layout.cert_dir / "front-proxy-ca.key")
    front_proxy_ca.issue(FRONT_PROXY_CLIENT).write(
        layout.cert_dir / "front-proxy-client.crt", layout.cert_dir / "front-proxy-client.key"
    )


def _aggregation_flags(certs: Path) -> list[str]:
    """kube-apiserver flags for the aggregation layer (see _write_front_proxy_pki)."""
    return [
        f"--requestheader-client-ca-file={certs / 'front-proxy-ca.crt'}",
        f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={certs / 'front-proxy-client.crt'}",
        f"--proxy-client-key-file={certs / 'front-proxy-client.key'}",
        # Proxy to the aggregated server's endpoint (pod IP) rather than its ClusterIP.
        "--enable-aggregator-routing=true",
    ]


def _etcd_argv(binaries: Path, layout: Layout, client_port: int, peer_port: int) -> list[str]:
    client = f"http://{LOOPBACK}:{client_port}"
    peer = f"http://{LOOPBACK}:{peer_port}"
    return [
        str(binaries / "etcd"),
        "--name=envtest",
        f"--data-dir={layout.run_dir / 'etcd'}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=envtest={peer}",
        "--unsafe-no-fsync=true",
        "--log-level=warn",
    ]


def _apiserver_argv(binaries: Path, layout: Layout, etcd_port: int, port: int) -> list[str]:
    certs = layout.cert_dir
    argv = [
        str(binaries / "kube-apiserver"),
        f"--etcd-servers=http://{LOOPBACK}:{etcd_port}",
        f"--cert-dir={certs}",
        f"--tls-cert-file={certs / 'apiserver.crt'}",
        f"--tls-private-key-file={certs / 'apiserver.key'}",
        f"--client-ca-file={layout.client_ca_cert}",
        f"--secure-port={port}",
        f"--bind-address={layout.api_address}",
        f"--advertise-address={layout.api_address}",
        "--authorization-mode=RBAC",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--allow-privileged=true",
        f"--service-account-key-file={certs / 'sa.pub'}",
        f"--service-account-signing-key-file={certs / 'sa.key'}",
        "--profiling=false",
        "--v=1",
        *_aggregation_flags(certs),
    ]
    if layout.node_address is None:
        return [
            *argv,
            # As envtest: no controller creates the `default` ServiceAccount. PodSecurity stays on (1.34
            # default).
            "--disable-admission-plugins=ServiceAccount",
            f"--service-account-issuer=https://{LOOPBACK}:{port}/",
            # The `kubernetes` Service cannot point at a loopback address; skip that reconciler instead of
            # logging errors.
            "--endpoint-reconciler-type=none",
        ]
    # A plane with a real node: pods get ServiceAccount tokens, the `kubernetes` Service points at the node
    # address, and the API server reaches the kubelet by its InternalIP with its own client certificate.
    return [
        *argv,
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        "--kubelet-preferred-address-types=InternalIP",
        f"--kubelet-client-certificate={certs / 'kubelet-client.crt'}",
        f"--kubelet-client-key={certs / 'kubelet-client.key'}",
    ]


def _kcm_argv(binaries: Path, layout: Layout, port: int) -> list[str]:
    certs = layout.cert_dir
    kubeconfig = layout.run_dir / "kcm.kubeconfig"
    # The played tier runs only what no test can play (garbage collector, namespace lifecycle); with a real
    # node every default controller runs (Deployments, ReplicaSets, EndpointSlices, ServiceAccounts, PVC
    # protection, the root-CA publisher that projected tokens need, ...), as on a real cluster.
    controllers = "*" if layout.node_address else "garbage-collector-controller,namespace-controller"
    argv = [
        str(binaries / "kube-controller-manager"),
        f"--kubeconfig={kubeconfig}",
        f"--controllers={controllers}",
        "--use-service-account-credentials=false",
        "--leader-elect=false",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={port}",
        f"--cert-dir={certs}",
        f"--tls-cert-file={certs / 'kcm.crt'}",
        f"--tls-private-key-file={certs / 'kcm.key'}",
        "--profiling=false",
        "--v=2",
    ]
    if layout.node_address:
        argv += [
            f"--root-ca-file={layout.serving_ca_cert}",
            f"--service-account-private-key-file={certs / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
        ]
    return argv


def load_crd_documents(folders: Sequence[Path]) -> list[dict[str, Any]]:
    """Every CRD document in the folders' YAML files (libyaml when present: the schemas are megabytes)."""
    documents: list[dict[str, Any]] = []
    for folder in folders:
        for path in crd_files(folder):
            for document in yaml.load_all(path.read_text(encoding="utf-8"), Loader=_YAML_LOADER):
                if document is None:
                    continue
                if not isinstance(document, dict) or document.get("kind") != "CustomResourceDefinition":
                    raise ControlPlaneError(f"{path} holds something that is not a CustomResourceDefinition")
                documents.append(document)
    return documents


def _apply_crd(plane: ControlPlane, document: dict[str, Any]) -> str:
    name = str(document["metadata"]["name"])
    path = (
        f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
        f"?fieldManager={CRD_FIELD_MANAGER}&force=true&fieldValidation=Strict"
    )
    try:
        plane.request("PATCH", path, json.dumps(document).encode("utf-8"), "application/apply-patch+yaml")
    except ControlPlaneError as error:
        raise ControlPlaneError(f"the API server rejected CRD {name}: {error}") from error
    return name


def _established(plane: ControlPlane) -> set[str]:
    listing = plane.request("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
    names: set[str] = set()
    for item in listing.get("items", []):
        conditions = (item.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
            names.add(item["metadata"]["name"])
    return names


def install_crds(
    plane: ControlPlane, documents: Sequence[dict[str, Any]], timeout_s: float = CRD_TIMEOUT_S
) -> list[str]:
    """Server-side apply every CRD document (Strict field validation) and wait until all are Established.

    Applied concurrently: the API server compiles each schema (structural checks, CEL rules) independently,
    and the Gateway API and KubeVirt schemas are large, so a few parallel requests shorten start-up.
    """
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        names = list(pool.map(lambda document: _apply_crd(plane, document), documents))
    deadline = time.monotonic() + timeout_s
    pending = set(names) - _established(plane)
    while pending:
        if time.monotonic() > deadline:
            raise ControlPlaneError(
                f"CRDs not Established after {timeout_s:.0f} s: {', '.join(sorted(pending))}"
            )
        time.sleep(0.1)
        pending -= _established(plane)
    return names


def default_crd_folders() -> list[Path]:
    """The cached upstream CRDs (fetched if absent) plus deploy/crds when the project has generated it."""
    folders = [ensure_crds()]
    if PROJECT_CRD_DIR.is_dir() and crd_files(PROJECT_CRD_DIR):
        folders.append(PROJECT_CRD_DIR)
    return folders


def _new_run_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="uds-envtest-"))


def _relauncher(
    plane: ControlPlane,
    env: dict[str, str],
    *,
    tie_to_parent: bool,
    name: str,
    argv: list[str],
    probe: Callable[[], bool],
) -> Callable[[], None]:
    """A function that starts ``name`` again with the same arguments and waits until ``probe`` holds."""

    def relaunch() -> None:
        log = plane.layout.log_dir / f"{name}.log"
        handle, record = spawn(name, argv, log, env, tie_to_parent=tie_to_parent)
        index = next(i for i, r in enumerate(plane.records) if r.name == name)
        plane.records[index] = record
        plane._handles[record.pid] = handle
        plane._save()
        _wait(name, probe, record, log)

    return relaunch


def _start_once(
    state_dir: Path, crds: Sequence[dict[str, Any]], tie_to_parent: bool, node_address: str | None
) -> ControlPlane:
    binaries = find_bin_dir()
    state_dir.mkdir(parents=True, exist_ok=True)
    layout = Layout(state_dir=state_dir, run_dir=_new_run_dir(), node_address=node_address)
    started = time.monotonic()
    etcd_port, peer_port, api_port, kcm_port = (free_loopback_port() for _ in range(4))
    plane = ControlPlane(layout=layout, server=f"https://{layout.api_address}:{api_port}")
    try:
        _write_pki(layout, plane.server)
        plane.timings["certs"] = time.monotonic() - started
        env = _child_env()

        def launch(name: str, argv: list[str]) -> tuple[ProcessRecord, Path]:
            log = layout.log_dir / f"{name}.log"
            log.unlink(missing_ok=True)
            handle, record = spawn(name, argv, log, env, tie_to_parent=tie_to_parent)
            plane.records.append(record)
            plane._handles[record.pid] = handle
            plane._save()
            return record, log

        def relauncher(name: str, argv: list[str], probe: Callable[[], bool]) -> Callable[[], None]:
            return _relauncher(plane, env, tie_to_parent=tie_to_parent, name=name, argv=argv, probe=probe)

        phase = time.monotonic()
        etcd_argv = _etcd_argv(binaries, layout, etcd_port, peer_port)
        record, log = launch("etcd", etcd_argv)

        def etcd_ready() -> bool:
            return _http_ok(f"http://{LOOPBACK}:{etcd_port}/health", b'"health":"true"')

        _wait("etcd", etcd_ready, record, log)
        plane._relaunch["etcd"] = relauncher("etcd", etcd_argv, etcd_ready)
        plane.timings["etcd"] = time.monotonic() - phase

        phase = time.monotonic()
        apiserver_argv = _apiserver_argv(binaries, layout, etcd_port, api_port)
        record, log = launch("kube-apiserver", apiserver_argv)

        def apiserver_ready() -> bool:
            return _https_get(plane, "/readyz", 2.0) == b"ok"

        _wait("kube-apiserver", apiserver_ready, record, log)
        plane._relaunch["kube-apiserver"] = relauncher("kube-apiserver", apiserver_argv, apiserver_ready)
        plane.timings["kube-apiserver"] = time.monotonic() - phase

        # CRDs before the controller manager: the garbage collector then discovers them at start-up instead of
        # at its next 30 s resync, so owner-reference cascades on custom resources work from the first test.
        phase = time.monotonic()
        plane.crds = install_crds(plane, crds)
        plane.timings["crds"] = time.monotonic() - phase

        phase = time.monotonic()
        record, log = launch("kube-controller-manager", _kcm_argv(binaries, layout, kcm_port))
        kcm_url = f"https://{LOOPBACK}:{kcm_port}/healthz"
        _wait("kube-controller-manager", lambda: _kcm_healthy(kcm_url, layout), record, log)
        plane.timings["kube-controller-manager"] = time.monotonic() - phase
        plane.timings["total"] = time.monotonic() - started
        plane._save()
        return plane
    except BaseException:
        plane.stop()
        raise


def _http_ok(url: str, needle: bytes) -> bool:
    with _loopback_open(url, None, 2.0) as response:
        return needle in response.read()


def _kcm_healthy(url: str, layout: Layout) -> bool:
    context = ssl.create_default_context(cafile=str(layout.serving_ca_cert))
    with _loopback_open(url, context, 2.0) as response:
        return bool(response.read() == b"ok")


def start(
    state_dir: Path,
    crd_folders: Sequence[Path] | None = None,
    *,
    tie_to_parent: bool = False,
    node_address: str | None = None,
) -> ControlPlane:
    """Start the plane (CRDs installed and Established); retry with new ports if one was taken meanwhile.

    node_address: listen there instead of loopback so a real node's pods can reach the API server
    (tools/node/); the address must already exist on an interface of this machine.
    """
    loading = time.monotonic()
    folders = list(crd_folders) if crd_folders is not None else default_crd_folders()
    crds = load_crd_documents(folders)  # before any process starts: a bad file fails fast
    load_s = time.monotonic() - loading
    for attempt in range(3):
        try:
            plane = _start_once(state_dir, crds, tie_to_parent, node_address)
            plane.timings = {"crd-files": load_s, **plane.timings, "total": plane.timings["total"] + load_s}
            plane._save()
            return plane
        except ControlPlaneError as error:
            if not error.port_conflict or attempt == 2:
                raise
    raise AssertionError("unreachable")


def attach(state_dir: Path) -> ControlPlane | None:
    """Load the plane recorded in state_dir (by `up`), or None when nothing was recorded there."""
    layout_state = state_dir / "state.json"
    pids = state_dir / "pids.json"
    if not pids.is_file():
        return None
    try:
        records = [ProcessRecord.from_json(item) for item in json.loads(pids.read_text(encoding="utf-8"))]
        state: dict[str, Any] = {}
        if layout_state.is_file():
            state = json.loads(layout_state.read_text(encoding="utf-8"))
    except (ValueError, KeyError, TypeError) as error:
        raise ControlPlaneError(
            f"{pids} or {layout_state} is damaged ({error}); stop any leftover etcd/kube-apiserver/"
            f"kube-controller-manager by the PIDs it lists, then delete {state_dir}"
        ) from error
    run_dir = Path(state.get("run_dir", state_dir / "missing-run-dir"))
    node_address = state.get("node_address")
    plane = ControlPlane(
        layout=Layout(state_dir, run_dir, str(node_address) if node_address else None),
        server=str(state.get("server", "")),
        records=records,
    )
    plane.timings = dict(state.get("timings_s", {}))
    plane.crds = list(state.get("crds", []))
    return plane


@contextlib.contextmanager
def running_control_plane(
    state_dir: Path | None = None,
    crd_folders: Sequence[Path] | None = None,
    node_address: str | None = None,
) -> Iterator[ControlPlane]:
    """Context manager for tests: start a private plane, always stop it and remove every file it made."""
    own_dir = state_dir is None
    folder = Path(tempfile.mkdtemp(prefix="uds-envtest-state-")) if state_dir is None else state_dir
    try:
        plane = start(folder, crd_folders, tie_to_parent=True, node_address=node_address)
        try:
            yield plane
        finally:
            plane.stop()
    finally:
        if own_dir:
            shutil.rmtree(folder, ignore_errors=True)


def _format_timings(plane: ControlPlane) -> str:
    parts = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in plane.timings.items() if name != "total")
    return f"{plane.timings.get('total', 0.0):.1f} s ({parts}; {len(plane.crds)} CRDs Established)"


def cmd_up(state_dir: Path) -> int:
    """Start in the background unless a healthy plane already runs there (idempotent)."""
    existing = attach(state_dir)
    if existing is not None:
        if existing.is_healthy():
            print(f"control plane already running; kubeconfig: {existing.kubeconfig}")
            return 0
        print("found a stale or partial control plane; stopping it first", file=sys.stderr)
        existing.stop()
    plane = start(state_dir)
    print(f"control plane up in {_format_timings(plane)}")
    print(f"API server {plane.server}; PIDs in {plane.layout.pids_file}; logs in {plane.layout.log_dir}")
    print(f"export KUBECONFIG={plane.kubeconfig.resolve()}")
    return 0


def cmd_down(state_dir: Path) -> int:
    """Stop what `up` recorded (by PID only); a no-op when nothing is recorded."""
    plane = attach(state_dir)
    if plane is None:
        print(f"no control plane recorded in {state_dir}; nothing to stop")
        return 0
    plane.stop()
    print(f"control plane stopped ({len(plane.crds)} CRDs were installed); no recorded process remains")
    return 0


def cmd_status(state_dir: Path) -> int:
    """Exit 0 and describe the plane when it is healthy, else exit 1."""
    plane = attach(state_dir)
    if plane is None:
        print(f"not running (nothing recorded in {state_dir})")
        return 1
    for record in plane.records:
        print(f"{record.name:<25} pid {record.pid:<8} {'running' if record.is_alive() else 'GONE'}")
    healthy = plane.is_healthy()
    verdict = "healthy" if healthy else "NOT healthy (run `make cluster-down cluster-up`)"
    print(f"control plane {verdict}; API server {plane.server}; kubeconfig {plane.kubeconfig}")
    return 0 if healthy else 1


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry: 0 ok, 1 failure (message says what to do), 2 usage error."""
    parser = argparse.ArgumentParser(description="Local Kubernetes control plane for tests and the demo.")
    parser.add_argument("command", choices=("up", "down", "status"))
    parser.add_argument(
        "--state-dir", type=Path, default=Path(".envtest"), help="kubeconfig, pids.json, logs"
    )
    args = parser.parse_args(argv)
    commands = {"up": cmd_up, "down": cmd_down, "status": cmd_status}
    try:
        return commands[args.command](args.state_dir)
    except LAUNCH_ERRORS as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; run `make cluster-down` to stop anything left running", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 1
    except Exception as error:  # a bug or an unforeseen environment problem: still no traceback for the user
        print(
            f"error: unexpected {type(error).__name__}: {error}; see the logs in {args.state_dir / 'logs'} "
            "and report it with them",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
