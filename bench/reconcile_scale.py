"""N UDSVirtualMachines applied at once: operator convergence vs a direct-creation floor, RSS, resync writes.

For each N (100, 1,000) and each repetition, two scenarios run interleaved in fresh namespaces:

- ``operator``: the operator runs as a real process (``--controllers vm``, ``--max-workers 8``); the bench
  applies N VMs (16 requests in flight) and a watch on every child kind records when the last child
  appeared and the last VM status was first written. Then the operator's peak RSS (``VmHWM`` of its PID)
  is read, the operator is restarted (a forced resync of all N objects: it re-lists and reconciles each)
  and the API server's own ``apiserver_request_total`` write counters must not move until it is idle.
- ``floor``: the same N VMs applied the same way, and a minimal script — same client library, same
  8-way concurrency — server-side applies the very children the renderer produces and writes the status
  (and the Event) the operator writes, the moment each VM's apply returns. No watch, no cache, no diffing:
  the least work that leaves the cluster in the same state. Timed by the same watches.

The operator runs in the pod's environment (``bench/image_env.py``: no ``SSL_CERT_FILE``/``SSL_CERT_DIR``,
which a developer shell exports and the image does not).

``ratio = operator_s / floor_s`` is the figure the acceptance criterion reads (≤ 1.5 at N = 1,000).
Uses ``$UDS_TEST_KUBECONFIG`` when set, else starts a private control plane. ``BENCH_SCALE_N`` (comma list)
and ``BENCH_SCALE_REPEAT`` override the sizes and repetitions.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._harness import api_server, fleet_vm, fresh_namespace, proc_status_mib
from bench.image_env import image_environment

ROOT = Path(__file__).resolve().parent.parent

SIZES = (100, 1000)
REPEATS = {100: 3, 1000: 2}
WORKERS = 8
"""The operator's default ``--max-workers``; the floor uses the same concurrency."""
APPLY_CONCURRENCY = 16
"""Requests in flight while the bench plays the user applying N VMs (same in both scenarios)."""
USER_MANAGER = "bench-user"
FLOOR_MANAGER = "bench-floor"


def watch_client(kubeconfig: str | Path) -> Any:
    """An httpx client for watch streams (the bench's observer; the operator's requests use aiohttp)."""
    import httpx2  # noqa: PLC0415
    from lightkube.config import client_adapter  # noqa: PLC0415

    from uds_vm_operator.runtime.kube import load_kubeconfig  # noqa: PLC0415

    params = client_adapter.ConnectionParams(timeout=httpx2.Timeout(60.0), trust_env=False)
    return client_adapter.AsyncClient(load_kubeconfig(kubeconfig), params)


class Convergence:
    """Watches the namespace and records when each VM and each expected child first reached its goal."""

    def __init__(self, http: Any, namespace: str, names: list[str], child_kinds: dict[str, set[str]]) -> None:
        self.http = http
        self.namespace = namespace
        self.vms = set(names)
        self.expected = child_kinds  # plural path -> expected names
        self.seen: dict[str, dict[str, float]] = {path: {} for path in child_kinds}
        self.status_written: dict[str, float] = {}
        self.done = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._started: list[asyncio.Event] = []

    async def start(self) -> None:
        from uds_vm_operator.runtime import kube  # noqa: PLC0415

        paths = {kube.UDS_VM.path(self.namespace): self._on_vm}
        for path in self.expected:
            paths[path] = self._child_handler(path)
        for path, handler in paths.items():
            ready = asyncio.Event()
            self._started.append(ready)
            self._tasks.append(asyncio.create_task(self._watch(path, handler, ready)))
        await asyncio.gather(*(event.wait() for event in self._started))

    def _child_handler(self, path: str) -> Any:
        def handle(obj: dict[str, Any]) -> None:
            name = obj["metadata"]["name"]
            if name in self.expected[path]:
                self.seen[path].setdefault(name, time.perf_counter())
                self._check()

        return handle

    def _on_vm(self, obj: dict[str, Any]) -> None:
        if (obj.get("status") or {}).get("phase"):
            self.status_written.setdefault(obj["metadata"]["name"], time.perf_counter())
            self._check()

    def _check(self) -> None:
        if len(self.status_written) == len(self.vms) and all(
            len(self.seen[path]) == len(names) for path, names in self.expected.items()
        ):
            self.done.set()

    async def _watch(self, path: str, handler: Any, ready: asyncio.Event) -> None:
        params = {"watch": "true", "allowWatchBookmarks": "false", "timeoutSeconds": "3600"}
        async with self.http.stream("GET", path, params=params, timeout=None) as response:
            ready.set()
            async for line in response.aiter_lines():
                if line:
                    event = json.loads(line)
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        handler(event["object"])

    def finished_at(self) -> float:
        times = list(self.status_written.values())
        for seen in self.seen.values():
            times.extend(seen.values())
        return max(times)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def _expected_children(namespace: str, names: list[str]) -> dict[str, set[str]]:
    from uds_vm_operator.api import parse_vm_spec  # noqa: PLC0415
    from uds_vm_operator.render import ClusterFacts, Owner, render_children  # noqa: PLC0415
    from uds_vm_operator.runtime import kube  # noqa: PLC0415

    spec = parse_vm_spec(fleet_vm("x", namespace)["spec"])
    expected: dict[str, set[str]] = {}
    for name in names:
        for child in render_children(Owner(name, namespace, "0"), spec, ClusterFacts(cdi_http_checksum=True)):
            kind = kube.kind_of(child)
            expected.setdefault(kind.path(namespace), set()).add(child["metadata"]["name"])
    return expected


async def _apply_all(api: Any, namespace: str, names: list[str]) -> None:
    """Play the user: apply every VM, ``APPLY_CONCURRENCY`` requests in flight."""
    gate = asyncio.Semaphore(APPLY_CONCURRENCY)

    async def one(name: str) -> None:
        async with gate:
            await api.apply(fleet_vm(name, namespace))

    await asyncio.gather(*(one(name) for name in names))


class Floor:
    """The least work that creates the same objects: render, apply, write status and Event; 8 at a time.

    Runs as its own process (like the operator), fed by one watch on the VMs; no cache, no diffing.
    """

    def __init__(self, api: Any, kubeconfig: str, status: dict[str, Any], with_event: bool) -> None:
        self.api = api
        self.kubeconfig = kubeconfig
        self.status = status
        self.with_event = with_event
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def serve(self, namespace: str) -> None:
        """Print ``ready`` once the watch is open, then converge every VM that appears, until killed."""
        from uds_vm_operator.runtime import kube  # noqa: PLC0415

        workers = [asyncio.create_task(self._worker()) for _ in range(WORKERS)]
        watcher = watch_client(self.kubeconfig)
        params = {"watch": "true", "allowWatchBookmarks": "false", "timeoutSeconds": "3600"}
        async with watcher.stream(
            "GET", kube.UDS_VM.path(namespace), params=params, timeout=None
        ) as response:
            print("ready", flush=True)
            async for line in response.aiter_lines():
                if line:
                    event = json.loads(line)
                    if event.get("type") == "ADDED":
                        self.queue.put_nowait(event["object"])
        await asyncio.gather(*workers)

    async def _worker(self) -> None:
        while True:
            await self.converge(await self.queue.get())

    async def converge(self, vm: dict[str, Any]) -> None:
        from uds_vm_operator.api import parse_vm_spec  # noqa: PLC0415
        from uds_vm_operator.render import ClusterFacts, Owner, render_children  # noqa: PLC0415
        from uds_vm_operator.runtime import kube  # noqa: PLC0415
        from uds_vm_operator.runtime.events import build_event  # noqa: PLC0415

        meta = vm["metadata"]
        owner = Owner(meta["name"], meta["namespace"], meta["uid"])
        facts = ClusterFacts(cdi_http_checksum=True)
        for child in render_children(owner, parse_vm_spec(vm["spec"]), facts):
            await self.api.apply(child)
        await self.api.merge_patch(
            kube.UDS_VM, meta["namespace"], meta["name"], {"status": self.status}, subresource="status"
        )
        if self.with_event:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
            event = build_event(
                {"apiVersion": kube.UDS_VM.api_version, "kind": kube.UDS_VM.kind, **vm},
                event_type="Normal",
                reason="Pending",
                note="floor",
                event_time=stamp,
            )
            await self.api.create(event)


def _floor_main(kubeconfig: str, namespace: str, status_json: str, with_event: str) -> None:
    from uds_vm_operator.runtime import kube  # noqa: PLC0415

    async def go() -> None:
        api = kube.KubeApi.from_kubeconfig(kubeconfig, timeout_s=60)
        api.field_manager = FLOOR_MANAGER
        await Floor(api, kubeconfig, json.loads(status_json), with_event == "1").serve(namespace)

    asyncio.run(go())


def _wait_no_terminating(api: Any, timeout_s: float = 300) -> None:
    """Earlier scenarios' namespaces are still being emptied: let that finish so it does not skew timing."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not any(
            (ns.get("status") or {}).get("phase") == "Terminating" for ns in api.items("/api/v1/namespaces")
        ):
            return
        time.sleep(1.0)


async def _timed(kubeconfig: Path, namespace: str, names: list[str]) -> tuple[float, Any]:
    """Apply N VMs; seconds until every child exists and every status is written (seen by watches)."""
    from uds_vm_operator.runtime import kube  # noqa: PLC0415

    api = kube.KubeApi.from_kubeconfig(kubeconfig, timeout_s=60)
    api.field_manager = USER_MANAGER
    watcher = watch_client(kubeconfig)
    convergence = Convergence(watcher, namespace, names, _expected_children(namespace, names))
    try:
        await convergence.start()
        started = time.perf_counter()
        await _apply_all(api, namespace, names)
        await asyncio.wait_for(convergence.done.wait(), timeout=900)
        return convergence.finished_at() - started, convergence
    finally:
        await convergence.stop()
        await api.close()
        await watcher.aclose()


def _operator_scenario(kubeconfig: Path, n: int) -> dict[str, Any]:
    from tests.integration.operator_harness import Api, OperatorProcess, apiserver_writes  # noqa: PLC0415

    api = Api(kubeconfig)
    _wait_no_terminating(api)
    namespace = fresh_namespace(api, f"bench-op{n}")
    names = [f"vm{i:04d}" for i in range(n)]
    operator = OperatorProcess(
        kubeconfig,
        namespace,
        Path(tempfile.mkdtemp(prefix="bench-scale-")),
        extra_args=["--controllers", "vm", "--max-workers", str(WORKERS), "--log-level", "WARNING"],
        environment=image_environment(os.environ),  # as in the pod: see bench/image_env.py
    )
    try:
        operator.start()
        writes_before = apiserver_writes(api)
        seconds, _ = asyncio.run(_timed(kubeconfig, namespace, names))
        operator.wait_quiet(minimum=n, quiet_s=2.0, timeout_s=600)
        writes_total = apiserver_writes(api) - writes_before - n  # minus the user's N applies
        assert operator.process is not None
        rss_converged = proc_status_mib(operator.process.pid, "VmHWM")
        sample_status = dict((api.get(f"{_vm_collection(namespace)}/{names[0]}") or {}).get("status") or {})
        events = len(api.items(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events"))

        operator.stop()
        before = apiserver_writes(api)
        by_kind_before = _writes_by_kind(api)
        resync_started = time.perf_counter()
        operator.start()
        operator.wait_quiet(minimum=n, quiet_s=3.0, timeout_s=600)
        resync_s = time.perf_counter() - resync_started
        resync_writes = apiserver_writes(api) - before
        by_kind_after = _writes_by_kind(api)
        resync_breakdown = {
            key: value - by_kind_before.get(key, 0.0)
            for key, value in by_kind_after.items()
            if value != by_kind_before.get(key, 0.0)
        }
        assert operator.process is not None
        rss_resync = proc_status_mib(operator.process.pid, "VmHWM")
    finally:
        operator.stop()
        api.call("DELETE", f"/api/v1/namespaces/{namespace}", expect=(200, 202, 404))
        api.close()
    return {
        "seconds": round(seconds, 2),
        "operator_writes": writes_total,
        "events": events,
        "peak_rss_mib_converging": rss_converged,
        "peak_rss_mib_resync": rss_resync,
        "resync_s_incl_start_and_3s_quiet": round(resync_s, 2),
        "resync_writes": resync_writes,
        "resync_writes_by_kind": resync_breakdown,
        "sample_status": sample_status,
    }


def _writes_by_kind(api: Any) -> dict[str, float]:
    """The API server's write counters per verb/resource/subresource (to explain a non-zero resync)."""
    from tests.integration.operator_harness import OPERATOR_RESOURCES, WRITE_VERBS, apiserver_request_samples  # noqa: PLC0415

    counts: dict[str, float] = {}
    for labels, value in apiserver_request_samples(api):
        if labels.get("verb") in WRITE_VERBS and labels.get("resource") in OPERATOR_RESOURCES:
            key = "/".join(
                (labels["verb"], labels["resource"], labels.get("subresource", ""), labels.get("scope", ""))
            )
            counts[key] = counts.get(key, 0.0) + value
    return counts


def _vm_collection(namespace: str) -> str:
    return f"/apis/uds.dev/v1alpha1/namespaces/{namespace}/udsvirtualmachines"


def _floor_scenario(kubeconfig: Path, n: int, status: dict[str, Any], with_event: bool) -> dict[str, Any]:
    from tests.integration.operator_harness import Api  # noqa: PLC0415

    api = Api(kubeconfig)
    _wait_no_terminating(api)
    namespace = fresh_namespace(api, f"bench-floor{n}")
    names = [f"vm{i:04d}" for i in range(n)]
    argv = [sys.executable, "-m", "bench.reconcile_scale", "floor", str(kubeconfig), namespace]
    argv += [json.dumps(status), "1" if with_event else "0"]
    env = {**os.environ, "NO_PROXY": "*", "no_proxy": "*"}
    process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None
        if process.stdout.readline().strip() != b"ready":
            raise RuntimeError(f"the floor script did not start (exit {process.wait()})")
        seconds, _ = asyncio.run(_timed(kubeconfig, namespace, names))
        peak_rss = proc_status_mib(process.pid, "VmHWM")
    finally:
        process.terminate()
        process.wait(timeout=20)
        api.call("DELETE", f"/api/v1/namespaces/{namespace}", expect=(200, 202, 404))
        api.close()
    return {"seconds": round(seconds, 2), "floor_peak_rss_mib": peak_rss}


def _status_for_floor(sample: dict[str, Any]) -> dict[str, Any]:
    status = dict(sample)
    status.pop("observedGeneration", None)
    return status or {"phase": "Pending"}


def run() -> dict[str, Any]:
    """Interleave operator and floor runs per N; the dict becomes bench/results/reconcile_scale.json."""
    sizes = [int(x) for x in os.environ.get("BENCH_SCALE_N", "").split(",") if x] or list(SIZES)
    repeat_override = os.environ.get("BENCH_SCALE_REPEAT")
    results: dict[str, Any] = {}
    with api_server() as kubeconfig:
        for n in sizes:
            repeats = int(repeat_override) if repeat_override else REPEATS.get(n, 1)
            operator_runs: list[dict[str, Any]] = []
            floor_runs: list[dict[str, Any]] = []
            for _ in range(repeats):
                op = _operator_scenario(kubeconfig, n)
                operator_runs.append(op)
                with_event = op["events"] >= n
                floor_runs.append(
                    _floor_scenario(kubeconfig, n, _status_for_floor(op["sample_status"]), with_event)
                )
                print(
                    f"N={n}: operator {op['seconds']} s, floor {floor_runs[-1]['seconds']} s", file=sys.stderr
                )
            op_s = round(statistics.median(r["seconds"] for r in operator_runs), 2)
            floor_s = round(statistics.median(r["seconds"] for r in floor_runs), 2)
            for run_ in operator_runs:
                run_.pop("sample_status", None)
            results[str(n)] = {
                "operator_s_median": op_s,
                "floor_s_median": floor_s,
                "ratio": round(op_s / floor_s, 2),
                "peak_rss_mib_max": max(
                    max(r["peak_rss_mib_converging"], r["peak_rss_mib_resync"]) for r in operator_runs
                ),
                "resync_writes_max": max(r["resync_writes"] for r in operator_runs),
                "operator_runs": operator_runs,
                "floor_runs": floor_runs,
            }
    return {
        "workers": WORKERS,
        "apply_concurrency": APPLY_CONCURRENCY,
        "sizes": results,
        "summary": {
            n: {
                "operator_s": r["operator_s_median"],
                "floor_s": r["floor_s_median"],
                "ratio": r["ratio"],
                "peak_rss_mib": r["peak_rss_mib_max"],
                "resync_writes": r["resync_writes_max"],
            }
            for n, r in results.items()
        },
    }


if __name__ == "__main__":
    if sys.argv[1:2] == ["floor"]:
        _floor_main(*sys.argv[2:6])
    else:
        print(json.dumps(run(), indent=2))
