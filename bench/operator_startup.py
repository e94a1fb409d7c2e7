"""Operator start-up: process start → first reconcile completed; cold, warm and without bytecode.

Each sample starts ``python -m uds_vm_operator.operator_main run`` against the real control plane, with one
UDSVirtualMachine waiting that has no status yet. The clock starts just before ``Popen`` and stops when a
watch (opened beforehand, in this process) sees the operator's first status write on that VM: the first
reconcile has finished and reached the API server. Nothing polls the operator.

The operator runs in the image's environment: ``PYTHONDONTWRITEBYTECODE=1``, and no ``SSL_CERT_FILE`` /
``SSL_CERT_DIR`` (a developer shell often exports them; the image does not, and with them set the
operator keeps loading the system CA bundle instead of trusting only the cluster CA, see
``runtime/trust.py``).

Bytecode "as the image has it": the image compiles the stdlib and its venv (``python -m compileall``, see
the ``Dockerfile``). Here one fresh ``PYTHONPYCACHEPREFIX`` is filled the same way, by ``compileall`` over
the stdlib, the venv's site-packages and ``src/``, once per run. (A prefix replaces every ``__pycache__``
folder, pip's included, so all three must be compiled into it. The tree's own ``__pycache__`` cannot be
trusted either: with ``PYTHONDONTWRITEBYTECODE`` set in a shell, ``src/`` has stale or no bytecode.)

Three kinds of start, interleaved so machine noise hits them alike:

- ``cold``: a pod's first start on a node. Bytecode from the prefix, and the page cache emptied first, with
  ``posix_fadvise(DONTNEED)``, of every file the interpreter may read: the stdlib, site-packages, ``src/``,
  the prefix, the Python binary and every shared library the operator maps. ``mincore`` then reports
  what stayed resident (pages another process maps cannot be dropped: ``libpython``, ``libc``) and how
  much the start read back in. The kernel's dentry and inode caches stay warm (only root could drop them,
  for the whole machine), so a real node's first start pays somewhat more for path look-ups.
- ``warm``: the same bytecode, files in the page cache (a restart on the same node).
- ``no_bytecode``: the old pessimistic case: an empty prefix and ``PYTHONDONTWRITEBYTECODE=1``, so every
  module of the operator and its dependencies is compiled from source; sources in the page cache (each
  measured start follows an unmeasured one).

The median of ``REPEATS`` samples of each kind is reported, with min and max.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import page_cache
from bench._harness import api_server, fresh_namespace
from bench.image_env import image_environment

ROOT = Path(__file__).resolve().parent.parent

REPEATS = 5
KINDS = ("cold", "warm", "no_bytecode")
TEST_FOLDERS = r"[/\\](test|tests|idle_test)[/\\]"
"""Skipped by compileall: the image's base deletes the stdlib's test suites, and nothing imports them."""


def operator_argv(kubeconfig: Path, namespace: str, *options: str) -> list[str]:
    """Our operator as the startup benchmarks time it: standalone, one namespace, loopback, fresh ports.

    ``options`` (``--controllers vm`` here; none, so both controllers, in ``fleet_anchor``) go after
    ``--standalone``.
    """
    from tools.envtest.controlplane import free_loopback_port  # noqa: PLC0415

    return [
        sys.executable,
        "-m",
        "uds_vm_operator.operator_main",
        "run",
        "--kubeconfig",
        str(kubeconfig),
        "--namespace",
        namespace,
        "--standalone",
        *options,
        "--bind-address",
        "127.0.0.1",
        "--metrics-port",
        str(free_loopback_port()),
        "--health-port",
        str(free_loopback_port()),
        "--log-level",
        "WARNING",
    ]


async def _first_status_after_start(
    kubeconfig: Path,
    namespace: str,
    name: str,
    env: dict[str, str],
    inspect: Callable[[int], None] | None = None,
    *,
    argv: list[str] | None = None,
) -> float:
    """Start the operator, return seconds until the VM's status is first written; stop it by its PID.

    ``inspect`` is called with the operator's PID once the status is seen, before the operator is stopped.
    ``argv`` replaces the operator's command line (bench/fleet_anchor.py starts both controllers, or the
    Go anchor, the same way).
    """
    from bench.reconcile_scale import watch_client  # noqa: PLC0415
    from uds_vm_operator.runtime import kube  # noqa: PLC0415

    http = watch_client(kubeconfig)
    written = asyncio.Event()
    opened = asyncio.Event()
    stamp: list[float] = []
    path = kube.UDS_VM.path(namespace)
    params = {"watch": "true", "fieldSelector": f"metadata.name={name}", "timeoutSeconds": "600"}

    async def watch() -> None:
        async with http.stream("GET", path, params=params, timeout=None) as response:
            opened.set()
            async for line in response.aiter_lines():
                if line and (json.loads(line)["object"].get("status") or {}).get("phase"):
                    stamp.append(time.perf_counter())
                    written.set()
                    return

    watcher = asyncio.create_task(watch())
    await opened.wait()
    log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in the finally below)
    started = time.perf_counter()
    process = subprocess.Popen(
        argv or operator_argv(kubeconfig, namespace, "--controllers", "vm"),
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        await asyncio.wait_for(written.wait(), timeout=120)
        if inspect is not None:
            inspect(process.pid)
    except TimeoutError:
        log.seek(0)
        raise RuntimeError(f"no status within 120 s; operator log: {log.read()[-3000:]!r}") from None
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        await http.aclose()
        log.close()
    return stamp[0] - started


def _interpreter_roots() -> list[Path]:
    """Where the operator's interpreter finds modules: the stdlib, the venv's site-packages, ``src/``."""
    paths = sysconfig.get_paths()
    roots = [Path(paths["stdlib"]), Path(paths["purelib"]), Path(paths["platlib"]), ROOT / "src"]
    return list(dict.fromkeys(root.resolve() for root in roots))


def _skipped_by_compile() -> str:
    """compileall's ``-x`` pattern: test suites, and the base interpreter's own site-packages.

    A venv does not see the latter (and the image's holds only pip, which the Dockerfile uninstalls).
    """
    base_site = re.escape(str(Path(sysconfig.get_paths()["stdlib"]).resolve() / "site-packages"))
    return f"{TEST_FOLDERS}|^{base_site}[/\\\\]"


def _compile_bytecode(prefix: Path, roots: list[Path]) -> float:
    """Fill ``prefix`` as the Dockerfile fills the image (compileall, unchecked-hash); returns seconds."""
    started = time.perf_counter()
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(prefix)}
    command = [sys.executable, "-m", "compileall", "-q", "-j0", "--invalidation-mode", "unchecked-hash"]
    command += ["-x", _skipped_by_compile(), *map(str, roots)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"compileall failed ({done.returncode}): {(done.stdout + done.stderr)[-2000:]}")
    page_cache.flush(page_cache.regular_files([prefix]))  # clean pages: only those can be evicted
    return time.perf_counter() - started


def _mapped_files(pid: int) -> list[Path]:
    """Files a running process has mapped: its binary, shared libraries and extension modules."""
    mapped: set[Path] = set()
    with open(f"/proc/{pid}/maps", encoding="utf-8") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].startswith("/") and not fields[5].endswith("(deleted)\n"):
                mapped.add(Path(fields[5].strip()))
    return sorted(mapped)


def _env(kind: str, scratch: Path, prefix: Path) -> dict[str, str]:
    env = image_environment(os.environ)
    env |= {"NO_PROXY": "*", "no_proxy": "*", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
    if kind == "no_bytecode":
        env["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="empty-pycache-", dir=scratch)
    else:
        env["PYTHONPYCACHEPREFIX"] = str(prefix)
    return env


def _figures(values: list[float]) -> dict[str, Any]:
    return {
        "median_s": round(statistics.median(values), 3),
        "min_s": min(values),
        "max_s": max(values),
        "samples_s": values,
    }


def run() -> dict[str, Any]:
    """Interleave cold, warm and no-bytecode samples; the dict becomes bench/results/operator_startup.json."""
    from tests.integration.operator_fixtures import udsvm, vm_path  # noqa: PLC0415
    from tests.integration.operator_harness import Api  # noqa: PLC0415

    repeats = int(os.environ.get("BENCH_STARTUP_REPEAT", REPEATS))
    samples: dict[str, list[float]] = {kind: [] for kind in KINDS}
    after_eviction: list[dict[str, Any]] = []
    after_cold_start_mib: list[float] = []
    with api_server() as kubeconfig, tempfile.TemporaryDirectory(prefix="bench-startup-") as scratch_dir:
        scratch = Path(scratch_dir)
        prefix = scratch / "pycache"
        roots = _interpreter_roots()
        compile_s = _compile_bytecode(prefix, roots)
        compiled = set(page_cache.regular_files([prefix]))
        api = Api(kubeconfig)
        namespace = fresh_namespace(api, "bench-startup")

        def start(name: str, env: dict[str, str], inspect: Callable[[int], None] | None = None) -> float:
            api.apply(udsvm(name, namespace), vm_path(namespace, name))
            try:
                return asyncio.run(_first_status_after_start(kubeconfig, namespace, name, env, inspect))
            finally:
                api.delete(vm_path(namespace, name))

        try:
            # Unmeasured warm-up, allowed to write bytecode: anything it writes was missing from the prefix
            # (the "image" would compile it on every start), and its mapped files join the eviction set.
            mapped: list[Path] = []
            warmup_env = _env("warm", scratch, prefix)
            warmup_env.pop("PYTHONDONTWRITEBYTECODE")
            start("warmup", warmup_env, lambda pid: mapped.extend(_mapped_files(pid)))
            missing = sorted(str(p) for p in set(page_cache.regular_files([prefix])) - compiled)
            evictable = page_cache.regular_files([*roots, prefix, Path(sys.executable), *mapped])
            for index in range(repeats):
                for kind in KINDS:
                    if kind == "cold":
                        page_cache.evict(evictable)
                        after_eviction.append(page_cache.residency(evictable, top=5))
                    if kind == "no_bytecode":  # sources into the page cache, as in the old runs
                        start(f"prime{index}", _env(kind, scratch, prefix))
                    seconds = start(f"{kind.replace('_', '')}{index}", _env(kind, scratch, prefix))
                    if kind == "cold":
                        after_cold_start_mib.append(float(page_cache.residency(evictable)["resident_mib"]))
                    samples[kind].append(round(seconds, 3))
                    print(f"{kind}: {seconds:.3f} s", file=sys.stderr)
        finally:
            api.call("DELETE", f"/api/v1/namespaces/{namespace}", expect=(200, 202, 404))
            api.close()
    figures = {kind: _figures(values) for kind, values in samples.items()}
    resident_mib = [float(report["resident_mib"]) for report in after_eviction]
    return {
        "definition": "Popen → first status write of a waiting VM seen by a watch",
        "definitions": {
            "cold": "image bytecode (compileall into a fresh PYTHONPYCACHEPREFIX); page cache of the "
            "interpreter's files evicted (posix_fadvise DONTNEED) before each start",
            "warm": "image bytecode, files in the page cache",
            "no_bytecode": "PYTHONDONTWRITEBYTECODE=1, empty PYTHONPYCACHEPREFIX: everything compiled from "
            "source on every start; sources in the page cache",
            "environment": "as the image: PYTHONDONTWRITEBYTECODE=1, SSL_CERT_FILE/SSL_CERT_DIR unset",
        },
        "target_s": 1.0,
        **figures,
        "bytecode": {
            "compile_s": round(compile_s, 1),
            "files_in_prefix": len(compiled),
            "modules_compiled_at_start": len(missing),
            "missing": missing[:20],
        },
        "page_cache": {
            "evicted_files": len(evictable),
            "evicted_mib": after_eviction[0]["total_mib"] if after_eviction else 0,
            "resident_after_eviction_mib": statistics.median(resident_mib) if resident_mib else None,
            "read_by_cold_start_mib": (
                round(statistics.median(after_cold_start_mib) - statistics.median(resident_mib), 1)
                if resident_mib
                else None
            ),
            "still_resident_after_eviction": after_eviction[0].get("most_resident") if after_eviction else [],
        },
        "summary": {kind: figures[kind]["median_s"] for kind in figures},
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
