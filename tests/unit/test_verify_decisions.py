"""SI-7 decisions (controller/verification.py): never claim what was not verified."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest

from uds_vm_operator.controller.verification import (
    VERIFICATION_ANNOTATION,
    ApplyVerifier,
    DeleteVerifierPod,
    ImageRecord,
    ImageRecordError,
    RecordVerdict,
    VerificationInput,
    decide,
    image_record_name,
    parse_image_record,
)
from uds_vm_operator.render.common import Owner
from uds_vm_operator.verify import parse_digest, verify_disk

OWNER = Owner("web", "apps", "vm-uid-1")
SIZE = 1 << 20
IMAGE = os.urandom(SIZE)
DECLARED = "sha256:" + hashlib.sha256(IMAGE).hexdigest()
OTHER = "sha256:" + "e" * 64
IMAGE_REF = "registry.local/uds-vm-operator:0.1.0"


def dv(
    phase: str = "Succeeded",
    *,
    annotations: dict[str, str] | None = None,
    http_checksum: str | None = None,
    uid: str = "dv-uid-1",
) -> dict[str, Any]:
    source: dict[str, Any] = {"upload": {}}
    if http_checksum is not None:
        source = {"http": {"url": "https://images.local/web.img", "checksum": http_checksum}}
    return {
        "metadata": {"name": "web-dv", "namespace": "apps", "uid": uid, "annotations": annotations or {}},
        "spec": {"source": source},
        "status": {"phase": phase},
    }


def observe(**changes: Any) -> VerificationInput:
    base: dict[str, Any] = {
        "owner": OWNER,
        "source_kind": "upload",
        "declared_checksum": DECLARED,
        "virtual_size_bytes": SIZE,
        "datavolume": dv(),
        "verifier_image": IMAGE_REF,
    }
    base.update(changes)
    return VerificationInput(**base)


def started_pod(obs: VerificationInput) -> dict[str, Any]:
    """The pod the operator would create, as the API server returns it (with a uid)."""
    outcome = decide(obs)
    (apply,) = outcome.actions
    assert isinstance(apply, ApplyVerifier)
    pod = apply.manifests[1]
    pod["metadata"]["uid"] = "pod-uid-1"
    return pod


def terminate(pod: dict[str, Any], message: str, exit_code: int) -> dict[str, Any]:
    """Play kubelet: the container ran and left its termination message."""
    pod = json.loads(json.dumps(pod))
    pod["status"] = {
        "phase": "Succeeded" if exit_code == 0 else "Failed",
        "containerStatuses": [
            {"name": "verify-disk", "state": {"terminated": {"exitCode": exit_code, "message": message}}}
        ],
    }
    return pod


def run_verifier(tmp_path: Path, disk: bytes, expected: str) -> tuple[str, int]:
    """Run the real verify-disk core on a real file; return (termination message, exit code)."""
    path = tmp_path / "disk.img"
    path.write_bytes(disk + bytes(4096))  # CDI pads disk.img to the PVC size
    result = verify_disk(str(path), SIZE, expected)
    return result.to_json(), result.exit_code


# --------------------------------------------------------------------------------------- no declaration


def test_no_declared_digest_lets_the_vm_run_but_claims_nothing() -> None:
    outcome = decide(observe(declared_checksum=None))
    assert outcome.state == "not-declared"
    assert not outcome.verified and not outcome.hold_vm
    assert outcome.condition[1] == "NoChecksumDeclared"


def test_disk_not_populated_yet_holds_the_vm() -> None:
    for datavolume in (None, dv("ImportInProgress"), dv("UploadReady")):
        outcome = decide(observe(datavolume=datavolume))
        assert outcome.state == "awaiting-disk" and outcome.hold_vm and not outcome.verified
        assert outcome.actions == []


# ------------------------------------------------------------------------------------------- CDI check


def test_cdi_http_checksum_counts_only_when_the_stored_dv_carries_it() -> None:
    verified = decide(
        observe(source_kind="http", cdi_http_checksum=True, datavolume=dv(http_checksum=DECLARED))
    )
    assert verified.verified and verified.verified_by == "cdi-http-checksum"
    assert verified.verified_digest == DECLARED and not verified.hold_vm


@pytest.mark.parametrize(
    ("capability", "stored_checksum"),
    [(False, DECLARED), (True, None), (True, OTHER)],
    ids=["crd-lacks-http-checksum", "field-pruned", "different-digest"],
)
def test_otherwise_http_falls_back_to_the_verifier(capability: bool, stored_checksum: str | None) -> None:
    datavolume = dv()
    datavolume["spec"]["source"] = {"http": {"url": "https://images.local/web.img"}}
    if stored_checksum is not None:
        datavolume["spec"]["source"]["http"]["checksum"] = stored_checksum
    outcome = decide(observe(source_kind="http", cdi_http_checksum=capability, datavolume=datavolume))
    assert not outcome.verified and outcome.verified_by is None and outcome.hold_vm
    assert any(isinstance(action, ApplyVerifier) for action in outcome.actions)


def failed_import(reason: str, message: str) -> dict[str, Any]:
    """A DataVolume as real CDI v1.65 leaves it after its importer's checksum check failed."""
    datavolume = dv("Failed", http_checksum=DECLARED)
    datavolume["status"]["conditions"] = [
        {"type": "Bound", "status": "True", "reason": "Bound"},
        {"type": "Running", "status": "False", "reason": reason, "message": message},
        {"type": "Ready", "status": "False"},
    ]
    return datavolume


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        ("ChecksumError", "Unable to process data: checksum mismatch"),
        ("Error", "Unable to process data: Checksum Mismatch: expected sha256:ab"),
    ],
)
def test_cdis_failed_checksum_is_reported_as_a_mismatch_with_the_vm_off(reason: str, message: str) -> None:
    outcome = decide(
        observe(source_kind="http", cdi_http_checksum=True, datavolume=failed_import(reason, message))
    )
    assert outcome.state == "failed" and outcome.hold_vm and not outcome.verified
    assert outcome.failure is not None and outcome.failure[0] == "ChecksumMismatch"
    assert message in outcome.failure[1] and DECLARED in outcome.failure[1]
    assert outcome.verified_by is None


def test_another_failed_import_is_not_called_a_checksum_mismatch() -> None:
    datavolume = failed_import("Error", "Unable to connect to http data source: connection refused")
    outcome = decide(observe(source_kind="http", cdi_http_checksum=True, datavolume=datavolume))
    assert outcome.failure is None or outcome.failure[0] != "ChecksumMismatch"
    assert not outcome.verified and outcome.hold_vm


# ------------------------------------------------------------------------------------ in-cluster verifier


def test_upload_starts_the_verifier_pod_for_the_declared_digest() -> None:
    outcome = decide(observe())
    assert outcome.state == "verifying" and outcome.hold_vm
    assert outcome.condition[1] == "VerifierRunning"
    (apply,) = outcome.actions
    assert isinstance(apply, ApplyVerifier)
    policy, pod = apply.manifests
    assert policy["kind"] == "NetworkPolicy" and pod["kind"] == "Pod"
    command = pod["spec"]["containers"][0]["command"]
    assert command[command.index("--expected") + 1] == DECLARED
    assert command[command.index("--virtual-size") + 1] == str(SIZE)
    assert pod["spec"]["containers"][0]["image"] == IMAGE_REF
    assert pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == "web-dv"
    assert pod["metadata"]["annotations"]["uds.dev/disk-uid"] == "dv-uid-1"


def test_without_its_own_image_the_operator_cannot_verify_and_holds() -> None:
    outcome = decide(observe(verifier_image=None))
    assert outcome.condition[1] == "VerifierUnavailable" and outcome.hold_vm and outcome.actions == []


def test_running_verifier_is_left_alone() -> None:
    pod = started_pod(observe())
    pod["status"] = {"phase": "Running"}
    outcome = decide(observe(verifier_pod=pod))
    assert outcome.state == "verifying" and outcome.actions == [] and outcome.hold_vm


def test_match_is_recorded_on_the_disk_and_the_pod_cleaned_up(tmp_path: Path) -> None:
    pod = started_pod(observe())
    message, code = run_verifier(tmp_path, IMAGE, DECLARED)
    outcome = decide(observe(verifier_pod=terminate(pod, message, code)))
    assert outcome.verified and not outcome.hold_vm
    assert outcome.verified_by == "in-cluster-verifier" and outcome.verified_digest == DECLARED
    record, delete = outcome.actions
    assert isinstance(record, RecordVerdict) and record.datavolume == "web-dv" and record.uid == "dv-uid-1"
    assert json.loads(record.annotations[VERIFICATION_ANNOTATION])["result"] == "match"
    assert delete == DeleteVerifierPod("web-verify", "pod-uid-1")
    assert [(e.type, e.reason) for e in outcome.events] == [("Normal", "ChecksumVerified")]

    # The next reconcile sees the verdict on the DataVolume, the pod gone: verified, nothing to do.
    later = decide(observe(datavolume=dv(annotations=record.annotations)))
    assert later.verified and later.actions == [] and later.events == []


def test_mismatch_fails_names_both_digests_and_keeps_the_vm_off(tmp_path: Path) -> None:
    tampered = bytearray(IMAGE)
    tampered[-1] ^= 0x01  # the last byte of the virtual size
    pod = started_pod(observe())
    message, code = run_verifier(tmp_path, bytes(tampered), DECLARED)
    outcome = decide(observe(verifier_pod=terminate(pod, message, code)))
    actual = "sha256:" + hashlib.sha256(bytes(tampered)).hexdigest()
    assert outcome.state == "failed" and outcome.hold_vm and not outcome.verified
    assert outcome.failure is not None and outcome.failure[0] == "ChecksumMismatch"
    assert outcome.condition[:2] == ("False", "ChecksumMismatch")
    (event,) = outcome.events
    assert event.type == "Warning" and event.reason == "ChecksumMismatch"
    assert DECLARED in event.message and actual in event.message
    record, delete = outcome.actions
    assert isinstance(record, RecordVerdict) and isinstance(delete, DeleteVerifierPod)

    later = decide(observe(datavolume=dv(annotations=record.annotations)))
    assert later.state == "failed" and later.failure is not None and later.failure[0] == "ChecksumMismatch"
    assert later.events == [] and later.actions == [], "the mismatch is not re-verified or re-announced"


def test_a_changed_declared_digest_verifies_again() -> None:
    # The disk was verified (and also once found mismatching) for an older declaration OTHER ...
    for result in ("match", "mismatch"):
        verdict = {"result": result, "expected": OTHER, "actual": OTHER if result == "match" else DECLARED}
        annotations = {VERIFICATION_ANNOTATION: json.dumps({**verdict, "bytes": SIZE})}
        assert decide(observe(declared_checksum=OTHER, datavolume=dv(annotations=annotations))).state in (
            "verified",
            "failed",
        )
        # ... the user now declares DECLARED: the old verdict does not apply, the verifier runs again.
        outcome = decide(observe(datavolume=dv(annotations=annotations)))
        assert outcome.state == "verifying" and not outcome.verified and outcome.hold_vm
        assert isinstance(outcome.actions[0], ApplyVerifier)


def test_a_recreated_disk_verifies_again(tmp_path: Path) -> None:
    message, code = run_verifier(tmp_path, IMAGE, DECLARED)
    annotations = {VERIFICATION_ANNOTATION: message}
    assert decide(observe(datavolume=dv(annotations=annotations))).verified
    # Same name, new incarnation: no annotation on the new DataVolume, so the verdict is gone.
    fresh = decide(observe(datavolume=dv(uid="dv-uid-2")))
    assert not fresh.verified and isinstance(fresh.actions[0], ApplyVerifier)
    assert code == 0


def test_a_pod_about_something_else_is_replaced() -> None:
    old_pod = started_pod(observe(declared_checksum=OTHER))
    outcome = decide(observe(verifier_pod=old_pod))
    assert outcome.state == "verifying" and outcome.condition[1] == "VerifierRestarting"
    assert outcome.actions == [DeleteVerifierPod("web-verify", "pod-uid-1")]
    recreated_disk_pod = started_pod(observe(datavolume=dv(uid="dv-uid-0")))
    assert decide(observe(verifier_pod=recreated_disk_pod)).actions == [
        DeleteVerifierPod("web-verify", "pod-uid-1")
    ]


@pytest.mark.parametrize(
    ("message", "exit_code", "fragment"),
    [
        ("", 1, "no verdict"),
        ("Traceback (most recent call last)", 1, "not JSON"),
        (
            json.dumps({"result": "match", "expected": DECLARED, "actual": DECLARED, "bytes": SIZE}),
            1,
            "contradicts",
        ),
        (
            json.dumps({"result": "match", "expected": DECLARED, "actual": DECLARED, "bytes": SIZE - 1}),
            0,
            "hashed",
        ),
        (json.dumps({"result": "match", "expected": OTHER, "actual": OTHER, "bytes": SIZE}), 0, "is about"),
        (
            json.dumps(
                {
                    "result": "error",
                    "expected": DECLARED,
                    "actual": None,
                    "bytes": 0,
                    "message": "cannot open /disk/disk.img",
                }
            ),
            2,
            "cannot open",
        ),
    ],
)
def test_anything_but_a_clean_verdict_is_an_error_never_a_match(
    message: str, exit_code: int, fragment: str
) -> None:
    pod = terminate(started_pod(observe()), message, exit_code)
    outcome = decide(observe(verifier_pod=pod))
    assert outcome.state == "failed" and not outcome.verified and outcome.hold_vm
    assert outcome.condition[1] == "VerificationError" and fragment in outcome.condition[2]
    assert "delete pod web-verify to retry" in outcome.condition[2]
    assert not any(isinstance(action, RecordVerdict) for action in outcome.actions)


def test_pod_killed_by_its_deadline_is_a_failure() -> None:
    pod = started_pod(observe())
    pod["status"] = {"phase": "Failed", "reason": "DeadlineExceeded"}
    outcome = decide(observe(verifier_pod=pod))
    assert outcome.failure is not None and outcome.failure[0] == "VerifierFailed"
    assert "DeadlineExceeded" in outcome.failure[1]


def test_unknown_virtual_size_cannot_be_verified() -> None:
    outcome = decide(observe(virtual_size_bytes=None))
    assert outcome.failure is not None and outcome.failure[0] == "VirtualSizeUnknown" and outcome.hold_vm


# ------------------------------------------------------------------------------------------ image record


CONTENT = "sha256:" + "c" * 64


def record(**changes: Any) -> ImageRecord:
    base: dict[str, Any] = {
        "name": "web-image-record",
        "sha256": parse_digest(DECLARED),
        "content_sha256": parse_digest(CONTENT),
        "virtual_size_bytes": SIZE,
        "format": "qcow2",
    }
    base.update(changes)
    return ImageRecord(**base)


def test_qcow2_record_makes_the_verifier_expect_the_raw_content_digest() -> None:
    outcome = decide(
        observe(image_record_name="web-image-record", image_record=record(), virtual_size_bytes=None)
    )
    (apply,) = outcome.actions
    assert isinstance(apply, ApplyVerifier)
    command = apply.manifests[1]["spec"]["containers"][0]["command"]
    assert command[command.index("--expected") + 1] == CONTENT
    assert command[command.index("--virtual-size") + 1] == str(SIZE), "size comes from the record"


def test_verified_content_is_reported_as_the_declared_digest() -> None:
    verdict = json.dumps({"result": "match", "expected": CONTENT, "actual": CONTENT, "bytes": SIZE})
    outcome = decide(
        observe(
            image_record_name="r",
            image_record=record(),
            datavolume=dv(annotations={VERIFICATION_ANNOTATION: verdict}),
        )
    )
    assert outcome.verified and outcome.verified_digest == DECLARED
    assert CONTENT in outcome.condition[2]


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"image_record": record(sha256=parse_digest(OTHER))}, "ImageRecordMismatch"),
        ({"image_record": record(virtual_size_bytes=SIZE * 2)}, "ImageRecordMismatch"),
        ({"image_record": None, "image_record_problem": "ConfigMap r has no key"}, "ImageRecordInvalid"),
    ],
)
def test_image_record_disagreement_is_a_failure(changes: dict[str, Any], reason: str) -> None:
    outcome = decide(observe(image_record_name="web-image-record", **changes))
    assert outcome.failure is not None and outcome.failure[0] == reason
    assert outcome.hold_vm and not outcome.verified


def test_missing_image_record_waits_with_the_vm_off() -> None:
    outcome = decide(observe(image_record_name="web-image-record", image_record_missing=True))
    assert outcome.state == "verifying" and outcome.hold_vm and outcome.failure is None
    assert outcome.condition[1] == "ImageRecordMissing"


def configmap(doc: object) -> dict[str, Any]:
    text = doc if isinstance(doc, str) else json.dumps(doc)
    return {"metadata": {"name": "web-image-record"}, "data": {"image-record.json": text}}


def test_parse_image_record_as_prep_writes_it() -> None:
    parsed = parse_image_record(
        configmap(
            {
                "schema": 1,
                "format": "qcow2",
                "sha256": DECLARED,
                "content_sha256": CONTENT.split(":")[1],
                "virtual_size_bytes": SIZE,
            }
        )
    )
    assert parsed == record()


@pytest.mark.parametrize(
    "bad",
    [
        {"metadata": {"name": "x"}, "data": {}},
        configmap("{nope"),
        configmap([1]),
        configmap({"format": "raw"}),
    ],
)
def test_unusable_image_records_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ImageRecordError):
        parse_image_record(bad)


def test_image_record_reference_is_the_spec_field_or_the_annotation() -> None:
    annotated = {"metadata": {"annotations": {"uds.dev/image-record": "web-image-record"}}}
    assert image_record_name(annotated) == "web-image-record"
    assert image_record_name({**annotated, "spec": {"imageRecord": "other-record"}}) == "other-record"
    assert image_record_name({"metadata": {}, "spec": {}}) is None


def test_a_record_without_a_digest_of_the_declared_kind_cannot_vouch_for_it() -> None:
    sha512 = "sha512:" + "a" * 128
    outcome = decide(observe(declared_checksum=sha512, image_record_name="r", image_record=record()))
    assert outcome.failure is not None and outcome.failure[0] == "ImageRecordMismatch"
    assert "--sha512" in outcome.failure[1] and outcome.hold_vm and not outcome.actions


def test_a_sha512_declaration_is_tied_to_the_record_by_its_sealed_sha512() -> None:
    sha512 = "sha512:" + "a" * 128
    doc = {"sha256": DECLARED, "sha512": sha512, "content_sha256": CONTENT, "virtual_size_bytes": SIZE}
    parsed = parse_image_record(configmap(doc))
    assert parsed.sha512 == parse_digest(sha512)
    outcome = decide(observe(declared_checksum=sha512, image_record_name="r", image_record=parsed))
    (apply,) = outcome.actions
    assert isinstance(apply, ApplyVerifier)
    command = apply.manifests[1]["spec"]["containers"][0]["command"]
    assert command[command.index("--expected") + 1] == CONTENT


# ----------------------------------------------------- raw image whose size is not a multiple of 512 bytes


def test_unaligned_raw_image_is_verified_against_the_content_digest_of_its_record(tmp_path: Path) -> None:
    """prep → image record → decision → verify-disk on the bytes CDI writes, all real.

    qemu (and so CDI) pads a raw image to whole 512-byte sectors, so the disk holds file + zeros: its
    digest is the record's ``content_sha256``, not the declared file digest. Comparing against the file
    digest would fail a perfectly good disk.
    """
    from uds_vm_operator.cli.prep import build_report  # noqa: PLC0415
    from uds_vm_operator.cli.prep_manifests import (  # noqa: PLC0415
        ManifestTarget,
        image_record,
        image_record_configmap,
    )
    from uds_vm_operator.images import survey_image  # noqa: PLC0415

    payload = random.Random(7).randbytes(3 * 512 + 100)
    image = tmp_path / "appliance.raw"
    image.write_bytes(payload)
    report = build_report(survey_image(str(image)))
    declared = "sha256:" + hashlib.sha256(payload).hexdigest()
    assert report["format"] == "raw" and report["sha256"] == declared
    assert report["virtual_size_bytes"] == 4 * 512
    assert report["content_sha256"] != declared, "qemu's sector padding changes the content digest"

    target = ManifestTarget(name="web", namespace="apps")
    parsed = parse_image_record(image_record_configmap(image_record(report, target), target))
    obs = observe(
        declared_checksum=declared,
        virtual_size_bytes=report["virtual_size_bytes"],
        image_record_name=target.record_name,
        image_record=parsed,
    )
    pod = started_pod(obs)
    command = pod["spec"]["containers"][0]["command"]
    assert command[command.index("--expected") + 1] == report["content_sha256"]
    assert command[command.index("--virtual-size") + 1] == "2048"

    disk = tmp_path / "disk.img"  # what CDI leaves in the PVC: the image, grown with zeros to the PVC size
    disk.write_bytes(payload + bytes(1 << 20))
    result = verify_disk(str(disk), 2048, report["content_sha256"])
    outcome = decide(_with_pod(obs, terminate(pod, result.to_json(), result.exit_code)))
    assert result.result == "match" and outcome.verified
    assert outcome.verified_digest == declared, "the claim is about what the user declared"

    # Without the record the only expectation is the file digest, and the padded disk cannot match it:
    # the operator fails closed (VM off) and tells the user to reference the record.
    plain = observe(declared_checksum=declared, virtual_size_bytes=2048)
    bare = verify_disk(str(disk), 2048, declared)
    failed = decide(_with_pod(plain, terminate(started_pod(plain), bare.to_json(), bare.exit_code)))
    assert failed.failure is not None and failed.failure[0] == "ChecksumMismatch" and failed.hold_vm
    assert "spec.imageRecord" in failed.failure[1]


def _with_pod(obs: VerificationInput, pod: dict[str, Any]) -> VerificationInput:
    return dataclasses.replace(obs, verifier_pod=pod)


def test_a_restore_whose_backup_was_altered_is_refused_naming_the_backup_and_its_record(
    tmp_path: Path,
) -> None:
    tampered = bytearray(IMAGE)
    tampered[len(IMAGE) // 2] ^= 0x01
    restored = {"source_kind": "s3", "restored_from": "web-20261203-220509"}
    pod = started_pod(observe(**restored))
    message, code = run_verifier(tmp_path, bytes(tampered), DECLARED)
    outcome = decide(observe(**restored, verifier_pod=terminate(pod, message, code)))
    assert outcome.state == "failed" and outcome.hold_vm
    assert outcome.condition[:2] == ("False", "ChecksumMismatch")
    text = outcome.condition.message
    assert text.startswith("Restore refused:") and "backup web-20261203-220509" in text and DECLARED in text
    assert "imageRecord" not in text, "no image-record advice for a restore"
