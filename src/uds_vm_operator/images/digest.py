"""Streaming digests with reads overlapped with hashing.

One reader thread fills a small pool of large preallocated buffers with ``os.preadv`` (no per-chunk
allocation) while one thread per algorithm hashes them; ``hashlib`` releases the GIL for large updates, so
reading, SHA-256 and (optionally) SHA-512 run on separate cores and the wall time approaches that of the
slowest single step. Zero runs are hashed from a shared zero buffer and never read.
"""

from __future__ import annotations

import hashlib
import os
import queue
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from uds_vm_operator.images._segments import DataRun, Literal, Segment, ZeroRun
from uds_vm_operator.images._source import ByteSource
from uds_vm_operator.images.errors import ImageError, TruncatedImageError

BUFFER_SIZE = 8 << 20
BUFFER_COUNT = 4
ZEROS = bytes(BUFFER_SIZE)
SUPPORTED_ALGORITHMS = ("sha256", "sha512")

Progress = Callable[[int], None]


@dataclass
class _Chunk:
    """One unit of work for the hashers: a view of a pool buffer, zeros, or literal bytes."""

    view: memoryview | bytes | None
    zero_length: int
    slot: int  # pool buffer index, -1 when not from the pool


class _Stop:
    """End-of-stream marker carrying the producer's exception, if any."""

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


def hash_segments(
    segments: Iterable[Segment],
    source: ByteSource,
    algorithms: Sequence[str] = ("sha256",),
    progress: Progress | None = None,
) -> dict[str, hashlib._Hash]:
    """Hash the bytes the segments describe; return ``{algorithm: hash object}`` (copy it to extend it).

    ``DataRun`` offsets are offsets in ``source``. Raises the first ``ImageError``/``OSError`` the reading
    side met, after all threads have stopped.
    """
    for name in algorithms:
        if name not in SUPPORTED_ALGORITHMS:
            raise ValueError(f"unsupported digest algorithm {name!r}")
    hashers = [hashlib.new(name) for name in algorithms]
    pool = [bytearray(BUFFER_SIZE) for _ in range(BUFFER_COUNT)]
    free: queue.Queue[int] = queue.Queue()
    for slot in range(BUFFER_COUNT):
        free.put(slot)
    pending = [0] * BUFFER_COUNT  # hashers still using each pool buffer
    lock = threading.Lock()
    queues: list[queue.Queue[_Chunk | _Stop]] = [queue.Queue() for _ in hashers]

    def release(slot: int) -> None:
        with lock:
            pending[slot] -= 1
            done = pending[slot] == 0
        if done:
            free.put(slot)

    def publish(chunk: _Chunk) -> None:
        if chunk.slot >= 0:
            pending[chunk.slot] = len(queues)
        for q in queues:
            q.put(chunk)

    def consume(hasher: hashlib._Hash, q: queue.Queue[_Chunk | _Stop]) -> None:
        while True:
            item = q.get()
            if isinstance(item, _Stop):
                return
            if item.view is None:
                remaining = item.zero_length
                while remaining:
                    step = min(remaining, BUFFER_SIZE)
                    hasher.update(ZEROS[:step] if step < BUFFER_SIZE else ZEROS)
                    remaining -= step
            else:
                hasher.update(item.view)
            if item.slot >= 0:
                release(item.slot)

    workers = [
        threading.Thread(target=consume, args=(h, q), daemon=True)
        for h, q in zip(hashers, queues, strict=True)
    ]
    for worker in workers:
        worker.start()
    error: BaseException | None = None
    try:
        _produce(segments=segments, source=source, pool=pool, free=free, publish=publish, progress=progress)
    except (ImageError, OSError) as exc:
        error = exc
    except BaseException as exc:  # KeyboardInterrupt: stop the hashers, then re-raise
        error = exc
    for q in queues:
        q.put(_Stop(error))
    for worker in workers:
        worker.join()
    if error is not None:
        raise error
    return dict(zip(algorithms, hashers, strict=True))


def _produce(
    *,
    segments: Iterable[Segment],
    source: ByteSource,
    pool: list[bytearray],
    free: queue.Queue[int],
    publish: Callable[[_Chunk], None],
    progress: Progress | None,
) -> None:
    region = source.file_region()
    for seg in segments:
        if isinstance(seg, ZeroRun):
            if seg.length:
                publish(_Chunk(None, seg.length, -1))
                if progress:
                    progress(seg.length)
        elif isinstance(seg, Literal):
            publish(_Chunk(seg.data, 0, -1))
            if progress:
                progress(len(seg.data))
        elif isinstance(seg, DataRun):
            _read_run(
                run=seg,
                source=source,
                region=region,
                pool=pool,
                free=free,
                publish=publish,
                progress=progress,
            )


def _read_run(
    *,
    run: DataRun,
    source: ByteSource,
    region: tuple[int, int] | None,
    pool: list[bytearray],
    free: queue.Queue[int],
    publish: Callable[[_Chunk], None],
    progress: Progress | None,
) -> None:
    if run.offset < 0 or run.offset + run.length > source.size:
        raise TruncatedImageError(
            f"{source.name}: data at {run.offset}+{run.length} lies beyond the end of the file"
        )
    offset = run.offset
    remaining = run.length
    while remaining:
        slot = free.get()
        buf = pool[slot]
        want = min(remaining, BUFFER_SIZE)
        if region is not None:
            fd, base = region
            view = memoryview(buf)[:want]
            got = os.preadv(fd, [view], base + offset)
            if got <= 0:
                free.put(slot)
                raise TruncatedImageError(
                    f"{source.name}: the file ended early at {offset}; was it modified?"
                )
        else:
            data = source.read_at(offset, want)
            buf[: len(data)] = data
            got = len(data)
        publish(_Chunk(memoryview(buf)[:got], 0, slot))
        offset += got
        remaining -= got
        if progress:
            progress(got)


def file_digests(
    source: ByteSource, algorithms: Sequence[str] = ("sha256",), progress: Progress | None = None
) -> dict[str, str]:
    """Digest of every byte of the source, as transferred (what ``sha256sum`` prints)."""
    hashers = hash_segments([DataRun(0, source.size)] if source.size else [], source, algorithms, progress)
    return {name: h.hexdigest() for name, h in hashers.items()}
