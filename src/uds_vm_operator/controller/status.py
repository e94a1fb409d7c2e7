"""Status of a UDSVirtualMachine, derived only from what was observed (SPEC §3).

Pure: the reconciler gathers an :class:`Observation` (the spec's essentials, the cluster facts and the
children as the API server returned them) and :func:`derive_status` turns it into the status object. Time
enters as an argument so the same observation always yields the same status, which is what lets the
reconciler skip the status write when nothing changed.

The rule that shapes everything here: never claim what was not verified. ``checksumVerified`` becomes
true only when CDI's own HTTP checksum check passed on a DataVolume that really carries the declared
digest, on a CDI whose CRD has that field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from uds_vm_operator import RECONCILER_NAME
from uds_vm_operator.controller.verification import VerificationOutcome
from uds_vm_operator.runtime.conditions import Condition, by_type, stamp
from uds_vm_operator.runtime.errors import TerminalError

CONDITION_TYPES = ("Ready", "DiskReady", "ChecksumVerified", "NetworkIsolated", "Hardened")

UPLOAD_WAIT_PHASES = frozenset({"UploadScheduled", "UploadReady"})
IMPORT_PHASES = frozenset(
    {
        "ImportScheduled",
        "ImportInProgress",
        "CloneScheduled",
        "CloneInProgress",
        "SnapshotForSmartCloneInProgress",
        "CloneFromSnapshotSourceInProgress",
        "SmartClonePVCInProgress",
        "CSICloneInProgress",
        "ExpansionInProgress",
        "NamespaceTransferInProgress",
        "PrepClaimInProgress",
        "RebindInProgress",
    }
)
VERIFIED_BY_CDI = "cdi-http-checksum"
STOPPABLE_RUN_STRATEGIES = frozenset({"Halted", "Manual"})
REPLACING_REASON = "DataVolumeReplacing"


@dataclass(frozen=True)
class Refusal:
    """A spec the operator will not act on (invalid, or impossible on this storage)."""

    reason: str
    message: str


class SpecRefusedError(TerminalError):
    """A reconcile step found a spec the operator will not act on; the refusal becomes the published status
    (the controller catches it: retrying cannot help until the spec, or the world it names, changes)."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


@dataclass(frozen=True)
class Observation:
    """Everything status derivation needs, gathered by the reconciler in one pass."""

    generation: int
    source_kind: str | None = None
    declared_checksum: str | None = None
    run_strategy: str = "Always"
    cdi_http_checksum: bool = False
    pvc_size: str | None = None
    datavolume: Mapping[str, Any] | None = None
    virtual_machine: Mapping[str, Any] | None = None
    network_isolated: bool = False
    network_selects_no_pod: bool = False
    """The policy is in place as rendered but its live podSelector selects none of the VM's pods."""
    zero_trust: bool = False
    hardening_secret: str | None = None
    """Kind of hardening Secret rendered ("cloud-init" / "sysprep"), None when none is rendered."""
    hardening_in_place: bool = False
    refusal: Refusal | None = None
    disk_blocker: Refusal | None = None
    """A DataVolume that cannot be brought to the desired state (immutable spec drift)."""
    backup_exemptions: tuple[tuple[str, str], ...] = ()
    """(disk, reason) of data disks deliberately left out of backups (CP-9 evidence)."""
    verification: VerificationOutcome | None = None
    """The SI-7 decision (controller.verification); when set it alone says what was verified."""
    extra_conditions: tuple[tuple[str, Condition], ...] = ()
    """Platform conditions (controller.platform: KVMAvailable, ImportSourceAllowed, ...) appended as given."""
    ready_blocker: tuple[str, str] | None = None
    """(reason, message) from the platform that keeps Ready False (NoKVM, a blocked import source)."""


def checksum_verified_by_cdi(obs: Observation) -> bool:
    """True only when CDI itself checked the declared digest and the import succeeded."""
    dv = obs.datavolume
    if not (obs.cdi_http_checksum and obs.source_kind == "http" and obs.declared_checksum and dv):
        return False
    if _dv_phase(dv) != "Succeeded":
        return False
    applied = (((dv.get("spec") or {}).get("source") or {}).get("http") or {}).get("checksum")
    return bool(applied == obs.declared_checksum)


def must_hold_vm(obs: Observation) -> bool:
    """Verified before activation: a declared digest keeps the VM halted until the check passed."""
    if obs.verification is not None:
        return obs.verification.hold_vm
    return obs.declared_checksum is not None and not checksum_verified_by_cdi(obs)


def derive_status(obs: Observation, previous: Mapping[str, Any] | None, now: str) -> dict[str, Any]:
    """Return the full status object for ``obs``; ``previous`` only supplies transition times."""
    previous_conditions = by_type((previous or {}).get("conditions"))
    if obs.refusal is not None:
        phase, message, conditions = _refused(obs.refusal)
        verified = False
    else:
        phase, message, conditions = _lifecycle(obs)
        verified = checksum_verified_by_cdi(obs)
    verified_by = VERIFIED_BY_CDI if verified else None
    verified_digest = obs.declared_checksum if verified else None
    if obs.verification is not None and obs.refusal is None:
        verified = obs.verification.verified
        verified_by, verified_digest = obs.verification.verified_by, obs.verification.verified_digest
    status: dict[str, Any] = {
        "phase": phase,
        "source": obs.source_kind,
        "pvcSize": obs.pvc_size,
        "checksumVerified": verified,
        "verifiedBy": verified_by if verified else None,
        "verifiedDigest": verified_digest if verified else None,
        "zeroTrust": obs.zero_trust and obs.refusal is None and not obs.network_selects_no_pod,
        "reconciledBy": RECONCILER_NAME,
        "importProgress": _import_progress(obs.datavolume) if obs.refusal is None else None,
        "observedGeneration": obs.generation,
        "message": message,
        "backupExemptions": [{"disk": d, "reason": r} for d, r in obs.backup_exemptions] or None,
        "conditions": [
            stamp(cond_type, cond, previous_conditions.get(cond_type), now=now, generation=obs.generation)
            for cond_type, cond in conditions
        ],
    }
    return status


def _refused(refusal: Refusal) -> tuple[str, str, list[tuple[str, Condition]]]:
    unknown = Condition("Unknown", refusal.reason, "Not evaluated: the spec is refused.")
    conditions: list[tuple[str, Condition]] = [("Ready", Condition("False", refusal.reason, refusal.message))]
    conditions += [(cond_type, unknown) for cond_type in CONDITION_TYPES[1:]]
    return "Failed", refusal.message, conditions


def _lifecycle(obs: Observation) -> tuple[str, str, list[tuple[str, Condition]]]:
    disk_phase, disk_cond = _disk(obs)
    checksum_cond = _checksum(obs, disk_ready=disk_cond.is_true)
    phase = disk_phase
    if disk_phase == "DiskReady":
        phase = "Verifying" if must_hold_vm(obs) else _workload_phase(obs)
    ready_cond = _ready(obs, phase, disk_cond, checksum_cond)
    failure = obs.verification.failure if obs.verification is not None else None
    # A checksum CDI rejected also fails the DataVolume: say which digest failed, not only that CDI did.
    if failure is not None and (disk_phase != "Failed" or failure[0] == "ChecksumMismatch"):
        phase, ready_cond = "Failed", Condition("False", *failure)
    if obs.ready_blocker is not None and not ready_cond.is_true and phase != "Failed":
        ready_cond = Condition("False", *obs.ready_blocker)
    conditions: list[tuple[str, Condition]] = [
        ("Ready", ready_cond),
        ("DiskReady", disk_cond),
        ("ChecksumVerified", checksum_cond),
        ("NetworkIsolated", _network(obs)),
        ("Hardened", _hardened(obs)),
        *obs.extra_conditions,
    ]
    return phase, ready_cond.message, conditions


def _disk(obs: Observation) -> tuple[str, Condition]:
    """Map the DataVolume phase to our phase (``DiskReady`` when the disk is usable)."""
    if obs.disk_blocker is not None:
        phase = "Pending" if obs.disk_blocker.reason == REPLACING_REASON else "Failed"
        return phase, Condition("False", obs.disk_blocker.reason, obs.disk_blocker.message)
    dv = obs.datavolume
    if dv is None:
        return "Pending", Condition("False", "DataVolumeMissing", "The DataVolume has not been created yet.")
    return _disk_from_datavolume(dv)


def _disk_from_datavolume(dv: Mapping[str, Any]) -> tuple[str, Condition]:
    """Our phase and ``DiskReady`` from the phase CDI reports on an existing DataVolume."""
    dv_phase = _dv_phase(dv)
    name = (dv.get("metadata") or {}).get("name", "the DataVolume")
    if dv_phase == "Succeeded":
        return "DiskReady", Condition("True", "DataVolumeSucceeded", f"DataVolume {name} holds the disk.")
    if dv_phase == "Failed":
        return "Failed", Condition(
            "False", "DataVolumeFailed", f"CDI failed to populate {name}: {_dv_message(dv)}"
        )
    if dv_phase in UPLOAD_WAIT_PHASES:
        return "WaitingForUpload", Condition(
            "False",
            "WaitingForUpload",
            f"DataVolume {name} waits for the image: run `uds-vmctl upload` (or virtctl image-upload).",
        )
    if dv_phase in IMPORT_PHASES:
        progress = _import_progress(dv) or "unknown progress"
        return "Importing", Condition("False", dv_phase, f"CDI is populating {name} ({progress}).")
    reason = dv_phase or "DataVolumePending"
    return "Pending", Condition("False", reason, f"DataVolume {name} is {dv_phase or 'pending'}.")


def _checksum(obs: Observation, *, disk_ready: bool) -> Condition:
    if obs.verification is not None:
        return obs.verification.condition
    if obs.declared_checksum is None:
        return Condition("False", "NoChecksumDeclared", "No digest is declared, so nothing was verified.")
    if checksum_verified_by_cdi(obs):
        return Condition("True", "CDIHTTPChecksum", f"CDI verified {obs.declared_checksum} while importing.")
    if not disk_ready:
        return Condition(
            "False",
            "AwaitingDisk",
            "The digest is checked once the disk is populated; the VM stays off.",
        )
    return Condition(
        "False",
        "VerifierPending",
        "The disk digest has not been verified yet; the VM stays halted until it is.",
    )


def _workload_phase(obs: Observation) -> str:
    vm = obs.virtual_machine
    if vm is None:
        return "Provisioning"
    vm_status = vm.get("status") or {}
    printable = vm_status.get("printableStatus")
    stoppable = obs.run_strategy in STOPPABLE_RUN_STRATEGIES
    if stoppable and printable in (None, "", "Stopped") and not vm_status.get("ready"):
        return "Stopped"
    if vm_status.get("ready") is True:  # KubeVirt's VMI Ready: the guest agent answers (guestAgent readiness)
        return "Ready"
    return "Provisioning"


def _ready(obs: Observation, phase: str, disk: Condition, checksum: Condition) -> Condition:
    if phase == "Ready":
        return Condition("True", "VirtualMachineRunning", "The VM is running and KubeVirt reports it Ready.")
    if phase == "Stopped":
        return Condition("False", "Stopped", f"The VM is stopped (runStrategy {obs.run_strategy}).")
    if phase == "Verifying":
        return Condition("False", checksum.reason, checksum.message)
    if phase == "Provisioning":
        printable = ((obs.virtual_machine or {}).get("status") or {}).get("printableStatus")
        detail = f"KubeVirt reports {printable}." if printable else "KubeVirt has not reported yet."
        return Condition(
            "False", printable or "Provisioning", f"Waiting for the VM to become ready. {detail}"
        )
    return Condition("False", disk.reason, disk.message)


def _network(obs: Observation) -> Condition:
    if obs.network_selects_no_pod:
        return Condition(
            "False",
            "NetworkPolicySelectsNoPod",
            "The VM's NetworkPolicy does not select the VM's virt-launcher pod, so it isolates nothing.",
        )
    if obs.network_isolated:
        return Condition(
            "True", "NetworkPolicyApplied", "Ingress is denied unless allowed; egress is restricted."
        )
    return Condition("False", "NetworkPolicyMissing", "The VM's NetworkPolicy is not in place as rendered.")


def _hardened(obs: Observation) -> Condition:
    if obs.hardening_secret is None:
        return Condition(
            "False", "NoHardeningSecret", "No cloud-init or sysprep hardening is rendered for this VM."
        )
    if obs.hardening_in_place:
        reason = "CloudInitHardened" if obs.hardening_secret == "cloud-init" else "SysprepHardened"
        return Condition("True", reason, f"The {obs.hardening_secret} hardening Secret is in place.")
    return Condition(
        "False",
        "HardeningSecretMissing",
        f"The {obs.hardening_secret} Secret is not in place as rendered.",
    )


def _dv_phase(dv: Mapping[str, Any]) -> str:
    return str((dv.get("status") or {}).get("phase") or "")


def _dv_message(dv: Mapping[str, Any]) -> str:
    """CDI's own words: the ``Running`` condition says why an import failed (real CDI lists ``Bound``,
    whose message is only "PVC ... Bound", first), then ``Ready``, then any other."""
    conditions = (dv.get("status") or {}).get("conditions") or []
    order = {"Running": 0, "Ready": 1}
    for condition in sorted(conditions, key=lambda c: order.get(str(c.get("type")), 2)):
        if condition.get("message"):
            return str(condition["message"])
    return "no message from CDI; see `kubectl describe dv`."


def _import_progress(dv: Mapping[str, Any] | None) -> str | None:
    if dv is None:
        return None
    progress = (dv.get("status") or {}).get("progress")
    if not progress or progress == "N/A":
        return None
    return str(progress)
