"""QCOW2 (versions 2 and 3): header, air-gap references, and the virtual disk's content.

Layout follows qemu's docs/interop/qcow2.txt. Every size and offset read from the header is validated
against qemu's own limits and the file size before it is used, so a hostile header cannot make us allocate
or loop without bound.
"""

from __future__ import annotations

import importlib
import io
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from uds_vm_operator.images._segments import DataRun, Literal, Segment, ZeroRun, coalesce
from uds_vm_operator.images._source import ByteSource, unpack_at
from uds_vm_operator.images.errors import CorruptImageError, UnsupportedImageError, one_line
from uds_vm_operator.images.model import MAX_VIRTUAL_SIZE, QCOW2, BackingRef, ImageInfo

MAGIC = b"QFI\xfb"
EXT_END = 0x00000000
EXT_BACKING_FORMAT = 0xE2792ACA
EXT_DATA_FILE = 0x44415441

INCOMPAT_DIRTY = 1 << 0
INCOMPAT_CORRUPT = 1 << 1
INCOMPAT_DATA_FILE = 1 << 2
INCOMPAT_COMPRESSION = 1 << 3
INCOMPAT_EXTL2 = 1 << 4
INCOMPAT_KNOWN = (
    INCOMPAT_DIRTY | INCOMPAT_CORRUPT | INCOMPAT_DATA_FILE | INCOMPAT_COMPRESSION | INCOMPAT_EXTL2
)

COMPRESSION_ZLIB = 0
COMPRESSION_ZSTD = 1

L1E_OFFSET_MASK = 0x00FFFFFFFFFFFE00
L2E_OFFSET_MASK = 0x00FFFFFFFFFFFE00
OFLAG_COMPRESSED = 1 << 62
OFLAG_ZERO = 1

MIN_CLUSTER_BITS = 9
MAX_CLUSTER_BITS = 21
MAX_L1_BYTES = 32 << 20  # qemu's QCOW_MAX_L1_SIZE
MAX_BACKING_NAME = 1023  # qemu refuses longer backing file names
MAX_EXTENSIONS = 64
SUBCLUSTERS = 32


@dataclass(frozen=True)
class Qcow2Header:
    """The fields of a qcow2 header that inspection and the content walk need."""

    version: int
    cluster_bits: int
    size: int
    l1_size: int
    l1_table_offset: int
    incompatible: int
    compression_type: int
    crypt_method: int

    @property
    def cluster_size(self) -> int:
        """Bytes per cluster."""
        return 1 << self.cluster_bits

    @property
    def extended_l2(self) -> bool:
        """Whether L2 entries carry a subcluster bitmap (128-bit entries)."""
        return bool(self.incompatible & INCOMPAT_EXTL2)

    @property
    def l2_entries(self) -> int:
        """Entries per L2 table (one table fills one cluster)."""
        return self.cluster_size // (16 if self.extended_l2 else 8)

    @property
    def virtual_size(self) -> int:
        """The size qemu reports: whole 512-byte sectors of the header's size field."""
        return self.size // 512 * 512


def probe(source: ByteSource) -> bool:
    """True if the source starts with the qcow2 magic."""
    return source.size >= 4 and source.read_at(0, 4) == MAGIC


def inspect(source: ByteSource) -> ImageInfo:
    """Parse and validate the header; collect backing and external data file references."""
    header, header_length, backing_name_field = _read_header(source)
    _validate_l1(source, header)
    cluster_size = 1 << header.cluster_bits
    refs = _backing_file_refs(source, backing_name_field, cluster_size)
    extensions = _read_extensions(source, header_length, cluster_size)
    refs += _data_file_refs(source.name, header.incompatible, extensions)
    return ImageInfo(
        format=QCOW2,
        virtual_size=header.virtual_size,
        details=_details(header, extensions),
        backing_refs=refs,
        layout=header,
    )


def _read_header(source: ByteSource) -> tuple[Qcow2Header, int, tuple[int, int]]:
    """The validated header, its length, and the backing file name field (offset, size)."""
    name = source.name
    (
        _magic,
        version,
        backing_offset,
        backing_size,
        cluster_bits,
        size,
        crypt_method,
        l1_size,
        l1_offset,
        _refcount_offset,
        _refcount_clusters,
        _nb_snapshots,
        _snapshots_offset,
    ) = unpack_at(source, 0, ">IIQIIQIIQQIIQ")
    if version not in (2, 3):
        raise UnsupportedImageError(f"{name}: qcow2 version {version} is not supported (only 2 and 3 exist)")
    if not MIN_CLUSTER_BITS <= cluster_bits <= MAX_CLUSTER_BITS:
        raise CorruptImageError(
            f"{name}: qcow2 cluster_bits {cluster_bits} is outside 9..21; the header is corrupt"
        )
    incompatible, header_length, compression_type = 0, 72, COMPRESSION_ZLIB
    if version == 3:
        incompatible, header_length, compression_type = _read_v3_fields(source, 1 << cluster_bits)
    _check_features(name, incompatible, compression_type)
    if size > MAX_VIRTUAL_SIZE:
        raise CorruptImageError(f"{name}: qcow2 virtual size {size} bytes is absurd; the header is corrupt")
    header = Qcow2Header(
        version=version,
        cluster_bits=cluster_bits,
        size=size,
        l1_size=l1_size,
        l1_table_offset=l1_offset,
        incompatible=incompatible,
        compression_type=compression_type,
        crypt_method=crypt_method,
    )
    return header, header_length, (backing_offset, backing_size)


def _read_v3_fields(source: ByteSource, cluster_size: int) -> tuple[int, int, int]:
    """Version 3's additions: incompatible feature bits, header length, compression type."""
    incompatible, _compat, _autoclear, refcount_order, header_length = unpack_at(source, 72, ">QQQII")
    if header_length < 104 or header_length > cluster_size or header_length % 8:
        raise CorruptImageError(
            f"{source.name}: qcow2 header length {header_length} is invalid; the header is corrupt"
        )
    if refcount_order > 6:
        raise CorruptImageError(f"{source.name}: qcow2 refcount order {refcount_order} is invalid")
    compression_type = COMPRESSION_ZLIB
    if header_length > 104:
        (compression_type,) = unpack_at(source, 104, ">B")
    return incompatible, header_length, compression_type


def _backing_file_refs(source: ByteSource, field: tuple[int, int], cluster_size: int) -> list[BackingRef]:
    """The backing file the header names, if any (its name must lie in the first cluster)."""
    backing_offset, backing_size = field
    if not backing_offset:
        return []
    if backing_size == 0 or backing_size > MAX_BACKING_NAME or backing_offset >= cluster_size:
        raise CorruptImageError(
            f"{source.name}: qcow2 backing file name field is invalid; the header is corrupt"
        )
    raw_name = source.read_at(backing_offset, backing_size)
    return [BackingRef("backing file", raw_name.decode("utf-8", "replace"))]


def _data_file_refs(name: str, incompatible: int, extensions: dict[int, bytes]) -> list[BackingRef]:
    """The external data file, which the feature bit and the extension must agree on."""
    data_file = extensions.get(EXT_DATA_FILE)
    if incompatible & INCOMPAT_DATA_FILE:
        name_text = data_file.decode("utf-8", "replace") if data_file else "(name not recorded in the image)"
        return [BackingRef("external data file", name_text)]
    if data_file is not None:
        raise CorruptImageError(f"{name}: qcow2 has a data-file extension without its feature bit")
    return []


def _details(header: Qcow2Header, extensions: dict[int, bytes]) -> dict[str, str | int | bool]:
    """What `uds-vmctl prep` reports about the image, as qemu-img info names it."""
    details: dict[str, str | int | bool] = {
        "qcow2_version": header.version,
        "compat": "0.10" if header.version == 2 else "1.1",
        "cluster_size": 1 << header.cluster_bits,
        "compression_type": "zstd" if header.compression_type == COMPRESSION_ZSTD else "zlib",
        "extended_l2": header.extended_l2,
        "encrypted": header.crypt_method != 0,
    }
    if EXT_BACKING_FORMAT in extensions:
        details["backing_format"] = one_line(extensions[EXT_BACKING_FORMAT].decode("utf-8", "replace"))
    return details


def _check_features(name: str, incompatible: int, compression_type: int) -> None:
    """Refuse incompatible feature bits we cannot honour and a compression type that contradicts them."""
    unknown = incompatible & ~INCOMPAT_KNOWN
    if unknown:
        raise UnsupportedImageError(
            f"{name}: qcow2 uses unknown incompatible features 0x{unknown:x}; "
            "convert it with a current qemu-img"
        )
    if incompatible & INCOMPAT_CORRUPT:
        raise CorruptImageError(
            f"{name}: qcow2 is marked corrupt by qemu; repair it with 'qemu-img check -r all'"
        )
    if incompatible & INCOMPAT_COMPRESSION and compression_type not in (COMPRESSION_ZLIB, COMPRESSION_ZSTD):
        raise UnsupportedImageError(f"{name}: qcow2 compression type {compression_type} is unknown")
    if not incompatible & INCOMPAT_COMPRESSION and compression_type != COMPRESSION_ZLIB:
        raise CorruptImageError(
            f"{name}: qcow2 compression type set without its feature bit; the header is corrupt"
        )


def _validate_l1(source: ByteSource, header: Qcow2Header) -> None:
    name = source.name
    per_l1 = header.l2_entries * header.cluster_size
    needed = -(-header.size // per_l1)
    if header.l1_size * 8 > MAX_L1_BYTES:
        raise CorruptImageError(
            f"{name}: qcow2 L1 table of {header.l1_size} entries is absurd; the header is corrupt"
        )
    if header.l1_size < needed:
        raise CorruptImageError(
            f"{name}: qcow2 L1 table is too small for the virtual size; the header is corrupt"
        )
    if header.l1_size:
        if header.l1_table_offset % header.cluster_size:
            raise CorruptImageError(
                f"{name}: qcow2 L1 table offset is not cluster aligned; the header is corrupt"
            )
        if header.l1_table_offset + header.l1_size * 8 > source.size:
            raise CorruptImageError(
                f"{name}: qcow2 L1 table lies beyond the end of the file; the image is truncated"
            )


def _read_extensions(source: ByteSource, start: int, cluster_size: int) -> dict[int, bytes]:
    """Header extensions live between the header and the end of the first cluster."""
    found: dict[int, bytes] = {}
    offset = start
    limit = min(cluster_size, source.size)
    for _ in range(MAX_EXTENSIONS):
        if offset + 8 > limit:
            return found
        ext_type, ext_len = unpack_at(source, offset, ">II")
        if ext_type == EXT_END:
            return found
        offset += 8
        if offset + ext_len > limit:
            raise CorruptImageError(
                f"{source.name}: qcow2 header extension 0x{ext_type:08x} overruns the first cluster"
            )
        found[ext_type] = source.read_at(offset, ext_len)
        offset += (ext_len + 7) // 8 * 8
    raise CorruptImageError(
        f"{source.name}: more than {MAX_EXTENSIONS} qcow2 header extensions; the header is corrupt"
    )


def content_segments(source: ByteSource, header: Qcow2Header) -> Iterator[Segment]:
    """Describe the virtual disk (exactly ``virtual_size`` bytes) as data, zero and literal segments.

    Unallocated clusters read as zeros: an image with a backing file never gets here (air-gap check first).
    """
    if header.crypt_method:
        raise UnsupportedImageError(
            f"{source.name}: the qcow2 is encrypted; its content cannot be hashed. "
            "Decrypt it with qemu-img convert"
        )
    return coalesce(_walk(source, header))


def _walk(source: ByteSource, header: Qcow2Header) -> Iterator[Segment]:
    cluster = header.cluster_size
    per_l1 = header.l2_entries * cluster
    remaining = header.virtual_size
    n_l1 = -(-remaining // per_l1)
    l1 = struct.unpack(f">{n_l1}Q", source.read_at(header.l1_table_offset, n_l1 * 8)) if n_l1 else ()
    decompress = _decompressor(source, header)
    for l1_entry in l1:
        span = min(per_l1, remaining)
        remaining -= span
        l2_offset = l1_entry & L1E_OFFSET_MASK
        if l2_offset == 0:
            yield ZeroRun(span)
            continue
        if l2_offset % cluster:
            raise CorruptImageError(
                f"{source.name}: qcow2 L2 table offset 0x{l2_offset:x} is not cluster aligned"
            )
        table = source.read_at(l2_offset, cluster)
        n_entries = -(-span // cluster)
        if header.extended_l2:
            words = struct.unpack(f">{2 * n_entries}Q", table[: 16 * n_entries])
            entries = [(words[2 * i], words[2 * i + 1]) for i in range(n_entries)]
        else:
            entries = [(e, -1) for e in struct.unpack(f">{n_entries}Q", table[: 8 * n_entries])]
        for index, (entry, bitmap) in enumerate(entries):
            length = min(cluster, span - index * cluster)
            yield from _cluster(
                source=source, header=header, entry=entry, bitmap=bitmap, length=length, decompress=decompress
            )


def _cluster(
    *,
    source: ByteSource,
    header: Qcow2Header,
    entry: int,
    bitmap: int,
    length: int,
    decompress: _Decompress,
) -> Iterator[Segment]:
    cluster = header.cluster_size
    if entry & OFLAG_COMPRESSED:
        shift = 62 - (header.cluster_bits - 8)
        offset = entry & ((1 << shift) - 1)
        sectors = ((entry >> shift) & ((1 << (header.cluster_bits - 8)) - 1)) + 1
        csize = sectors * 512 - (offset & 511)
        csize = min(csize, source.size - offset) if offset < source.size else csize
        data = decompress(source.read_at(offset, csize))
        yield Literal(data[:length])
        return
    offset = entry & L2E_OFFSET_MASK
    if bitmap < 0:  # standard L2 entry
        if entry & OFLAG_ZERO or offset == 0:
            yield ZeroRun(length)
            return
        _check_data_cluster(source, offset, cluster)
        yield DataRun(offset, length)
        return
    allocated = bitmap & 0xFFFFFFFF
    zeroed = bitmap >> 32
    if allocated & zeroed:
        raise CorruptImageError(
            f"{source.name}: qcow2 subcluster is both allocated and zero; the image is corrupt"
        )
    if offset == 0 or allocated == 0:
        yield ZeroRun(length)
        return
    _check_data_cluster(source, offset, cluster)
    sub = cluster // SUBCLUSTERS
    for i in range(SUBCLUSTERS):
        start = i * sub
        if start >= length:
            break
        part = min(sub, length - start)
        yield DataRun(offset + start, part) if allocated >> i & 1 else ZeroRun(part)


def _check_data_cluster(source: ByteSource, offset: int, cluster: int) -> None:
    if offset % cluster:
        raise CorruptImageError(
            f"{source.name}: qcow2 data cluster offset 0x{offset:x} is not cluster aligned"
        )
    if offset + cluster > source.size:
        raise CorruptImageError(
            f"{source.name}: qcow2 data cluster at 0x{offset:x} lies beyond the end of the file; "
            "the image is truncated (copy it again)"
        )


class _Decompress:
    """Decompress one compressed cluster to exactly ``cluster_size`` bytes, as qemu does."""

    def __init__(self, name: str, cluster_size: int, kind: int) -> None:
        self._name = name
        self._cluster_size = cluster_size
        self._kind = kind
        self._zstd: Any = None
        if kind == COMPRESSION_ZSTD:
            self._zstd = _zstandard().ZstdDecompressor()

    def __call__(self, compressed: bytes) -> bytes:
        try:
            if self._zstd is not None:
                reader = self._zstd.stream_reader(io.BytesIO(compressed), read_across_frames=False)
                chunks = []
                got = 0
                while got < self._cluster_size:
                    chunk = reader.read(self._cluster_size - got)
                    if not chunk:
                        break
                    chunks.append(chunk)
                    got += len(chunk)
                out = b"".join(chunks)
            else:
                out = zlib.decompressobj(-12).decompress(compressed, self._cluster_size)
        except (zlib.error, _ZstdError) as exc:
            raise CorruptImageError(
                f"{self._name}: a compressed qcow2 cluster does not decompress ({exc})"
            ) from exc
        if len(out) != self._cluster_size:
            raise CorruptImageError(
                f"{self._name}: a compressed qcow2 cluster decompresses to {len(out)} bytes"
            )
        return out


def _zstandard() -> ModuleType:
    """zstandard loads only for zstd-compressed images (it costs start-up time otherwise)."""
    global _ZstdError  # noqa: PLW0603 (the exception class is only known once the module is loaded)
    module = importlib.import_module("zstandard")
    _ZstdError = module.ZstdError
    return module


class _NeverRaisedError(Exception):
    """Placeholder until zstandard is loaded."""


_ZstdError: type[Exception] = _NeverRaisedError


def _decompressor(source: ByteSource, header: Qcow2Header) -> _Decompress:
    return _Decompress(source.name, header.cluster_size, header.compression_type)
