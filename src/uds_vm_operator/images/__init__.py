"""Disk-image inspection for ``uds-vmctl prep``.

Pure Python at run time (no qemu-img): detect the format (raw, qcow2, vmdk, vhdx, vpc, iso; inside gzip,
xz, zstd, tar or OVA), read the virtual size exactly as ``qemu-img info`` reports it, name every external
file the image depends on, and stream SHA-256 digests of the file and of the virtual disk's content.
The in-cluster verifier (``verify/``) imports nothing from here: it hashes the disk with its own reader.
"""

from uds_vm_operator.images.errors import (
    AirGapViolation,
    CorruptImageError,
    ImageError,
    TruncatedImageError,
    UnsupportedImageError,
)
from uds_vm_operator.images.model import BackingRef, ImageInfo
from uds_vm_operator.images.survey import (
    ImageSurvey,
    NotAFileError,
    ProgressSink,
    content_sha256,
    inspect_image,
    survey_image,
)

__all__ = [
    "AirGapViolation",
    "BackingRef",
    "CorruptImageError",
    "ImageError",
    "ImageInfo",
    "ImageSurvey",
    "NotAFileError",
    "ProgressSink",
    "TruncatedImageError",
    "UnsupportedImageError",
    "content_sha256",
    "inspect_image",
    "survey_image",
]
