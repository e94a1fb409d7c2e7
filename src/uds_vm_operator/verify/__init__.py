"""The in-cluster disk verifier (SI-7): hash exactly the image's bytes on the PVC and compare.

CDI cannot check a digest for uploads (its issue #4104) nor for http imports before v1.65, so the operator
runs ``uds-vm-operator verify-disk`` in a short-lived, hardened pod against the imported PVC and lets the
VM run only after a match.
"""

from uds_vm_operator.verify.core import verify_disk
from uds_vm_operator.verify.digest import Digest, digest_or_none, parse_digest
from uds_vm_operator.verify.errors import DigestFormatError, DiskReadError, DiskTooSmallError, VerifyError
from uds_vm_operator.verify.reader import HashedPrefix, hash_prefix
from uds_vm_operator.verify.result import VerifyResult, parse_result

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
