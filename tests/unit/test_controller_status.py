"""Status derivation: each row is a world the operator could observe and the status it must report."""

from __future__ import annotations

from typing import Any

import pytest

from uds_vm_operator.controller.status import (
    Observation,
    Refusal,
    checksum_verified_by_cdi,
    derive_status,
    must_hold_vm,
)
from uds_vm_operator.controller.verification import VerificationInput, decide
from uds_vm_operator.render.common import Owner
from uds_vm_operator.runtime.status_writer import status_changed

NOW = "2026-01-02T03:04:05Z"
LATER = "2026-01-02T04:00:00Z"
SHA = "sha256:" + "a" * 64


def dv(phase: str, progress: str | None = None, checksum: str | None = None) -> dict[str, Any]:
    source: dict[str, Any] = {"http": {"url": "https://images.local/disk.img"}}
    if checksum:
        source["http"]["checksum"] = checksum
    status: dict[str, Any] = {"phase": phase}
    if progress:
        status["progress"] = progress
    return {"metadata": {"name": "vm1-dv"}, "spec": {"source": source}, "status": status}


def vm(printable: str | None = None, ready: bool | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if printable is not None:
        status["printableStatus"] = printable
    if ready is not None:
        status["ready"] = ready
    return {"metadata": {"name": "vm1"}, "status": status}


def obs(**overrides: Any) -> Observation:
    base: dict[str, Any] = {
        "generation": 3,
        "source_kind": "http",
        "declared_checksum": None,
        "run_strategy": "Always",
        "cdi_http_checksum": True,
        "pvc_size": "11Mi",
        "network_isolated": True,
        "zero_trust": True,
        "hardening_secret": "cloud-init",
        "hardening_in_place": True,
    }
    base.update(overrides)
    return Observation(**base)


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


@pytest.mark.parametrize(
    ("observation", "phase", "ready_reason"),
    [
        (obs(datavolume=None), "Pending", "DataVolumeMissing"),
        (obs(datavolume=dv("Pending")), "Pending", "Pending"),
        (obs(source_kind="upload", datavolume=dv("UploadScheduled")), "WaitingForUpload", "WaitingForUpload"),
        (obs(source_kind="upload", datavolume=dv("UploadReady")), "WaitingForUpload", "WaitingForUpload"),
        (obs(datavolume=dv("ImportScheduled")), "Importing", "ImportScheduled"),
        (obs(datavolume=dv("ImportInProgress", "45.20%")), "Importing", "ImportInProgress"),
        (obs(source_kind="dataSource", datavolume=dv("CloneInProgress")), "Importing", "CloneInProgress"),
        (obs(datavolume=dv("Failed")), "Failed", "DataVolumeFailed"),
        (obs(datavolume=dv("Succeeded"), virtual_machine=None), "Provisioning", "Provisioning"),
        (obs(datavolume=dv("Succeeded"), virtual_machine=vm("Starting")), "Provisioning", "Starting"),
        (
            obs(datavolume=dv("Succeeded"), virtual_machine=vm("Running", True)),
            "Ready",
            "VirtualMachineRunning",
        ),
        (obs(datavolume=dv("Succeeded"), virtual_machine=vm(ready=True)), "Ready", "VirtualMachineRunning"),
        (
            obs(run_strategy="Halted", datavolume=dv("Succeeded"), virtual_machine=vm("Stopped", False)),
            "Stopped",
            "Stopped",
        ),
        (obs(run_strategy="Halted", datavolume=dv("Succeeded"), virtual_machine=vm()), "Stopped", "Stopped"),
        (
            obs(run_strategy="Manual", datavolume=dv("Succeeded"), virtual_machine=vm("Stopped")),
            "Stopped",
            "Stopped",
        ),
        (
            obs(
                source_kind="upload", declared_checksum=SHA, datavolume=dv("Succeeded"), virtual_machine=vm()
            ),
            "Verifying",
            "VerifierPending",
        ),
        (
            obs(
                declared_checksum=SHA,
                datavolume=dv("Succeeded", checksum=SHA),
                virtual_machine=vm("Running", True),
            ),
            "Ready",
            "VirtualMachineRunning",
        ),
        (
            obs(
                declared_checksum=SHA,
                cdi_http_checksum=False,
                datavolume=dv("Succeeded"),
                virtual_machine=vm("Running", True),
            ),
            "Verifying",
            "VerifierPending",
        ),
        (obs(refusal=Refusal("InvalidSpec", "spec.source: pick one")), "Failed", "InvalidSpec"),
        (
            obs(disk_blocker=Refusal("DataVolumeSpecImmutable", "delete it")),
            "Failed",
            "DataVolumeSpecImmutable",
        ),
        (obs(disk_blocker=Refusal("DataVolumeReplacing", "replacing")), "Pending", "DataVolumeReplacing"),
    ],
)
def test_phase_table(observation: Observation, phase: str, ready_reason: str) -> None:
    status = derive_status(observation, None, NOW)
    assert status["phase"] == phase
    assert conditions(status)["Ready"] == ("True" if phase == "Ready" else "False", ready_reason)
    assert status["reconciledBy"] == "kopf-python"
    assert status["observedGeneration"] == 3
    assert [c["type"] for c in status["conditions"]] == [
        "Ready",
        "DiskReady",
        "ChecksumVerified",
        "NetworkIsolated",
        "Hardened",
    ]


def test_import_progress_is_copied_from_the_datavolume() -> None:
    status = derive_status(obs(datavolume=dv("ImportInProgress", "45.20%")), None, NOW)
    assert status["importProgress"] == "45.20%"
    assert derive_status(obs(datavolume=dv("ImportInProgress", "N/A")), None, NOW)["importProgress"] is None


def test_cdi_checksum_counts_only_when_cdi_really_checked_the_declared_digest() -> None:
    verified = obs(declared_checksum=SHA, datavolume=dv("Succeeded", checksum=SHA))
    assert checksum_verified_by_cdi(verified)
    status = derive_status(verified, None, NOW)
    assert status["checksumVerified"] is True
    assert status["verifiedBy"] == "cdi-http-checksum"
    assert status["verifiedDigest"] == SHA
    assert conditions(status)["ChecksumVerified"] == ("True", "CDIHTTPChecksum")

    # The CRD lacks the field (old CDI): the field was pruned, nothing was checked.
    assert not checksum_verified_by_cdi(
        obs(declared_checksum=SHA, cdi_http_checksum=False, datavolume=dv("Succeeded", checksum=SHA))
    )
    # The DV carries another digest (or none): not the one the user declared.
    assert not checksum_verified_by_cdi(obs(declared_checksum=SHA, datavolume=dv("Succeeded")))
    other = "sha256:" + "b" * 64
    assert not checksum_verified_by_cdi(
        obs(declared_checksum=SHA, datavolume=dv("Succeeded", checksum=other))
    )
    # Import not finished: not verified yet.
    assert not checksum_verified_by_cdi(
        obs(declared_checksum=SHA, datavolume=dv("ImportInProgress", checksum=SHA))
    )
    # Upload: CDI has no upload checksum at all.
    assert not checksum_verified_by_cdi(
        obs(source_kind="upload", declared_checksum=SHA, datavolume=dv("Succeeded", checksum=SHA))
    )


def test_vm_is_held_until_a_declared_digest_is_verified() -> None:
    assert must_hold_vm(obs(declared_checksum=SHA, datavolume=None))
    assert must_hold_vm(obs(declared_checksum=SHA, datavolume=dv("ImportInProgress", checksum=SHA)))
    assert must_hold_vm(obs(source_kind="upload", declared_checksum=SHA, datavolume=dv("Succeeded")))
    assert not must_hold_vm(obs(declared_checksum=SHA, datavolume=dv("Succeeded", checksum=SHA)))
    assert not must_hold_vm(obs(declared_checksum=None, datavolume=None))


def test_no_checksum_declared_lets_the_vm_run_but_claims_nothing() -> None:
    status = derive_status(obs(datavolume=dv("Succeeded"), virtual_machine=vm("Running", True)), None, NOW)
    assert status["phase"] == "Ready"
    assert status["checksumVerified"] is False
    assert status["verifiedBy"] is None
    assert conditions(status)["ChecksumVerified"] == ("False", "NoChecksumDeclared")


def test_network_and_hardening_conditions_follow_the_observed_children() -> None:
    status = derive_status(obs(network_isolated=False, zero_trust=False, hardening_in_place=False), None, NOW)
    assert conditions(status)["NetworkIsolated"] == ("False", "NetworkPolicyMissing")
    assert conditions(status)["Hardened"] == ("False", "HardeningSecretMissing")
    assert status["zeroTrust"] is False
    status = derive_status(obs(hardening_secret="sysprep"), None, NOW)
    assert conditions(status)["Hardened"] == ("True", "SysprepHardened")
    assert conditions(status)["NetworkIsolated"] == ("True", "NetworkPolicyApplied")


def test_transition_time_is_kept_while_a_condition_keeps_its_status() -> None:
    first = derive_status(obs(datavolume=dv("ImportInProgress", "10%")), None, NOW)
    second = derive_status(obs(datavolume=dv("ImportInProgress", "20%")), first, LATER)
    by_type = {c["type"]: c for c in second["conditions"]}
    assert by_type["DiskReady"]["lastTransitionTime"] == NOW
    third = derive_status(obs(datavolume=dv("Succeeded")), second, LATER)
    by_type = {c["type"]: c for c in third["conditions"]}
    assert by_type["DiskReady"]["lastTransitionTime"] == LATER
    assert by_type["DiskReady"]["status"] == "True"


def test_same_observation_gives_an_unchanged_status() -> None:
    observation = obs(datavolume=dv("Succeeded"), virtual_machine=vm("Running", True))
    first = derive_status(observation, None, NOW)
    second = derive_status(observation, first, LATER)
    assert not status_changed(second, first)
    # Absent keys and None are the same thing in a stored status.
    stored = {key: value for key, value in first.items() if value is not None}
    assert not status_changed(second, stored)
    assert status_changed({**second, "phase": "Stopped"}, first)


def test_backup_exemptions_are_reported_and_absent_when_there_are_none() -> None:
    assert derive_status(obs(), None, NOW)["backupExemptions"] is None
    status = derive_status(obs(backup_exemptions=(("scratch", "rebuildable cache"),)), None, NOW)
    assert status["backupExemptions"] == [{"disk": "scratch", "reason": "rebuildable cache"}]


def failed_dv(running_message: str) -> dict[str, Any]:
    """A DataVolume as real CDI v1.65 fails it: Bound first (its message says only that), then Running."""
    failed = dv("Failed", checksum=SHA)
    failed["status"]["conditions"] = [
        {"type": "Bound", "status": "True", "message": "PVC vm1-dv Bound", "reason": "Bound"},
        {"type": "Running", "status": "False", "message": running_message, "reason": "Error"},
        {"type": "Ready", "status": "False"},
    ]
    return failed


def test_a_failed_import_is_reported_in_cdis_own_words() -> None:
    status = derive_status(obs(datavolume=failed_dv("Unable to connect to http data source")), None, NOW)
    assert status["phase"] == "Failed"
    assert conditions(status)["Ready"] == ("False", "DataVolumeFailed")
    assert "Unable to connect to http data source" in status["message"]
    assert "PVC vm1-dv Bound" not in status["message"]


def test_a_checksum_cdi_rejected_is_a_checksum_mismatch_not_a_bare_dv_failure() -> None:
    failed = failed_dv("Unable to process data: checksum mismatch")
    failed["status"]["conditions"][1]["reason"] = "ChecksumError"
    verification = decide(
        VerificationInput(
            owner=Owner("vm1", "ns", "uid-1"),
            source_kind="http",
            declared_checksum=SHA,
            virtual_size_bytes=1 << 20,
            cdi_http_checksum=True,
            datavolume=failed,
        )
    )
    status = derive_status(
        obs(declared_checksum=SHA, datavolume=failed, verification=verification), None, NOW
    )
    assert status["phase"] == "Failed" and status["checksumVerified"] is False
    assert conditions(status)["Ready"] == ("False", "ChecksumMismatch")
    assert conditions(status)["ChecksumVerified"] == ("False", "ChecksumMismatch")
    assert "checksum mismatch" in status["message"] and SHA in status["message"]
