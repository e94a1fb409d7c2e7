"""The Grafana dashboard only queries metrics that exist: the operator's own (uds_vm_operator.metrics), and on
the guest panels the gauges of the guest report spec.monitoring installs and the node exporter's own."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from uds_vm_operator.api.models import CloudInit
from uds_vm_operator.metrics import OperatorMetrics
from uds_vm_operator.render.guestmonitor import report_script

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = json.loads((ROOT / "dashboards/uds-vm-overview.json").read_text())


def exported_series_names() -> set[str]:
    """Every sample name the operator's registry exposes, with a VM and a pool recorded."""
    metrics = OperatorMetrics(CollectorRegistry(), process_collectors=False)
    metrics.record_vm(
        name="web",
        namespace="apps",
        phase="Ready",
        controls={"SI-7": True},
        overhead_ratio=0.06,
        guest="True",
    )
    metrics.reconcile_total.labels(status="success").inc()
    metrics.reconcile_duration_seconds.observe(0.1)
    metrics.pool_replicas.labels(pool="p", namespace="apps", state="ready").set(1)
    metrics.record_backup("apps", "web", "success", size_bytes=1, duration_s=1.0, finished_at=1.0)
    text = generate_latest(metrics.registry).decode()
    return {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}


GUEST_EXPORTER_SERIES = {"node_cpu_seconds_total", "node_memory_MemAvailable_bytes"}
"""Node exporter series the guest panels read (standard collectors of the packaged exporter)."""


def guest_report_series() -> set[str]:
    """The gauges the guest report script writes (every flavour writes the same names)."""
    return set(re.findall(r"^(uds_guest_[a-z_]+) ", report_script(CloudInit()), flags=re.MULTILINE))


def expressions(guest: bool | None = None) -> list[str]:
    """Panel and variable queries; ``guest`` True/False: only the guest panels / only the others."""
    exprs = [
        t["expr"]
        for p in DASHBOARD["panels"]
        for t in p["targets"]
        if guest is None or p["title"].startswith("Guest") == guest
    ]
    exprs += [v["definition"] for v in DASHBOARD["templating"]["list"] if v["type"] == "query"]
    return exprs


def metric_names(expr: str) -> set[str]:
    without_labels = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\"[^\"]*\"", "", expr)
    # Every operator metric carries the uds_ prefix; label names and PromQL functions do not.
    return set(re.findall(r"\buds_[a-zA-Z0-9_:]*", without_labels))


def test_every_panel_expression_names_an_exported_metric() -> None:
    exported = exported_series_names()
    for expr in expressions(guest=False):
        names = metric_names(expr)
        assert names, f"no metric in {expr!r}"
        assert names <= exported, f"{expr!r} uses {sorted(names - exported)}, not exported by the operator"


def test_guest_panels_read_the_guest_report_the_node_exporter_or_the_operators_guest_verdict() -> None:
    report = guest_report_series()
    assert "uds_guest_sshd_password_authentication" in report
    allowed = report | GUEST_EXPORTER_SERIES | exported_series_names()
    guest_exprs = expressions(guest=True)
    assert len(guest_exprs) >= 4
    for expr in guest_exprs:
        without_labels = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\"[^\"]*\"", "", expr)
        names = set(re.findall(r"\b(?:uds|node)_[a-zA-Z0-9_:]*", without_labels))
        assert names and names <= allowed, f"{expr!r} uses {sorted(names - allowed)}"
    used = set().union(*(metric_names(e) for e in guest_exprs))
    assert "uds_vm_guest_compliant" in used and used & report


def test_dashboard_is_importable_by_the_grafana_sidecar() -> None:
    variables = {v["name"]: v for v in DASHBOARD["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    assert isinstance(DASHBOARD["schemaVersion"], int) and DASHBOARD["uid"]
    ids = [p["id"] for p in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids))
    for panel in DASHBOARD["panels"]:
        assert {"h", "w", "x", "y"} <= panel["gridPos"].keys()
        sources: list[Any] = [panel["datasource"], *(t["datasource"] for t in panel["targets"])]
        assert all(s["uid"] == "${datasource}" for s in sources), panel["title"]
        assert all(t["refId"] for t in panel["targets"])


def test_every_spec_metric_has_a_panel() -> None:
    used = set().union(*(metric_names(e) for e in expressions()))
    for family in (
        "uds_vm_compliance_verified",
        "uds_vm_storage_overhead_ratio",
        "uds_vm_phase",
        "uds_vm_reconcile_total",
        "uds_vm_reconcile_duration_seconds_bucket",
        "uds_vm_pool_replicas",
    ):
        assert family in used
