"""What the benchmarks that run an operator against an API server share (not a benchmark: ``bench.run`` skips
names starting with ``_``).

The API server to use, a fresh namespace on it, the fleet's VM manifest and a process's memory figures, so
``reconcile_scale``, ``fleet_anchor``, ``operator_startup`` and ``pool_rollout`` measure on the same footing.
The test-tree imports (``tools.envtest``, ``tests.integration``) are deferred to the functions that use them.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def api_server() -> Iterator[Path]:
    """The kubeconfig to measure on: ``$UDS_TEST_KUBECONFIG`` when set, else a private control plane's."""
    reuse = os.environ.get("UDS_TEST_KUBECONFIG")
    if reuse:
        yield Path(reuse)
        return
    from tools.envtest.controlplane import running_control_plane  # noqa: PLC0415

    with running_control_plane() as plane:
        yield Path(plane.kubeconfig)


def fleet_vm(name: str, namespace: str) -> dict[str, Any]:
    """The VM the fleet benchmarks apply: the integration tests' ``udsvm``, so both judge one object."""
    from tests.integration.operator_fixtures import udsvm  # noqa: PLC0415

    return udsvm(name, namespace)


def fresh_namespace(api: Any, prefix: str) -> str:
    """Create ``<prefix>-<6 hex>`` (no earlier run's objects in it) and return its name."""
    name = f"{prefix}-{secrets.token_hex(3)}"
    api.call("POST", "/api/v1/namespaces", {"metadata": {"name": name}}, expect=(201,))
    return name


def proc_status_mib(pid: int, field: str) -> float:
    """``VmHWM`` (peak resident set) or ``VmRSS`` of a process, MiB, from ``/proc/<pid>/status``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError(f"no {field} in /proc/{pid}/status")
