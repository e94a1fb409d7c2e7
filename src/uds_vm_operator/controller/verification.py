"""SI-7 decisions: has the disk of a UDSVirtualMachine been verified, and what must happen next?

Pure: the reconciler gathers a :class:`VerificationInput` (the declaration, the DataVolume and verifier pod
as the API server returned them, the image record) and :func:`decide` returns a
:class:`VerificationOutcome`: the ``ChecksumVerified`` condition, whether the VM must stay halted, a
failure for the phase, an Event, and the actions to take (start the verifier, record its verdict, clean up).

Where verdicts live. A verdict is a fact about one disk, so it is recorded on the DataVolume itself, in
the annotation ``uds.dev/verification`` (the verifier's own JSON result), written under a separate field
manager so the operator's server-side apply of the DataVolume never removes it. A re-created DataVolume
has no annotation and is verified again; a changed declaration changes the expected digest and no longer
matches the recorded one, so it is verified again too. Nothing is trusted from the operator's memory or
from the UDSVirtualMachine's own status.

What is compared. The verifier hashes the bytes CDI wrote (raw, first ``virtual_size`` bytes). For a raw
image those bytes are the declared file's bytes, so the expected digest is the declared one. For qcow2 and
compressed images CDI converts, so the expected digest is the image record's ``content_sha256`` (written
by ``uds-vmctl prep``), and the record's file digest must equal the declared one. CDI's own check is
trusted only for http sources, on a CDI whose CRD has ``http.checksum``, when the stored DataVolume really
carries the declared digest and the import succeeded.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from uds_vm_operator.render.common import Owner
from uds_vm_operator.render.verifier import (
    DISK_UID_ANNOTATION,
    EXPECTED_DIGEST_ANNOTATION,
    VIRTUAL_SIZE_ANNOTATION,
    VerifierRequest,
    render_verifier,
    verifier_pod_name,
)
from uds_vm_operator.render.verifier_resources import Resources
from uds_vm_operator.runtime.conditions import Condition
from uds_vm_operator.termination import terminated_state
from uds_vm_operator.verify.digest import Digest, digest_or_none
from uds_vm_operator.verify.result import VerifyResult, parse_result

VERIFIED_BY_CDI = "cdi-http-checksum"
VERIFIED_BY_VERIFIER = "in-cluster-verifier"
VERIFICATION_ANNOTATION = "uds.dev/verification"
IMAGE_RECORD_ANNOTATION = "uds.dev/image-record"
IMAGE_RECORD_KEY = "image-record.json"
VERIFIER_FIELD_MANAGER = "uds-vm-operator-verifier"

State = Literal["not-declared", "awaiting-disk", "verifying", "verified", "failed"]


# ------------------------------------------------------------------------------------------ image record


class ImageRecordError(ValueError):
    """The referenced image record is missing or unreadable; the message says what to fix."""


@dataclass(frozen=True)
class ImageRecord:
    """The facts ``uds-vmctl prep`` sealed before the image crossed the air gap."""

    name: str
    sha256: Digest | None
    content_sha256: Digest | None
    virtual_size_bytes: int | None
    format: str | None
    sha512: Digest | None = None

    def file_digest(self, algorithm: str) -> Digest | None:
        """The sealed digest of the image *file* in ``algorithm`` (what a user declares), if recorded."""
        return {"sha256": self.sha256, "sha512": self.sha512}.get(algorithm)


def image_record_name(vm: Mapping[str, Any]) -> str | None:
    """The image record ConfigMap a UDSVirtualMachine references, if any.

    ``spec.imageRecord`` is the API; the ``uds.dev/image-record`` annotation is honoured too because prep
    writes both and older manifests carry only the annotation. The spec wins when both are set.
    """
    spec_name = (vm.get("spec") or {}).get("imageRecord")
    if isinstance(spec_name, str) and spec_name.strip():
        return spec_name.strip()
    annotations = (vm.get("metadata") or {}).get("annotations") or {}
    name = annotations.get(IMAGE_RECORD_ANNOTATION)
    return name.strip() if isinstance(name, str) and name.strip() else None


def parse_image_record(configmap: Mapping[str, Any]) -> ImageRecord:
    """Read ``image-record.json`` from the ConfigMap; raise :class:`ImageRecordError` if it is not usable."""
    name = str((configmap.get("metadata") or {}).get("name") or "the image record")
    text = (configmap.get("data") or {}).get(IMAGE_RECORD_KEY)
    if not isinstance(text, str):
        raise ImageRecordError(f"ConfigMap {name} has no key {IMAGE_RECORD_KEY}; re-apply the one prep wrote")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ImageRecordError(f"ConfigMap {name}: {IMAGE_RECORD_KEY} is not JSON ({exc.msg})") from exc
    if not isinstance(doc, dict):
        raise ImageRecordError(f"ConfigMap {name}: {IMAGE_RECORD_KEY} is not a JSON object")
    sha256 = _record_digest(doc.get("sha256"))
    content = _record_digest(doc.get("content_sha256"))
    if sha256 is None and content is None:
        raise ImageRecordError(f"ConfigMap {name}: the image record holds no sha256 or content_sha256 digest")
    size = doc.get("virtual_size_bytes")
    size_bytes = size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None
    fmt = doc.get("format")
    sha512 = _record_digest(doc.get("sha512"), "sha512")
    return ImageRecord(name, sha256, content, size_bytes, fmt if isinstance(fmt, str) else None, sha512)


def _record_digest(value: object, algorithm: str = "sha256") -> Digest | None:
    if isinstance(value, str) and ":" not in value:
        value = f"{algorithm}:{value}"  # records may hold bare hex; the key names the algorithm
    digest = digest_or_none(value)
    return digest if digest is not None and digest.algorithm == algorithm else None


# ---------------------------------------------------------------------------------------------- actions


@dataclass(frozen=True)
class ApplyVerifier:
    """Create the verifier's NetworkPolicy and pod (in this order)."""

    manifests: list[dict[str, Any]]


@dataclass(frozen=True)
class DeleteVerifierPod:
    """Remove the verifier pod (its verdict is recorded, or it checked something that changed)."""

    name: str
    uid: str | None


@dataclass(frozen=True)
class RecordVerdict:
    """Merge-patch the DataVolume's annotations (field manager ``uds-vm-operator-verifier``)."""

    datavolume: str
    uid: str | None
    annotations: dict[str, str]


Action = ApplyVerifier | DeleteVerifierPod | RecordVerdict


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event to emit on the UDSVirtualMachine."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


# ------------------------------------------------------------------------------------------ input/output


@dataclass(frozen=True)
class VerificationInput:
    """What the reconciler observed, in one pass."""

    owner: Owner
    source_kind: str | None
    declared_checksum: str | None
    virtual_size_bytes: int | None
    volume_mode: Literal["Filesystem", "Block"] = "Filesystem"
    cdi_http_checksum: bool = False
    datavolume: Mapping[str, Any] | None = None
    verifier_pod: Mapping[str, Any] | None = None
    image_record_name: str | None = None
    image_record: ImageRecord | None = None
    image_record_problem: str | None = None
    """Why the referenced record could not be read (ConfigMap missing: None record and this message)."""
    image_record_missing: bool = False
    """The referenced ConfigMap does not exist (yet): wait for it rather than fail."""
    verifier_image: str | None = None
    """The operator's own image; without it the verifier cannot run."""
    verifier_resources: Resources | None = None
    """The verifier pod's requests and limits (chart value ``verifier.resources``); None: the defaults."""
    restored_from: str | None = None
    """The backup a restored VM's disk came from (annotation ``uds.dev/restored-from``): its record is the
    declared digest, and a mismatch means the stored backup was altered."""


@dataclass(frozen=True)
class VerificationOutcome:
    """The SI-7 part of the status, plus what the reconciler must do."""

    state: State
    condition: Condition
    verified_by: str | None = None
    verified_digest: str | None = None
    failure: tuple[str, str] | None = None
    """(reason, message) that makes the phase ``Failed``."""
    events: list[Event] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)

    @property
    def verified(self) -> bool:
        """``checksumVerified``: true only when a digest check really passed."""
        return self.state == "verified"

    @property
    def hold_vm(self) -> bool:
        """Verified before activation: a declared digest keeps the VM halted until verified."""
        return self.state not in ("verified", "not-declared")


# ------------------------------------------------------------------------------------------------ logic


def decide(obs: VerificationInput) -> VerificationOutcome:
    """Decide the verification state and next actions for one UDSVirtualMachine."""
    pod = obs.verifier_pod
    cleanup: list[Action] = [_delete(pod)] if pod is not None else []
    if obs.declared_checksum is None:
        return VerificationOutcome(
            "not-declared",
            Condition("False", "NoChecksumDeclared", "No digest is declared, so nothing was verified."),
            actions=cleanup,
        )
    declared = digest_or_none(obs.declared_checksum)
    if declared is None:
        message = f"The declared digest {obs.declared_checksum!r} is not sha256:<64 hex> or sha512:<128 hex>."
        return _failed("InvalidChecksum", message, cleanup)

    held = _held_by_image_record(obs, declared, cleanup)
    if held is not None:
        return held
    return _decide_on_disk(obs, declared, cleanup)


def _held_by_image_record(
    obs: VerificationInput, declared: Digest, cleanup: list[Action]
) -> VerificationOutcome | None:
    """The referenced image record is missing, unreadable or contradicts the declaration (else None)."""
    record_problem = _check_image_record(obs, declared)
    if record_problem is None:
        return None
    state, reason, message = record_problem
    if state == "failed":
        return _failed(reason, message, cleanup)
    return VerificationOutcome("verifying", Condition("False", reason, message), actions=cleanup)


def _decide_on_disk(obs: VerificationInput, declared: Digest, cleanup: list[Action]) -> VerificationOutcome:
    """A valid declaration: wait for the disk, accept CDI's own check, or verify in the cluster."""
    dv = obs.datavolume
    rejected = _cdi_rejected_checksum(obs, dv)
    if rejected is not None:
        return _failed("ChecksumMismatch", rejected, cleanup)
    if dv is None or str((dv.get("status") or {}).get("phase") or "") != "Succeeded":
        return VerificationOutcome(
            "awaiting-disk",
            Condition(
                "False", "AwaitingDisk", "The digest is checked once the disk is populated; the VM stays off."
            ),
            actions=cleanup,
        )
    if _cdi_checked(obs, dv, declared):
        return VerificationOutcome(
            "verified",
            Condition("True", "CDIHTTPChecksum", f"CDI verified {declared} while importing."),
            verified_by=VERIFIED_BY_CDI,
            verified_digest=str(declared),
            actions=cleanup,
        )
    return _verify_in_cluster(obs, dv, declared)


def _check_image_record(obs: VerificationInput, declared: Digest) -> tuple[State, str, str] | None:
    if obs.image_record_name is None:
        return None
    if obs.image_record_missing:
        return (
            "verifying",
            "ImageRecordMissing",
            f"The image record ConfigMap {obs.image_record_name} does not exist; apply the "
            f"{obs.image_record_name} ConfigMap written by uds-vmctl prep. The VM stays off.",
        )
    if obs.image_record_problem is not None or obs.image_record is None:
        return ("failed", "ImageRecordInvalid", obs.image_record_problem or "The image record is unreadable.")
    return _record_contradiction(obs, obs.image_record, declared)


def _record_contradiction(
    obs: VerificationInput, record: ImageRecord, declared: Digest
) -> tuple[State, str, str] | None:
    """Where a readable image record disagrees with the declared digest or the declared size."""
    sealed = record.file_digest(declared.algorithm)
    if sealed is not None and declared not in (sealed, record.content_sha256):
        return (
            "failed",
            "ImageRecordMismatch",
            f"The declared digest {declared} differs from the file digest {sealed} sealed in image "
            f"record {record.name}; declare the digest prep recorded, or reference the right record.",
        )
    if sealed is None and record.content_sha256 != declared:
        # Without a sealed digest of the declared kind, nothing ties the record's content digest (which
        # the verifier would check) to the declaration: verifying it would prove nothing about the claim.
        return (
            "failed",
            "ImageRecordMismatch",
            f"Image record {record.name} holds no {declared.algorithm} digest of the image file, so it "
            f"cannot be tied to the declared {declared}; declare the sha256 prep recorded, or re-run "
            f"uds-vmctl prep{' --sha512' if declared.algorithm == 'sha512' else ''} and re-apply the record.",
        )
    if obs.virtual_size_bytes is not None and record.virtual_size_bytes not in (None, obs.virtual_size_bytes):
        return (
            "failed",
            "ImageRecordMismatch",
            f"spec.disk.virtualSize is {obs.virtual_size_bytes} bytes but image record {record.name} "
            f"records {record.virtual_size_bytes}; they must describe the same image.",
        )
    return None


def _cdi_rejected_checksum(obs: VerificationInput, dv: Mapping[str, Any] | None) -> str | None:
    """CDI's own check failed the import: its message, else None.

    CDI (v1.65) has no DataVolume reason for this: the DataVolume turns ``Failed`` and its ``Running``
    condition carries reason ``ChecksumError`` with the importer's "checksum mismatch" message (seen on the
    real node), so both are accepted.
    """
    if dv is None or obs.source_kind != "http":
        return None
    status = dv.get("status") or {}
    if str(status.get("phase") or "") != "Failed":
        return None
    for condition in status.get("conditions") or []:
        if condition.get("type") != "Running":
            continue
        message = str(condition.get("message") or "")
        if condition.get("reason") == "ChecksumError" or "checksum mismatch" in message.lower():
            return (
                f"CDI's importer rejected the download: {message or 'checksum mismatch'}. The served file "
                f"is not the image whose digest {obs.declared_checksum} was declared; nothing was verified "
                "and the VM stays off. Replace the file on the server (or correct the declared digest), "
                "then delete the DataVolume so CDI imports it again."
            )
    return None


def _cdi_checked(obs: VerificationInput, dv: Mapping[str, Any], declared: Digest) -> bool:
    """CDI's own check counts only if this CDI knows the field and the stored DataVolume really has it."""
    if not (obs.cdi_http_checksum and obs.source_kind == "http"):
        return False
    applied = (((dv.get("spec") or {}).get("source") or {}).get("http") or {}).get("checksum")
    return digest_or_none(applied) == declared


def _expected_content(obs: VerificationInput, declared: Digest) -> tuple[Digest, str]:
    """The digest of the bytes CDI wrote, and a phrase saying where it comes from."""
    record = obs.image_record
    if record is not None and record.content_sha256 is not None:
        return record.content_sha256, f"the raw-content digest in image record {record.name}"
    if obs.restored_from:
        return declared, f"the sha256 backup {obs.restored_from} recorded when it copied this disk"
    return declared, "the declared digest"


def _verify_in_cluster(
    obs: VerificationInput, dv: Mapping[str, Any], declared: Digest
) -> VerificationOutcome:
    pod = obs.verifier_pod
    expected, origin = _expected_content(obs, declared)
    size = obs.virtual_size_bytes
    if size is None and obs.image_record is not None:
        size = obs.image_record.virtual_size_bytes
    if size is None:
        return _failed(
            "VirtualSizeUnknown",
            "The disk cannot be verified without its virtual size; set spec.disk.virtualSize (uds-vmctl prep "
            "prints it) or reference the image record.",
            [_delete(pod)] if pod is not None else [],
        )
    meta = dv.get("metadata") or {}
    dv_name, dv_uid = str(meta.get("name") or ""), str(meta.get("uid") or "")
    recorded = _recorded_verdict(dv)
    if recorded is not None and recorded.expected == str(expected) and recorded.bytes == size:
        cleanup: list[Action] = [_delete(pod)] if pod is not None else []
        if recorded.result == "match":
            return _verified(declared, expected, origin, cleanup)
        return _mismatch(
            declared, expected, recorded.actual, origin, cleanup, events=[], restored_from=obs.restored_from
        )

    request = VerifierRequest(
        pvc_name=str((dv.get("status") or {}).get("claimName") or dv_name),
        volume_mode=obs.volume_mode,
        virtual_size_bytes=size,
        expected_digest=str(expected),
        disk_uid=dv_uid,
        image=obs.verifier_image or "",
        resources=obs.verifier_resources,
    )
    return _verifier_pod_step(obs, dv_name, request, declared=declared, expected=expected, origin=origin)


def _verifier_pod_step(
    obs: VerificationInput,
    dv_name: str,
    request: VerifierRequest,
    *,
    declared: Digest,
    expected: Digest,
    origin: str,
) -> VerificationOutcome:
    """No verdict recorded yet: start, restart or wait for the verifier pod, or read its verdict."""
    pod = obs.verifier_pod
    pending = Condition(
        "False", "VerifierRunning", f"The in-cluster verifier is hashing the disk against {origin}."
    )
    if pod is None:
        if not obs.verifier_image:
            return VerificationOutcome(
                "verifying",
                Condition(
                    "False",
                    "VerifierUnavailable",
                    "The operator does not know its own image, so it cannot run the verifier; set "
                    "UDS_VM_OPERATOR_IMAGE on the operator's Deployment (the Helm chart sets it). "
                    "The VM stays off.",
                ),
            )
        return VerificationOutcome(
            "verifying", pending, actions=[ApplyVerifier(render_verifier(obs.owner, request))]
        )
    if not _pod_is_about(pod, request):
        return VerificationOutcome(
            "verifying",
            Condition("False", "VerifierRestarting", "The declaration or the disk changed; verifying again."),
            actions=[_delete(pod)],
        )
    terminated = terminated_state(pod)
    if terminated is None:
        reason = (pod.get("status") or {}).get("reason")
        if (pod.get("status") or {}).get("phase") == "Failed":
            return _failed(
                "VerifierFailed",
                f"The verifier pod {verifier_pod_name(obs.owner.name)} failed ({reason or 'no reason'}) "
                "without a verdict; delete the pod to retry. The VM stays off.",
                [],
            )
        return VerificationOutcome("verifying", pending)
    result = _verdict_of(terminated, str(expected), request.virtual_size_bytes)
    record = RecordVerdict(
        dv_name, request.disk_uid or None, {VERIFICATION_ANNOTATION: _verdict_annotation(result)}
    )
    return _verdict_outcome(obs, pod, result, record, declared=declared, expected=expected, origin=origin)


def _verdict_outcome(
    obs: VerificationInput,
    pod: Mapping[str, Any],
    result: VerifyResult,
    record: RecordVerdict,
    *,
    declared: Digest,
    expected: Digest,
    origin: str,
) -> VerificationOutcome:
    """The verifier pod finished: record its verdict on the DataVolume and say what it means."""
    if result.result == "match":
        outcome = _verified(declared, expected, origin, [record, _delete(pod)])
        event = Event("Normal", "ChecksumVerified", outcome.condition.message)
        return VerificationOutcome(
            outcome.state,
            outcome.condition,
            outcome.verified_by,
            outcome.verified_digest,
            events=[event],
            actions=outcome.actions,
        )
    if result.result == "mismatch":
        mismatch = _mismatch(
            declared,
            expected,
            result.actual,
            origin,
            [record, _delete(pod)],
            events=[],
            restored_from=obs.restored_from,
        )
        assert mismatch.failure is not None
        return VerificationOutcome(
            mismatch.state,
            mismatch.condition,
            failure=mismatch.failure,
            events=[Event("Warning", "ChecksumMismatch", mismatch.failure[1])],
            actions=mismatch.actions,
        )
    message = (
        f"The verifier could not check the disk: {result.message or 'no verdict'}. Fix the cause, then "
        f"delete pod {verifier_pod_name(obs.owner.name)} to retry. The VM stays off."
    )
    return VerificationOutcome(
        "failed",
        Condition("False", "VerificationError", message),
        failure=("VerificationError", message),
        events=[Event("Warning", "VerificationError", message)],
    )


def _verified(
    declared: Digest, expected: Digest, origin: str, actions: Sequence[Action]
) -> VerificationOutcome:
    detail = "" if expected == declared else f" (its raw content {expected}, from {origin})"
    return VerificationOutcome(
        "verified",
        Condition(
            "True", "InClusterVerifier", f"The in-cluster verifier confirmed {declared}{detail} on the disk."
        ),
        verified_by=VERIFIED_BY_VERIFIER,
        verified_digest=str(declared),
        actions=list(actions),
    )


def _mismatch(
    declared: Digest,
    expected: Digest,
    actual: str | None,
    origin: str,
    actions: Sequence[Action],
    *,
    events: list[Event],
    restored_from: str | None = None,
) -> VerificationOutcome:
    message = (
        f"Checksum mismatch: expected {expected} ({origin}), the disk has {actual}. The VM stays off and the "
        "disk is kept as evidence; replace the image, or correct the declared digest"
        + ("" if expected == declared else f" (declared {declared})")
        + "."
    )
    if restored_from and expected == declared:  # the record is the declared digest of a restore
        message = (
            f"Restore refused: {origin} is {expected}, but the restored disk has {actual}; the stored "
            "backup was altered or damaged after it was recorded. The VM stays off and the disk is kept as "
            "evidence; restore from another backup."
        )
    elif expected == declared:
        # The verifier hashes what CDI wrote (raw content): a declared *file* digest only equals it for raw
        # images whose size is a whole number of 512-byte sectors.
        message += (
            " If the image is qcow2, compressed or raw with a size that is not a multiple of 512 bytes, "
            "reference the image record uds-vmctl prep wrote (spec.imageRecord): it seals the content digest."
        )
    return VerificationOutcome(
        "failed",
        Condition("False", "ChecksumMismatch", message),
        failure=("ChecksumMismatch", message),
        events=events,
        actions=list(actions),
    )


def _failed(reason: str, message: str, actions: list[Action]) -> VerificationOutcome:
    return VerificationOutcome(
        "failed", Condition("False", reason, message), failure=(reason, message), actions=actions
    )


def _delete(pod: Mapping[str, Any]) -> DeleteVerifierPod:
    meta = pod.get("metadata") or {}
    return DeleteVerifierPod(str(meta.get("name") or ""), meta.get("uid"))


def _pod_is_about(pod: Mapping[str, Any], request: VerifierRequest) -> bool:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return (
        annotations.get(DISK_UID_ANNOTATION) == request.disk_uid
        and annotations.get(EXPECTED_DIGEST_ANNOTATION) == request.expected_digest
        and annotations.get(VIRTUAL_SIZE_ANNOTATION) == str(request.virtual_size_bytes)
    )


def _verdict_of(terminated: Mapping[str, Any], expected: str, size: int) -> VerifyResult:
    """Trust the termination message only if it is ours, about this digest and size, and agrees with the
    exit code; anything else is an error, never a match."""
    text = terminated.get("message")
    exit_code = terminated.get("exitCode")
    if not isinstance(text, str) or not text.strip():
        return VerifyResult(
            "error", expected, None, 0, f"no verdict in the termination message (exit {exit_code})"
        )
    try:
        result = parse_result(text)
    except ValueError as exc:
        return VerifyResult("error", expected, None, 0, str(exc))
    if result.expected != expected:
        return VerifyResult(
            "error", expected, None, 0, f"the verdict is about {result.expected}, not {expected}"
        )
    if result.result != "error" and result.bytes != size:
        return VerifyResult(
            "error", expected, None, 0, f"the verifier hashed {result.bytes} bytes, not {size}"
        )
    if exit_code != result.exit_code:
        return VerifyResult(
            "error", expected, None, 0, f"exit code {exit_code} contradicts the verdict {result.result}"
        )
    return result


def _recorded_verdict(dv: Mapping[str, Any]) -> VerifyResult | None:
    text = ((dv.get("metadata") or {}).get("annotations") or {}).get(VERIFICATION_ANNOTATION)
    if not isinstance(text, str):
        return None
    try:
        result = parse_result(text)
    except ValueError:
        return None
    return result if result.result in ("match", "mismatch") else None


def _verdict_annotation(result: VerifyResult) -> str:
    return VerifyResult(result.result, result.expected, result.actual, result.bytes).to_json()
