"""Errors of the disk verifier, one hierarchy so callers catch ``VerifyError`` and nothing else.

Every message names what was wrong and what to do next: the verifier runs unattended in a pod, and its
message ends up verbatim in the UDSVirtualMachine's status and Events.
"""

from __future__ import annotations


class VerifyError(Exception):
    """Base class: the disk could not be verified (which is different from a digest mismatch)."""


class DigestFormatError(VerifyError, ValueError):
    """The expected digest is not ``sha256:<64 hex>`` or ``sha512:<128 hex>``."""


class DiskTooSmallError(VerifyError):
    """The disk holds fewer bytes than the declared virtual size, so it cannot contain the image."""


class DiskReadError(VerifyError):
    """The disk (file or block device) could not be opened or read."""
