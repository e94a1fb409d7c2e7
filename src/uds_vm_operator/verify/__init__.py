"""The in-cluster disk verifier (SI-7): hash exactly the image's bytes on the PVC and compare.

CDI cannot check a digest for uploads (its issue #4104) nor for http imports before v1.65, so the operator
runs ``uds-vm-operator verify-disk`` in a short-lived, hardened pod against the imported PVC and lets the
VM run only after a match.

The names below load on first use: the operator imports ``verify.digest`` and ``verify.result`` to read
a verifier's verdict, and should not pay for the hashing code (``core``, ``reader``) it never runs itself
on every start.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from uds_vm_operator.verify.core import verify_disk
    from uds_vm_operator.verify.digest import Digest, digest_or_none, parse_digest
    from uds_vm_operator.verify.errors import (
        DigestFormatError,
        DiskReadError,
        DiskTooSmallError,
        VerifyError,
    )
    from uds_vm_operator.verify.reader import HashedPrefix, hash_prefix
    from uds_vm_operator.verify.result import VerifyResult, parse_result

_HOMES = {
    "verify_disk": "core",
    "Digest": "digest",
    "digest_or_none": "digest",
    "parse_digest": "digest",
    "DigestFormatError": "errors",
    "DiskReadError": "errors",
    "DiskTooSmallError": "errors",
    "VerifyError": "errors",
    "HashedPrefix": "reader",
    "hash_prefix": "reader",
    "VerifyResult": "result",
    "parse_result": "result",
}

__all__ = [
    "Digest",
    "DigestFormatError",
    "DiskReadError",
    "DiskTooSmallError",
    "HashedPrefix",
    "VerifyError",
    "VerifyResult",
    "digest_or_none",
    "hash_prefix",
    "parse_digest",
    "parse_result",
    "verify_disk",
]


def __getattr__(name: str) -> Any:
    """Import a public name's module the first time the name is asked for (PEP 562)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value
