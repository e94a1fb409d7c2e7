"""`uds-vmctl inventory` rows and cells for pools and pool members (pure; the live listing is integration)."""

from __future__ import annotations

from datetime import UTC, datetime

from typer.testing import CliRunner

from uds_vm_operator.api.pool import POOL_API_VERSION, POOL_KIND, POOL_PLURAL
from uds_vm_operator.cli import inventory
from uds_vm_operator.cli.inventory import (
    HEADERS,
    POOL_HEADERS,
    inventory_row,
    pool_cells,
    pool_row,
    sorted_rows,
    vm_cells,
)
from uds_vm_operator.cli.main import build_app
from uds_vm_operator.fleet import POOL_LABEL

NOW = datetime(2026, 1, 1, 1, 0, 0, tzinfo=UTC)


def rolling_pool() -> dict[str, object]:
    return {
        "metadata": {"name": "web", "namespace": "ns", "creationTimestamp": "2026-01-01T00:58:00Z"},
        "spec": {"replicas": 5},
        "status": {
            "replicas": 6,
            "readyReplicas": 5,
            "updatedReplicas": 2,
            "outdatedReplicas": 4,
            "currentRevision": "aaaa1111",
            "updateRevision": "bbbb2222",
        },
    }


def test_copied_constants_match_their_sources() -> None:
    # inventory copies them to keep CLI start-up free of pydantic; a rename elsewhere must fail here
    assert inventory.POOL_LABEL == POOL_LABEL
    assert (inventory.POOL_API_VERSION, inventory.POOL_KIND, inventory.POOL_PLURAL) == (
        POOL_API_VERSION,
        POOL_KIND,
        POOL_PLURAL,
    )


def test_pool_row_reports_counts_and_both_revisions() -> None:
    assert pool_row(rolling_pool(), NOW) == {
        "namespace": "ns",
        "name": "web",
        "desired": 5,
        "replicas": 6,
        "ready": 5,
        "updated": 2,
        "outdated": 4,
        "currentRevision": "aaaa1111",
        "updateRevision": "bbbb2222",
        "revision": "bbbb2222",
        "age": "2m",
        "createdAt": "2026-01-01T00:58:00Z",
    }


def test_unreconciled_pool_has_zero_counts_and_the_crd_default_replicas() -> None:
    row = pool_row({"metadata": {"name": "new", "namespace": "ns"}, "spec": {}}, NOW)
    assert (row["desired"], row["ready"], row["updated"], row["outdated"], row["revision"]) == (
        1,
        0,
        0,
        0,
        None,
    )
    assert pool_cells(row) == ("ns", "new", "1", "0", "0", "0", "", "<unknown>")


def test_settled_pool_revision_falls_back_to_current_and_junk_counts_are_zero() -> None:
    pool = {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"replicas": "5"},
        "status": {"readyReplicas": True, "currentRevision": "cccc3333"},
    }
    row = pool_row(pool, NOW)
    assert (row["desired"], row["ready"], row["revision"]) == (1, 0, "cccc3333")


def test_pool_cells_follow_the_pools_table_headers() -> None:
    cells = pool_cells(pool_row(rolling_pool(), NOW))
    assert dict(zip(POOL_HEADERS, cells, strict=True)) == {
        "NAMESPACE": "ns",
        "NAME": "web",
        "DESIRED": "5",
        "READY": "5",
        "UPDATED": "2",
        "OUTDATED": "4",
        "REVISION": "bbbb2222",
        "AGE": "2m",
    }


def test_member_vm_row_names_its_pool_and_standalone_vm_has_none() -> None:
    member = {
        "metadata": {"name": "web-0", "namespace": "ns", "labels": {POOL_LABEL: "web"}},
        "spec": {"source": {"dataSource": {"name": "golden"}}},
        "status": {"phase": "Ready", "checksumVerified": True},
    }
    member_cells = dict(zip(HEADERS, vm_cells(inventory_row(member, NOW)), strict=True))
    assert (member_cells["NAME"], member_cells["POOL"], member_cells["SOURCE"]) == (
        "web-0",
        "web",
        "dataSource",
    )
    assert (member_cells["CHECKSUM-VERIFIED"], member_cells["ZERO-TRUST"]) == ("true", "false")

    pet = inventory_row({"metadata": {"name": "db", "labels": {"app": "db"}}, "spec": {}}, NOW)
    assert pet["pool"] is None
    assert dict(zip(HEADERS, vm_cells(pet), strict=True))["POOL"] == ""


def test_rows_sort_by_namespace_then_name() -> None:
    rows = [{"namespace": "b", "name": "a"}, {"namespace": "a", "name": "z"}, {"namespace": "a", "name": "c"}]
    assert [(r["namespace"], r["name"]) for r in sorted_rows(rows)] == [("a", "c"), ("a", "z"), ("b", "a")]


def test_help_documents_the_json_contract_and_conflicting_scopes_are_a_usage_error() -> None:
    runner = CliRunner()
    app = build_app("inventory")
    help_text = " ".join(runner.invoke(app, ["inventory", "--help"]).output.split())
    assert "--json prints a JSON array of VM rows" in help_text
    assert "--pools --json prints a JSON array of pool rows" in help_text
    result = runner.invoke(app, ["inventory", "-n", "a", "-A", "--pools"])
    assert result.exit_code == 2


def test_guest_column_says_hardened_drifted_unknown_and_nothing_for_an_unmonitored_vm() -> None:
    def row(guest: dict[str, object] | None) -> dict[str, object]:
        vm = {"metadata": {"name": "web", "namespace": "ns"}, "status": {"guest": guest} if guest else {}}
        return inventory_row(vm, NOW)

    drifted = row({"compliant": "False", "drift": [{"setting": "PasswordAuthentication", "control": "ia-5"}]})
    assert (drifted["guest"], drifted["guestDrift"]) == ("drifted", ["PasswordAuthentication"])
    assert dict(zip(HEADERS, vm_cells(drifted), strict=True))["GUEST"] == "drifted"
    assert row({"compliant": "True"})["guest"] == "hardened"
    assert row({"compliant": "Unknown", "reason": "NoGuestAgent"})["guest"] == "unknown"
    unmonitored = row(None)
    assert (unmonitored["guest"], unmonitored["guestDrift"]) == (None, [])
    assert dict(zip(HEADERS, vm_cells(unmonitored), strict=True))["GUEST"] == ""
