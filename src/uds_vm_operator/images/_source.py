"""Random-access byte sources the format parsers read from, each bounds-checked.

A parser never touches a file object directly: it asks a ``ByteSource`` for ``length`` bytes at ``offset``
and gets exactly that many or a ``TruncatedImageError``. That one rule makes every offset read from a hostile
header safe, whether the bytes live in a file, a tar member, a test's ``bytes`` or the captured head and
tail of a decompressed stream.
"""

from __future__ import annotations

import os
import struct
from typing import Any, Protocol

from uds_vm_operator.images.errors import TruncatedImageError, UnsupportedImageError

MIB = 1 << 20
# A single header structure is never larger than this; a bigger request means a corrupt length field.
MAX_SINGLE_READ = 64 * MIB


class ByteSource(Protocol):
    """Something with a size that can hand out byte ranges."""

    @property
    def name(self) -> str:
        """Human name of the source, used in error messages."""
        ...

    @property
    def size(self) -> int:
        """Total length in bytes."""
        ...

    def read_at(self, offset: int, length: int) -> bytes:
        """Return exactly ``length`` bytes at ``offset`` or raise ``TruncatedImageError``."""
        ...

    def file_region(self) -> tuple[int, int] | None:
        """``(fd, base_offset)`` when the bytes are a contiguous region of a real file, else ``None``.

        Digest code uses it to read large runs with ``os.preadv`` instead of going through ``read_at``.
        """
        ...


def _check_range(source: ByteSource, offset: int, length: int) -> None:
    if offset < 0 or length < 0:
        raise TruncatedImageError(
            f"{source.name}: negative offset or length in a header; the image is corrupt"
        )
    if length > MAX_SINGLE_READ:
        raise TruncatedImageError(
            f"{source.name}: a header asks for {length} bytes at once; the image is corrupt"
        )
    if offset + length > source.size:
        raise TruncatedImageError(
            f"{source.name}: needs bytes {offset}..{offset + length} but the file has only {source.size}; "
            "the image is truncated (copy it again)"
        )


class FileSource:
    """An open regular file; reads use ``os.pread`` so no seek state is shared."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._fd = os.open(path, os.O_RDONLY)
        try:
            self._size = os.fstat(self._fd).st_size
        except OSError:
            os.close(self._fd)
            raise

    @property
    def name(self) -> str:
        return os.path.basename(self._path)

    @property
    def size(self) -> int:
        return self._size

    @property
    def fd(self) -> int:
        """The open descriptor (owned by this object)."""
        return self._fd

    def read_at(self, offset: int, length: int) -> bytes:
        _check_range(self, offset, length)
        data = os.pread(self._fd, length, offset)
        if len(data) != length:  # the file shrank under us
            raise TruncatedImageError(
                f"{self.name}: short read at {offset}; was the file modified while reading?"
            )
        return data

    def file_region(self) -> tuple[int, int] | None:
        return (self._fd, 0)

    def close(self) -> None:
        """Release the descriptor."""
        os.close(self._fd)

    def __enter__(self) -> FileSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BytesSource:
    """In-memory bytes, for tests and small captured headers."""

    def __init__(self, data: bytes, name: str = "image") -> None:
        self._data = data
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @property
    def size(self) -> int:
        return len(self._data)

    def read_at(self, offset: int, length: int) -> bytes:
        _check_range(self, offset, length)
        return self._data[offset : offset + length]

    def file_region(self) -> tuple[int, int] | None:
        return None


class SliceSource:
    """A window ``[offset, offset + size)`` of another source, e.g. a disk inside an uncompressed tar."""

    def __init__(self, parent: ByteSource, offset: int, size: int, name: str) -> None:
        _check_range(parent, offset, size if size <= MAX_SINGLE_READ else 0)
        if offset + size > parent.size:
            raise TruncatedImageError(f"{parent.name}: member {name} extends past the end of the archive")
        self._parent = parent
        self._offset = offset
        self._size = size
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @property
    def size(self) -> int:
        return self._size

    def read_at(self, offset: int, length: int) -> bytes:
        _check_range(self, offset, length)
        return self._parent.read_at(self._offset + offset, length)

    def file_region(self) -> tuple[int, int] | None:
        region = self._parent.file_region()
        if region is None:
            return None
        return (region[0], region[1] + self._offset)


class CapturedStream:
    """The head and tail of a stream that was decompressed once and not kept.

    Compressed images are read in one pass; the parsers only need headers (at the start) and, for fixed VHD
    and streamOptimized VMDK, footers (at the end). A read elsewhere is refused with advice rather than
    buffering an unbounded amount of data.
    """

    def __init__(self, head: bytes, tail: bytes, size: int, name: str) -> None:
        self._head = head
        self._tail = tail
        self._size = size
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @property
    def size(self) -> int:
        return self._size

    def read_at(self, offset: int, length: int) -> bytes:
        _check_range(self, offset, length)
        if offset + length <= len(self._head):
            return self._head[offset : offset + length]
        tail_start = self._size - len(self._tail)
        if offset >= tail_start:
            return self._tail[offset - tail_start : offset - tail_start + length]
        raise UnsupportedImageError(
            f"{self._name}: its headers point to data at offset {offset}, beyond the first "
            f"{len(self._head) // MIB} MiB of the compressed stream; decompress the image and run prep on it"
        )

    def file_region(self) -> tuple[int, int] | None:
        return None


def unpack_at(source: ByteSource, offset: int, fmt: str) -> tuple[Any, ...]:
    """Read and unpack a fixed-size struct; the bounds check makes ``struct.error`` impossible."""
    size = struct.calcsize(fmt)
    return struct.unpack(fmt, source.read_at(offset, size))
