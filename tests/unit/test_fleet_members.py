"""Member names, the planner's view of a live member, and the manifest of a new member."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from uds_vm_operator.api import netbios_problem, parse_vm_spec, validate_vm_name
from uds_vm_operator.fleet import (
    ORDINAL_LABEL,
    POOL_LABEL,
    REVISION_LABEL,
    PoolRef,
    member_name,
    member_view,
    ordinal_of,
    render_member,
    windows_computer_name,
)

POOL = PoolRef(name="web", namespace="apps", uid="1234-uid")
LINUX = {
    "metadata": {"labels": {"app": "web", POOL_LABEL: "intruder"}, "annotations": {"team": "blue"}},
    "spec": {
        "source": {"dataSource": {"name": "ubuntu", "namespace": "golden"}},
        "dataDisks": [{"name": "data", "size": "1Gi", "retentionPolicy": "Retain"}],
    },
}
WINDOWS = {"spec": {"os": "windows", "source": {"dataSource": {"name": "win2022"}}, "windows": {}}}


def live(
    name: str,
    *,
    pool: str = "web",
    phase: str | None = "Ready",
    ready_condition: str | None = "True",
    deleting: bool = False,
    revision: str = "abc",
) -> dict:  # type: ignore[type-arg]
    status: dict = {}  # type: ignore[type-arg]
    if phase:
        status["phase"] = phase
    if ready_condition:
        status["conditions"] = [{"type": "Ready", "status": ready_condition, "reason": "X"}]
    metadata = {
        "name": name,
        "labels": {POOL_LABEL: pool, REVISION_LABEL: revision},
        "creationTimestamp": "2025-03-01T10:00:00Z",
    }
    if deleting:
        metadata["deletionTimestamp"] = "2025-03-01T10:05:00Z"
    return {"metadata": metadata, "status": status}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("web-0", 0),
        ("web-12", 12),
        ("web-a-3", None),
        ("web-", None),
        ("web-01", None),
        ("webx-1", None),
        ("other-1", None),
        ("web-1-2", None),
    ],
)
def test_ordinal_is_read_back_from_the_name_only_when_it_is_ours(name, expected):  # type: ignore[no-untyped-def]
    assert ordinal_of("web", name) == expected


def test_pool_names_with_digits_and_hyphens_still_parse():
    assert ordinal_of("web-1", "web-1-7") == 7
    assert ordinal_of("web", member_name("web", 42)) == 42


def test_member_view_reads_readiness_revision_age_and_deletion():
    view = member_view("web", live("web-3", revision="r1"))
    assert view is not None
    assert (view.ordinal, view.revision, view.ready, view.deleting) == (3, "r1", True, False)
    assert view.created_at == datetime(2025, 3, 1, 10, 0, tzinfo=UTC)
    assert member_view("web", live("web-3", deleting=True)).deleting  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("phase", "condition", "ready"),
    [
        ("Ready", "True", True),
        ("Ready", None, True),
        ("Ready", "False", False),
        ("Provisioning", None, False),
        ("Failed", "False", False),
        (None, None, False),
    ],
)
def test_readiness_comes_only_from_the_member_status(phase, condition, ready):  # type: ignore[no-untyped-def]
    view = member_view("web", live("web-0", phase=phase, ready_condition=condition))
    assert view is not None and view.ready is ready


def test_objects_of_other_pools_or_foreign_names_are_not_members():
    assert member_view("web", live("web-0", pool="db")) is None
    assert member_view("web", live("stray", pool="web")) is None


def test_member_manifest_names_labels_and_owner():
    manifest = render_member(POOL, LINUX, ordinal=3, revision="r1")
    meta = manifest["metadata"]
    assert (manifest["apiVersion"], manifest["kind"]) == ("uds.dev/v1alpha1", "UDSVirtualMachine")
    assert (meta["name"], meta["namespace"]) == ("web-3", "apps")
    assert meta["labels"] == {
        "app": "web",
        POOL_LABEL: "web",
        REVISION_LABEL: "r1",
        ORDINAL_LABEL: "3",
        "app.kubernetes.io/managed-by": "uds-vm-operator",
    }
    assert meta["annotations"] == {"team": "blue"}
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "uds.dev/v1alpha1",
            "kind": "UDSVirtualMachinePool",
            "name": "web",
            "uid": "1234-uid",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert manifest["spec"] == LINUX["spec"]
    parse_vm_spec(manifest["spec"])
    validate_vm_name(meta["name"])


def test_member_manifest_does_not_alias_the_template():
    manifest = render_member(POOL, LINUX, ordinal=0, revision="r1")
    manifest["spec"]["dataDisks"][0]["name"] = "changed"
    assert LINUX["spec"]["dataDisks"][0]["name"] == "data"  # type: ignore[index]


def test_windows_members_get_unique_valid_computer_names():
    names = {
        render_member(POOL, WINDOWS, ordinal=i, revision="r")["spec"]["windows"]["computerName"]
        for i in range(120)
    }
    assert len(names) == 120
    assert all(netbios_problem(name) is None for name in names)
    assert render_member(POOL, WINDOWS, ordinal=7, revision="r")["spec"]["windows"]["computerName"] == "WEB-7"
    parse_vm_spec(render_member(POOL, WINDOWS, ordinal=7, revision="r")["spec"])


def test_windows_computer_name_prefix_from_the_template_is_used_and_shortened():
    template = {"spec": {**WINDOWS["spec"], "windows": {"computerName": "FINANCE-APPS"}}}
    name = render_member(POOL, template, ordinal=1234, revision="r")["spec"]["windows"]["computerName"]
    assert name == "FINANCE-AP-1234"
    assert len(name) == 15


@pytest.mark.parametrize(
    ("prefix", "ordinal", "expected"),
    [
        ("web", 0, "WEB-0"),
        ("a-very-long-pool-name", 12, "A-VERY-LONG-12"),
        ("x--", 1, "X-1"),
        ("---", 5, "VM-5"),
        ("web.prod_1", 2, "WEB-PROD-1-2"),
        ("123456789012345", 1, "1234567890123-1"),
    ],
)
def test_windows_computer_names(prefix, ordinal, expected):  # type: ignore[no-untyped-def]
    assert windows_computer_name(prefix, ordinal) == expected
    assert netbios_problem(expected) is None


def test_linux_members_get_no_windows_section():
    assert "windows" not in render_member(POOL, LINUX, ordinal=0, revision="r")["spec"]


def test_negative_ordinals_are_refused():
    with pytest.raises(ValueError, match="negative"):
        member_name("web", -1)


def test_failed_members_are_marked_failed():
    view = member_view("web", live("web-0", phase="Failed", ready_condition="False"))
    assert view is not None and view.failed and not view.ready
    assert not member_view("web", live("web-0")).failed  # type: ignore[union-attr]
