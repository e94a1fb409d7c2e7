"""The ``uds-vm-operator run`` process: metrics, probes, the reconcile workers and kopf's watches.

kopf logs in with the kubeconfig (``KUBECONFIG``) or the in-cluster service account and runs the watch
streams and peering; every request *we* make goes through :class:`uds_vm_operator.runtime.kube.KubeApi`
(over kopf's aiohttp, ADR 0004). The installed kopf is checked first
(:func:`~uds_vm_operator.runtime.kopf_integration.check_kopf_version`): the process refuses to start on a
kopf series its kopf integration was not tested on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from dataclasses import dataclass, field
from typing import Any

import kopf

from uds_vm_operator.controller import factory
from uds_vm_operator.controller.handlers import (
    VM_CONTROLLER_KINDS,
    configure_settings,
    needs_cluster_scanning,
)
from uds_vm_operator.controller.reconciler import Reconciler
from uds_vm_operator.metrics import OperatorMetrics
from uds_vm_operator.runtime import kube
from uds_vm_operator.runtime.api_presence import ServedKindsChangedError, served_kinds, wait_for_change
from uds_vm_operator.runtime.errors import ControllerError
from uds_vm_operator.runtime.health import start_health_server
from uds_vm_operator.runtime.kopf_integration import (
    check_kopf_version,
    memories_for,
    set_stop_flag_on_cleanup,
    use_no_diffbase_if_event_only,
)
from uds_vm_operator.runtime.logsetup import configure_logging
from uds_vm_operator.runtime.memory import trim_when_idle, tune_allocator
from uds_vm_operator.runtime.metrics_server import start_metrics_server
from uds_vm_operator.runtime.peering import (
    DEFAULT_LIFETIME_S,
    apply_peering_settings,
    warn_if_peering_object_missing,
)

log = logging.getLogger("uds_vm_operator.process")


@dataclass(frozen=True)
class RunOptions:
    """Parsed command-line options of ``uds-vm-operator run``."""

    kubeconfig: str | None = None
    namespaces: tuple[str, ...] = ()
    all_namespaces: bool = False
    metrics_port: int = 8080
    health_port: int = 8081
    bind_address: str = "0.0.0.0"
    peering: str | None = None
    standalone: bool = False
    priority: int | None = None
    """Peering priority; ``None`` = chosen per replica (runtime/peering.py), so replicas never tie."""
    peering_lifetime: int = DEFAULT_LIFETIME_S
    max_workers: int = 8
    log_level: str = "INFO"
    controllers: tuple[str, ...] = ("vm", "pool", "backup")
    extra: dict[str, Any] = field(default_factory=dict)


SPARE_CONNECTIONS = 4


def run(options: RunOptions) -> int:
    """Run the operator until SIGINT/SIGTERM; returns the process exit code."""
    configure_logging(options.log_level)
    if options.kubeconfig:
        os.environ["KUBECONFIG"] = os.path.abspath(options.kubeconfig)
    try:
        asyncio.run(_serve(options))
    except KeyboardInterrupt:
        return 0
    except Exception as exc:  # top-level: one clear line, no traceback, non-zero exit
        log.error("operator stopped", extra={"error": str(exc)})
        return 1
    return 0


async def _serve(options: RunOptions) -> None:
    check_kopf_version()
    tune_allocator()
    # One connection per reconcile worker (requests within a reconcile are sequential) plus a few for the
    # pool controller, Events and status: more would only hold idle TLS buffers.
    api = kube.KubeApi.from_kubeconfig(
        options.kubeconfig, max_connections=options.max_workers + SPARE_CONNECTIONS
    )
    metrics = OperatorMetrics()
    metrics_server = await start_metrics_server(options.bind_address, options.metrics_port, metrics)
    controllers = _start_controllers(options, api, metrics)
    registry = controllers.registry
    settings, scan_cluster = _kopf_settings(options, registry)
    clusterwide = options.all_namespaces or not options.namespaces
    await warn_if_peering_object_missing(
        api, name=options.peering, clusterwide=clusterwide, namespaces=options.namespaces
    )
    stop = asyncio.Event()
    set_stop_flag_on_cleanup(registry, stop)
    presence = (
        None
        if scan_cluster
        else asyncio.create_task(_stop_when_served_kinds_change(api, controllers.kopf_kinds, stop))
    )
    ready = asyncio.Event()
    health = await start_health_server(options.bind_address, options.health_port, ready.is_set)
    workers = asyncio.create_task(controllers.reconciler.run(), name="reconcile-workers")
    trimmer = asyncio.create_task(trim_when_idle(controllers.reconciler.idle), name="memory-trim")
    # Let the worker pools spawn their tasks now: kopf treats every task created after it starts as its
    # own, and on SIGTERM waits 5 s for those to finish before cancelling them (our workers never finish
    # on their own), so each stop took 5 s longer. Tasks that exist before kopf.operator are left to us.
    await asyncio.sleep(0)
    _log_starting(options)
    try:
        await kopf.operator(
            registry=registry,
            settings=settings,  # peering name, priority and lifetime: apply_peering_settings above
            clusterwide=clusterwide,
            namespaces=options.namespaces,
            ready_flag=ready,
            stop_flag=stop,
            memories=memories_for(registry),
        )
        if presence is not None and presence.done() and not presence.cancelled():
            raise ServedKindsChangedError(f"restarting to follow the API: {presence.result()}")
    finally:
        if presence is not None:
            presence.cancel()
        trimmer.cancel()
        await _cancel_and_wait(workers)
        for task in controllers.worker_tasks:
            await _cancel_and_wait(task)
        health.close()
        metrics_server.close()
        await api.close()
        log.info("operator stopped")


@dataclass
class _Controllers:
    """The controllers one process runs: the kopf registry they share and the kinds kopf must watch."""

    reconciler: Reconciler
    registry: kopf.OperatorRegistry
    kopf_kinds: list[kube.Kind]
    worker_tasks: list[asyncio.Task[None]]
    """The pool and backup controllers' worker pools (the VM controller's start later, in _serve)."""


def _start_controllers(options: RunOptions, api: kube.KubeApi, metrics: OperatorMetrics) -> _Controllers:
    """Build the VM controller (always, its workers start later) and the pool controller when enabled, each
    registering its own handlers (controller.factory: the same build as the in-process tests).

    The pool workers' task is created here, before kopf starts, for the reason given in ``_serve``."""
    reconciler = factory.vm_controller(api, metrics, workers=options.max_workers)
    registry = kopf.OperatorRegistry()
    kopf_kinds: list[kube.Kind] = []
    if "vm" in options.controllers:
        reconciler.register(registry)
        kopf_kinds += VM_CONTROLLER_KINDS
    worker_tasks: list[asyncio.Task[None]] = []
    if "pool" in options.controllers:
        pools = factory.pool_controller(api, metrics)
        pools.register(registry)
        kopf_kinds += [pools.kind, kube.UDS_VM]  # a repeat is harmless: presence is checked as a set
        worker_tasks.append(asyncio.create_task(pools.run(), name="pool-workers"))
    if "backup" in options.controllers:
        for controller in factory.backup_controllers(api, metrics):
            controller.register(registry)
            kopf_kinds.append(controller.kind)
            task = asyncio.create_task(controller.run(), name=f"{controller.queue_name}-workers")
            worker_tasks.append(task)
    return _Controllers(reconciler, registry, kopf_kinds, worker_tasks)


def _log_starting(options: RunOptions) -> None:
    log.info(
        "operator starting",
        extra={
            "namespaces": ",".join(options.namespaces) or "*",
            "metrics_port": options.metrics_port,
            "health_port": options.health_port,
            "peering": "standalone" if options.standalone else options.peering or "default",
        },
    )


async def _cancel_and_wait(task: asyncio.Task[None] | None) -> None:
    """Cancel one of our worker tasks and wait until it has ended (it never ends by itself)."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _kopf_settings(
    options: RunOptions, registry: kopf.OperatorRegistry
) -> tuple[kopf.OperatorSettings, bool]:
    """kopf's login, watch, persistence and peering settings; True when it must scan the cluster for CRDs."""

    @kopf.on.login(registry=registry)
    async def login(**kwargs: Any) -> Any:
        if options.kubeconfig:
            return kopf.login_with_kubeconfig(**kwargs)
        return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)

    settings = kopf.OperatorSettings()
    scan_cluster = needs_cluster_scanning(options.namespaces)
    configure_settings(settings, max_workers=options.max_workers, scan_cluster=scan_cluster)
    use_no_diffbase_if_event_only(settings, registry)
    apply_peering_settings(
        settings,
        name=options.peering,
        standalone=options.standalone,
        priority=options.priority,
        lifetime_s=options.peering_lifetime,
    )
    return settings, scan_cluster


async def _stop_when_served_kinds_change(
    api: kube.KubeApi, kinds: list[kube.Kind], stop: asyncio.Event
) -> str:
    """Ask kopf to stop once a watched kind appears or disappears (kopf watches what was served at start)."""
    initial: frozenset[kube.Kind] | None = None
    while initial is None:
        try:
            initial = await served_kinds(api, kinds)
        except ControllerError:
            await asyncio.sleep(5.0)  # the API server is not reachable yet; kopf retries on its own too
    change = await wait_for_change(api, kinds, initial)
    log.error("stopping: the served API changed", extra={"change": change})
    stop.set()
    return change
