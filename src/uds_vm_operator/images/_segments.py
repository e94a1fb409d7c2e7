"""The virtual disk described as a sequence of pieces, so one hashing loop serves every format.

A format's content walker yields runs of host-file bytes (read in large ``preadv`` calls), runs of zeros
(hashed from a preallocated zero buffer, never read) and literal bytes (a decompressed cluster).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

# Adjacent runs are merged up to this length, so a fully allocated image becomes a few large reads.
MAX_RUN = 64 << 20


@dataclass(frozen=True, slots=True)
class DataRun:
    """``length`` bytes at ``offset`` of the source file."""

    offset: int
    length: int


@dataclass(frozen=True, slots=True)
class ZeroRun:
    """``length`` zero bytes."""

    length: int


@dataclass(frozen=True, slots=True)
class Literal:
    """Bytes produced in memory (e.g. a decompressed cluster)."""

    data: bytes


Segment = DataRun | ZeroRun | Literal


def coalesce(segments: Iterable[Segment]) -> Iterator[Segment]:
    """Merge neighbouring data runs that are contiguous in the file, and neighbouring zero runs."""
    pending: Segment | None = None
    for seg in segments:
        if pending is None:
            pending = seg
            continue
        if (
            isinstance(seg, DataRun)
            and isinstance(pending, DataRun)
            and pending.offset + pending.length == seg.offset
            and pending.length + seg.length <= MAX_RUN
        ):
            pending = DataRun(pending.offset, pending.length + seg.length)
        elif isinstance(seg, ZeroRun) and isinstance(pending, ZeroRun):
            pending = ZeroRun(pending.length + seg.length)
        else:
            yield pending
            pending = seg
    if pending is not None:
        yield pending


def segments_length(segments: Iterable[Segment]) -> int:
    """Total number of bytes the segments describe (used by tests)."""
    total = 0
    for seg in segments:
        total += len(seg.data) if isinstance(seg, Literal) else seg.length
    return total
