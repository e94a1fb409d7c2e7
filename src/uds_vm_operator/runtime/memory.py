"""Keep the operator's resident memory close to what it actually holds.

Two glibc behaviours inflate a Python process that decodes bursts of JSON (start-up listings, resyncs):
every thread that allocates gets its own malloc arena (aiohttp's resolver, the metrics server and kopf's
executor all run threads), and memory freed after a burst stays mapped until ``malloc_trim`` hands it
back. Capping the arenas and trimming whenever the reconcile queue drains keeps peak and steady RSS
near the live data. On a libc without these functions (musl, macOS) both are no-ops.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
from collections.abc import Callable
from typing import Any

M_ARENA_MAX = -8
"""glibc ``mallopt`` parameter number (malloc.h)."""
ARENA_MAX = 2
TRIM_INTERVAL_S = 5.0


def _libc() -> Any | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None


_LIBC = _libc()


TLS_READ_BUFFER_BYTES = 32 * 1024
"""asyncio's per-connection TLS read buffer (default 256 KiB, zero-filled, so resident at once).

TLS records carry at most 16 KiB, so 32 KiB costs a few more reads of a large listing and nothing else,
while ~20 open connections (kopf's watches and our request pool) drop from ~5 MiB of buffers to ~0.6 MiB.
"""


def shrink_tls_read_buffers(size: int = TLS_READ_BUFFER_BYTES) -> None:
    """Lower asyncio's TLS read-buffer size for connections opened from now on (if this Python has it)."""
    from asyncio import sslproto  # noqa: PLC0415

    protocol = getattr(sslproto, "SSLProtocol", None)
    if protocol is not None and isinstance(getattr(protocol, "max_size", None), int):
        protocol.max_size = size


def tune_allocator() -> None:
    """Cap malloc arenas and move everything imported so far out of the garbage collector's way.

    ``gc.freeze`` after the imports means the collector no longer walks tens of thousands of module-level
    objects on every full collection. The import garbage frozen with them (~0.7 MiB) is collected at the
    first idle moment (:func:`trim_when_idle`): a full collection here would cost ~15 ms of every start.
    """
    if _LIBC is not None:
        _LIBC.mallopt(M_ARENA_MAX, ARENA_MAX)
    shrink_tls_read_buffers()
    gc.freeze()


def trim() -> None:
    """Return freed heap pages to the kernel (``malloc_trim(0)``)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


async def trim_when_idle(is_idle: Callable[[], bool], interval_s: float = TRIM_INTERVAL_S) -> None:
    """Trim once after each busy period ends (checked every ``interval_s``), until cancelled."""
    was_busy = True
    start_up_garbage_collected = False
    while True:
        await asyncio.sleep(interval_s)
        idle = is_idle()
        if idle and was_busy:
            if not start_up_garbage_collected:
                gc.unfreeze()  # the imports' garbage, frozen at start without a collection
                start_up_garbage_collected = True
            gc.collect()
            gc.freeze()
            trim()
        was_busy = not idle
