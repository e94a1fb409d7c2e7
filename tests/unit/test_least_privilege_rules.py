"""Issue 32's pure rules: which references cross namespaces, the review the operator sends, the SSRF lock
and the systemd calendar validator."""

from __future__ import annotations

import pytest

from uds_vm_operator.api import SpecError, parse_vm_spec
from uds_vm_operator.api.calendar import CALENDAR_SHAPE, calendar_problem
from uds_vm_operator.controller import ssrf
from uds_vm_operator.controller.references import (
    REFUSAL_REASON,
    clone_refusal,
    consumer_review,
    cross_namespace_clones,
)

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE me@host"


def spec(**fields: object) -> dict[str, object]:
    base: dict[str, object] = {"disk": {"virtualSize": "1Gi"}, "cloudInit": {"sshAuthorizedKeys": [KEY]}}
    base.update(fields)
    return base


def test_only_clone_sources_in_other_namespaces_are_cross_namespace() -> None:
    same = parse_vm_spec(spec(source={"pvc": {"name": "d", "namespace": "apps"}}))
    implicit = parse_vm_spec(spec(source={"dataSource": {"name": "d"}}))
    assert cross_namespace_clones(same, "apps") == cross_namespace_clones(implicit, "apps") == []
    other = parse_vm_spec(spec(source={"dataSource": {"name": "img", "namespace": "golden"}}))
    (ref,) = cross_namespace_clones(other, "apps")
    assert (ref.field, ref.kind, ref.namespace, ref.name) == (
        "spec.source.dataSource",
        "DataSource",
        "golden",
        "img",
    )
    windows = parse_vm_spec(
        {
            "os": "windows",
            "source": {"blank": {}},
            "disk": {"virtualSize": "1Gi"},
            "windows": {"driverMedia": {"dataSource": {"name": "virtio", "namespace": "drivers"}}},
        }
    )
    assert [r.field for r in cross_namespace_clones(windows, "apps")] == [
        "spec.windows.driverMedia.dataSource"
    ]


def test_the_review_asks_about_the_vm_namespace_group_in_the_source_namespace() -> None:
    review = consumer_review("apps", "golden")["spec"]
    assert "system:serviceaccounts:apps" in review["groups"]
    assert review["user"].startswith("system:serviceaccount:apps:")
    assert review["resourceAttributes"] == {
        "group": "cdi.kubevirt.io",
        "resource": "datavolumes",
        "subresource": "source",
        "verb": "create",
        "namespace": "golden",
    }


def test_the_clone_refusal_names_the_field_and_the_grant() -> None:
    other = parse_vm_spec(spec(source={"pvc": {"name": "db", "namespace": "payroll"}}))
    refusal = clone_refusal("apps", cross_namespace_clones(other, "apps"))
    assert refusal.reason == REFUSAL_REASON
    assert "spec.source.pvc" in refusal.message and "payroll/db" in refusal.message
    assert (
        "uds-vmctl golden-image rbac --image-namespace payroll --consumer-namespace apps" in refusal.message
    )


@pytest.mark.parametrize(
    ("url", "entry"),
    [
        ("http://169.254.169.254/latest/meta-data", "169.254.169.254"),
        ("http://127.0.0.1:9000/x", "127.0.0.1"),
        ("https://10.1.2.3/x", "10.1.2.3"),
        ("http://[::1]/x", "::1"),
        ("http://[fd12::1]/x", "fd12::1"),
        ("http://[::ffff:169.254.169.254]/x", "::ffff:a9fe:a9fe"),
        ("http://100.64.0.9/x", "100.64.0.9"),
        ("http://localhost/x", "localhost"),
        ("http://minio.storage.svc:9000/x", "minio.storage.svc"),
        ("s3://minio.storage.svc.cluster.local/b", "minio.storage.svc.cluster.local"),
    ],
)
def test_internal_hosts_are_refused_naming_the_entry_to_add(url: str, entry: str) -> None:
    kind = "s3" if url.startswith("s3") else "http"
    refusal = ssrf.private_source_refusal({"source": {kind: {"url": url}}}, ())
    assert refusal is not None and refusal.reason == ssrf.PRIVATE_SOURCE_REASON
    assert f"adds {entry!r} to the chart value ssrf.allowedSourceHosts" in refusal.message


def test_the_allowlist_admits_cidrs_addresses_and_names_with_subdomains() -> None:
    allow = ("10.0.0.0/8", "169.254.169.254", "storage.svc")
    for url in ("https://10.9.9.9/x", "http://169.254.169.254/", "http://minio.storage.svc/x"):
        assert ssrf.private_source_refusal({"source": {"http": {"url": url}}}, allow) is None
    assert (
        ssrf.private_source_refusal({"source": {"http": {"url": "http://192.168.1.1/"}}}, allow) is not None
    )


def test_a_public_name_resolving_to_a_private_address_is_refused() -> None:
    source = {"source": {"http": {"url": "https://images.example.com/x"}}}
    assert ssrf.private_source_refusal(source, ()) is None
    refusal = ssrf.private_source_refusal(source, (), resolved=("93.184.216.34", "10.0.0.7"))
    assert refusal is not None and "resolves to 10.0.0.7" in refusal.message
    assert "'images.example.com'" in refusal.message
    assert ssrf.private_source_refusal(source, ("images.example.com",), resolved=("10.0.0.7",)) is None


def test_the_allowlist_env_is_comma_separated() -> None:
    assert ssrf.source_allowlist_from_env({ssrf.ALLOWLIST_ENV: " 10.0.0.0/8, ,mirror.lan "}) == (
        "10.0.0.0/8",
        "mirror.lan",
    )
    assert ssrf.source_allowlist_from_env({}) == ()


@pytest.mark.parametrize(
    "expression",
    [
        "daily",
        "*-*-* 03:00:00",
        "Mon..Fri *-*-* 03:00",
        "Sat,Sun 04:30",
        "*-*-01 02:00:00 UTC",
        "2026-01-01",
        "*-02~03",
        "Mon *-*-* 03:00 Europe/Berlin",
        "*:0/15",
        "weekly",
        "Tue 00:00:00.5",
    ],
)
def test_calendar_expressions_systemd_accepts_are_accepted(expression: str) -> None:
    import re  # noqa: PLC0415

    assert calendar_problem(expression) is None
    assert re.fullmatch(CALENDAR_SHAPE.removeprefix("(?i)^").removesuffix("$"), expression, re.IGNORECASE)


@pytest.mark.parametrize(
    "expression",
    [
        "",
        "every day",
        "*-*-* 24:00",
        "*-13-01",
        "*-*-32",
        "Mon Tue",
        "03:00 Mon",
        "*-*-* 03:00\nUnit=x",
        "daily\n",
        "OnCalendar=daily",
        "Fun 03:00",
        "*-*-* 03:61",
        "*/0:00",
    ],
)
def test_malformed_calendar_expressions_are_refused_at_parse(expression: str) -> None:
    assert calendar_problem(expression) is not None
    with pytest.raises(SpecError):
        parse_vm_spec(
            spec(
                source={"blank": {}},
                cloudInit={"sshAuthorizedKeys": [KEY], "autoUpdate": {"schedule": expression}},
            )
        )
