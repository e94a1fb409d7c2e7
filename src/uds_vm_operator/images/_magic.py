"""Cheap wrapper sniffing, kept apart from ``wrappers`` so a bare image never imports the decompressors."""

from __future__ import annotations

GZIP = "gzip"
XZ = "xz"
ZSTD = "zstd"
COMPRESSIONS = {GZIP: b"\x1f\x8b", XZ: b"\xfd7zXZ\x00", ZSTD: b"\x28\xb5\x2f\xfd"}
TAR_MAGIC_OFFSET = 257


def sniff_compression(head: bytes) -> str | None:
    """Name of the compression whose magic starts ``head``, if any."""
    for name, magic in COMPRESSIONS.items():
        if head.startswith(magic):
            return name
    return None


def is_tar(head: bytes) -> bool:
    """True for a POSIX/GNU tar header (the ``ustar`` magic at offset 257)."""
    return head[TAR_MAGIC_OFFSET : TAR_MAGIC_OFFSET + 5] == b"ustar"
