"""ISO 9660 (and UDF-bridged, e.g. Windows installation media): detection and volume label.

qemu treats an ISO as raw bytes, so the virtual size is the file size; the label helps the engineer see at a
glance which installation medium this is.
"""

from __future__ import annotations

from uds_vm_operator.images._source import ByteSource
from uds_vm_operator.images.errors import one_line
from uds_vm_operator.images.model import ISO, ImageInfo

SECTOR = 2048
FIRST_DESCRIPTOR = 16
MAX_DESCRIPTORS = 32
ISO_ID = b"CD001"
UDF_IDS = (b"BEA01", b"NSR02", b"NSR03", b"TEA01")
PRIMARY = 1
TERMINATOR = 255


def probe(source: ByteSource) -> bool:
    """True if an ISO 9660 or UDF volume recognition sequence starts at sector 16."""
    offset = FIRST_DESCRIPTOR * SECTOR
    if source.size < offset + SECTOR:
        return False
    ident = source.read_at(offset + 1, 5)
    return ident == ISO_ID or ident in UDF_IDS


def inspect(source: ByteSource, virtual_size: int) -> ImageInfo:
    """Read the primary volume descriptor's label; the disk content is the file itself."""
    label: str | None = None
    udf = False
    for index in range(MAX_DESCRIPTORS):
        offset = (FIRST_DESCRIPTOR + index) * SECTOR
        if offset + SECTOR > source.size:
            break
        descriptor = source.read_at(offset, SECTOR)
        ident = descriptor[1:6]
        if ident in UDF_IDS:
            udf = True
            continue
        if ident != ISO_ID:
            break
        if descriptor[0] == PRIMARY and label is None:
            label = one_line(descriptor[40:72].decode("ascii", "replace").strip(" \x00")) or None
        if descriptor[0] == TERMINATOR and not udf:
            # UDF's recognition sequence follows the ISO terminator on bridged media; keep looking.
            continue
    details: dict[str, str | int | bool] = {"udf": udf}
    return ImageInfo(format=ISO, virtual_size=virtual_size, details=details, iso_volume_label=label)
