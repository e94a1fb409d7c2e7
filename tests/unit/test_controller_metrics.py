"""Metrics: SPEC §7 names, one phase series per VM, nothing left behind by deleted VMs."""

from __future__ import annotations

from prometheus_client import generate_latest

from uds_vm_operator.metrics import OperatorMetrics


def exposition(metrics: OperatorMetrics) -> str:
    return generate_latest(metrics.registry).decode()


def record(metrics: OperatorMetrics, name: str, phase: str, verified: bool = True) -> None:
    metrics.record_vm(
        name=name,
        namespace="ns",
        phase=phase,
        controls={"SI-7": verified, "SC-7": True, "AC-3": True, "IA-5": True},
        overhead_ratio=0.1,
    )


def test_spec_metric_names_are_exported() -> None:
    metrics = OperatorMetrics(process_collectors=False)
    record(metrics, "vm1", "Ready")
    metrics.reconcile_total.labels(status="success").inc()
    metrics.reconcile_duration_seconds.observe(0.02)
    metrics.pool_replicas.labels(pool="p", namespace="ns", state="ready").set(2)
    text = exposition(metrics)
    for line in (
        'uds_vm_phase{namespace="ns",phase="Ready",vm="vm1"} 1.0',
        'uds_vm_compliance_verified{control="SI-7",namespace="ns",vm="vm1"} 1.0',
        'uds_vm_storage_overhead_ratio{namespace="ns",vm="vm1"} 0.1',
        'uds_vm_reconcile_total{status="success"} 1.0',
        "uds_vm_reconcile_duration_seconds_count 1.0",
        'uds_vm_pool_replicas{namespace="ns",pool="p",state="ready"} 2.0',
    ):
        assert line in text, line


def test_only_the_current_phase_has_a_series() -> None:
    metrics = OperatorMetrics(process_collectors=False)
    record(metrics, "vm1", "Importing")
    record(metrics, "vm1", "Ready")
    text = exposition(metrics)
    assert 'phase="Ready",vm="vm1"' in text
    assert 'phase="Importing"' not in text


def test_deleted_vm_leaves_no_series() -> None:
    metrics = OperatorMetrics(process_collectors=False)
    record(metrics, "vm1", "Ready")
    record(metrics, "vm2", "Failed", verified=False)
    metrics.forget_vm(name="vm1", namespace="ns")
    text = exposition(metrics)
    assert 'vm="vm1"' not in text
    assert 'uds_vm_compliance_verified{control="SI-7",namespace="ns",vm="vm2"} 0.0' in text
    metrics.forget_vm(name="never-seen", namespace="ns")  # forgetting an unknown VM is fine


def test_overhead_series_disappears_when_unknown() -> None:
    metrics = OperatorMetrics(process_collectors=False)
    record(metrics, "vm1", "Ready")
    metrics.record_vm(name="vm1", namespace="ns", phase="Ready", controls={}, overhead_ratio=None)
    assert "uds_vm_storage_overhead_ratio{" not in exposition(metrics)


def test_the_streamed_exposition_says_exactly_what_generate_latest_says() -> None:
    """The server streams per-VM series from the compact state; a scrape must not tell a different story."""
    metrics = OperatorMetrics(process_collectors=False)
    for index in range(1200):  # more than one chunk
        record(metrics, f"vm{index}", "Ready" if index % 3 else "Importing", verified=bool(index % 2))
    metrics.record_vm(name="odd", namespace="ns", phase="Ready", controls={}, overhead_ratio=None)
    metrics.record_vm(
        name='q"uo\\te', namespace="ns", phase="Ready", controls={"SI-7": True}, overhead_ratio=2.5
    )
    metrics.reconcile_total.labels(status="success").inc()
    metrics.pool_replicas.labels(pool="p", namespace="ns", state="ready").set(2)
    chunks = list(metrics.exposition_chunks())
    assert len(chunks) > 3
    streamed = b"".join(chunks).decode()
    assert sorted(streamed.splitlines()) == sorted(exposition(metrics).splitlines())
    assert 'uds_vm_phase{namespace="ns",phase="Ready",vm="q\\"uo\\\\te"} 1.0' in streamed
