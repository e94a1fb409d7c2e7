"""Which NIST SP 800-53 Rev 5 controls the operator implements, how, and which validation proves each.

Control ids are OSCAL's lower-case form (``sc-7``). Every control maps to exactly one validation, so
tampering with one piece of evidence flips exactly one control.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ControlImplementation:
    """How one control is implemented, and the validation whose result decides it."""

    control_id: str
    title: str
    description: str
    validation: str


CATALOG_SOURCE = (
    "https://raw.githubusercontent.com/usnistgov/oscal-content/main/nist.gov/SP800-53/rev5/json/"
    "NIST_SP-800-53_rev5_catalog.json"
)

CONTROLS: tuple[ControlImplementation, ...] = (
    ControlImplementation(
        "ac-3",
        "Access Enforcement",
        "Guest access is enforced by the operator's cloud-init: disable_root: true and no root user; Windows "
        "guests receive the operator-generated unattend (sysprep) Secret that sets the local accounts. With "
        "spec.monitoring, the running guest is checked too: root login allowed, root's password unlocked, or "
        "root or an undeclared user logged in (the guest agent's user list) is drift and fails the control.",
        "vm-access-enforcement",
    ),
    ControlImplementation(
        "ac-6",
        "Least Privilege",
        "The operator runs with enumerated RBAC (no wildcard groups, resources or verbs; no escalate, bind "
        "or "
        "impersonate), as a non-root, read-only, capability-free container.",
        "operator-least-privilege",
    ),
    ControlImplementation(
        "cm-6",
        "Configuration Settings",
        "Each KubeVirt VirtualMachine follows the hardened baseline: UEFI secure boot with SMM, no "
        "auto-attached graphics device, no host-device or GPU passthrough.",
        "vm-configuration-baseline",
    ),
    ControlImplementation(
        "cp-9",
        "System Backup",
        "VM data lives on Retain data disks (<vm>-data-<disk>, label uds.dev/retain=true, no ownerReference) "
        "that survive deletion of the VM and are re-attached when it is recreated. Each VM declares "
        "spec.backup: the operator copies its disks to the site's S3 target and records each disk's sha256 "
        "in a UDSVirtualMachineBackup (label uds.dev/vm). A VM with a schedule needs a Succeeded backup with "
        "its root-disk record completed within twice the schedule's period; an on-demand VM (no schedule) "
        "needs one Succeeded backup. A VM without spec.backup fails the control.",
        "vm-backups",
    ),
    ControlImplementation(
        "cp-10",
        "System Recovery and Reconstitution",
        "A VM restored from a backup (annotation uds.dev/restored-from) declares the backup's root-disk "
        "sha256 as spec.source.s3.checksum and stays off until SI-7 verified the restored bytes against that "
        "record. A restored VM satisfies the control once its backup Succeeded and the verification passed "
        "with that digest; a VM declaring spec.backup satisfies it once a VM of its namespace is such a "
        "verified restore of one of its backups. A VM with neither fails it.",
        "vm-verified-restore",
    ),
    ControlImplementation(
        "ia-5",
        "Authenticator Management",
        "Key-only authentication: cloud-init sets ssh_pwauth: false and locks every user's password; Windows "
        "Administrator passwords are generated at random into a Secret, never written in the spec. With "
        "spec.monitoring, a running guest whose sshd accepts passwords (sshd -T, reported from inside the "
        "guest) fails the control until the change is undone.",
        "vm-authenticators",
    ),
    ControlImplementation(
        "sc-7",
        "Boundary Protection",
        "Each VM gets a NetworkPolicy <vm>-netpol: all ingress denied unless declared, egress only to "
        "cluster "
        "DNS unless an egress class (none, internet, vpn with kill switch) or allow rule says otherwise.",
        "vm-network-isolation",
    ),
    ControlImplementation(
        "sc-13",
        "Cryptographic Protection",
        "Guests run FIPS 140 validated cryptography: cloud-init enables Ubuntu Pro fips-updates or RHEL "
        "fips-mode-setup (spec.cloudInit.fips, default true). With spec.monitoring, a running guest whose "
        "kernel is not in FIPS mode fails it.",
        "vm-fips-cryptography",
    ),
    ControlImplementation(
        "si-2",
        "Flaw Remediation",
        "Guests install and schedule their own security updates (unattended-upgrades or dnf-automatic) from "
        "local mirrors. With spec.monitoring, an update timer found inactive in the running guest fails it.",
        "vm-guest-updates",
    ),
    ControlImplementation(
        "si-7",
        "Software, Firmware, and Information Integrity",
        "Every root disk carries a sha256/sha512 digest that is verified (CDI's own check or the operator's "
        "in-cluster verifier on the imported bytes) before the VM may start.",
        "vm-disk-integrity",
    ),
)
