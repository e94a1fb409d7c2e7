"""spec.monitoring's drift checks (issue 34) at N = 1,000 VMs: what checking every guest every interval costs.

Real: the API server (a private envtest control plane with the upstream KubeVirt/CDI CRDs, or
``$UDS_TEST_KUBECONFIG``), the operator as its own process (``python -m uds_vm_operator.operator_main``,
``--controllers vm``, ``--max-workers 8``, the pod's environment from ``bench/image_env.py``), its
reconciles, its requeues after ``checkIntervalSeconds``, its status writes, and its HTTP fetches of the
guest's report over TCP (``fetch_http`` to ``IP:9100``). One change to the private plane: its Service range
is ``10.0.0.0/16`` instead of envtest's ``/24``, because every monitored VM has a ``<vm>-metrics`` ClusterIP
Service and a /24 runs out at ~250 VMs (see ``wide_service_range``).

Played (and listed under ``"played"`` in the JSON):

- the VMIs: one ``kubevirt.io/v1`` VirtualMachineInstance per VM, created through the API with the labels a
  real VMI inherits from the VM's template (``app.kubernetes.io/managed-by``, which the operator's watch
  selects on, and ``uds.dev/vm``, which routes its events to the VM). The upstream VMI CRD has no status
  subresource, so the status (``phase: Running``, ``AgentConnected: True``,
  ``interfaces[{ipAddress: 127.0.0.1}]``) is written with the object itself, in the same apply;
- every guest's node exporter: one asyncio HTTP server in this process (its own thread) on
  ``127.0.0.1:9100`` answers every GET with the report the guest script (``render/guestmonitor.py``) writes,
  all settings compliant, and counts and timestamps the requests. The run fails at once if 9100 is taken;
- the guest agent's ``userlist``: envtest has no virt-api, and the operator reads a 404 user list as "the
  agent did not answer" (Unknown, never compliant). So this process plays virt-api's aggregated API: a TLS
  server (aiohttp, its own thread, on this host's outward address, a port the kernel picks) registered in
  the real API server as APIService ``v1.subresources.kubevirt.io`` (a selector-less Service with a
  hand-written Endpoints/EndpointSlice, a CA bundle made here). The operator's GET of
  ``/apis/subresources.kubevirt.io/v1/namespaces/NS/virtualmachineinstances/NAME/userlist`` goes to the API
  server, which proxies it there; it answers an empty ``VirtualMachineInstanceGuestOSUserList`` (no one
  logged in) and counts every request by path. What the real virt-api does behind it (virt-handler, the
  agent in the guest) is not played. Refused when the cluster already serves that API (real KubeVirt).
  The API server leaves proxied requests out of ``apiserver_request_total``; its ``authentication_attempts``
  minus that counter (less the bench's scrape), net of the baseline's, cross-checks the agent's count.

Procedure, for each of two scenarios in a fresh namespace with a fresh operator: ``monitored`` (N VMs with
``monitoring: {enabled: true, checkIntervalSeconds: I}``) and ``baseline`` (the same N VMs without it). Apply
the VMs (``bench._harness.fleet_vm``), wait until the operator is quiet, create the N Running VMIs, wait until
every VM's ``status.guest.compliant`` is ``True`` (monitored: the first check of each; timed) or the operator
is quiet (baseline), then measure over the window: operator CPU seconds (utime + stime of its PID), RSS now
and peak, exporter fetches, API server requests and writes by kind, the operator's reconciles. The monitored
window starts in the gap between two rounds of checks, so a window of k intervals holds k rounds.

The git commit of the tree the operator ran from is recorded, and a change of ``src/`` during the run is
flagged (others commit on this machine).

Overrides: ``BENCH_GUEST_N`` (1000), ``BENCH_GUEST_WINDOW_S`` (300), ``BENCH_GUEST_INTERVAL_S`` (60, min 15).
The machine is shared (2 cores, real-node tests beside): CPU seconds are the cost figure, wall times are not.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import re
import resource
import secrets
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._harness import api_server, fleet_vm, fresh_namespace, proc_status_mib
from bench.image_env import image_environment

ROOT = Path(__file__).resolve().parent.parent

WORKERS = 8
"""The operator's default ``--max-workers``."""
APPLY_CONCURRENCY = 16
"""Requests in flight while the bench plays the user (VMs) and KubeVirt (VMIs)."""
BENCH_MANAGER = "bench-guest-checks"
EXPORTER_HOST = "127.0.0.1"
GUEST_ADDRESS = "127.0.0.1"
CONVERGE_TIMEOUT_S = 1200.0
FIRST_CHECK_TIMEOUT_S = 900.0
TERMINATING_TIMEOUT_S = 900.0
POLL_S = 2.0
HISTOGRAM_BIN_S = 10
VM_COLLECTION = "/apis/uds.dev/v1alpha1/namespaces/{namespace}/udsvirtualmachines"
BENCH_SERVICE_CIDR = "10.0.0.0/16"
"""The private plane's Service range here (envtest's /24 holds 254 ClusterIPs; see wide_service_range)."""
AGENT_GROUP = "subresources.kubevirt.io"
AGENT_APISERVICE = f"/apis/apiregistration.k8s.io/v1/apiservices/v1.{AGENT_GROUP}"
PLAYED = [
    "VMIs: created through the API (labels app.kubernetes.io/managed-by=uds-vm-operator and uds.dev/vm), "
    "status written with the object (the VMI CRD has no status subresource): phase Running, "
    "AgentConnected True, interfaces[0].ipAddress 127.0.0.1",
    "the guests' node exporter: one asyncio HTTP server in the bench process on 127.0.0.1:9100, answering "
    "every GET with a compliant uds_guest_* report (the lines render/guestmonitor.py's script writes)",
    "the guest agent's userlist: virt-api's aggregated API subresources.kubevirt.io/v1, played by a TLS "
    "server in the bench process registered as an APIService (Service + Endpoints/EndpointSlice to this "
    "host's address); the real API server proxies the operator's GET to it; it answers an empty "
    "VirtualMachineInstanceGuestOSUserList (no one logged in). virt-handler and the in-guest agent are "
    "not played",
]


# ------------------------------------------------------------------------------------ the played guest


def compliant_report() -> str:
    """What a hardened guest's node exporter serves for ``collect[]=textfile``: the guest script's gauges
    (sshd readable, no passwords, no keyboard-interactive, no root login, root locked, the update timer
    active, FIPS on) and the textfile collector's own two series."""
    gauges = {
        "sshd_config_readable": (1, "1 when sshd -T printed the effective sshd configuration."),
        "sshd_password_authentication": (0, "1 when sshd accepts passwords (PasswordAuthentication yes)."),
        "sshd_kbd_interactive_authentication": (0, "1 when sshd accepts keyboard-interactive logins."),
        "sshd_permit_root_login": (0, "1 when PermitRootLogin is anything but no."),
        "root_password_locked": (1, "1 when root's password is locked."),
        "update_timer_active": (1, "1 when apt-daily-upgrade.timer is active."),
        "fips_enabled": (1, "The kernel's crypto.fips_enabled."),
        "report_timestamp_seconds": (int(time.time()), "When the guest wrote this report (guest clock)."),
    }
    lines: list[str] = []
    for name, (value, help_text) in gauges.items():
        metric = f"uds_guest_{name}"
        lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} gauge", f"{metric} {value}"]
    lines += [
        "# HELP node_textfile_mtime_seconds Unixtime mtime of textfiles successfully read.",
        "# TYPE node_textfile_mtime_seconds gauge",
        f'node_textfile_mtime_seconds{{file="/var/lib/prometheus/node-exporter/uds_guest.prom"}} '
        f"{int(time.time())}",
        "# HELP node_textfile_scrape_error 1 if there was an error opening or reading a file, 0 otherwise",
        "# TYPE node_textfile_scrape_error gauge",
        "node_textfile_scrape_error 0",
    ]
    return "\n".join(lines) + "\n"


def _assert_report_is_compliant(body: str, spec: dict[str, Any]) -> None:
    """The played report must be what the operator judges compliant for the fleet's VM, or the run lies."""
    from uds_vm_operator.api import parse_vm_spec  # noqa: PLC0415
    from uds_vm_operator.controller.guest_checks import GuestFacts, judge, parse_report  # noqa: PLC0415

    verdict = judge(parse_vm_spec(spec), GuestFacts(report=parse_report(body), users=()))
    if verdict.condition.status != "True":
        raise RuntimeError(f"the played report is not compliant for the fleet VM: {verdict.status()}")


class PlayedExporter:
    """Every guest's node exporter: HTTP/1.0 on ``127.0.0.1:9100`` in its own thread, counting requests."""

    def __init__(self, body: str, port: int) -> None:
        self.port = port
        payload = body.encode()
        head = (
            "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n"
        )
        self._response = head.encode() + payload
        self.times: list[float] = []
        """time.monotonic() of every answered GET (appended by the server thread only)."""
        self.paths: dict[str, int] = {}
        self.errors = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Bind and serve; raise at once, naming the port, if it cannot be bound."""
        started = threading.Event()
        failure: list[BaseException] = []
        loop = asyncio.new_event_loop()

        def serve() -> None:
            asyncio.set_event_loop(loop)
            try:
                server = loop.run_until_complete(asyncio.start_server(self._handle, EXPORTER_HOST, self.port))
            except OSError as exc:
                failure.append(exc)
                started.set()
                loop.close()
                return
            started.set()
            try:
                loop.run_forever()
            finally:
                server.close()
                loop.run_until_complete(server.wait_closed())
                loop.close()

        self._thread = threading.Thread(target=serve, name="played-exporter", daemon=True)
        self._thread.start()
        if not started.wait(10):
            raise RuntimeError("the played node exporter did not start within 10 s")
        if failure:
            raise RuntimeError(
                f"cannot listen on {EXPORTER_HOST}:{self.port} for the played node exporter ({failure[0]}); "
                f"the operator fetches every guest's report from port {self.port}, so it must be free "
                f"(see `ss -ltnp 'sport = :{self.port}'`)"
            ) from failure[0]
        self._loop = loop

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5.0)
            parts = head.split(b"\r\n", 1)[0].decode(errors="replace").split()
            if len(parts) >= 2 and parts[0] == "GET":
                self.times.append(time.monotonic())
                self.paths[parts[1]] = self.paths.get(parts[1], 0) + 1
                writer.write(self._response)  # one write: a single segment on loopback
            else:
                self.errors += 1
                writer.write(b"HTTP/1.0 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
        except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            self.errors += 1
        finally:
            writer.close()

    def count(self) -> int:
        return len(self.times)

    def between(self, start: float, end: float) -> list[float]:
        return [t for t in list(self.times) if start <= t < end]


@contextlib.contextmanager
def played_exporter(port: int) -> Iterator[PlayedExporter]:
    server = PlayedExporter(compliant_report(), port)
    server.start()
    try:
        yield server
    finally:
        server.stop()


class PlayedAgent:
    """virt-api's ``subresources.kubevirt.io/v1`` as far as the user list goes: TLS, its own thread, counting.

    Listens on this host's outward address (the API server refuses loopback endpoints), a kernel-chosen port.
    """

    def __init__(self, host: str, service_dns: str) -> None:
        from tools.envtest.cert_authority import CertificateAuthority  # noqa: PLC0415

        self.host = host
        self.port = 0
        self.ca = CertificateAuthority.create("bench-played-virt-api-ca")
        self._pair = self.ca.issue("virt-api", dns_names=(service_dns,), ip_addresses=(host,), server=True)
        self.paths: dict[str, int] = {}
        self.userlists = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:

        from aiohttp import web  # noqa: PLC0415

        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind((self.host, 0))
        listener.listen(128)
        self.port = listener.getsockname()[1]
        folder = Path(tempfile.mkdtemp(prefix="bench-virt-api-"))
        self._pair.write(folder / "tls.crt", folder / "tls.key")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(folder / "tls.crt", folder / "tls.key")
        started = threading.Event()
        failure: list[BaseException] = []
        loop = asyncio.new_event_loop()
        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app, access_log=None)

        def serve() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(runner.setup())
                loop.run_until_complete(web.SockSite(runner, listener, ssl_context=context).start())
            except OSError as exc:
                failure.append(exc)
                started.set()
                return
            started.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(runner.cleanup())
                loop.close()

        self._thread = threading.Thread(target=serve, name="played-virt-api", daemon=True)
        self._thread.start()
        if not started.wait(10) or failure:
            raise RuntimeError(f"the played virt-api could not listen on {self.host}: {failure}")
        self._loop = loop

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop = None

    async def _handle(self, request: Any) -> Any:
        from aiohttp import web  # noqa: PLC0415

        path = request.path
        if path.endswith("/userlist"):
            self.userlists += 1
            return web.json_response(
                {"apiVersion": "v1", "kind": "VirtualMachineInstanceGuestOSUserList", "items": []}
            )
        self.paths[path] = self.paths.get(path, 0) + 1
        if path == f"/apis/{AGENT_GROUP}/v1":
            return web.json_response(
                {
                    "apiVersion": "v1",
                    "kind": "APIResourceList",
                    "groupVersion": f"{AGENT_GROUP}/v1",
                    "resources": [
                        {
                            "name": "virtualmachineinstances/userlist",
                            "namespaced": True,
                            "kind": "VirtualMachineInstanceGuestOSUserList",
                            "verbs": ["get"],
                        }
                    ],
                }
            )
        return web.json_response(
            {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404}, status=404
        )


def outward_address() -> str:
    """This host's address on its default route (no packet is sent: a UDP socket only picks a source)."""

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError as exc:
            raise RuntimeError(f"no outward IPv4 address for the played virt-api: {exc}") from exc
        address = str(probe.getsockname()[0])
    if address.startswith("127."):
        raise RuntimeError("the host's only address is loopback: the API server refuses loopback endpoints")
    return address


@contextlib.contextmanager
def wide_service_range() -> Iterator[str | None]:
    """A private plane with room for one ClusterIP per monitored VM; yields the range (None: not ours).

    Each monitored VM has a ``<vm>-metrics`` ClusterIP Service (render.guestmonitor), and envtest's
    ``10.0.0.0/24`` holds 254 addresses: at N = 1,000 the API server refuses the rest ("range is full") and
    their reconciles fail before the guest check. The plane's module constant is widened for this run only.
    """
    if os.environ.get("UDS_TEST_KUBECONFIG"):
        yield None
        return
    from tools.envtest import controlplane  # noqa: PLC0415

    before = controlplane.SERVICE_CIDR
    controlplane.SERVICE_CIDR = BENCH_SERVICE_CIDR
    try:
        yield BENCH_SERVICE_CIDR
    finally:
        controlplane.SERVICE_CIDR = before


@contextlib.contextmanager
def registered_agent(api: Any) -> Iterator[PlayedAgent]:
    """Serve the played virt-api and register it as APIService v1.subresources.kubevirt.io; undo both."""

    if api.get(AGENT_APISERVICE) is not None:
        raise RuntimeError(
            f"this cluster already serves {AGENT_GROUP} (real KubeVirt?): the played virt-api cannot be "
            "registered beside it; run on the private control plane (unset UDS_TEST_KUBECONFIG)"
        )
    namespace = f"bench-virt-api-{secrets.token_hex(3)}"
    agent = PlayedAgent(outward_address(), f"virt-api.{namespace}.svc")
    agent.start()
    try:
        api.call("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
        port = {"name": "https", "port": agent.port, "protocol": "TCP"}
        base = f"/api/v1/namespaces/{namespace}"
        api.call(
            "POST",
            f"{base}/services",
            {
                "metadata": {"name": "virt-api"},
                "spec": {"ports": [{"name": "https", "port": 443, "targetPort": agent.port}]},
            },
        )
        api.call(
            "POST",
            f"{base}/endpoints",
            {
                "metadata": {"name": "virt-api"},
                "subsets": [{"addresses": [{"ip": agent.host}], "ports": [port]}],
            },
        )
        api.call(
            "POST",
            f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices",
            {
                "metadata": {
                    "name": "virt-api-played",
                    "labels": {
                        "kubernetes.io/service-name": "virt-api",
                        "endpointslice.kubernetes.io/managed-by": BENCH_MANAGER,
                    },
                },
                "addressType": "IPv4",
                "endpoints": [{"addresses": [agent.host], "conditions": {"ready": True}}],
                "ports": [port],
            },
        )
        api.call(
            "POST",
            "/apis/apiregistration.k8s.io/v1/apiservices",
            {
                "metadata": {"name": f"v1.{AGENT_GROUP}"},
                "spec": {
                    "group": AGENT_GROUP,
                    "version": "v1",
                    "groupPriorityMinimum": 1000,
                    "versionPriority": 15,
                    "caBundle": base64.b64encode(agent.ca.cert_pem).decode(),
                    "service": {"namespace": namespace, "name": "virt-api", "port": 443},
                },
            },
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            status = (api.get(AGENT_APISERVICE) or {}).get("status") or {}
            if any(
                c.get("type") == "Available" and c.get("status") == "True"
                for c in status.get("conditions") or []
            ):
                break
            time.sleep(0.5)
        else:
            raise RuntimeError(f"APIService v1.{AGENT_GROUP} did not become Available: {status}")
        yield agent
    finally:
        api.call("DELETE", AGENT_APISERVICE, expect=(200, 202, 404))
        api.call("DELETE", f"/api/v1/namespaces/{namespace}", expect=(200, 202, 404))
        agent.stop()


@dataclass(frozen=True)
class Players:
    """What this process plays for every guest: the node exporter and virt-api's user list."""

    exporter: PlayedExporter
    agent: PlayedAgent


# ------------------------------------------------------------------------------------ observing


def _own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (``/proc/<pid>/stat`` fields 14 and 15), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _parse_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return 0.0


def apiserver_snapshot(api: Any) -> dict[str, Any]:
    """One scrape of the API server's /metrics: request counters by verb/resource/subresource, the requests
    it authenticated, and its own CPU seconds."""
    by_key: dict[str, float] = {}
    authenticated = cpu = 0.0
    for line in api.text("/metrics").splitlines():
        if line.startswith("apiserver_request_total{"):
            labels_text, _, value = line.rpartition(" ")
            labels = dict(re.findall(r'(\w+)="([^"]*)"', labels_text))
            key = "/".join(
                (labels.get("verb", ""), labels.get("resource", ""), labels.get("subresource", ""))
            )
            by_key[key] = by_key.get(key, 0.0) + _parse_float(value)
        elif line.startswith('authentication_attempts{result="success"} '):
            authenticated = _parse_float(line.rsplit(" ", 1)[1])
        elif line.startswith("process_cpu_seconds_total "):
            cpu = _parse_float(line.rsplit(" ", 1)[1])
    return {"requests": by_key, "authenticated": authenticated, "cpu_s": cpu}


WRITE_VERBS = {"POST", "PUT", "PATCH", "APPLY", "DELETE", "CREATE", "UPDATE"}


def _apiserver_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    keys = set(before["requests"]) | set(after["requests"])
    delta = {k: after["requests"].get(k, 0.0) - before["requests"].get(k, 0.0) for k in keys}
    delta = {k: int(v) for k, v in sorted(delta.items()) if v}
    counted = sum(delta.values())
    authenticated = int(after["authenticated"] - before["authenticated"])
    writes = {k: v for k, v in delta.items() if k.split("/", 1)[0] in WRITE_VERBS}
    status_writes = sum(v for k, v in writes.items() if k.split("/")[1:] == ["udsvirtualmachines", "status"])
    return {
        "requests_counted": counted,
        "requests_authenticated": authenticated,
        # the closing scrape itself is authenticated and not counted: leave it out
        "requests_uncounted": authenticated - counted - 1,
        "requests_by_verb_resource_subresource": delta,
        "writes": sum(writes.values()),
        "writes_by_verb_resource_subresource": writes,
        "uds_vm_status_writes": status_writes,
        "apiserver_cpu_s": round(after["cpu_s"] - before["cpu_s"], 2),
    }


# ------------------------------------------------------------------------ playing the user and KubeVirt


def _vmi(name: str, namespace: str) -> dict[str, Any]:
    from uds_vm_operator import MANAGED_BY_LABEL  # noqa: PLC0415
    from uds_vm_operator.controller.handlers import VM_LABEL  # noqa: PLC0415

    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": namespace, "labels": {**MANAGED_BY_LABEL, VM_LABEL: name}},
        "spec": {"domain": {"devices": {}}},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "AgentConnected", "status": "True"}],
            "interfaces": [{"name": "default", "ipAddress": GUEST_ADDRESS, "ipAddresses": [GUEST_ADDRESS]}],
        },
    }


async def _apply_all(kubeconfig: Path, manifests: list[dict[str, Any]]) -> None:
    """Server-side apply every manifest, ``APPLY_CONCURRENCY`` requests in flight."""
    from uds_vm_operator.runtime import kube  # noqa: PLC0415

    api = kube.KubeApi.from_kubeconfig(kubeconfig, timeout_s=60)
    api.field_manager = BENCH_MANAGER
    gate = asyncio.Semaphore(APPLY_CONCURRENCY)

    async def one(manifest: dict[str, Any]) -> None:
        async with gate:
            await api.apply(manifest)

    try:
        await asyncio.gather(*(one(m) for m in manifests))
    finally:
        await api.close()


def _vm(name: str, namespace: str, interval_s: int | None) -> dict[str, Any]:
    vm = fleet_vm(name, namespace)
    if interval_s is not None:
        vm["spec"]["monitoring"] = {"enabled": True, "checkIntervalSeconds": interval_s}
    return vm


def _wait_no_terminating(api: Any, timeout_s: float = TERMINATING_TIMEOUT_S) -> float:
    """Let earlier namespaces finish emptying (their finalisation would load the window); seconds waited."""
    started = time.monotonic()
    deadline = started + timeout_s
    while time.monotonic() < deadline:
        if not any(
            (ns.get("status") or {}).get("phase") == "Terminating" for ns in api.items("/api/v1/namespaces")
        ):
            break
        time.sleep(2.0)
    return round(time.monotonic() - started, 1)


def _guest_states(api: Any, namespace: str) -> dict[str, int]:
    """How many VMs report each ``status.guest.compliant`` value (``-`` for none yet)."""
    counts: dict[str, int] = {}
    for vm in api.items(VM_COLLECTION.format(namespace=namespace)):
        state = str(((vm.get("status") or {}).get("guest") or {}).get("compliant") or "-")
        counts[state] = counts.get(state, 0) + 1
    return counts


def _require_converged(api: Any, namespace: str, n: int, operator: Any, *, monitored: bool) -> None:
    """Every VM has a status (monitored: guest Unknown, no VMI yet), or the operator's failures are shown."""
    vms = api.items(VM_COLLECTION.format(namespace=namespace))
    with_status = sum(1 for vm in vms if (vm.get("status") or {}).get("phase"))
    states = _guest_states(api, namespace)
    if with_status == n and (not monitored or states.get("Unknown", 0) == n):
        return
    raise RuntimeError(
        f"the operator left VMs unconverged before any VMI existed: {with_status}/{n} with a status, "
        f"guest states {states}; operator log tail: {operator.logs(3000)}"
    )


def _wait_all_compliant(api: Any, namespace: str, n: int, operator: Any) -> dict[str, int]:
    deadline = time.monotonic() + FIRST_CHECK_TIMEOUT_S
    states: dict[str, int] = {}
    while time.monotonic() < deadline:
        if operator.process is None or operator.process.poll() is not None:
            raise RuntimeError(f"the operator exited: {operator.logs()}")
        states = _guest_states(api, namespace)
        if states.get("True", 0) == n:
            return states
        time.sleep(POLL_S)
    raise RuntimeError(
        f"not every VM's guest became compliant within {FIRST_CHECK_TIMEOUT_S:.0f} s: {states}; "
        f"operator log tail: {operator.logs(3000)}"
    )


# ------------------------------------------------------------------------------------ one scenario


def _scenario(
    kubeconfig: Path, players: Players, n: int, window_s: float, interval_s: int, *, monitored: bool
) -> dict[str, Any]:
    from tests.integration.operator_harness import Api, OperatorProcess  # noqa: PLC0415

    api = Api(kubeconfig)
    result: dict[str, Any] = {"waited_for_terminating_namespaces_s": _wait_no_terminating(api)}
    namespace = fresh_namespace(api, "bench-guest" if monitored else "bench-guest-base")
    names = [f"vm{i:04d}" for i in range(n)]
    operator = OperatorProcess(
        kubeconfig,
        namespace,
        Path(tempfile.mkdtemp(prefix="bench-guest-")),
        extra_args=["--controllers", "vm", "--max-workers", str(WORKERS), "--log-level", "WARNING"],
        environment=image_environment(os.environ),  # as in the pod: see bench/image_env.py
    )
    try:
        operator.start()
        assert operator.process is not None
        pid = operator.process.pid
        started = time.monotonic()
        asyncio.run(
            _apply_all(
                kubeconfig, [_vm(name, namespace, interval_s if monitored else None) for name in names]
            )
        )
        operator.wait_quiet(minimum=n, quiet_s=3.0, timeout_s=CONVERGE_TIMEOUT_S)
        result["vms_converged_s"] = round(time.monotonic() - started, 1)
        _require_converged(api, namespace, n, operator, monitored=monitored)

        exporter = players.exporter
        fetches_before_vmis = exporter.count()
        userlists_before_vmis = players.agent.userlists
        reconciles_before_vmis = operator.reconciles()
        vmis_started = time.monotonic()
        asyncio.run(_apply_all(kubeconfig, [_vmi(name, namespace) for name in names]))
        vmis_created = time.monotonic()
        result["vmis_created_s"] = round(vmis_created - vmis_started, 1)
        if monitored:
            result["guest_states"] = _wait_all_compliant(api, namespace, n, operator)
            all_compliant = time.monotonic()
            first_round = exporter.times[fetches_before_vmis:]
            spread = (max(first_round) - min(first_round)) if first_round else 0.0
            result["first_check"] = {
                "all_compliant_after_first_vmi_created_s": round(all_compliant - vmis_started, 1),
                "all_compliant_after_last_vmi_created_s": round(all_compliant - vmis_created, 1),
                "fetches_first_to_last_s": round(spread, 1),
                "fetches": len(first_round),
                "userlists": players.agent.userlists - userlists_before_vmis,
                "poll_resolution_s": POLL_S,
            }
            # Start in the gap between rounds of checks: a window of k intervals then holds k rounds.
            offset = max(0.0, (interval_s - spread) / 2 - (time.monotonic() - max(first_round, default=0)))
            time.sleep(offset)
            result["window_offset_after_all_compliant_s"] = round(time.monotonic() - all_compliant, 1)
        else:
            operator.wait_quiet(minimum=reconciles_before_vmis + 1, quiet_s=5.0, timeout_s=CONVERGE_TIMEOUT_S)
        result.update(_measure_window(api, operator, pid, players, window_s))
        result["operator_log_bytes"] = operator.log_path.stat().st_size
    finally:
        operator.stop()
        api.call("DELETE", f"/api/v1/namespaces/{namespace}", expect=(200, 202, 404))
        api.close()
    return result


def _measure_window(api: Any, operator: Any, pid: int, players: Players, window_s: float) -> dict[str, Any]:
    """Operator CPU, RSS, reconciles, exporter fetches and API server requests over ``window_s``."""
    reconciles_before = operator.reconciles()
    rss_start = proc_status_mib(pid, "VmRSS")
    load_start = os.getloadavg()
    before = apiserver_snapshot(api)
    agent = players.agent
    userlists_before, agent_other_before = agent.userlists, sum(agent.paths.values())
    bench_before = _own_cpu_seconds()
    cpu_before = cpu_seconds(pid)
    start = time.monotonic()
    end = start + window_s
    rss_max = rss_start
    while (now := time.monotonic()) < end:
        time.sleep(min(1.0, end - now))
        rss_max = max(rss_max, proc_status_mib(pid, "VmRSS"))
        if operator.process is None or operator.process.poll() is not None:
            raise RuntimeError(f"the operator exited during the window: {operator.logs()}")
    cpu_after = cpu_seconds(pid)
    elapsed = time.monotonic() - start
    userlists = agent.userlists - userlists_before
    agent_other = sum(agent.paths.values()) - agent_other_before
    bench_cpu = _own_cpu_seconds() - bench_before
    after = apiserver_snapshot(api)
    fetch_times = players.exporter.between(start, start + elapsed)
    bins = [0] * (int(elapsed // HISTOGRAM_BIN_S) + 1)
    for t in fetch_times:
        bins[int((t - start) // HISTOGRAM_BIN_S)] += 1
    return {
        "window_s": round(elapsed, 1),
        "operator_cpu_s": round(cpu_after - cpu_before, 2),
        "rss_mib_window_start": rss_start,
        "rss_mib_window_end": proc_status_mib(pid, "VmRSS"),
        "rss_mib_window_max": rss_max,
        "rss_mib_peak_since_start": proc_status_mib(pid, "VmHWM"),
        "reconciles": operator.reconciles() - reconciles_before,
        "exporter_fetches": len(fetch_times),
        f"exporter_fetches_per_{HISTOGRAM_BIN_S}s": bins,
        "agent_userlists": userlists,
        "agent_other_requests_from_the_apiserver": agent_other,
        "bench_process_cpu_s_players_included": round(bench_cpu, 2),
        "apiserver": _apiserver_delta(before, after),
        "loadavg_1m_start_end": [round(load_start[0], 2), round(os.getloadavg()[0], 2)],
    }


# ------------------------------------------------------------------------------------ the benchmark


def _per_vm_hour(count: float, n: int, window_s: float) -> float:
    return round(count / n / window_s * 3600, 2)


def _figures(mon: dict[str, Any], base: dict[str, Any], n: int, interval_s: int) -> dict[str, Any]:
    w_mon, w_base = mon["window_s"], base["window_s"]
    cpu_h_mon = mon["operator_cpu_s"] / w_mon * 3600
    cpu_h_base = base["operator_cpu_s"] / w_base * 3600
    checks = mon["exporter_fetches"]
    uncounted_mon = mon["apiserver"]["requests_uncounted"] / w_mon
    uncounted_base = base["apiserver"]["requests_uncounted"] / w_base
    userlist_estimate = (uncounted_mon - uncounted_base) * w_mon
    return {
        "n": n,
        "interval_s": interval_s,
        "window_s": w_mon,
        "expected_checks_per_vm_per_hour": round(3600 / interval_s, 2),
        "checks_per_vm_per_hour": _per_vm_hour(checks, n, w_mon),
        "agent_calls_per_vm_per_hour": _per_vm_hour(mon["agent_userlists"], n, w_mon),
        "agent_calls_per_vm_per_hour_apiserver_crosscheck": _per_vm_hour(userlist_estimate, n, w_mon),
        "exporter_fetches_per_s": round(checks / w_mon, 2),
        "reconciles_per_vm_per_hour": _per_vm_hour(mon["reconciles"], n, w_mon),
        "baseline_reconciles_per_vm_per_hour": _per_vm_hour(base["reconciles"], n, w_base),
        "operator_cpu_s_per_hour": round(cpu_h_mon, 1),
        "baseline_operator_cpu_s_per_hour": round(cpu_h_base, 1),
        "monitoring_cpu_s_per_hour": round(cpu_h_mon - cpu_h_base, 1),
        "cpu_share_of_one_core": round(mon["operator_cpu_s"] / w_mon, 4),
        "baseline_cpu_share_of_one_core": round(base["operator_cpu_s"] / w_base, 4),
        "cpu_ms_per_check": round((cpu_h_mon - cpu_h_base) / 3600 * w_mon / checks * 1000, 2)
        if checks
        else None,
        "status_writes_in_window": mon["apiserver"]["uds_vm_status_writes"],
        "writes_in_window": mon["apiserver"]["writes"],
        "baseline_writes_in_window": base["apiserver"]["writes"],
        "apiserver_cpu_s_per_hour": round(mon["apiserver"]["apiserver_cpu_s"] / w_mon * 3600, 1),
        "baseline_apiserver_cpu_s_per_hour": round(base["apiserver"]["apiserver_cpu_s"] / w_base * 3600, 1),
        "rss_mib_end": mon["rss_mib_window_end"],
        "baseline_rss_mib_end": base["rss_mib_window_end"],
        "rss_mib_peak": mon["rss_mib_peak_since_start"],
        "baseline_rss_mib_peak": base["rss_mib_peak_since_start"],
        "rss_mib_window_max": mon["rss_mib_window_max"],
        "first_check_all_n_s": mon["first_check"]["all_compliant_after_first_vmi_created_s"],
        "first_check_after_last_vmi_s": mon["first_check"]["all_compliant_after_last_vmi_created_s"],
    }


def _anomalies(figures: dict[str, Any]) -> list[str]:
    """What the operator did that the feature does not promise (empty when it behaved)."""
    found = []
    expected = figures["expected_checks_per_vm_per_hour"]
    if figures["checks_per_vm_per_hour"] > 1.2 * expected:
        found.append(f"{figures['checks_per_vm_per_hour']} checks/VM/h, more than the interval's {expected}")
    if figures["checks_per_vm_per_hour"] < 0.8 * expected:
        found.append(f"{figures['checks_per_vm_per_hour']} checks/VM/h, fewer than the interval's {expected}")
    if figures["agent_calls_per_vm_per_hour"] != figures["checks_per_vm_per_hour"]:
        found.append(
            f"{figures['agent_calls_per_vm_per_hour']} user lists/VM/h but "
            f"{figures['checks_per_vm_per_hour']} report fetches/VM/h (one of each per check)"
        )
    if figures["status_writes_in_window"]:
        found.append(f"{figures['status_writes_in_window']} status writes while every guest stayed compliant")
    extra = figures["reconciles_per_vm_per_hour"] - figures["baseline_reconciles_per_vm_per_hour"]
    if figures["checks_per_vm_per_hour"] and extra > 1.2 * figures["checks_per_vm_per_hour"]:
        found.append(
            f"{round(extra, 2)} extra reconciles/VM/h for {figures['checks_per_vm_per_hour']} checks"
        )
    return found


def _source_state() -> dict[str, Any]:
    """The commit and ``src/`` tree the operator runs from, and any uncommitted change under ``src/``."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
        return done.stdout.strip()

    return {
        "head": git("rev-parse", "HEAD"),
        "src_tree": git("rev-parse", "HEAD:src"),
        "src_uncommitted": git("status", "--porcelain", "--", "src").splitlines(),
    }


def run() -> dict[str, Any]:
    """Monitored, then baseline; the dict becomes bench/results/guest_checks.json."""
    from tests.integration.operator_harness import Api  # noqa: PLC0415
    from uds_vm_operator.render.guestmonitor import EXPORTER_PORT  # noqa: PLC0415

    n = int(os.environ.get("BENCH_GUEST_N", "1000"))
    window_s = float(os.environ.get("BENCH_GUEST_WINDOW_S", "300"))
    interval_s = int(os.environ.get("BENCH_GUEST_INTERVAL_S", "60"))
    if interval_s < 15:
        raise SystemExit("BENCH_GUEST_INTERVAL_S must be at least 15 (the CRD's minimum)")
    _assert_report_is_compliant(compliant_report(), _vm("x", "x", interval_s)["spec"])
    source_before = _source_state()
    with (
        played_exporter(EXPORTER_PORT) as exporter,
        wide_service_range() as service_cidr,
        api_server() as kubeconfig,
    ):
        admin = Api(kubeconfig)
        try:
            with registered_agent(admin) as agent:
                players = Players(exporter, agent)
                monitored = _scenario(kubeconfig, players, n, window_s, interval_s, monitored=True)
                print(
                    f"monitored: {monitored['operator_cpu_s']} CPU s in {monitored['window_s']} s",
                    file=sys.stderr,
                )
                baseline = _scenario(kubeconfig, players, n, window_s, interval_s, monitored=False)
                print(
                    f"baseline: {baseline['operator_cpu_s']} CPU s in {baseline['window_s']} s",
                    file=sys.stderr,
                )
                _wait_no_terminating(admin)
                agent_requests = {"userlist": agent.userlists, **agent.paths}
        finally:
            admin.close()
        exporter_paths, exporter_errors = dict(exporter.paths), exporter.errors
    source_after = _source_state()
    figures = _figures(monitored, baseline, n, interval_s)
    anomalies = _anomalies(figures)
    if source_after != source_before:
        anomalies.append(f"src/ changed during the run: {source_before} -> {source_after}")
    return {
        "played": PLAYED,
        "workers": WORKERS,
        "source": source_before,
        "service_cidr": service_cidr or "the cluster's own (UDS_TEST_KUBECONFIG)",
        "exporter_paths": exporter_paths,
        "exporter_errors": exporter_errors,
        "agent_requests": agent_requests,
        "monitored": monitored,
        "baseline": baseline,
        "anomalies": anomalies,
        "summary": figures,
    }


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
