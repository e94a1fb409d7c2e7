"""Checks on the files a command reads, made before a library reads them whole.

A path on the command line may be a directory, a device or a FIFO (``/dev/zero`` never ends, a FIFO
blocks on open) or far larger than the input can be; libraries that call ``read_text`` would hang or
exhaust memory. Images are the exception: ``prep`` and ``upload`` stream them and check them themselves.
"""

from __future__ import annotations

import stat
from pathlib import Path

from uds_vm_operator.cli._errors import UsageError, os_error_message

MAX_DOCUMENT_BYTES = 64 * 1024 * 1024
"""YAML/JSON inputs (component definitions) are kilobytes to a few megabytes."""


def regular_file(path: Path, *, option: str, max_bytes: int = MAX_DOCUMENT_BYTES) -> Path:
    """``path`` if it is a readable regular file of at most ``max_bytes``; else a :class:`UsageError`."""
    try:
        info = path.stat()
    except OSError as exc:
        raise UsageError(f"{option} {os_error_message(exc)}") from None
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(f"{option} {path} is not a regular file (a directory or a device); give a file")
    if info.st_size > max_bytes:
        raise UsageError(
            f"{option} {path} is {info.st_size} bytes, more than {max_bytes}; is it the right file?"
        )
    return path
