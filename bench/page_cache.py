"""Evict files from the Linux page cache, and measure how much of them is resident.

A benchmark of a *cold* start needs the interpreter's files (stdlib, site-packages, bytecode, shared
libraries) to come from disk, as on a node that has never run the image. ``posix_fadvise(DONTNEED)`` drops
the clean, unmapped pages of one file without root and without touching anyone else's files; pages that
another process has mapped (``libpython`` under every running interpreter, ``libc``) stay, which is why
:func:`resident_bytes` exists: it asks the kernel (``mincore``) what is still cached, so a report can say
how cold "cold" really was instead of assuming it.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import subprocess
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
_MAP_FAILED = ctypes.c_void_p(-1).value


def regular_files(roots: Iterable[Path]) -> list[Path]:
    """Every non-empty regular file under ``roots`` (files or folders), each once, symlinks resolved."""
    seen: set[Path] = set()
    for root in roots:
        for path in _walk(root):
            try:
                real = path.resolve()
                if real not in seen and real.is_file() and real.stat().st_size > 0:
                    seen.add(real)
            except OSError:
                continue
    return sorted(seen)


def _walk(root: Path) -> Iterator[Path]:
    if root.is_file():
        yield root
        return
    for folder, _, names in os.walk(root):
        for name in names:
            yield Path(folder, name)


def evict(paths: Iterable[Path]) -> int:
    """Ask the kernel to drop each file's cached pages; returns how many files it was asked about.

    Dirty pages are not dropped (write them first: :func:`flush`), nor pages mapped by a running process.
    """
    count = 0
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        _drop_and_close(fd)
        count += 1
    return count


def evict_one(path: str | Path) -> None:
    """:func:`evict` for one file that must exist (an error if it cannot be opened)."""
    _drop_and_close(os.open(path, os.O_RDONLY))


def timed_from_disk(argv: list[str], path: str | Path) -> float:
    """Seconds ``argv`` takes to succeed when ``path``'s pages were evicted first, so it reads the device."""
    evict_one(path)
    started = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - started


def _drop_and_close(fd: int) -> None:
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def flush(paths: Iterable[Path]) -> None:
    """Write freshly created files to disk, so their pages are clean and :func:`evict` can drop them."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)


def resident_bytes(path: Path) -> tuple[int, int]:
    """(bytes of ``path`` now in the page cache, file size), from ``mincore`` on a read-only mapping."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return 0, 0
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return 0, 0
        address = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if address in (None, _MAP_FAILED):
            return 0, size
        try:
            pages = (size + PAGE_BYTES - 1) // PAGE_BYTES
            vector = (ctypes.c_ubyte * pages)()
            if _libc.mincore(address, size, vector) != 0:
                raise OSError(ctypes.get_errno(), f"mincore failed on {path}")
            resident_pages = sum(byte & 1 for byte in vector)
        finally:
            _libc.munmap(address, size)
    finally:
        os.close(fd)
    return min(resident_pages * PAGE_BYTES, size), size


def residency(paths: Iterable[Path], top: int = 0) -> dict[str, Any]:
    """Resident and total MiB over ``paths``; with ``top``, the files that kept the most resident bytes."""
    resident_total = size_total = 0
    kept: list[tuple[int, str]] = []
    for path in paths:
        resident, size = resident_bytes(path)
        resident_total += resident
        size_total += size
        if top and resident:
            kept.append((resident, str(path)))
    report: dict[str, Any] = {
        "resident_mib": round(resident_total / 2**20, 1),
        "total_mib": round(size_total / 2**20, 1),
    }
    if top:
        report["most_resident"] = [
            {"file": name, "resident_mib": round(resident / 2**20, 2)}
            for resident, name in sorted(kept, reverse=True)[:top]
        ]
    return report
