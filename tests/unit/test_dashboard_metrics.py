"""The Grafana dashboard only queries metrics the operator really exports (uds_vm_operator.metrics)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from uds_vm_operator.metrics import OperatorMetrics

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = json.loads((ROOT / "dashboards/uds-vm-overview.json").read_text())


def exported_series_names() -> set[str]:
    """Every sample name the operator's registry exposes, with a VM and a pool recorded."""
    metrics = OperatorMetrics(CollectorRegistry(), process_collectors=False)
    metrics.record_vm(
        name="web", namespace="apps", phase="Ready", controls={"SI-7": True}, overhead_ratio=0.06
    )
    metrics.reconcile_total.labels(status="success").inc()
    metrics.reconcile_duration_seconds.observe(0.1)
    metrics.pool_replicas.labels(pool="p", namespace="apps", state="ready").set(1)
    text = generate_latest(metrics.registry).decode()
    return {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}


def expressions() -> list[str]:
    exprs = [t["expr"] for p in DASHBOARD["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in DASHBOARD["templating"]["list"] if v["type"] == "query"]
    return exprs


def metric_names(expr: str) -> set[str]:
    without_labels = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\"[^\"]*\"", "", expr)
    # Every operator metric carries the uds_ prefix; label names and PromQL functions do not.
    return set(re.findall(r"\buds_[a-zA-Z0-9_:]*", without_labels))


def test_every_panel_expression_names_an_exported_metric() -> None:
    exported = exported_series_names()
    for expr in expressions():
        names = metric_names(expr)
        assert names, f"no metric in {expr!r}"
        assert names <= exported, f"{expr!r} uses {sorted(names - exported)}, not exported by the operator"


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
