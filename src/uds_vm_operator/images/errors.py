"""The one exception hierarchy of ``images``: every problem with an image file is an ``ImageError``.

Callers (the CLI, the in-cluster verifier) catch ``ImageError`` at their edge and print its message; no
parser lets ``struct.error``, ``IndexError``, ``UnicodeDecodeError`` or ``zlib.error`` escape. Each message
says what is wrong and what to do next, on one line.
"""

from __future__ import annotations


class ImageError(Exception):
    """Base class: the image cannot be used as it is."""


class TruncatedImageError(ImageError):
    """The file ends before a structure its headers promise (an incomplete copy, usually)."""


class CorruptImageError(ImageError):
    """A header or table holds values no valid image can have."""


class UnsupportedImageError(ImageError):
    """A valid image using a feature we cannot handle (encryption, exotic sub-formats)."""


class AirGapViolation(ImageError):  # noqa: N818 (the name the project and its users know)
    """The image depends on a file that will not exist on the other side of the air gap.

    ``references`` names every external file (backing file, data file, extent, parent disk) found.
    """

    def __init__(self, message: str, references: list[str] | None = None) -> None:
        super().__init__(message)
        self.references = list(references or [])


def one_line(text: str, limit: int = 200) -> str:
    """Make untrusted text (a file name read from an image) safe to print on one terminal line."""
    cleaned = "".join(ch if ch.isprintable() else "?" for ch in text)
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 3] + "..."
