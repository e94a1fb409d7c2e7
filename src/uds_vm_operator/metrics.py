"""Prometheus metrics of the operator (SPEC §7), on their own registry.

A dedicated registry keeps the exposition to exactly the names the SPEC promises (plus the standard
process/platform collectors), and lets tests build a fresh set without touching global state. Per-object
series are removed when the object goes away, so dashboards never show ghosts of deleted VMs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import NamedTuple

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

POOL_STATES = ("desired", "active", "ready", "updated", "outdated")

RECONCILE_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class OperatorMetrics:
    """All series the operator exports, bound to one registry."""

    def __init__(self, registry: CollectorRegistry | None = None, *, process_collectors: bool = True) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        if process_collectors:
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
        self.vms = VmSeries()
        self.registry.register(self.vms)
        self.reconcile_total = Counter(
            "uds_vm_reconcile",
            "Reconciles of UDSVirtualMachines by outcome (success, error, invalid).",
            ["status"],
            registry=self.registry,
        )
        self.reconcile_duration_seconds = Histogram(
            "uds_vm_reconcile_duration_seconds",
            "Wall time of one reconcile of one UDSVirtualMachine.",
            buckets=RECONCILE_BUCKETS_S,
            registry=self.registry,
        )
        self.pool_replicas = Gauge(
            "uds_vm_pool_replicas",
            "Members of a UDSVirtualMachinePool by state.",
            ["pool", "namespace", "state"],
            registry=self.registry,
        )

    def record_vm(
        self,
        *,
        name: str,
        namespace: str,
        phase: str,
        controls: Mapping[str, bool],
        overhead_ratio: float | None,
    ) -> None:
        """Publish one VM's current state (its earlier phase and ratio series go with the old state)."""
        self.vms.record(namespace, name, phase, controls, overhead_ratio)

    def forget_vm(self, *, name: str, namespace: str) -> None:
        """Remove every series of a deleted VM."""
        self.vms.forget(namespace, name)


class _VmState(NamedTuple):
    phase: str
    controls: tuple[tuple[str, bool], ...]
    overhead_ratio: float | None


class VmSeries(Collector):
    """The per-VM series, kept as one small tuple per VM and expanded only when Prometheus scrapes.

    A labelled ``Gauge`` child per series (a lock, a value object and label tuples each) cost ~1.5 KiB, and
    a VM has six of them: ~9 MiB at 1,000 VMs. Here a VM costs one tuple, and a deleted VM's series cannot
    linger because they are generated from the current state on every scrape.
    """

    def __init__(self) -> None:
        self._states: dict[tuple[str, str], _VmState] = {}
        self._controls: dict[tuple[tuple[str, bool], ...], tuple[tuple[str, bool], ...]] = {}

    def record(
        self,
        namespace: str,
        name: str,
        phase: str,
        controls: Mapping[str, bool],
        overhead_ratio: float | None,
    ) -> None:
        """Replace the VM's state; identical control sets share one tuple."""
        pairs = tuple((control, bool(verified)) for control, verified in controls.items())
        shared = self._controls.setdefault(pairs, pairs)
        self._states[(namespace, name)] = _VmState(phase, shared, overhead_ratio)

    def forget(self, namespace: str, name: str) -> None:
        """Drop the VM (unknown VMs are fine: absence is the desired end state)."""
        self._states.pop((namespace, name), None)

    def collect(self) -> Iterator[Metric]:
        """Expand the current states into the SPEC §7 families (runs in the scrape thread)."""
        states = self._states.copy()  # one C-level copy: safe against the event loop's concurrent updates
        phase = GaugeMetricFamily(
            "uds_vm_phase",
            "1 for the VM's current phase; other phases of the VM have no series.",
            labels=["vm", "namespace", "phase"],
        )
        verified = GaugeMetricFamily(
            "uds_vm_compliance_verified",
            "1 when the control has live evidence on this VM, 0 when it does not.",
            labels=["vm", "namespace", "control"],
        )
        overhead = GaugeMetricFamily(
            "uds_vm_storage_overhead_ratio",
            "Extra PVC capacity over the virtual disk size, (pvc - virtual) / virtual.",
            labels=["vm", "namespace"],
        )
        for (namespace, name), state in states.items():
            phase.add_metric([name, namespace, state.phase], 1)
            for control, ok in state.controls:
                verified.add_metric([name, namespace, control], 1 if ok else 0)
            if state.overhead_ratio is not None:
                overhead.add_metric([name, namespace], state.overhead_ratio)
        yield phase
        yield verified
        yield overhead

    def describe(self) -> Iterator[Metric]:
        """No names up front, so registering never calls ``collect`` (there is nothing to scrape yet)."""
        return iter(())
