"""Verify a disk against a declared digest: hash the first ``virtual_size`` bytes and compare."""

from __future__ import annotations

import hmac
from collections.abc import Callable

from uds_vm_operator.verify.digest import parse_digest
from uds_vm_operator.verify.errors import VerifyError
from uds_vm_operator.verify.reader import DEFAULT_BUFFER_BYTES, hash_prefix
from uds_vm_operator.verify.result import VerifyResult


def verify_disk(
    path: str,
    virtual_size_bytes: int,
    expected: str,
    *,
    buffer_bytes: int = DEFAULT_BUFFER_BYTES,
    on_progress: Callable[[int], None] | None = None,
) -> VerifyResult:
    """Return match/mismatch/error for the disk at ``path``; never raises for a bad disk or digest.

    Errors (unreadable disk, disk shorter than the virtual size, malformed digest) become an ``error``
    verdict with a message, because the caller's job is to report, and an exception in a pod would only
    leave a traceback nobody reads.
    """
    try:
        want = parse_digest(expected)
        if virtual_size_bytes <= 0:
            raise VerifyError(f"virtual size must be a positive number of bytes, got {virtual_size_bytes}")
        got = hash_prefix(
            path, virtual_size_bytes, want.algorithm, buffer_bytes=buffer_bytes, on_progress=on_progress
        )
    except VerifyError as exc:
        return VerifyResult("error", expected.strip(), None, 0, str(exc))
    if hmac.compare_digest(got.digest.hex, want.hex):
        return VerifyResult("match", str(want), str(got.digest), got.bytes_hashed)
    return VerifyResult("mismatch", str(want), str(got.digest), got.bytes_hashed)
