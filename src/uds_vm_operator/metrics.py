"""Prometheus metrics of the operator (SPEC §7), on their own registry.

A dedicated registry keeps the exposition to exactly the names the SPEC promises (plus the standard
process/platform collectors), and lets tests build a fresh set without touching global state. Per-object
series are removed when the object goes away, so dashboards never show ghosts of deleted VMs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from uds_vm_operator.api.models import PHASES

# ``PHASES`` is every value ``status.phase`` can take; ``uds_vm_phase`` keeps exactly one of them at 1 per VM.

CONTROLS = ("SI-7", "SC-7", "AC-3", "IA-5")
"""Controls with live evidence on each VM: digest verified, zero-trust network, hardened guest access."""

POOL_STATES = ("desired", "active", "ready", "updated", "outdated")

RECONCILE_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class OperatorMetrics:
    """All series the operator exports, bound to one registry."""

    def __init__(self, registry: CollectorRegistry | None = None, *, process_collectors: bool = True) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        if process_collectors:
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
        self.compliance_verified = Gauge(
            "uds_vm_compliance_verified",
            "1 when the control has live evidence on this VM, 0 when it does not.",
            ["vm", "namespace", "control"],
            registry=self.registry,
        )
        self.storage_overhead_ratio = Gauge(
            "uds_vm_storage_overhead_ratio",
            "Extra PVC capacity over the virtual disk size, (pvc - virtual) / virtual.",
            ["vm", "namespace"],
            registry=self.registry,
        )
        self.phase = Gauge(
            "uds_vm_phase",
            "1 for the VM's current phase; other phases of the VM have no series.",
            ["vm", "namespace", "phase"],
            registry=self.registry,
        )
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
        """Publish one VM's current state and drop the series of the phases it is no longer in."""
        for other in PHASES:
            if other != phase:
                _remove_quietly(self.phase, name, namespace, other)
        self.phase.labels(vm=name, namespace=namespace, phase=phase).set(1)
        for control, verified in controls.items():
            self.compliance_verified.labels(vm=name, namespace=namespace, control=control).set(
                1 if verified else 0
            )
        if overhead_ratio is None:
            _remove_quietly(self.storage_overhead_ratio, name, namespace)
        else:
            self.storage_overhead_ratio.labels(vm=name, namespace=namespace).set(overhead_ratio)

    def forget_vm(self, *, name: str, namespace: str, controls: Iterable[str] = CONTROLS) -> None:
        """Remove every series of a deleted VM."""
        for phase in PHASES:
            _remove_quietly(self.phase, name, namespace, phase)
        for control in controls:
            _remove_quietly(self.compliance_verified, name, namespace, control)
        _remove_quietly(self.storage_overhead_ratio, name, namespace)


def _remove_quietly(metric: Gauge, *labels: str) -> None:
    """Remove a labelled series if it exists; absence is the desired end state, not an error."""
    with contextlib.suppress(KeyError):
        metric.remove(*labels)
