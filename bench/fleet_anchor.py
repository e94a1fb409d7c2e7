"""5,000 VMs and a Go operator side by side (issue 19): the floor, our operator and the Go anchor, one run.

Sections, each written to ``bench/results/fleet_anchor.partial.json`` as soon as it finishes:

- ``startup``: start → first status write of a waiting VM (seen by a watch, as ``operator_startup``),
  interleaved ours / anchor / kopf floor, warm and cold (page cache of every file the process reads evicted
  first); ours with both controllers, as the chart runs it. The kopf floor (``_kopf_floor_operator.py``) is
  the least an operator on the mandated framework does: what it takes, no kopf operator can beat. Beside
  each time, the CPU seconds the process used until then (steadier than wall time on a shared machine).
  ``idle_rss_mib``: ``VmRSS`` 3 s after that first reconcile, with nothing left to do.
- ``fleet``: per N (1,000 and 5,000), in fresh namespaces and interleaved: the floor
  (``reconcile_scale``'s), ours (both controllers, ``--max-workers 8``), the anchor (8 workers). Per
  operator: convergence seconds (watch-observed, as ``reconcile_scale``), ratio to the floor, peak RSS
  (``VmHWM``), CPU seconds (utime + stime) to converge, API requests per VM (the API server's own
  ``apiserver_request_total``, every verb and resource, minus the user's N applies), and the writes of a
  forced resync (restart: re-list and reconcile all N; must be 0).
- ``pools``: ours (both controllers), 50 pools x 20 members rolled to a new template at once: time to roll,
  peak RSS, the lowest Ready count any pool reached. CDI and KubeVirt are played for the namespace (every
  DataVolume Succeeded, every VirtualMachine ready, polled every 2 s), so the UDSVirtualMachine controller
  derives each member's readiness itself, as it does in production. (Marking members Ready directly, as
  with ``--controllers pool`` alone, fights the VM controller's own status writes and never converges.)

The anchor is fed the Python renderer's output (``bench/anchor_render.py``; ADR 0010). Every wait is
bounded. The load average (1 min) is recorded beside every figure: the machine is shared. Uses
``$UDS_TEST_KUBECONFIG`` when set, else a private control plane (preferred: its request counters are
ours alone). ``BENCH_ANCHOR_N`` (comma list), ``BENCH_ANCHOR_SECTIONS`` (comma list) and
``BENCH_ANCHOR_POOLS`` (``POOLSxMEMBERS``, e.g. ``2x3`` for a quick check) override.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import page_cache
from bench._harness import api_server, fleet_vm, fresh_namespace, proc_status_mib
from bench.anchor_process import ANCHOR_BIN, AnchorProcess
from bench.anchor_render import GENERATION_PLACEHOLDER, NOW_PLACEHOLDER, calibrate, write_rendered
from bench.image_env import image_environment

ROOT = Path(__file__).resolve().parent.parent
SIZES = (1000, 5000)
WORKERS = 8
SECTIONS = ("startup", "fleet", "pools")
STARTUP_REPEATS = 3
POOLS, POOL_REPLICAS, POOL_PLAY_INTERVAL_S = 50, 20, 2.0
POOL_STRATEGY = {"maxSurge": 2, "maxUnavailable": 0}
PARTIAL = ROOT / "bench" / "results" / "fleet_anchor.partial.json"
KOPF_FLOOR = ROOT / "bench" / "_kopf_floor_operator.py"
CONTENDERS = ("ours", "go", "kopf_floor")
"""Timed at start-up: our operator, the Go anchor, and the least a kopf operator can do (its floor)."""


def _load() -> float:
    return round(os.getloadavg()[0], 1)


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return round((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), 2)


def _requests(api: Any) -> dict[str, float]:
    """Every ``apiserver_request_total`` sample, keyed verb/resource/subresource."""
    from tests.integration.operator_harness import apiserver_request_samples  # noqa: PLC0415

    counts: dict[str, float] = {}
    for labels, value in apiserver_request_samples(api):
        key = "/".join((labels.get("verb", ""), labels.get("resource", ""), labels.get("subresource", "")))
        counts[key] = counts.get(key, 0.0) + value
    return counts


def _delta(after: dict[str, float], before: dict[str, float]) -> dict[str, int]:
    return {k: int(v - before.get(k, 0.0)) for k, v in after.items() if v != before.get(k, 0.0)}


def _save_partial(results: dict[str, Any]) -> dict[str, Any]:
    """Write what is measured so far, keeping the sections (and fleet sizes) an earlier run measured.

    A subset run (``BENCH_ANCHOR_SECTIONS``, ``BENCH_ANCHOR_N``) replaces only what it measured; every
    section and fleet size carries ``measured_at`` and ``commit`` so a merged record says which run gave it.
    """
    _stamp(results)
    merged = merged_with_earlier(results)
    PARTIAL.parent.mkdir(parents=True, exist_ok=True)
    PARTIAL.write_text(json.dumps(merged, indent=2, sort_keys=True) + "\n")
    return merged


def merged_with_earlier(results: dict[str, Any]) -> dict[str, Any]:
    """``results`` over the partial file's earlier contents: whole sections, fleet sizes one by one."""
    try:
        earlier = json.loads(PARTIAL.read_text())
    except (OSError, ValueError):
        earlier = {}
    if not isinstance(earlier, dict):
        earlier = {}
    merged = {**earlier, **results}
    merged["fleet"] = {**(earlier.get("fleet") or {}), **(results.get("fleet") or {})}
    if merged["fleet"]:
        merged["sizes"] = sorted(int(n) for n in merged["fleet"])
    else:
        del merged["fleet"]
    return merged


def _stamp(results: dict[str, Any]) -> None:
    entries = [results.get(key) for key in ("startup", "pools")]
    entries += list((results.get("fleet") or {}).values())
    fresh = [entry for entry in entries if isinstance(entry, dict) and "measured_at" not in entry]
    if not fresh:
        return
    stamp = {"measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": _commit()}
    for entry in fresh:
        entry.update(stamp)


def _commit() -> str:
    import subprocess  # noqa: PLC0415

    done = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip() or "unknown"


# ------------------------------------------------------------------------------------------- processes


class _Ours:
    """Our operator as the chart runs it (both controllers), behind the interface the scenarios need."""

    label = "ours"

    def __init__(self, kubeconfig: Path, namespace: str, scratch: Path) -> None:
        from tests.integration.operator_harness import OperatorProcess  # noqa: PLC0415

        self.process = OperatorProcess(
            kubeconfig,
            namespace,
            scratch / "logs",
            extra_args=["--max-workers", str(WORKERS), "--log-level", "WARNING"],
            environment=image_environment(os.environ),
        )

    def start(self) -> None:
        self.process.start()

    @property
    def pid(self) -> int:
        assert self.process.process is not None
        return self.process.process.pid

    def wait_quiet(self, minimum: int, quiet_s: float, timeout_s: float) -> int:
        return self.process.wait_quiet(minimum=minimum, quiet_s=quiet_s, timeout_s=timeout_s)

    def stop(self) -> None:
        self.process.stop()


class _Anchor:
    label = "anchor"

    def __init__(self, kubeconfig: Path, namespace: str, scratch: Path, rendered: Path) -> None:
        self.process = AnchorProcess(kubeconfig, namespace, rendered, scratch / "logs", workers=WORKERS)

    def start(self) -> None:
        self.process.start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_quiet(self, minimum: int, quiet_s: float, timeout_s: float) -> int:
        return self.process.wait_quiet(minimum=minimum, quiet_s=quiet_s, timeout_s=timeout_s)

    def stop(self) -> None:
        self.process.stop()


# --------------------------------------------------------------------------------------------- fleet


def _operator_scenario(
    kubeconfig: Path, n: int, make: Callable[[str, Path], Any], calibration: dict[str, Any]
) -> dict[str, Any]:
    from bench.reconcile_scale import _timed, _wait_no_terminating  # noqa: PLC0415
    from tests.integration.operator_harness import Api, apiserver_writes  # noqa: PLC0415

    api = Api(kubeconfig)
    _wait_no_terminating(api, timeout_s=1800)
    scratch = Path(tempfile.mkdtemp(prefix="bench-anchor-"))
    label = make("probe", scratch).label
    namespace = fresh_namespace(api, f"bench-{label}{n}")
    names = [f"vm{i:04d}" for i in range(n)]
    if label == "anchor":
        write_rendered(scratch / "rendered", namespace, names, fleet_vm, calibration)
    operator = make(namespace, scratch)
    load_before = _load()
    try:
        operator.start()
        idle_rss = proc_status_mib(operator.pid, "VmRSS")
        cpu_before = _cpu_s(operator.pid)
        requests_before = _requests(api)
        seconds, _ = asyncio.run(_timed(kubeconfig, namespace, names))
        operator.wait_quiet(minimum=n, quiet_s=2.0, timeout_s=1800)
        cpu_converge = round(_cpu_s(operator.pid) - cpu_before, 2)
        requests = _delta(_requests(api), requests_before)
        rss_converged = proc_status_mib(operator.pid, "VmHWM")
        load_converged = _load()

        operator.stop()
        writes_before = apiserver_writes(api)
        resync_requests_before = _requests(api)
        started = time.perf_counter()
        operator.start()
        operator.wait_quiet(minimum=n, quiet_s=3.0, timeout_s=1800)
        resync_s = time.perf_counter() - started
        resync_writes = apiserver_writes(api) - writes_before
        resync_requests = _delta(_requests(api), resync_requests_before)
        rss_resync = proc_status_mib(operator.pid, "VmHWM")
        cpu_resync = _cpu_s(operator.pid)
    finally:
        operator.stop()
        api.call("DELETE", f"/api/v1/namespaces/{namespace}", expect=(200, 202, 404))
        api.close()
    total = sum(requests.values()) - n  # minus the user's N applies
    return {
        "operator": label,
        "seconds": round(seconds, 2),
        "peak_rss_mib": max(rss_converged, rss_resync),
        "peak_rss_mib_converging": rss_converged,
        "peak_rss_mib_resync": rss_resync,
        "rss_mib_at_start": idle_rss,
        "cpu_s_converging": cpu_converge,
        "cpu_s_resync_incl_start": cpu_resync,
        "api_requests": total,
        "api_requests_per_vm": round(total / n, 2),
        "api_requests_by_verb_resource": dict(sorted(requests.items(), key=lambda kv: -kv[1])[:25]),
        "resync_s_incl_start_and_3s_quiet": round(resync_s, 2),
        "resync_writes": resync_writes,
        "resync_requests": sum(resync_requests.values()),
        "resync_requests_by_verb_resource": dict(sorted(resync_requests.items(), key=lambda kv: -kv[1])[:25]),
        "load_1m": {"before": load_before, "converged": load_converged, "after": _load()},
    }


def _floor_status(calibration: dict[str, Any]) -> dict[str, Any]:
    text = json.dumps(calibration["status"]).replace(f'"{GENERATION_PLACEHOLDER}"', "1")
    status = json.loads(text.replace(NOW_PLACEHOLDER, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())))
    status.pop("observedGeneration", None)
    return {key: value for key, value in status.items() if value is not None}


def _fleet(kubeconfig: Path, sizes: list[int], calibration: dict[str, Any], results: dict[str, Any]) -> None:
    from bench.reconcile_scale import _floor_scenario, _wait_no_terminating  # noqa: PLC0415
    from tests.integration.operator_harness import Api  # noqa: PLC0415

    fleet: dict[str, Any] = results.setdefault("fleet", {})
    for n in sizes:
        api = Api(kubeconfig)
        _wait_no_terminating(api, timeout_s=1800)
        api.close()
        load = _load()
        floor = _floor_scenario(kubeconfig, n, _floor_status(calibration), True)
        floor["load_1m"] = {"before": load, "after": _load()}
        print(f"N={n}: floor {floor['seconds']} s", file=sys.stderr, flush=True)
        entry: dict[str, Any] = {"floor": floor}
        fleet[str(n)] = entry
        _save_partial(results)
        makers: dict[str, Callable[[str, Path], Any]] = {
            "ours": lambda ns, scratch: _Ours(kubeconfig, ns, scratch),
            "anchor": lambda ns, scratch: _Anchor(kubeconfig, ns, scratch, scratch / "rendered"),
        }
        for label, make in makers.items():
            run_ = _operator_scenario(kubeconfig, n, make, calibration)
            run_["ratio_to_floor"] = round(run_["seconds"] / floor["seconds"], 2)
            entry[label] = run_
            print(
                f"N={n}: {label} {run_['seconds']} s ({run_['ratio_to_floor']}x floor), "
                f"peak {run_['peak_rss_mib']} MiB, cpu {run_['cpu_s_converging']} s, "
                f"{run_['api_requests_per_vm']} req/VM, resync writes {run_['resync_writes']}",
                file=sys.stderr,
                flush=True,
            )
            _save_partial(results)
        entry["ours_to_anchor_time"] = round(entry["ours"]["seconds"] / entry["anchor"]["seconds"], 2)
        _save_partial(results)


# ------------------------------------------------------------------------------------------- startup


def _after_first_status(
    who: str, mapped: list[Path], idle: dict[str, list[float]], cpu: dict[str, list[float]]
) -> Callable[[int], None]:
    """At the first status: CPU seconds used so far; the files ours maps (once); idle RSS 3 s later."""
    from bench import operator_startup as startup  # noqa: PLC0415

    def look(pid: int) -> None:
        cpu.setdefault(who, []).append(_cpu_s(pid))
        if not mapped and who == "ours":
            mapped.extend(startup._mapped_files(pid))
        time.sleep(3.0)
        idle.setdefault(who, []).append(proc_status_mib(pid, "VmRSS"))

    return look


def _pool_shape() -> tuple[int, int]:
    """(pools, members per pool): POOLS x POOL_REPLICAS, or ``BENCH_ANCHOR_POOLS`` as ``POOLSxMEMBERS``."""
    raw = os.environ.get("BENCH_ANCHOR_POOLS", "")
    if not raw:
        return POOLS, POOL_REPLICAS
    try:
        count, replicas = (int(part) for part in raw.lower().split("x"))
    except ValueError:
        raise SystemExit(f"BENCH_ANCHOR_POOLS={raw!r}: write POOLSxMEMBERS, e.g. 50x20") from None
    if count < 1 or replicas < 1:
        raise SystemExit(f"BENCH_ANCHOR_POOLS={raw!r}: both numbers must be at least 1")
    return count, replicas


def _pools_rolled(api: Any, namespace: str, revisions: dict[str, str], replicas: int) -> bool:
    """Every pool reports ``revision`` current with all replicas Ready, and its members carry it."""
    from tests.integration.pool_play import members_path, pool_path  # noqa: PLC0415
    from uds_vm_operator.fleet import POOL_LABEL, REVISION_LABEL  # noqa: PLC0415

    members = api.items(members_path(namespace))
    by_pool: dict[str, list[dict[str, Any]]] = {}
    for member in members:
        by_pool.setdefault(member["metadata"]["labels"].get(POOL_LABEL, ""), []).append(member)
    for pool, revision in revisions.items():
        status = (api.get(pool_path(namespace, pool)) or {}).get("status") or {}
        current = by_pool.get(pool, [])
        if not (
            status.get("currentRevision") == revision
            and status.get("readyReplicas") == replicas
            and len(current) == replicas
            and all(m["metadata"]["labels"].get(REVISION_LABEL) == revision for m in current)
        ):
            return False
    return True


def _startup_vm(kind: str, who: str, index: int) -> str:
    """The VM one start-up sample waits on (a valid VM name: no underscores)."""
    return f"{kind}-{who.replace('_', '-')}-{index}"


def _startup(kubeconfig: Path, calibration: dict[str, Any], results: dict[str, Any]) -> None:
    from bench import operator_startup as startup  # noqa: PLC0415
    from tests.integration.operator_harness import Api  # noqa: PLC0415
    from tools.envtest.controlplane import free_loopback_port  # noqa: PLC0415

    api = Api(kubeconfig)
    namespace = fresh_namespace(api, "bench-anchor-start")
    scratch = Path(tempfile.mkdtemp(prefix="bench-anchor-start-"))
    prefix = scratch / "pycache"
    roots = startup._interpreter_roots()
    startup._compile_bytecode(prefix, roots)
    names = [
        _startup_vm(kind, who, i) for kind in ("warm", "cold", "up") for who in CONTENDERS for i in range(9)
    ]
    rendered = write_rendered(scratch / "rendered", namespace, names, fleet_vm, calibration)
    anchor = AnchorProcess(kubeconfig, namespace, rendered, scratch / "logs", workers=WORKERS)
    samples: dict[str, list[float]] = {}
    idle: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    loads: list[float] = []
    mapped: list[Path] = []

    def argv(who: str) -> list[str]:
        if who == "go":
            anchor.metrics_port = free_loopback_port()
            return anchor.argv()
        if who == "kopf_floor":
            return [
                sys.executable,
                str(KOPF_FLOOR),
                "--kubeconfig",
                str(kubeconfig),
                "--namespace",
                namespace,
            ]
        return startup.operator_argv(kubeconfig, namespace)

    def one(kind: str, who: str, index: int) -> float:
        name = _startup_vm(kind, who, index)
        api.apply(
            fleet_vm(name, namespace),
            f"/apis/uds.dev/v1alpha1/namespaces/{namespace}/udsvirtualmachines/{name}",
        )
        env = startup._env("warm", scratch, prefix)
        try:
            return asyncio.run(
                startup._first_status_after_start(
                    kubeconfig,
                    namespace,
                    name,
                    env,
                    _after_first_status(who, mapped, idle, cpu),
                    argv=argv(who),
                )
            )
        finally:
            api.delete(f"/apis/uds.dev/v1alpha1/namespaces/{namespace}/udsvirtualmachines/{name}")

    try:
        for who in CONTENDERS:  # unmeasured: records the files ours maps, and warms every binary once
            one("up", who, 0)
        idle.clear()
        cpu.clear()
        python_files = page_cache.regular_files([*roots, prefix, Path(sys.executable), *mapped])
        for index in range(int(os.environ.get("BENCH_ANCHOR_STARTUP_REPEAT", STARTUP_REPEATS))):
            for kind in ("warm", "cold"):
                for who in CONTENDERS:
                    if kind == "cold":
                        page_cache.evict([ANCHOR_BIN.resolve()] if who == "go" else python_files)
                    loads.append(_load())
                    seconds = one(kind, who, index)
                    samples.setdefault(f"{who}_{kind}", []).append(round(seconds, 3))
                    print(f"start {who} {kind}: {seconds:.3f} s", file=sys.stderr, flush=True)
    finally:
        api.call("DELETE", f"/api/v1/namespaces/{namespace}", expect=(200, 202, 404))
        api.close()
    results["startup"] = {
        "definition": "Popen → first status write of a waiting VM seen by a watch; ours: both controllers; "
        "kopf_floor: bench/_kopf_floor_operator.py, the least a kopf operator does (same kopf settings, "
        "one status write through kopf's patch, no models, no children)",
        "median_s": {key: statistics.median(values) for key, values in samples.items()},
        "samples_s": samples,
        "cpu_s_to_first_status_median": {who: statistics.median(v) for who, v in cpu.items() if v},
        "cpu_s_to_first_status_samples": cpu,
        "idle_rss_mib_median": {who: statistics.median(v) for who, v in idle.items() if v},
        "idle_rss_mib_samples": idle,
        "load_1m": loads,
    }
    _save_partial(results)


# --------------------------------------------------------------------------------------------- pools


def _grant_golden_images(api: Any, namespace: str) -> None:
    """The grant a site's admin gives (``uds-vmctl golden-image rbac``): the members clone golden-images'
    DataSources, and the operator refuses a clone the namespace was not granted (ADR 0016)."""
    from uds_vm_operator.cli.goldenimage import golden_image_manifests  # noqa: PLC0415

    for manifest in golden_image_manifests("golden-images", [namespace]):
        meta = manifest["metadata"]
        if manifest["kind"] == "Namespace":
            path = f"/api/v1/namespaces/{meta['name']}"
        else:
            plural = {"Role": "roles", "RoleBinding": "rolebindings"}[manifest["kind"]]
            rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{meta['namespace']}"
            path = f"{rbac}/{plural}/{meta['name']}"
        api.apply(manifest, path)


def _pools(kubeconfig: Path, results: dict[str, Any]) -> None:
    from bench.pool_rollout import _pool  # noqa: PLC0415
    from bench.reconcile_scale import _wait_no_terminating  # noqa: PLC0415
    from tests.integration.operator_harness import Api  # noqa: PLC0415
    from tests.integration.pool_play import ClusterPlayer, ReadyWatcher, pool_path, wait_until  # noqa: PLC0415
    from uds_vm_operator.fleet import revision_hash  # noqa: PLC0415

    api = Api(kubeconfig)
    _wait_no_terminating(api, timeout_s=1800)
    namespace = fresh_namespace(api, "bench-pools")
    _grant_golden_images(api, namespace)
    scratch = Path(tempfile.mkdtemp(prefix="bench-anchor-pools-"))
    operator = _Ours(kubeconfig, namespace, scratch)
    count, replicas = _pool_shape()
    pools = [f"pool{i:02d}" for i in range(count)]
    player = ClusterPlayer(kubeconfig, namespace, interval_s=POOL_PLAY_INTERVAL_S)

    def manifest(pool: str, image: str) -> dict[str, Any]:
        body = _pool(namespace, image, POOL_STRATEGY)
        body["metadata"]["name"] = pool
        body["spec"]["replicas"] = replicas
        return body

    def rolled(revisions: dict[str, str]) -> bool:
        return _pools_rolled(api, namespace, revisions, replicas)

    watchers: list[Any] = []
    load_before = _load()
    try:
        player.__enter__()
        operator.start()
        for pool in pools:
            api.create(manifest(pool, "image-a"), pool_path(namespace))
        first = {
            p: revision_hash((api.get(pool_path(namespace, p)) or {})["spec"]["template"]) for p in pools
        }
        started = time.perf_counter()
        wait_until(lambda: rolled(first), 1800, f"{count} pools created and Ready", 2.0)
        create_s = time.perf_counter() - started
        watchers = [ReadyWatcher(kubeconfig, namespace, pool).start() for pool in pools]
        started = time.perf_counter()
        for pool in pools:
            api.merge(
                pool_path(namespace, pool),
                {"spec": {"template": {"spec": {"source": {"dataSource": {"name": "image-b"}}}}}},
            )
        second = {
            p: revision_hash((api.get(pool_path(namespace, p)) or {})["spec"]["template"]) for p in pools
        }
        wait_until(lambda: rolled(second), 1800, f"{count} pools rolled to the new template", 2.0)
        roll_s = time.perf_counter() - started
        peak = proc_status_mib(operator.pid, "VmHWM")
        cpu = _cpu_s(operator.pid)
    finally:
        for watcher in watchers:
            watcher.stop()
        player.__exit__(None, None, None)
        operator.stop()
        api.call("DELETE", f"/api/v1/namespaces/{namespace}", expect=(200, 202, 404))
        api.close()
    min_ready = min(watcher.min_ready for watcher in watchers)
    waits = sorted(wait for watcher in watchers for wait in watcher.deletion_waits_s)
    results["pools"] = {
        "pools": count,
        "replicas": replicas,
        "strategy": POOL_STRATEGY,
        "played": f"CDI and KubeVirt for the namespace, polled every {POOL_PLAY_INTERVAL_S} s",
        "create_and_ready_s": round(create_s, 1),
        "roll_s": round(roll_s, 1),
        "peak_rss_mib": peak,
        "cpu_s_total": cpu,
        "min_ready_any_pool": min_ready,
        "ready_floor": replicas - POOL_STRATEGY["maxUnavailable"],
        "floor_held": min_ready >= replicas - POOL_STRATEGY["maxUnavailable"],
        "max_members_any_pool": max(watcher.max_members for watcher in watchers),
        "member_deletion_wait_s": {
            "definition": "a replaced member's deletion timestamp (first seen) → gone: its children "
            "removed (by the operator's release, ADR 0018); an ordinal returns only after",
            "members": len(waits),
            "median": round(statistics.median(waits), 1) if waits else None,
            "mean": round(statistics.fmean(waits), 1) if waits else None,
            "max": round(waits[-1], 1) if waits else None,
        },
        "load_1m": {"before": load_before, "after": _load()},
    }
    _save_partial(results)


def run() -> dict[str, Any]:
    """Startup, fleet (floor / ours / anchor per N) and pools; becomes bench/results/fleet_anchor.json.

    Sections this run did not measure are kept from the partial file (each stamped with its run).
    """
    if not ANCHOR_BIN.exists():
        raise SystemExit(f"{ANCHOR_BIN} is missing: run `make go-anchor`")
    sizes = [int(x) for x in os.environ.get("BENCH_ANCHOR_N", "").split(",") if x] or list(SIZES)
    sections = [x for x in os.environ.get("BENCH_ANCHOR_SECTIONS", "").split(",") if x] or list(SECTIONS)
    results: dict[str, Any] = {"workers": WORKERS, "sizes": sizes, "cpus": os.cpu_count()}
    with api_server() as kubeconfig:
        calibration = calibrate(kubeconfig, fleet_vm, image_environment(os.environ))
        results["calibration"] = {k: v for k, v in calibration.items() if k != "status"}
        if "startup" in sections:
            _startup(kubeconfig, calibration, results)
        if "fleet" in sections:
            _fleet(kubeconfig, sizes, calibration, results)
        if "pools" in sections:
            _pools(kubeconfig, results)
    merged = _save_partial(results)
    merged["summary"] = _summary(merged)
    return merged


def _summary(results: dict[str, Any]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for n, entry in (results.get("fleet") or {}).items():
        summary[n] = {
            "floor_s": entry["floor"]["seconds"],
            **{
                label: {
                    key: entry[label][key]
                    for key in (
                        "seconds",
                        "ratio_to_floor",
                        "peak_rss_mib",
                        "cpu_s_converging",
                        "api_requests_per_vm",
                        "resync_writes",
                    )
                }
                for label in ("ours", "anchor")
                if label in entry
            },
            "ours_to_anchor_time": entry.get("ours_to_anchor_time"),
        }
    if "startup" in results:
        summary["startup_median_s"] = results["startup"]["median_s"]
        summary["idle_rss_mib"] = results["startup"]["idle_rss_mib_median"]
        summary["startup_cpu_s"] = results["startup"]["cpu_s_to_first_status_median"]
    if "pools" in results:
        pools = results["pools"]
        summary["pools"] = {
            k: pools.get(k)
            for k in ("roll_s", "peak_rss_mib", "min_ready_any_pool", "floor_held", "member_deletion_wait_s")
        }
    return summary


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
