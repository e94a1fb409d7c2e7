"""CP-9 (vm-backups) and CP-10 (vm-verified-restore), judged by the evaluator at a fixed clock.

CP-9: a VM declaring spec.backup needs a Succeeded UDSVirtualMachineBackup (label uds.dev/vm, its namespace)
recording its root disk's sha256, completed within twice its schedule's period before the assessment; on
demand (no schedule) any such backup counts. CP-10: a restored VM (uds.dev/restored-from) needs its backup
Succeeded, its declared s3 checksum equal to the backup's root-disk record and SI-7 verification with that
digest; a VM declaring spec.backup needs such a verified restore of one of its backups in its namespace.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from regopy import Input, Interpreter

from tests.unit.compliance_fixtures import (
    backup,
    backup_evidence,
    children,
    compliant_objects,
    find,
    restored_udsvm,
    snapshot_of,
    udsvm,
)
from uds_vm_operator.compliance.component import LinkedControl, load_component_definition
from uds_vm_operator.compliance.errors import ComponentDefinitionError
from uds_vm_operator.compliance.evaluate import VM_API, Finding, assess, vm_input
from uds_vm_operator.compliance.validation import packaged_validations, parse_validation

NS = "apps"
NOW = datetime(2026, 12, 3, 22, 0, tzinfo=UTC)
UID = "00000000-0000-4000-8000-000000000001"
RESTORED_UID = "00000000-0000-4000-8000-00000000eeee"


@pytest.fixture(scope="module")
def controls() -> list[LinkedControl]:
    return [c for c in load_component_definition(None) if c.control_id in ("cp-9", "cp-10")]


def judge(
    controls: list[LinkedControl], objects: list[dict[str, Any]], now: datetime = NOW
) -> dict[tuple[str, str], Finding]:
    """(vm name, control) -> finding, for every VM of the objects."""
    return {(f.vm.name, f.control_id): f for f in assess(controls, snapshot_of(objects), now=now)}


def text(finding: Finding) -> str:
    return " ".join(m for o in finding.observations for m in o.verdict.observations)


def backed_up_vm(
    name: str = "web", schedule: str | None = "@daily", **backup_spec: Any
) -> list[dict[str, Any]]:
    """A VM declaring spec.backup (schedule None: on demand) and its children, without any backup object."""
    vm = udsvm(name, NS, uid=UID)
    if schedule is None:
        vm["spec"]["backup"].pop("schedule")
    else:
        vm["spec"]["backup"]["schedule"] = schedule
    vm["spec"]["backup"] |= backup_spec
    return [vm, *children(name, NS, uid=UID)]


def restore_of(source: dict[str, Any], name: str = "web-restored") -> list[dict[str, Any]]:
    """A VM restored from ``source``, SI-7 verified against its record, with its children."""
    vm = restored_udsvm(name, NS, source, uid=RESTORED_UID)
    return [vm, *children(name, NS, uid=RESTORED_UID, spec_doc=vm["spec"])]


# ------------------------------------------------------------------------------------------------ CP-9


def test_a_backup_within_twice_the_schedule_satisfies_cp9_and_is_named(controls: list[LinkedControl]) -> None:
    objects = [*backed_up_vm(), backup("web", NS, NOW - timedelta(hours=1))]
    cp9 = judge(controls, objects)["web", "cp-9"]
    assert cp9.satisfied
    assert text(cp9) == (
        "apps/web: data on Retain data disks; backup web-20261203-210000 Succeeded at 2026-12-03T21:00:00Z, "
        "within 48h (twice @daily)"
    )


@pytest.mark.parametrize(
    ("schedule", "within", "beyond", "window"),
    [
        ("@hourly", timedelta(minutes=119), timedelta(minutes=121), "2h"),
        ("@daily", timedelta(hours=47), timedelta(hours=49), "48h"),
        ("@weekly", timedelta(days=13), timedelta(days=15), "336h"),
        ("@every 30m", timedelta(minutes=59), timedelta(minutes=61), "1h"),
        ("@every 45m", timedelta(minutes=89), timedelta(minutes=91), "90m"),
        ("@every 6h", timedelta(hours=11), timedelta(hours=13), "12h"),
    ],
)
def test_a_backup_older_than_twice_the_schedule_fails_cp9(
    controls: list[LinkedControl], schedule: str, within: timedelta, beyond: timedelta, window: str
) -> None:
    fresh = judge(controls, [*backed_up_vm(schedule=schedule), backup("web", NS, NOW - within)])
    assert fresh["web", "cp-9"].satisfied, text(fresh["web", "cp-9"])
    old = backup("web", NS, NOW - beyond)
    stale = judge(controls, [*backed_up_vm(schedule=schedule), old])["web", "cp-9"]
    assert not stale.satisfied
    assert text(stale) == (
        f"apps/web: the newest Succeeded backup {old['metadata']['name']} completed at "
        f"{old['status']['completedAt']}, more than {window} (twice {schedule}) before the assessment"
    )


def test_the_newest_succeeded_backup_decides_not_the_newest_attempt(controls: list[LinkedControl]) -> None:
    objects = [
        *backed_up_vm(),
        backup("web", NS, NOW - timedelta(hours=30)),
        backup("web", NS, NOW - timedelta(minutes=10), phase="Failed"),
        backup("web", NS, NOW - timedelta(minutes=1), phase="Running"),
    ]
    assert judge(controls, objects)["web", "cp-9"].satisfied


def test_failed_backups_only_fail_cp9_naming_them(controls: list[LinkedControl]) -> None:
    objects = [
        *backed_up_vm(),
        backup("web", NS, NOW - timedelta(hours=2), phase="Failed"),
        backup("web", NS, NOW - timedelta(hours=1), phase="Failed"),
    ]
    cp9 = judge(controls, objects)["web", "cp-9"]
    assert not cp9.satisfied
    assert text(cp9) == (
        "apps/web: no Succeeded backup with a recorded root-disk sha256 (schedule @daily; "
        "web-20261203-200000 Failed, web-20261203-210000 Failed)"
    )


def test_no_backup_at_all_fails_cp9(controls: list[LinkedControl]) -> None:
    cp9 = judge(controls, backed_up_vm())["web", "cp-9"]
    assert not cp9.satisfied
    assert text(cp9) == (
        "apps/web: no Succeeded backup with a recorded root-disk sha256 (schedule @daily; "
        "no UDSVirtualMachineBackup labelled uds.dev/vm=web)"
    )


def test_a_vm_without_spec_backup_fails_cp9_and_cp10(controls: list[LinkedControl]) -> None:
    vm = udsvm("web", NS, uid=UID)
    del vm["spec"]["backup"]
    # Even a backup object labelled for it does not stand in for the declaration.
    result = judge(controls, [vm, *children("web", NS, uid=UID), backup("web", NS, NOW - timedelta(hours=1))])
    assert not result["web", "cp-9"].satisfied and not result["web", "cp-10"].satisfied
    assert (
        text(result["web", "cp-9"]) == "apps/web: declares no spec.backup, so its disks are never backed up"
    )
    assert text(result["web", "cp-10"]) == (
        "apps/web: declares no spec.backup and is no restore (uds.dev/restored-from): "
        "nothing proves it can be recovered"
    )


def test_on_demand_backups_count_however_old_and_the_message_says_so(controls: list[LinkedControl]) -> None:
    objects = [*backed_up_vm(schedule=None), backup("web", NS, NOW - timedelta(days=100))]
    cp9 = judge(controls, objects)["web", "cp-9"]
    assert cp9.satisfied
    assert text(cp9) == (
        "apps/web: data on Retain data disks; on-demand backups only (no spec.backup.schedule), "
        "any Succeeded backup counts: web-20260825-220000 Succeeded at 2026-08-25T22:00:00Z"
    )


def test_on_demand_without_a_succeeded_backup_fails_cp9(controls: list[LinkedControl]) -> None:
    objects = [*backed_up_vm(schedule=None), backup("web", NS, NOW - timedelta(days=1), phase="Failed")]
    cp9 = judge(controls, objects)["web", "cp-9"]
    assert not cp9.satisfied
    assert text(cp9) == (
        "apps/web: on-demand backups only (no spec.backup.schedule) and none has Succeeded with a recorded "
        "root-disk sha256 (web-20261202-220000 Failed)"
    )


def test_backups_of_another_vm_or_namespace_do_not_count(controls: list[LinkedControl]) -> None:
    other_vm = backup("db", NS, NOW - timedelta(hours=1))
    other_ns = backup("web", "elsewhere", NOW - timedelta(hours=1))
    relabelled = backup("web", NS, NOW - timedelta(hours=1))
    relabelled["metadata"]["labels"]["uds.dev/vm"] = "web2"  # spec.vmName still says web: the label decides
    for stray in (other_vm, other_ns, relabelled):
        assert not judge(controls, [*backed_up_vm(), stray])["web", "cp-9"].satisfied


def test_a_succeeded_backup_without_a_root_disk_record_does_not_count(controls: list[LinkedControl]) -> None:
    unrecorded = backup("web", NS, NOW - timedelta(hours=1))
    unrecorded["status"]["disks"] = [d for d in unrecorded["status"]["disks"] if d["name"] != "root"]
    malformed = backup("web", NS, NOW - timedelta(hours=2))
    malformed["status"]["disks"][0]["sha256"] = "md5:0123"
    cp9 = judge(controls, [*backed_up_vm(), unrecorded, malformed])["web", "cp-9"]
    assert not cp9.satisfied
    assert "no Succeeded backup with a recorded root-disk sha256" in text(cp9)


def test_a_backup_dated_after_the_assessment_does_not_count(controls: list[LinkedControl]) -> None:
    future = backup("web", NS, NOW + timedelta(hours=3))
    cp9 = judge(controls, [*backed_up_vm(), future])["web", "cp-9"]
    assert not cp9.satisfied
    assert (
        f"apps/web: backup {future['metadata']['name']} claims to have completed at 2026-12-04T01:00:00Z, "
        "after the assessment: not counted"
    ) in text(cp9)
    slightly = backup("web", NS, NOW + timedelta(minutes=4))  # clock skew between nodes is tolerated
    assert judge(controls, [*backed_up_vm(), slightly])["web", "cp-9"].satisfied


@pytest.mark.parametrize(
    "completed",
    [
        "2026-12-03T21:00:00Z",
        "2026-12-03T21:00:00.250Z",
        "2026-12-03T21:00:00+00:00",
        "2026-12-03T22:30:00+01:30",
    ],
)
def test_completed_at_is_read_in_every_rfc3339_form(controls: list[LinkedControl], completed: str) -> None:
    recent = backup("web", NS, NOW - timedelta(hours=1))
    recent["status"]["completedAt"] = completed
    assert judge(controls, [*backed_up_vm(), recent])["web", "cp-9"].satisfied
    assert not judge(controls, [*backed_up_vm(), recent], now=NOW + timedelta(hours=48))[
        "web", "cp-9"
    ].satisfied


def test_the_retained_data_disks_are_still_required(controls: list[LinkedControl]) -> None:
    objects = [*backed_up_vm(), backup("web", NS, NOW - timedelta(hours=1))]
    find(objects, "PersistentVolumeClaim", "web-data-data")["metadata"]["ownerReferences"] = [{"uid": "x"}]
    cp9 = judge(controls, objects)["web", "cp-9"]
    assert not cp9.satisfied
    assert (
        text(cp9) == "apps/web: PersistentVolumeClaim web-data-data has an owner and would be deleted with it"
    )


# ----------------------------------------------------------------------------------------------- CP-10


def restored_namespace() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """web with a recent backup and an older one restored into web-restored (verified); the older backup."""
    source = backup("web", NS, NOW - timedelta(days=3))
    objects = [*backed_up_vm(), backup("web", NS, NOW - timedelta(hours=1)), source, *restore_of(source)]
    return objects, source


def test_a_verified_restore_satisfies_cp10_for_the_restore_and_its_origin(
    controls: list[LinkedControl],
) -> None:
    objects, source = restored_namespace()
    result = judge(controls, objects)
    assert result["web", "cp-10"].satisfied and result["web-restored", "cp-10"].satisfied
    name = source["metadata"]["name"]
    assert (
        text(result["web", "cp-10"]) == f"apps/web: verified restore of its backups: web-restored from {name}"
    )
    assert text(result["web-restored", "cp-10"]) == (
        f"apps/web-restored: restored from {name} and verified against the backup's record sha256:{'cd' * 32}"
    )


def test_restored_bytes_that_differ_from_the_record_fail_cp10(controls: list[LinkedControl]) -> None:
    objects, source = restored_namespace()
    status = find(objects, "UDSVirtualMachine", "web-restored")["status"]
    status.update(phase="Failed", checksumVerified=False, verifiedBy=None, verifiedDigest=None)
    status["conditions"] = [
        {"type": "ChecksumVerified", "status": "False", "reason": "ChecksumMismatch", "message": "mismatch"}
    ]
    result = judge(controls, objects)
    name = source["metadata"]["name"]
    refused = (
        f"restore from {name} refused: the restored bytes differ from the backup's record (ChecksumMismatch)"
    )
    assert not result["web-restored", "cp-10"].satisfied
    assert text(result["web-restored", "cp-10"]) == f"apps/web-restored: {refused}"
    assert not result["web", "cp-10"].satisfied
    assert (
        text(result["web", "cp-10"])
        == f"apps/web: no verified restore of its backups yet: web-restored: {refused}"
    )


def test_a_verified_digest_other_than_the_record_fails_cp10(controls: list[LinkedControl]) -> None:
    objects, source = restored_namespace()
    find(objects, "UDSVirtualMachine", "web-restored")["status"]["verifiedDigest"] = "sha256:" + "77" * 32
    result = judge(controls, objects)
    assert not result["web-restored", "cp-10"].satisfied and not result["web", "cp-10"].satisfied
    assert text(result["web-restored", "cp-10"]) == (
        f"apps/web-restored: restore from {source['metadata']['name']} refused: the restored bytes differ "
        f"from the backup's record (verified digest sha256:{'77' * 32}, recorded sha256:{'cd' * 32})"
    )


def test_a_declared_checksum_other_than_the_record_fails_cp10(controls: list[LinkedControl]) -> None:
    # The restored VM was verified, but against a digest of its own choosing, not the backup's record.
    objects, source = restored_namespace()
    restored = find(objects, "UDSVirtualMachine", "web-restored")
    restored["spec"]["source"]["s3"]["checksum"] = restored["status"]["verifiedDigest"] = (
        "sha256:" + "77" * 32
    )
    result = judge(controls, objects)
    assert not result["web-restored", "cp-10"].satisfied and not result["web", "cp-10"].satisfied
    assert text(result["web-restored", "cp-10"]) == (
        f"apps/web-restored: restore from {source['metadata']['name']} refused: spec.source.s3.checksum "
        f"sha256:{'77' * 32} is not the backup's root-disk record sha256:{'cd' * 32}"
    )


def test_a_restore_whose_backup_is_missing_fails_cp10(controls: list[LinkedControl]) -> None:
    objects, source = restored_namespace()
    objects.remove(source)
    result = judge(controls, objects)
    name = source["metadata"]["name"]
    assert not result["web-restored", "cp-10"].satisfied
    assert text(result["web-restored", "cp-10"]) == (
        f"apps/web-restored: restored from {name}, but no UDSVirtualMachineBackup {name} exists in apps: "
        "nothing to check the restored bytes against"
    )
    assert text(result["web", "cp-10"]) == (
        "apps/web: no verified restore of its backups yet (no VM of apps is restored from one of them, "
        "annotation uds.dev/restored-from)"
    )


def test_a_restore_from_a_backup_that_did_not_succeed_fails_cp10(controls: list[LinkedControl]) -> None:
    objects, source = restored_namespace()
    source["status"]["phase"] = "Failed"
    result = judge(controls, objects)
    assert not result["web-restored", "cp-10"].satisfied and not result["web", "cp-10"].satisfied
    assert text(result["web-restored", "cp-10"]) == (
        f"apps/web-restored: restored from {source['metadata']['name']}, a backup that did not succeed "
        "(phase Failed)"
    )


def test_a_restore_not_verified_yet_fails_cp10(controls: list[LinkedControl]) -> None:
    objects, source = restored_namespace()
    status = find(objects, "UDSVirtualMachine", "web-restored")["status"]
    status.update(phase="Importing", checksumVerified=False, verifiedBy=None, verifiedDigest=None)
    result = judge(controls, objects)
    assert not result["web-restored", "cp-10"].satisfied
    assert text(result["web-restored", "cp-10"]) == (
        f"apps/web-restored: restore from {source['metadata']['name']} not verified yet: "
        "status.checksumVerified is not true"
    )


def test_a_vm_whose_backups_were_never_restored_fails_cp10(controls: list[LinkedControl]) -> None:
    objects = [*backed_up_vm(), backup("web", NS, NOW - timedelta(hours=1))]
    result = judge(controls, objects)
    assert result["web", "cp-9"].satisfied and not result["web", "cp-10"].satisfied
    assert text(result["web", "cp-10"]) == (
        "apps/web: no verified restore of its backups yet (no VM of apps is restored from one of them, "
        "annotation uds.dev/restored-from)"
    )


def test_a_verified_restore_of_another_vms_backup_does_not_count(controls: list[LinkedControl]) -> None:
    db_backup = backup("db", NS, NOW - timedelta(days=1))
    objects = [
        *backed_up_vm(),
        backup("web", NS, NOW - timedelta(hours=1)),
        db_backup,
        *restore_of(db_backup),
    ]
    objects += backed_up_vm("db")
    result = judge(controls, objects)
    assert result["db", "cp-10"].satisfied and result["web-restored", "cp-10"].satisfied
    assert not result["web", "cp-10"].satisfied


def test_a_restore_in_another_namespace_does_not_count(controls: list[LinkedControl]) -> None:
    source = backup("web", "elsewhere", NOW - timedelta(days=1))  # a backup of a "web" of another namespace
    restored = restored_udsvm("web-restored", "elsewhere", source, uid=RESTORED_UID)
    objects = [*backed_up_vm(), backup("web", NS, NOW - timedelta(hours=1)), source, restored]
    result = judge(controls, objects)
    assert result["web-restored", "cp-10"].satisfied
    assert not result["web", "cp-10"].satisfied


def test_a_restore_without_spec_backup_satisfies_cp10_but_not_cp9(controls: list[LinkedControl]) -> None:
    objects, _ = restored_namespace()
    del find(objects, "UDSVirtualMachine", "web-restored")["spec"]["backup"]
    result = judge(controls, objects)
    assert result["web-restored", "cp-10"].satisfied and result["web", "cp-10"].satisfied
    assert text(result["web-restored", "cp-9"]) == (
        "apps/web-restored: declares no spec.backup, so its disks are never backed up"
    )


# ------------------------------------------------------------------------------ Lula's reading, the clock


def lula_verdict(validation_name: str, objects: list[dict[str, Any]]) -> tuple[bool, str]:
    """The validation evaluated once over every object, without the evaluator's clock, as Lula runs it."""
    (validation,) = [v for v in packaged_validations() if v.name == validation_name]
    snapshot = snapshot_of(objects)
    document = {rule.name: snapshot.get(rule.api_key, []) for rule in validation.resources}
    interpreter = Interpreter()
    interpreter.add_module(validation.name, validation.rego)
    interpreter.set_input(Input(json.loads(json.dumps(document))))
    values = interpreter.query("v := data.validate.validate; m := data.validate.msg").results[0].bindings
    return values["v"], values["m"]


def _stale_backups(objects: list[dict[str, Any]], namespace: str) -> None:
    for obj in objects:
        if obj["kind"] == "UDSVirtualMachineBackup" and obj["metadata"]["namespace"] == namespace:
            obj["status"]["completedAt"] = "2020-01-01T00:00:00Z"


def _unverified_restore(objects: list[dict[str, Any]], namespace: str) -> None:
    for obj in objects:
        annotations = obj["metadata"].get("annotations", {})
        if obj["metadata"]["namespace"] == namespace and "uds.dev/restored-from" in annotations:
            obj["status"]["checksumVerified"] = False


@pytest.mark.parametrize(
    ("validation_name", "control", "tamper", "failing"),
    [
        ("vm-backups", "cp-9", None, []),
        ("vm-verified-restore", "cp-10", None, []),
        ("vm-backups", "cp-9", _stale_backups, ["other/web", "other/web-restored"]),
        ("vm-verified-restore", "cp-10", _stale_backups, []),  # a restore stays proof when backups age
        ("vm-backups", "cp-9", _unverified_restore, []),
        ("vm-verified-restore", "cp-10", _unverified_restore, ["other/web", "other/web-restored"]),
    ],
)
def test_lulas_single_evaluation_agrees_with_the_per_vm_one(
    controls: list[LinkedControl], validation_name: str, control: str, tamper: Any, failing: list[str]
) -> None:
    """Two namespaces with the same VM names, judged once over everything on the engine's own clock (Lula)
    and per VM (uds-vmctl): the whole passes exactly when every VM does, and names each failing VM's reason.
    """
    now = datetime.now(UTC)
    objects = [*compliant_objects("web", NS, now=now), *compliant_objects("web", "other", now=now)]
    if tamper is not None:
        tamper(objects, "other")
    per_vm = [f for f in assess(controls, snapshot_of(objects), now=now) if f.control_id == control]
    assert sorted(str(f.vm) for f in per_vm if not f.satisfied) == failing
    passed, message = lula_verdict(validation_name, objects)
    assert passed is (failing == []), message
    # Passing, the message is every VM's note; failing, it holds every failing VM's reasons.
    for finding in per_vm:
        if passed or not finding.satisfied:
            assert text(finding) in message


def test_the_evaluators_clock_is_one_input_key_in_nanoseconds() -> None:
    (validation,) = [v for v in packaged_validations() if v.name == "vm-backups"]
    objects = compliant_objects("web", NS, now=NOW)
    snapshot = snapshot_of(objects)
    vm = next(v for v in snapshot[VM_API] if v["metadata"]["name"] == "web")
    document = vm_input(validation, vm, snapshot, datetime(2026, 12, 3, 22, 0, 0, 123456, tzinfo=UTC))
    assert document["now_ns"] == 1_796_335_200_123_456_000
    assert set(document) == {"now_ns", *(r.name for r in validation.resources)}


def test_a_validation_may_not_name_a_resource_like_the_clock() -> None:
    (validation,) = [v for v in packaged_validations() if v.name == "vm-backups"]
    text_ = validation.source_text.replace("- name: backups\n", "- name: now_ns\n")
    with pytest.raises(ComponentDefinitionError, match="reserved for the evaluation's clock"):
        parse_validation(text_)


def test_the_backup_evidence_fixture_is_complete(controls: list[LinkedControl]) -> None:
    """What the other compliance tests rely on: backup_evidence alone satisfies both controls."""
    objects = [
        udsvm("web", NS, uid=UID),
        *children("web", NS, uid=UID),
        *backup_evidence("web", NS, UID, NOW),
    ]
    assert all(f.satisfied for f in judge(controls, objects).values())
