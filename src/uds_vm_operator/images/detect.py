"""Recognise a disk image format from its magic bytes and hand it to the right parser.

The order matters: formats with a magic at offset 0 first, then VHD (whose fixed variant keeps its only
footer at the end), then ISO (sector 16), then raw, which is what qemu also assumes for anything unknown.
"""

from __future__ import annotations

from uds_vm_operator.images import iso, qcow2, vhdx, vmdk, vpc
from uds_vm_operator.images._source import ByteSource
from uds_vm_operator.images.errors import UnsupportedImageError
from uds_vm_operator.images.model import RAW, ImageInfo

# Formats qemu knows that CDI cannot import and we do not parse: refuse them by name, never call them raw.
_UNSUPPORTED_MAGICS: tuple[tuple[int, bytes, str], ...] = (
    (0, b"QED\x00", "QED"),
    (0, b"LUKS\xba\xbe", "LUKS-encrypted"),
    (0, b"WithoutFreeSpace", "Parallels"),
    (0, b"WithouFreSpacExt", "Parallels"),
    (64, b"\x7f\x10\xda\xbe", "VDI (VirtualBox)"),
)


def raw_virtual_size(file_size: int) -> int:
    """qemu rounds a raw file's size up to whole 512-byte sectors (and reads zeros past the end)."""
    return -(-file_size // 512) * 512


def inspect_source(source: ByteSource) -> ImageInfo:
    """Detect the format of ``source`` and parse its headers."""
    if qcow2.probe(source):
        return qcow2.inspect(source)
    if vhdx.probe(source):
        return vhdx.inspect(source)
    if vmdk.probe(source):
        return vmdk.inspect(source)
    if vpc.probe(source):
        return vpc.inspect(source)
    for offset, magic, label in _UNSUPPORTED_MAGICS:
        if source.size >= offset + len(magic) and source.read_at(offset, len(magic)) == magic:
            raise UnsupportedImageError(
                f"{source.name}: {label} images are not supported; convert it with "
                "'qemu-img convert -O qcow2 IN OUT' first"
            )
    virtual_size = raw_virtual_size(source.size)
    if iso.probe(source):
        return iso.inspect(source, virtual_size)
    return ImageInfo(format=RAW, virtual_size=virtual_size, details={})
