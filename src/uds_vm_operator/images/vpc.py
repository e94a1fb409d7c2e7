"""VHD (qemu calls it ``vpc``): fixed, dynamic and differencing disks.

The virtual size follows qemu's block/vpc.c exactly: Virtual PC and old qemu derive the visible size from the
CHS geometry, while Hyper-V, Disk2vhd, XenServer, XenConverter and qemu with ``force_size`` ("qem2") use the
footer's ``current_size``; the maximum geometry always means ``current_size``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from uds_vm_operator.images._source import ByteSource, unpack_at
from uds_vm_operator.images.errors import CorruptImageError, one_line
from uds_vm_operator.images.model import VPC, BackingRef, ImageInfo

COOKIE = b"conectix"
DYN_COOKIE = b"cxsparse"
FOOTER_SIZE = 512
TYPE_FIXED = 2
TYPE_DYNAMIC = 3
TYPE_DIFFERENCING = 4
SUBFORMATS = {TYPE_FIXED: "fixed", TYPE_DYNAMIC: "dynamic", TYPE_DIFFERENCING: "differencing"}
CURRENT_SIZE_CREATORS = (b"win ", b"qem2", b"d2v ", b"CTXS", b"tap\x00")
MAX_GEOMETRY = 65535 * 16 * 255
MAX_SECTORS = 0xFF000000  # qemu: 2040 GiB
LOCATOR_PLATFORMS = {
    b"W2ru": "relative path",
    b"W2ku": "absolute path",
    b"Mac ": "mac alias",
    b"MacX": "mac url",
}


@dataclass(frozen=True)
class VpcLayout:
    """Where a fixed VHD keeps its data (the footer trails the raw bytes)."""

    fixed: bool
    footer_offset: int


def probe(source: ByteSource) -> bool:
    """True for a VHD: the footer copy at 0 (dynamic/differencing) or the footer at the end (fixed)."""
    if source.size < FOOTER_SIZE:
        return False
    if source.read_at(0, 8) == COOKIE:
        return True
    return source.read_at(source.size - FOOTER_SIZE, 8) == COOKIE


def inspect(source: ByteSource) -> ImageInfo:
    """Read the footer (and dynamic header), compute qemu's virtual size, find parent references."""
    name = source.name
    footer_offset = 0 if source.read_at(0, 8) == COOKIE else source.size - FOOTER_SIZE
    footer = source.read_at(footer_offset, FOOTER_SIZE)
    data_offset, creator_app, current_size, cyls, heads, secs, disk_type = _footer_fields(footer)
    total_sectors = cyls * heads * secs
    use_chs = creator_app not in CURRENT_SIZE_CREATORS
    if not use_chs or total_sectors == MAX_GEOMETRY:
        total_sectors = current_size // 512
    if total_sectors > MAX_SECTORS:
        raise CorruptImageError(
            f"{name}: VHD of {total_sectors} sectors exceeds the 2040 GiB VHD limit; corrupt header"
        )
    virtual_size = total_sectors * 512
    # qemu decides fixed vs dynamic by where the footer is; the type field tells us about differencing.
    fixed = footer_offset != 0
    refs: list[BackingRef] = []
    details: dict[str, str | int | bool] = {
        "subformat": "fixed" if fixed else SUBFORMATS.get(disk_type, f"type {disk_type}"),
        "creator_app": one_line(creator_app.decode("latin-1")),
    }
    if not fixed:
        block_size, max_entries, table_offset, parent_name, locators = _dynamic_header(source, data_offset)
        if block_size < 512 or block_size & (block_size - 1):
            raise CorruptImageError(
                f"{name}: VHD block size {block_size} is not a power of two; corrupt header"
            )
        if max_entries * block_size < virtual_size:
            raise CorruptImageError(f"{name}: VHD block table is too small for the disk size; corrupt header")
        if table_offset + 4 * max_entries > source.size:
            raise CorruptImageError(
                f"{name}: VHD block table lies beyond the end of the file; the image is truncated"
            )
        details["block_size"] = block_size
        if disk_type == TYPE_DIFFERENCING or parent_name or locators:
            refs.append(BackingRef("parent disk", parent_name or "(unnamed parent)"))
            refs.extend(BackingRef(f"parent locator ({kind})", where) for kind, where in locators)
    elif disk_type == TYPE_DIFFERENCING:
        raise CorruptImageError(
            f"{name}: VHD footer says differencing but no dynamic header copy exists; corrupt"
        )
    return ImageInfo(
        format=VPC,
        virtual_size=virtual_size,
        details=details,
        backing_refs=refs,
        layout=VpcLayout(fixed=fixed, footer_offset=footer_offset),
    )


def _footer_fields(footer: bytes) -> tuple[int, bytes, int, int, int, int, int]:
    data_offset = struct.unpack_from(">Q", footer, 16)[0]
    creator_app = footer[28:32]
    current_size = struct.unpack_from(">Q", footer, 48)[0]
    cyls, heads, secs, disk_type = struct.unpack_from(">HBBI", footer, 56)
    return data_offset, creator_app, current_size, cyls, heads, secs, disk_type


def _dynamic_header(source: ByteSource, offset: int) -> tuple[int, int, int, str, list[tuple[str, str]]]:
    name = source.name
    header = source.read_at(offset, 1024)
    if header[:8] != DYN_COOKIE:
        raise CorruptImageError(f"{name}: VHD dynamic header cookie is missing; the image is corrupt")
    table_offset, _version, max_entries, block_size = unpack_at(source, offset + 16, ">QIII")
    parent_name = header[64:576].decode("utf-16-be", "replace").split("\x00", 1)[0]
    locators: list[tuple[str, str]] = []
    for index in range(8):
        base = 576 + 24 * index
        code = header[base : base + 4]
        if code == b"\x00\x00\x00\x00":
            continue
        _space, length, _reserved, loc_offset = struct.unpack_from(">IIIQ", header, base + 4)
        kind = LOCATOR_PLATFORMS.get(code, "locator")
        where = "(unreadable)"
        if 0 < length <= 4096 and loc_offset + length <= source.size:
            raw = source.read_at(loc_offset, length)
            where = raw.decode("utf-16-le" if code in (b"W2ru", b"W2ku") else "utf-8", "replace").rstrip(
                "\x00"
            )
        locators.append((kind, where))
    return block_size, max_entries, table_offset, parent_name, locators
