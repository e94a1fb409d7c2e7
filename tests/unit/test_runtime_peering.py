"""Peering settings of ``uds-vm-operator run``: replicas never tie, explicit choices are kept, bad lifetimes
are refused on the command line, and the chart only scales out with peering (issue 8, "Two operator
replicas")."""

from __future__ import annotations

import logging
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml

from uds_vm_operator.operator_main import build_parser
from uds_vm_operator.runtime.peering import (
    DEFAULT_LIFETIME_S,
    apply_peering_settings,
    automatic_priority,
)


def test_automatic_priorities_differ_between_replicas_started_in_the_same_second() -> None:
    priorities = [automatic_priority(now_s=1_750_000_000.5) for _ in range(200)]
    assert len(set(priorities)) >= 199  # a tie among 200 draws from 10**6 is possible, two are not


def test_a_replica_started_later_always_ranks_below_the_running_one() -> None:
    for _ in range(200):
        running = automatic_priority(now_s=1_750_000_000)
        restarted = automatic_priority(now_s=1_750_000_001)
        assert restarted < running


def test_automatic_priorities_are_negative_so_an_explicit_zero_outranks_them() -> None:
    assert all(automatic_priority() < 0 for _ in range(100))
    # JSON readers that hold numbers as doubles (kubectl plugins, jq) still see exact values in 2100.
    assert abs(automatic_priority(now_s=4_102_444_800)) < 2**53


def test_without_a_priority_each_replica_chooses_its_own_and_logs_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    first, second = kopf.OperatorSettings(), kopf.OperatorSettings()
    with caplog.at_level(logging.INFO, logger="uds_vm_operator.peering"):
        chosen = [
            apply_peering_settings(s, name="ops", standalone=False, priority=None, lifetime_s=15)
            for s in (first, second)
        ]
    assert chosen == [first.peering.priority, second.peering.priority]
    assert first.peering.priority != second.peering.priority
    logged = [r for r in caplog.records if r.getMessage() == "peering priority chosen"]
    assert [r.priority for r in logged] == chosen  # type: ignore[attr-defined]
    assert all(r.levelno == logging.INFO for r in logged)


def test_an_explicit_priority_name_and_lifetime_are_applied_as_given() -> None:
    settings = kopf.OperatorSettings()
    assert apply_peering_settings(settings, name="ops", standalone=False, priority=7, lifetime_s=20) == 7
    assert settings.peering.priority == 7
    assert settings.peering.lifetime == 20
    assert settings.peering.name == "ops"
    assert settings.peering.mandatory is True
    assert settings.peering.standalone is False


def test_without_a_name_kopf_keeps_looking_for_its_default_peering_but_never_ties() -> None:
    settings = kopf.OperatorSettings()
    priority = apply_peering_settings(settings, name=None, standalone=False, priority=None, lifetime_s=15)
    assert priority is not None and priority < 0
    assert settings.peering.name == "default"
    assert settings.peering.mandatory is False


def test_standalone_sets_no_priority() -> None:
    settings = kopf.OperatorSettings()
    assert apply_peering_settings(settings, name=None, standalone=True, priority=None, lifetime_s=15) is None
    assert settings.peering.standalone is True
    assert settings.peering.priority == 0  # kopf's default, unused without peering


@pytest.mark.parametrize("lifetime_s", [4, 3601])
def test_a_lifetime_out_of_range_is_refused_by_the_function_too(lifetime_s: int) -> None:
    with pytest.raises(ValueError, match="outside 5-3600 s"):
        apply_peering_settings(
            kopf.OperatorSettings(), name="ops", standalone=False, priority=None, lifetime_s=lifetime_s
        )


def test_command_line_defaults_leave_the_priority_to_the_replica() -> None:
    args = build_parser().parse_args(["run", "--peering", "ops"])
    assert args.priority is None
    assert args.peering_lifetime == DEFAULT_LIFETIME_S
    explicit = build_parser().parse_args(
        ["run", "--peering", "ops", "--priority", "-3", "--peering-lifetime", "5"]
    )
    assert (explicit.priority, explicit.peering_lifetime) == (-3, 5)


@pytest.mark.parametrize(
    ("value", "message"),
    [("4", "4 s is below 5 s"), ("3601", "3601 s is above 3600 s"), ("15s", "'15s' is not a whole number")],
)
def test_the_command_line_refuses_a_bad_lifetime_with_exit_code_2(
    value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["run", "--peering", "ops", "--peering-lifetime", value])
    assert exited.value.code == 2
    assert f"argument --peering-lifetime: {message}" in capsys.readouterr().err


ROOT = Path(__file__).resolve().parents[2]


@cache
def _helm() -> str:
    result = subprocess.run([str(ROOT / "tools/helm/build.sh")], capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"helm could not be built (needs Go >= 1.26.8): {result.stderr}"
    return result.stdout.strip()


def _template(*values: str) -> subprocess.CompletedProcess[str]:
    # The chart's default (namespaced) flavour needs the managed namespaces; the tests here are about peering.
    if not any(v.startswith(("watchNamespaces=", "rbac.scope=cluster")) for v in values):
        values = ("watchNamespaces={vms}", *values)
    sets = [arg for value in values for arg in ("--set", value)]
    return subprocess.run(
        [
            _helm(),
            "template",
            "x",
            str(ROOT / "chart"),
            "-n",
            "ops",
            "--set",
            "image.allowUnpinned=true",
            *sets,
        ],
        capture_output=True,
        text=True,
        check=False,
    )


def _objects(*values: str) -> list[dict[str, Any]]:
    result = _template(*values)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def test_the_chart_refuses_several_replicas_without_peering() -> None:
    result = _template("replicas=2")
    assert result.returncode != 0 and "replicas > 1 needs peering.name" in result.stderr


def test_the_chart_refuses_a_lifetime_the_operator_would_refuse() -> None:
    result = _template("peering.name=ops", "peering.lifetimeSeconds=4")
    assert result.returncode != 0 and "peering.lifetimeSeconds must be 5-3600" in result.stderr


def test_peered_replicas_get_the_flags_their_identity_and_the_cluster_peering_object() -> None:
    objects = _objects("rbac.scope=cluster", "replicas=2", "peering.name=ops", "peering.lifetimeSeconds=20")
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 2
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["args"] == [
        "run",
        "--all-namespaces",
        "--bind-address=0.0.0.0",
        "--peering=ops",
        "--peering-lifetime=20",
    ]
    assert "--priority" not in " ".join(container["args"]), "identical replicas choose their own priority"
    env = {item["name"]: item for item in container["env"]}
    assert env["POD_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    peerings = [o for o in objects if o["apiVersion"] == "kopf.dev/v1"]
    assert [(o["kind"], o["metadata"]["name"]) for o in peerings] == [("ClusterKopfPeering", "ops")]


def test_the_namespaced_flavour_gets_one_peering_object_per_watched_namespace() -> None:
    objects = _objects("rbac.scope=namespaced", "watchNamespaces={vms,lab}", "peering.name=ops")
    peerings = [o for o in objects if o["apiVersion"] == "kopf.dev/v1"]
    assert sorted((o["kind"], o["metadata"]["namespace"]) for o in peerings) == [
        ("KopfPeering", "lab"),
        ("KopfPeering", "vms"),
    ]


def test_without_peering_the_chart_renders_what_it_rendered_before() -> None:
    objects = _objects()
    assert not [o for o in objects if o["apiVersion"] == "kopf.dev/v1"]
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 1
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["run", "--namespace=vms", "--bind-address=0.0.0.0"]
    assert "POD_ID" not in {item["name"] for item in container["env"]}
