"""Operator start-up: process start → first reconcile completed, cold and warm.

Each sample starts ``python -m uds_vm_operator.operator_main run`` against the real control plane, with one
UDSVirtualMachine waiting that has no status yet. The clock starts just before ``Popen`` and stops when a
watch (opened beforehand, in this process) sees the operator's first status write on that VM: the first
reconcile has finished and reached the API server. Nothing polls the operator.

Two kinds of start, interleaved so machine noise hits them alike:

- ``cold``: no usable bytecode — ``PYTHONDONTWRITEBYTECODE=1`` and a fresh, empty ``PYTHONPYCACHEPREFIX``,
  so every module of the operator *and its dependencies* is compiled from source (the worst case; a
  container image normally ships compiled bytecode).
- ``warm``: the normal environment (bytecode present, files in the page cache).

The median of ``REPEATS`` samples of each is reported, with min and max.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for extra in (ROOT / "tools" / "envtest", ROOT / "tests", ROOT / "tests" / "integration"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

REPEATS = 5


@contextlib.contextmanager
def _kubeconfig() -> Iterator[Path]:
    reuse = os.environ.get("UDS_TEST_KUBECONFIG")
    if reuse:
        yield Path(reuse)
        return
    from controlplane import running_control_plane  # noqa: PLC0415 (after sys.path is set up)

    with running_control_plane() as plane:
        yield Path(plane.kubeconfig)


def _argv(kubeconfig: Path, namespace: str) -> list[str]:
    from controlplane import free_loopback_port  # noqa: PLC0415

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
        "--controllers",
        "vm",
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
    kubeconfig: Path, namespace: str, name: str, env: dict[str, str]
) -> float:
    """Start the operator, return seconds until the VM's status is first written; stop it by its PID."""
    from bench.reconcile_scale import watch_client  # noqa: PLC0415
    from uds_vm_operator.controller import kube  # noqa: PLC0415

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
    process = subprocess.Popen(_argv(kubeconfig, namespace), env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        await asyncio.wait_for(written.wait(), timeout=120)
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


def _env(kind: str, scratch: Path) -> dict[str, str]:
    env = {**os.environ, "NO_PROXY": "*", "no_proxy": "*"}
    if kind == "cold":
        prefix = Path(tempfile.mkdtemp(prefix="pycache-", dir=scratch))
        env |= {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": str(prefix)}
    return env


def run() -> dict[str, Any]:
    """Interleave cold and warm samples; the dict becomes bench/results/operator_startup.json."""
    from operator_fixtures import udsvm, vm_path  # noqa: PLC0415
    from operator_harness import Api  # noqa: PLC0415

    repeats = int(os.environ.get("BENCH_STARTUP_REPEAT", REPEATS))
    samples: dict[str, list[float]] = {"cold": [], "warm": []}
    with _kubeconfig() as kubeconfig, tempfile.TemporaryDirectory(prefix="bench-startup-") as scratch:
        api = Api(kubeconfig)
        namespace = f"bench-startup-{secrets.token_hex(3)}"
        api.call("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}}, expect=(201,))
        try:
            # One warm-up start so "warm" really has its bytecode and page cache (not measured).
            api.apply(udsvm("warmup", namespace), vm_path(namespace, "warmup"))
            asyncio.run(
                _first_status_after_start(kubeconfig, namespace, "warmup", _env("warm", Path(scratch)))
            )
            api.delete(vm_path(namespace, "warmup"))
            for index in range(repeats):
                for kind in ("cold", "warm"):
                    name = f"{kind}{index}"
                    api.apply(udsvm(name, namespace), vm_path(namespace, name))
                    seconds = asyncio.run(
                        _first_status_after_start(kubeconfig, namespace, name, _env(kind, Path(scratch)))
                    )
                    samples[kind].append(round(seconds, 3))
                    api.delete(vm_path(namespace, name))
                    print(f"{kind}: {seconds:.3f} s", file=sys.stderr)
        finally:
            api.call("DELETE", f"/api/v1/namespaces/{namespace}", expect=(200, 202, 404))
            api.close()
    figures = {
        kind: {
            "median_s": round(statistics.median(values), 3),
            "min_s": min(values),
            "max_s": max(values),
            "samples_s": values,
        }
        for kind, values in samples.items()
    }
    return {
        "definition": "Popen → first status write of a waiting VM seen by a watch",
        "cold_definition": "no bytecode: PYTHONDONTWRITEBYTECODE=1, fresh empty PYTHONPYCACHEPREFIX",
        "target_s": 1.0,
        **figures,
        "summary": {kind: figures[kind]["median_s"] for kind in figures},
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
