"""VMDK: hosted sparse extents (monolithicSparse, streamOptimized) and text descriptor files.

A descriptor lists extents; every extent stored in a file other than the one being inspected, and every
parent (``parentFileNameHint`` or a ``parentCID`` other than ``ffffffff``), is an air-gap reference: the user
must ship a single self-contained file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from uds_vm_operator.images._source import ByteSource, unpack_at
from uds_vm_operator.images.errors import CorruptImageError, UnsupportedImageError, one_line
from uds_vm_operator.images.model import MAX_VIRTUAL_SIZE, VMDK, BackingRef, ImageInfo

SPARSE_MAGIC = b"KDMV"
COWD_MAGIC = b"COWD"
GD_AT_END = 0xFFFFFFFFFFFFFFFF
MAX_DESCRIPTOR = 1 << 20
NO_PARENT_CID = "ffffffff"
DESCRIPTOR_MARKERS = (b"# Disk DescriptorFile", b"createType=")
# Access, size in sectors, type, optional "file name", optional offset.
EXTENT_LINE = re.compile(r'^(RW|RDONLY|NOACCESS)\s+(\d+)\s+([A-Z]+)(?:\s+"([^"]*)")?(?:\s+(\d+))?\s*$')
LINE_PAIR = re.compile(r'^([A-Za-z0-9_.]+)\s*=\s*"?([^"]*)"?\s*$')


@dataclass(frozen=True)
class Extent:
    """One extent line of a descriptor."""

    sectors: int
    kind: str
    file_name: str | None


def probe(source: ByteSource) -> bool:
    """True for a sparse extent header or a text descriptor."""
    if source.size < 4:
        return False
    magic = source.read_at(0, 4)
    if magic in (SPARSE_MAGIC, COWD_MAGIC):
        return True
    head = source.read_at(0, min(source.size, 1024))
    return any(marker in head for marker in DESCRIPTOR_MARKERS) and b"\x00" not in head[:64]


def inspect(source: ByteSource) -> ImageInfo:
    """Dispatch between a sparse extent file and a standalone descriptor file."""
    magic = source.read_at(0, 4)
    if magic == COWD_MAGIC:
        raise UnsupportedImageError(
            f"{source.name}: ESX COWD (vmdk3) sparse disks are not supported; convert to qcow2 with qemu-img"
        )
    if magic == SPARSE_MAGIC:
        return _inspect_sparse(source)
    return _inspect_descriptor_file(source)


def _inspect_sparse(source: ByteSource) -> ImageInfo:
    name = source.name
    header = _sparse_header(source, 0)
    if header["gd_offset"] == GD_AT_END:
        header = _stream_footer(source)
    capacity = header["capacity"]
    grain = header["grain"]
    if grain == 0 or grain & (grain - 1) or grain > 2048 * 128:
        raise CorruptImageError(f"{name}: VMDK grain size {grain} sectors is invalid; the header is corrupt")
    if header["gtes_per_gt"] > 512 or header["gtes_per_gt"] == 0:
        raise CorruptImageError(f"{name}: VMDK grain table size {header['gtes_per_gt']} is invalid")
    if capacity * 512 > MAX_VIRTUAL_SIZE:
        raise CorruptImageError(f"{name}: VMDK capacity {capacity} sectors is absurd; the header is corrupt")
    details: dict[str, str | int | bool] = {"grain_size": grain * 512}
    refs: list[BackingRef] = []
    virtual_sectors = capacity
    if header["desc_offset"] and header["desc_size"]:
        if header["desc_size"] * 512 > MAX_DESCRIPTOR:
            raise CorruptImageError(
                f"{name}: VMDK embedded descriptor is larger than 1 MiB; the header is corrupt"
            )
        text = source.read_at(header["desc_offset"] * 512, header["desc_size"] * 512)
        pairs, extents = _parse_descriptor(text.split(b"\x00", 1)[0], name)
        create_type = pairs.get("createType", "")
        details["create_type"] = one_line(create_type)
        refs.extend(_parent_refs(pairs))
        # The embedded descriptor names this file as its extent; more than one extent means other files.
        refs.extend(BackingRef("extent file", ext.file_name) for ext in extents[1:] if ext.file_name)
        if capacity == 0 and extents:
            virtual_sectors = sum(ext.sectors for ext in extents)
    if header["version"] == 3 or details.get("create_type") == "streamOptimized":
        details.setdefault("create_type", "streamOptimized")
    return ImageInfo(format=VMDK, virtual_size=virtual_sectors * 512, details=details, backing_refs=refs)


def _sparse_header(source: ByteSource, offset: int) -> dict[str, int]:
    fields = unpack_at(source, offset, "<4sIIQQQQIQQQ")
    magic, version, _flags, capacity, grain, desc_offset, desc_size, gtes, _rgd, gd_offset, _overhead = fields
    if magic != SPARSE_MAGIC:
        raise CorruptImageError(f"{source.name}: VMDK header magic is missing at offset {offset}; corrupt")
    if version not in (1, 2, 3):
        raise UnsupportedImageError(f"{source.name}: VMDK sparse version {version} is not supported")
    return {
        "version": version,
        "capacity": capacity,
        "grain": grain,
        "desc_offset": desc_offset,
        "desc_size": desc_size,
        "gtes_per_gt": gtes,
        "gd_offset": gd_offset,
    }


def _stream_footer(source: ByteSource) -> dict[str, int]:
    """streamOptimized files may keep the real header in a footer 1536 bytes before the end."""
    if source.size < 1536 + 512:
        raise CorruptImageError(
            f"{source.name}: streamOptimized VMDK is too short to hold its footer; truncated"
        )
    _val, marker_size, marker_type = unpack_at(source, source.size - 1536, "<QII")
    if marker_size != 0 or marker_type != 3:
        raise CorruptImageError(
            f"{source.name}: streamOptimized VMDK footer marker is missing; the file is truncated"
        )
    return _sparse_header(source, source.size - 1024)


def _inspect_descriptor_file(source: ByteSource) -> ImageInfo:
    name = source.name
    if source.size > MAX_DESCRIPTOR:
        raise CorruptImageError(f"{name}: a VMDK descriptor file larger than 1 MiB is not plausible")
    pairs, extents = _parse_descriptor(source.read_at(0, source.size), name)
    if not extents:
        raise CorruptImageError(f"{name}: VMDK descriptor lists no extents; the descriptor is corrupt")
    refs = _parent_refs(pairs)
    refs.extend(BackingRef("extent file", ext.file_name) for ext in extents if ext.file_name)
    sectors = sum(ext.sectors for ext in extents)
    if sectors * 512 > MAX_VIRTUAL_SIZE:
        raise CorruptImageError(f"{name}: VMDK descriptor extents add up to an absurd size; corrupt")
    details: dict[str, str | int | bool] = {
        "create_type": one_line(pairs.get("createType", "")),
        "descriptor_file": True,
        "extents": len(extents),
    }
    return ImageInfo(format=VMDK, virtual_size=sectors * 512, details=details, backing_refs=refs)


def _parse_descriptor(raw: bytes, name: str) -> tuple[dict[str, str], list[Extent]]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptImageError(f"{name}: VMDK descriptor is not text; the image is corrupt") from exc
    pairs: dict[str, str] = {}
    extents: list[Extent] = []
    for raw_line in text.splitlines():
        line = raw_line.strip()
        if not line or line.startswith("#"):
            continue
        extent = EXTENT_LINE.match(line)
        if extent:
            _access, sectors, kind, file_name, _offset = extent.groups()
            if kind != "ZERO" and not file_name:
                raise CorruptImageError(f"{name}: VMDK extent line without a file name: {one_line(line)!r}")
            extents.append(Extent(int(sectors), kind, file_name if kind != "ZERO" else None))
            continue
        pair = LINE_PAIR.match(line)
        if pair:
            pairs[pair.group(1)] = pair.group(2)
    return pairs, extents


def _parent_refs(pairs: dict[str, str]) -> list[BackingRef]:
    hint = pairs.get("parentFileNameHint")
    if hint:
        return [BackingRef("parent disk", hint)]
    parent_cid = pairs.get("parentCID", NO_PARENT_CID).lower()
    if parent_cid != NO_PARENT_CID:
        return [BackingRef("parent disk", f"(CID {parent_cid}, no file name hint)")]
    return []
