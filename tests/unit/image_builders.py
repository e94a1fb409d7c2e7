"""Synthetic images built byte by byte, so parser tests do not need qemu-img (the image tier checks qemu).

Each builder produces the smallest valid file of its format, with knobs for the features under test.
"""

from __future__ import annotations

import struct
import uuid
import zlib

import zstandard

# ----------------------------------------------------------------------------------------------- qcow2


def qcow2(
    *,
    size: int = 1 << 20,
    cluster_bits: int = 16,
    version: int = 3,
    backing: bytes | None = None,
    data_file: bytes | None = None,
    data_file_bit: bool = False,
    extended_l2: bool = False,
    compression_type: int = 0,
    clusters: dict[int, tuple[str, bytes | int]] | None = None,
) -> bytes:
    """A qcow2 with one L1 table and one L2 table; ``clusters`` maps virtual cluster index to content.

    Content kinds: ``("data", bytes)``, ``("zero", 0)``, ``("zlib", bytes)``, ``("zstd", bytes)``,
    ``("sub", bitmap_int)`` (extended L2 only: data cluster of 0xAB bytes with that allocation bitmap).
    """
    cluster = 1 << cluster_bits
    entry_size = 16 if extended_l2 else 8
    l2_entries = cluster // entry_size
    assert size <= l2_entries * cluster, "builder supports one L2 table"
    incompatible = (4 if data_file_bit else 0) | (16 if extended_l2 else 0) | (8 if compression_type else 0)
    header = _qcow2_header(
        cluster_bits=cluster_bits,
        size=size,
        version=version,
        incompatible=incompatible,
        compression_type=compression_type,
        backing=backing,
        data_file=data_file,
    )
    l2_offset = 2 * cluster
    body = bytearray(header)
    l1 = bytearray(cluster)
    l2 = bytearray(cluster)
    payload = bytearray()
    next_offset = 3 * cluster
    for index, (kind, content) in sorted((clusters or {}).items()):
        standard = 0
        bitmap = 0
        if kind == "data":
            assert isinstance(content, bytes)
            standard = next_offset | (1 << 63)
            payload += content.ljust(cluster, b"\0")
            next_offset += cluster
            bitmap = 0xFFFFFFFF
        elif kind == "zero":
            standard = 1 if not extended_l2 else 0
            bitmap = 0xFFFFFFFF << 32
        elif kind == "sub":
            assert isinstance(content, int)
            standard = next_offset
            payload += b"\xab" * cluster
            next_offset += cluster
            bitmap = content
        else:
            assert isinstance(content, bytes)
            if kind == "zlib":
                comp = zlib.compressobj(9, zlib.DEFLATED, -12)
                data = comp.compress(content.ljust(cluster, b"\0")) + comp.flush()
            else:
                data = zstandard.ZstdCompressor().compress(content.ljust(cluster, b"\0"))
            padded = data.ljust((len(data) + 511) // 512 * 512, b"\0")
            sectors = len(padded) // 512
            shift = 62 - (cluster_bits - 8)
            standard = (1 << 62) | ((sectors - 1) << shift) | next_offset
            payload += padded.ljust((len(padded) + cluster - 1) // cluster * cluster, b"\0")
            next_offset += (len(padded) + cluster - 1) // cluster * cluster
            bitmap = 0
        struct.pack_into(">Q", l2, index * entry_size, standard)
        if extended_l2:
            struct.pack_into(">Q", l2, index * entry_size + 8, bitmap)
    struct.pack_into(">Q", l1, 0, l2_offset | (1 << 63))
    return bytes(body + l1 + l2 + payload)


def _qcow2_header(
    *,
    cluster_bits: int,
    size: int,
    version: int,
    incompatible: int,
    compression_type: int,
    backing: bytes | None,
    data_file: bytes | None,
) -> bytearray:
    """The header cluster: fixed fields, the v3 extension, a data-file extension, the backing name."""
    header_length = 112 if version == 3 else 72
    header = bytearray(1 << cluster_bits)
    l1_offset = 1 << cluster_bits
    struct.pack_into(
        ">4sIQIIQIIQQIIQ",
        header,
        0,
        b"QFI\xfb",
        version,
        0,
        0,
        cluster_bits,
        size,
        0,
        1,
        l1_offset,
        0,
        0,
        0,
        0,
    )
    if version == 3:
        struct.pack_into(">QQQII", header, 72, incompatible, 0, 0, 4, header_length)
        header[104] = compression_type
    ext_at = header_length
    if data_file is not None:
        struct.pack_into(">II", header, ext_at, 0x44415441, len(data_file))
        header[ext_at + 8 : ext_at + 8 + len(data_file)] = data_file
        ext_at += 8 + (len(data_file) + 7) // 8 * 8
    struct.pack_into(">II", header, ext_at, 0, 0)
    if backing is not None:
        at = ext_at + 16
        struct.pack_into(">QI", header, 8, at, len(backing))
        header[at : at + len(backing)] = backing
    return header


# ------------------------------------------------------------------------------------------------- vpc


def vpc_footer(
    *,
    size: int,
    creator: bytes = b"qemu",
    disk_type: int = 3,
    data_offset: int = 512,
    chs: tuple[int, int, int],
) -> bytes:
    """A 512-byte VHD footer (checksum filled in, though qemu and we only warn about it)."""
    footer = bytearray(512)
    struct.pack_into(">8sIIQI4sII", footer, 0, b"conectix", 2, 0x10000, data_offset, 0, creator, 0x50003, 0)
    struct.pack_into(">QQHBBI", footer, 40, size, size, chs[0], chs[1], chs[2], disk_type)
    checksum = (~sum(footer)) & 0xFFFFFFFF
    struct.pack_into(">I", footer, 64, checksum)
    return bytes(footer)


def vpc_dynamic(
    *,
    size: int = 10 << 20,
    creator: bytes = b"qemu",
    chs: tuple[int, int, int] = (20, 16, 63),
    parent_name: str = "",
    locator: str | None = None,
    disk_type: int = 3,
) -> bytes:
    """A dynamic (or differencing) VHD without allocated blocks."""
    block_size = 2 << 20
    entries = -(-size // block_size)
    footer = vpc_footer(size=size, creator=creator, disk_type=disk_type, chs=chs)
    header = bytearray(1024)
    table_offset = 1536
    struct.pack_into(
        ">8sQQIII", header, 0, b"cxsparse", 0xFFFFFFFFFFFFFFFF, table_offset, 0x10000, entries, block_size
    )
    name = parent_name.encode("utf-16-be")
    header[64 : 64 + len(name)] = name
    table = b"\xff" * (4 * entries)
    table = table.ljust((len(table) + 511) // 512 * 512, b"\xff")
    locator_data = b""
    if locator is not None:
        locator_data = locator.encode("utf-16-le").ljust(512, b"\0")
        loc_offset = table_offset + len(table)
        struct.pack_into(
            ">4sIIIQ", header, 576, b"W2ru", 512, len(locator.encode("utf-16-le")), 0, loc_offset
        )
    return footer + bytes(header) + table + locator_data + footer


# ------------------------------------------------------------------------------------------------ vhdx

VHDX_METADATA = uuid.UUID("8B7CA206-4790-4B9A-B8FE-575F050F886E")
VHDX_BAT = uuid.UUID("2DC27766-F623-4200-9D64-115E9BFD4A08")


def vhdx(*, size: int = 64 << 20, parent_paths: dict[str, str] | None = None, fixed: bool = False) -> bytes:
    """A VHDX with headers, region table and metadata (no blocks allocated)."""
    data = bytearray(3 << 20)
    data[0:8] = b"vhdxfile"
    for offset in (64 * 1024, 128 * 1024):
        data[offset : offset + 4] = b"head"
    meta_offset = 2 << 20
    bat_offset = (2 << 20) + (512 << 10)
    for table in (192 * 1024, 256 * 1024):
        struct.pack_into("<4sIII", data, table, b"regi", 0, 2, 0)
        struct.pack_into("<16sQII", data, table + 16, VHDX_METADATA.bytes_le, meta_offset, 256 << 10, 1)
        struct.pack_into("<16sQII", data, table + 48, VHDX_BAT.bytes_le, bat_offset, 256 << 10, 1)
    items: list[tuple[str, bytes]] = [
        (
            "CAA16737-FA36-4D43-B3B6-33F0AA44E76B",
            struct.pack("<II", 32 << 20, (2 if parent_paths else 0) | fixed),
        ),
        ("2FA54224-CD1B-4876-B211-5DBED83BF4B8", struct.pack("<Q", size)),
        ("8141BF1D-A96F-4709-BA47-F233A8FAAB5F", struct.pack("<I", 512)),
    ]
    if parent_paths is not None:
        blob = bytearray(
            struct.pack(
                "<16sHH", uuid.UUID("B04AEFB7-D19E-4A81-B789-25B8E9445913").bytes_le, 0, len(parent_paths)
            )
        )
        strings = bytearray()
        entries = bytearray()
        base = 20 + 12 * len(parent_paths)
        for key, value in parent_paths.items():
            k = key.encode("utf-16-le")
            v = value.encode("utf-16-le")
            entries += struct.pack("<IIHH", base + len(strings), base + len(strings) + len(k), len(k), len(v))
            strings += k + v
        blob += entries + strings
        items.append(("A8D35F2D-B30B-454D-ABF7-D3D84834AB0C", bytes(blob)))
    struct.pack_into("<8sHH", data, meta_offset, b"metadata", 0, len(items))
    item_at = 64 << 10
    for index, (guid, payload) in enumerate(items):
        struct.pack_into(
            "<16sIII", data, meta_offset + 32 + 32 * index, uuid.UUID(guid).bytes_le, item_at, len(payload), 0
        )
        data[meta_offset + item_at : meta_offset + item_at + len(payload)] = payload
        item_at += 4096
    return bytes(data)


# ------------------------------------------------------------------------------------------------ vmdk


def vmdk_descriptor(
    extra: str = "",
    create_type: str = "monolithicSparse",
    parent_cid: str = "ffffffff",
    extents: str = 'RW 20480 SPARSE "disk.vmdk"',
) -> str:
    """A VMDK descriptor text."""
    return (
        "# Disk DescriptorFile\nversion=1\nCID=12345678\n"
        f'parentCID={parent_cid}\ncreateType="{create_type}"\n{extra}\n# Extent description\n{extents}\n'
    )


def vmdk_sparse(*, capacity_sectors: int = 20480, descriptor: str | None = None, grain: int = 128) -> bytes:
    """A hosted sparse extent header with an embedded descriptor at sector 1."""
    desc = (descriptor if descriptor is not None else vmdk_descriptor()).encode()
    desc_sectors = max(1, -(-len(desc) // 512))
    header = bytearray(512)
    struct.pack_into(
        "<4sIIQQQQIQQQ", header, 0, b"KDMV", 1, 3, capacity_sectors, grain, 1, desc_sectors, 512, 0, 21, 128
    )
    return bytes(header) + desc.ljust(desc_sectors * 512, b"\0") + bytes(64 * 512)


# ------------------------------------------------------------------------------------------------- iso


def iso(label: str = "MY_LABEL", udf: bool = False) -> bytes:
    """A minimal ISO 9660 volume: primary descriptor, optional UDF recognition, terminator."""
    data = bytearray(20 * 2048)
    pvd = 16 * 2048
    data[pvd] = 1
    data[pvd + 1 : pvd + 6] = b"CD001"
    data[pvd + 6] = 1
    data[pvd + 40 : pvd + 72] = label.encode().ljust(32)
    term = 17 * 2048
    data[term] = 255
    data[term + 1 : term + 6] = b"CD001"
    if udf:
        data[18 * 2048 + 1 : 18 * 2048 + 6] = b"BEA01"
        data[19 * 2048 + 1 : 19 * 2048 + 6] = b"NSR02"
    return bytes(data)
