"""gzip, xz, zstd, tar and OVA wrappers around a disk image.

Compressed images are read in one streaming pass that does everything at once: hash the file as
transferred, decompress, walk a tar stream to the disk member, keep only the head and tail of the disk
(enough for every format's headers and footers), count its length and, when the disk turns out to be raw,
hash its content. Memory stays bounded whatever the size; nothing is written to disk.

An uncompressed tar or OVA needs no streaming: the disk member is a contiguous byte range of the file, so it
is inspected in place like a bare image.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import lzma
import os
import tarfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Protocol, cast

import zstandard

from uds_vm_operator.images import qcow2, vhdx, vmdk
from uds_vm_operator.images._magic import GZIP, XZ, is_tar, sniff_compression
from uds_vm_operator.images._source import ByteSource, CapturedStream, SliceSource
from uds_vm_operator.images.detect import inspect_source, raw_virtual_size
from uds_vm_operator.images.errors import CorruptImageError, ImageError, UnsupportedImageError, one_line
from uds_vm_operator.images.model import ISO, MAX_VIRTUAL_SIZE, RAW, ImageInfo

TAR = "tar"
OVA = "ova"

HEAD_BYTES = 16 << 20  # every supported format's headers live in the first 16 MiB
TAIL_BYTES = 1 << 20  # fixed VHD and streamOptimized VMDK footers live in the last few KiB
CHUNK = 4 << 20
MAX_TAR_MEMBERS = 10_000
TAR_HEADER_SLACK = 64 << 20
NOT_DISKS = (".ovf", ".mf", ".cert", ".nvram", ".sha256", ".sha512", ".sha1", ".txt", ".xml", ".json")

Progress = Callable[[int], None]


class _Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


def pick_disk_member(names: list[str], archive: str) -> str:
    """Choose the disk among tar/OVA members: everything that is not a descriptor, manifest or checksum."""
    disks = [n for n in names if not n.lower().endswith(NOT_DISKS)]
    if not disks:
        raise CorruptImageError(f"{archive}: the archive contains no disk image (members: {_list(names)})")
    if len(disks) > 1:
        raise UnsupportedImageError(
            f"{archive}: the archive holds {len(disks)} disks ({_list(disks)}); "
            "extract them and prep one at a time"
        )
    return disks[0]


def _list(names: list[str]) -> str:
    shown = ", ".join(one_line(n, 60) for n in names[:5])
    return shown + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def archive_kind(names: list[str], file_name: str) -> str:
    """``ova`` when an OVF descriptor is inside (or the name says so), else ``tar``."""
    if file_name.lower().endswith(".ova") or any(n.lower().endswith(".ovf") for n in names):
        return OVA
    return TAR


def inspect_plain_tar(source: ByteSource, file_name: str) -> tuple[ImageInfo, SliceSource]:
    """Inspect the disk inside an uncompressed tar/OVA in place; returns the info and the member's window."""
    members: list[tarfile.TarInfo] = []
    region = source.file_region()
    if region is None:
        raise UnsupportedImageError(f"{source.name}: tar archives are only read from files")
    try:
        with tarfile.open(fileobj=_SourceFile(source), mode="r:") as archive:
            for _ in range(MAX_TAR_MEMBERS + 1):
                member = archive.next()
                if member is None:
                    break
                members.append(member)
            else:
                raise UnsupportedImageError(
                    f"{source.name}: the archive has more than {MAX_TAR_MEMBERS} members"
                )
    except (tarfile.TarError, EOFError, ValueError) as exc:
        raise CorruptImageError(f"{source.name}: the tar archive is corrupt ({exc})") from exc
    files = [m for m in members if m.isfile()]
    chosen_name = pick_disk_member([m.name for m in files], source.name)
    chosen = next(m for m in files if m.name == chosen_name)
    if chosen.issparse():
        raise UnsupportedImageError(f"{source.name}: member {one_line(chosen.name)!r} is a sparse tar entry")
    inner = SliceSource(source, chosen.offset_data, chosen.size, os.path.basename(chosen.name))
    info = inspect_source(inner)
    info.wrappers = [archive_kind([m.name for m in files], file_name)]
    info.member_name = chosen.name
    return info, inner


class _SourceFile(io.RawIOBase):
    """A seekable read-only file object over a ``ByteSource`` (for ``tarfile``)."""

    def __init__(self, source: ByteSource) -> None:
        self._source = source
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._source.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        want = min(len(buffer), max(0, self._source.size - self._pos))
        if want <= 0:
            return 0
        data = self._source.read_at(self._pos, want)
        buffer[: len(data)] = data
        self._pos += len(data)
        return len(data)


@dataclass
class StreamResult:
    """What one pass over a compressed image learned."""

    info: ImageInfo
    file_digests: dict[str, str]
    content_sha256: str | None


class _HashingFile(io.RawIOBase):
    """Reads the compressed file once, feeding every byte to the file digests and the progress bar."""

    def __init__(self, fd: int, hashers: list[hashlib._Hash], progress: Progress | None) -> None:
        self._fd = fd
        self._offset = 0
        self._hashers = hashers
        self._progress = progress

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = os.pread(self._fd, len(buffer), self._offset)
        n = len(data)
        buffer[:n] = data
        self._offset += n
        for hasher in self._hashers:
            hasher.update(data)
        if self._progress and n:
            self._progress(n)
        return n

    def drain(self) -> None:
        """Hash whatever the decompressor did not need (e.g. tar padding), so the file digest is complete."""
        buffer = bytearray(CHUNK)
        while self.readinto(memoryview(buffer)):
            pass


class _Prepended:
    """A stream with some already-read bytes put back in front."""

    def __init__(self, first: bytes, rest: _Readable) -> None:
        self._first = first
        self._rest = rest

    def read(self, size: int = -1) -> bytes:
        if self._first:
            if size < 0 or size >= len(self._first):
                out, self._first = self._first, b""
                return out
            out, self._first = self._first[:size], self._first[size:]
            return out
        return self._rest.read(size)


def _decompressor(kind: str, stream: _Readable) -> _Readable:
    if kind == GZIP:
        return gzip.GzipFile(fileobj=stream, mode="rb")  # type: ignore[call-overload,no-any-return]
    if kind == XZ:
        return lzma.LZMAFile(stream, mode="rb")  # type: ignore[arg-type]
    reader: _Readable = zstandard.ZstdDecompressor().stream_reader(
        cast(IO[bytes], stream), read_across_frames=True
    )
    return reader


def _read_full(stream: _Readable, size: int) -> bytes:
    parts: list[bytes] = []
    got = 0
    while got < size:
        chunk = stream.read(size - got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


_STREAM_ERRORS = (
    OSError,
    EOFError,
    zlib.error,
    lzma.LZMAError,
    zstandard.ZstdError,
    tarfile.TarError,
    ValueError,
)


def inspect_compressed(
    *,
    fd: int,
    name: str,
    kind: str,
    algorithms: list[str],
    want_content: bool,
    progress: Progress | None,
) -> StreamResult:
    """Single streaming pass over a compressed image (optionally a compressed tar/OVA)."""
    hashers = [hashlib.new(a) for a in algorithms]
    raw = _HashingFile(fd, hashers, progress)
    wrappers = [kind]
    member_name: str | None = None
    try:
        outer = io.BufferedReader(raw, buffer_size=CHUNK)
        stream = _decompressor(kind, outer)
        head = _read_full(stream, 1024)
        if sniff_compression(head):
            raise UnsupportedImageError(
                f"{name}: the image is compressed twice; decompress the outer layer first"
            )
        stream = _Prepended(head, stream)
        if is_tar(head):
            capture, member_name, archive = _capture_from_tar(stream, name, want_content)
            wrappers.append(archive)
        else:
            capture = _capture(stream, name, want_content)
        # Drain the decompressor (trailing members, padding) and then the file itself.
        while stream.read(CHUNK):
            pass
        raw.drain()
    except ImageError:
        raise
    except _STREAM_ERRORS as exc:
        raise CorruptImageError(
            f"{name}: the {kind} stream is corrupt or truncated ({exc}); copy it again"
        ) from exc
    source = CapturedStream(capture.head, capture.tail, capture.size, member_name or name)
    info = inspect_source(source)
    info.wrappers = wrappers
    info.member_name = member_name
    content: str | None = None
    if capture.hasher is not None and info.format in (RAW, ISO):
        padding = raw_virtual_size(capture.size) - capture.size
        capture.hasher.update(bytes(padding))
        content = capture.hasher.hexdigest()
    return StreamResult(info, {a: h.hexdigest() for a, h in zip(algorithms, hashers, strict=True)}, content)


@dataclass
class _Capture:
    head: bytes
    tail: bytes
    size: int
    hasher: hashlib._Hash | None


def _capture(stream: _Readable, name: str, want_content: bool) -> _Capture:
    """Read a disk stream to its end keeping the head, the tail and (for raw disks) a content hash."""
    head = _read_full(stream, HEAD_BYTES)
    size = len(head)
    hasher = hashlib.sha256() if want_content and not _has_header_at_zero(head) else None
    if hasher is not None:
        hasher.update(head)
    tail = head[-TAIL_BYTES:]
    while True:
        chunk = stream.read(CHUNK)
        if not chunk:
            break
        size += len(chunk)
        if size > MAX_VIRTUAL_SIZE:
            raise CorruptImageError(f"{name}: decompresses to more than 64 PiB; it is not a disk image")
        if hasher is not None:
            hasher.update(chunk)
        tail = (tail + chunk)[-TAIL_BYTES:] if len(chunk) < TAIL_BYTES else chunk[-TAIL_BYTES:]
    return _Capture(head, tail, size, hasher)


def _has_header_at_zero(head: bytes) -> bool:
    """Formats whose content is not their bytes: no point hashing them as raw."""
    return head[:4] in (qcow2.MAGIC, vmdk.SPARSE_MAGIC, vmdk.COWD_MAGIC) or head[:8] == vhdx.SIGNATURE


class _Budget:
    """Caps how far a tar stream may be read beyond the members announced so far.

    ``tarfile`` reads a pax or GNU long-name header in one piece of the size the header claims; in a
    compressed stream a forged claim could make it buffer gigabytes. Reading past the last member's data
    plus ``TAR_HEADER_SLACK`` is refused instead.
    """

    def __init__(self, stream: _Readable, name: str) -> None:
        self._stream = stream
        self._name = name
        self.consumed = 0
        self.allowance = TAR_HEADER_SLACK

    def read(self, size: int = -1) -> bytes:
        data = self._stream.read(size)
        self.consumed += len(data)
        if self.consumed > self.allowance:
            raise CorruptImageError(
                f"{self._name}: a tar header claims an absurd size; the archive is corrupt"
            )
        return data


def _capture_from_tar(stream: _Readable, name: str, want_content: bool) -> tuple[_Capture, str, str]:
    names: list[str] = []
    captured: _Capture | None = None
    captured_name = ""
    budget = _Budget(stream, name)
    with tarfile.open(fileobj=budget, mode="r|") as archive:  # type: ignore[call-overload]
        for count, member in enumerate(archive):
            budget.allowance = budget.consumed + member.size + TAR_HEADER_SLACK
            if count > MAX_TAR_MEMBERS:
                raise UnsupportedImageError(f"{name}: the archive has more than {MAX_TAR_MEMBERS} members")
            if not member.isfile():
                continue
            names.append(member.name)
            if member.name.lower().endswith(NOT_DISKS):
                continue
            if captured is not None:
                pick_disk_member(names, name)  # raises: more than one disk
            if member.issparse():
                raise UnsupportedImageError(f"{name}: member {one_line(member.name)!r} is a sparse tar entry")
            data = archive.extractfile(member)
            if data is None:
                continue
            captured = _capture(data, name, want_content)
            captured_name = member.name
    if captured is None:
        pick_disk_member(names, name)  # raises: no disk
        raise CorruptImageError(f"{name}: the archive contains no disk image")
    return captured, captured_name, archive_kind(names, name)
