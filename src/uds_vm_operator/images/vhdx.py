"""VHDX: headers, region table, metadata (virtual size, parent locator) per [MS-VHDX].

A differencing VHDX (``HasParent`` flag) names its parent in the parent locator's key/value pairs; we report
every path it lists, since any of them would be needed on the other side of the air gap.
"""

from __future__ import annotations

import struct
import uuid

from uds_vm_operator.images._source import ByteSource, unpack_at
from uds_vm_operator.images.errors import CorruptImageError
from uds_vm_operator.images.model import MAX_VIRTUAL_SIZE, VHDX, BackingRef, ImageInfo

SIGNATURE = b"vhdxfile"
HEADER_OFFSETS = (64 * 1024, 128 * 1024)
REGION_TABLE_OFFSETS = (192 * 1024, 256 * 1024)
MAX_ENTRIES = 2047
METADATA_REGION = uuid.UUID("8B7CA206-4790-4B9A-B8FE-575F050F886E")
BAT_REGION = uuid.UUID("2DC27766-F623-4200-9D64-115E9BFD4A08")
FILE_PARAMETERS = uuid.UUID("CAA16737-FA36-4D43-B3B6-33F0AA44E76B")
VIRTUAL_DISK_SIZE = uuid.UUID("2FA54224-CD1B-4876-B211-5DBED83BF4B8")
LOGICAL_SECTOR_SIZE = uuid.UUID("8141BF1D-A96F-4709-BA47-F233A8FAAB5F")
PARENT_LOCATOR = uuid.UUID("A8D35F2D-B30B-454D-ABF7-D3D84834AB0C")
HAS_PARENT = 0x2
LEAVE_BLOCKS_ALLOCATED = 0x1
PATH_KEYS = ("relative_path", "volume_path", "absolute_win32_path")


def probe(source: ByteSource) -> bool:
    """True if the file type identifier is present."""
    return source.size >= 8 and source.read_at(0, 8) == SIGNATURE


def inspect(source: ByteSource) -> ImageInfo:
    """Find the metadata region, read virtual size and file parameters, and any parent locator."""
    name = source.name
    _check_headers(source)
    regions = _region_table(source)
    if METADATA_REGION not in regions or BAT_REGION not in regions:
        raise CorruptImageError(
            f"{name}: VHDX region table lacks the metadata or BAT region; the image is corrupt"
        )
    meta_offset, meta_length = regions[METADATA_REGION]
    items = _metadata_items(source, meta_offset, meta_length)
    for required in (FILE_PARAMETERS, VIRTUAL_DISK_SIZE, LOGICAL_SECTOR_SIZE):
        if required not in items:
            raise CorruptImageError(f"{name}: VHDX metadata item {required} is missing; the image is corrupt")
    block_size, flags = unpack_at(source, items[FILE_PARAMETERS][0], "<II")
    (disk_size,) = unpack_at(source, items[VIRTUAL_DISK_SIZE][0], "<Q")
    (sector_size,) = unpack_at(source, items[LOGICAL_SECTOR_SIZE][0], "<I")
    if sector_size not in (512, 4096):
        raise CorruptImageError(f"{name}: VHDX logical sector size {sector_size} is invalid")
    if block_size < (1 << 20) or block_size > (256 << 20) or block_size & (block_size - 1):
        raise CorruptImageError(f"{name}: VHDX block size {block_size} is invalid")
    if disk_size > MAX_VIRTUAL_SIZE:
        raise CorruptImageError(f"{name}: VHDX virtual size {disk_size} is absurd; the header is corrupt")
    refs: list[BackingRef] = []
    if flags & HAS_PARENT or PARENT_LOCATOR in items:
        refs = _parent_refs(source, items.get(PARENT_LOCATOR))
    details: dict[str, str | int | bool] = {
        "subformat": _subformat(flags),
        "block_size": block_size,
        "logical_sector_size": sector_size,
        "leave_blocks_allocated": bool(flags & LEAVE_BLOCKS_ALLOCATED),
    }
    # qemu reports whole 512-byte sectors of the metadata's size.
    return ImageInfo(format=VHDX, virtual_size=disk_size // 512 * 512, details=details, backing_refs=refs)


def _subformat(flags: int) -> str:
    if flags & HAS_PARENT:
        return "differencing"
    return "fixed" if flags & LEAVE_BLOCKS_ALLOCATED else "dynamic"


def _check_headers(source: ByteSource) -> None:
    signatures = [source.read_at(offset, 4) for offset in HEADER_OFFSETS]
    if b"head" not in signatures:
        raise CorruptImageError(
            f"{source.name}: neither VHDX header has a valid signature; the image is corrupt"
        )


def _region_table(source: ByteSource) -> dict[uuid.UUID, tuple[int, int]]:
    for table_offset in REGION_TABLE_OFFSETS:
        signature, _checksum, count, _reserved = unpack_at(source, table_offset, "<4sIII")
        if signature != b"regi":
            continue
        if count > MAX_ENTRIES:
            raise CorruptImageError(
                f"{source.name}: VHDX region table has {count} entries; the image is corrupt"
            )
        regions: dict[uuid.UUID, tuple[int, int]] = {}
        raw = source.read_at(table_offset + 16, 32 * count)
        for index in range(count):
            guid = uuid.UUID(bytes_le=raw[32 * index : 32 * index + 16])
            file_offset, length, _required = struct.unpack_from("<QII", raw, 32 * index + 16)
            if file_offset + length > source.size:
                raise CorruptImageError(f"{source.name}: VHDX region {guid} lies beyond the end of the file")
            regions[guid] = (file_offset, length)
        return regions
    raise CorruptImageError(f"{source.name}: no valid VHDX region table; the image is corrupt")


def _metadata_items(source: ByteSource, offset: int, length: int) -> dict[uuid.UUID, tuple[int, int]]:
    signature, _reserved, count = unpack_at(source, offset, "<8sHH")
    if signature != b"metadata":
        raise CorruptImageError(
            f"{source.name}: VHDX metadata table signature is missing; the image is corrupt"
        )
    if count > MAX_ENTRIES:
        raise CorruptImageError(
            f"{source.name}: VHDX metadata table has {count} entries; the image is corrupt"
        )
    raw = source.read_at(offset + 32, 32 * count)
    items: dict[uuid.UUID, tuple[int, int]] = {}
    for index in range(count):
        guid = uuid.UUID(bytes_le=raw[32 * index : 32 * index + 16])
        item_offset, item_length = struct.unpack_from("<II", raw, 32 * index + 16)
        if item_offset + item_length > length:
            raise CorruptImageError(f"{source.name}: VHDX metadata item {guid} overruns its region; corrupt")
        items[guid] = (offset + item_offset, item_length)
    return items


def _parent_refs(source: ByteSource, item: tuple[int, int] | None) -> list[BackingRef]:
    if item is None:
        return [BackingRef("parent disk", "(parent locator missing)")]
    offset, length = item
    if length < 20:
        raise CorruptImageError(f"{source.name}: VHDX parent locator is too short; the image is corrupt")
    blob = source.read_at(offset, length)
    (count,) = struct.unpack_from("<H", blob, 18)
    if 20 + 12 * count > length:
        raise CorruptImageError(
            f"{source.name}: VHDX parent locator entries overrun the item; the image is corrupt"
        )
    pairs: dict[str, str] = {}
    for index in range(count):
        key_off, value_off, key_len, value_len = struct.unpack_from("<IIHH", blob, 20 + 12 * index)
        if key_off + key_len > length or value_off + value_len > length:
            raise CorruptImageError(f"{source.name}: VHDX parent locator entry overruns the item; corrupt")
        key = blob[key_off : key_off + key_len].decode("utf-16-le", "replace")
        pairs[key] = blob[value_off : value_off + value_len].decode("utf-16-le", "replace")
    paths = [BackingRef(f"parent disk ({key})", pairs[key]) for key in PATH_KEYS if key in pairs]
    if not paths:
        linkage = pairs.get("parent_linkage", "(no path recorded)")
        paths = [BackingRef("parent disk (linkage)", linkage)]
    return paths
