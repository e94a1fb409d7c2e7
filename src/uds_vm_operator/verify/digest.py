"""Digest strings (``sha256:<hex>``) as values, so every comparison is between normalised forms.

We accept the algorithms our CRD accepts (sha256, sha512). Upper-case hex and surrounding blanks are
normalised; anything else is refused with a message that shows the expected shape.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from uds_vm_operator.verify.errors import DigestFormatError

HEX_LENGTH = {"sha256": 64, "sha512": 128}
_HEX = re.compile(r"^[0-9a-f]+$")


@dataclass(frozen=True)
class Digest:
    """An algorithm plus its lower-case hex value; ``str()`` gives the canonical ``algo:hex`` form."""

    algorithm: str
    hex: str

    def __str__(self) -> str:
        return f"{self.algorithm}:{self.hex}"

    def new_hasher(self) -> hashlib._Hash:
        """Return a fresh hash object of this digest's algorithm, to hash the bytes we compare against it."""
        return hashlib.new(self.algorithm)


def parse_digest(text: str) -> Digest:
    """Parse ``sha256:<64 hex>`` or ``sha512:<128 hex>``; raise ``DigestFormatError`` otherwise.

    A bare 64-hex string is refused on purpose: silently guessing the algorithm would turn a typo into a
    "verified" claim about the wrong hash.
    """
    algorithm, sep, value = text.strip().partition(":")
    algorithm = algorithm.strip().lower()
    value = value.strip().lower()
    if not sep or algorithm not in HEX_LENGTH:
        raise DigestFormatError(
            f"digest {text!r} must look like sha256:<64 hex digits> or sha512:<128 hex digits>"
        )
    if len(value) != HEX_LENGTH[algorithm] or not _HEX.match(value):
        raise DigestFormatError(
            f"digest {text!r}: a {algorithm} digest needs exactly {HEX_LENGTH[algorithm]} hex digits after "
            f"'{algorithm}:', got {len(value)} characters"
        )
    return Digest(algorithm, value)


def digest_or_none(text: object) -> Digest | None:
    """Parse ``text`` when it is a well-formed digest string, else return ``None`` (for optional fields)."""
    if not isinstance(text, str):
        return None
    try:
        return parse_digest(text)
    except DigestFormatError:
        return None
