"""What inspection learns about an image: plain data, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field

from uds_vm_operator.images.errors import AirGapViolation, one_line

# Formats use qemu-img's names so a field engineer can compare our report with `qemu-img info`.
RAW = "raw"
QCOW2 = "qcow2"
VMDK = "vmdk"
VHDX = "vhdx"
VPC = "vpc"
ISO = "iso"

# No real disk is this big (64 PiB); a larger size read from a header is corruption or an attack.
MAX_VIRTUAL_SIZE = 1 << 56


@dataclass(frozen=True)
class BackingRef:
    """One file outside the image that the image depends on."""

    kind: str  # "backing file", "external data file", "extent file", "parent disk"
    reference: str

    def describe(self) -> str:
        """One line naming the reference, safe to print."""
        return f"{self.kind} {one_line(self.reference)!r}"


@dataclass
class ImageInfo:
    """Facts read from the headers of one disk image."""

    format: str
    virtual_size: int
    details: dict[str, str | int | bool] = field(default_factory=dict)
    backing_refs: list[BackingRef] = field(default_factory=list)
    iso_volume_label: str | None = None
    # Outermost first, e.g. ["gzip", "tar"]; empty for a bare image.
    wrappers: list[str] = field(default_factory=list)
    # Name of the disk member inside a tar/ova wrapper.
    member_name: str | None = None
    # Format-specific parsed header the content digest needs (e.g. ``Qcow2Header``); not part of the report.
    layout: object | None = None

    @property
    def airgap_verified(self) -> bool:
        """True when the image references no external file."""
        return not self.backing_refs

    def ensure_airgap_safe(self) -> None:
        """Raise ``AirGapViolation`` naming every external reference, if there is any."""
        if self.backing_refs:
            refs = "; ".join(ref.describe() for ref in self.backing_refs)
            raise AirGapViolation(
                f"air-gap violation: this {self.format} image depends on {refs}, which will not exist on the "
                "other side; flatten it into a single file first (e.g. qemu-img convert -O qcow2 IN OUT)",
                [ref.reference for ref in self.backing_refs],
            )
