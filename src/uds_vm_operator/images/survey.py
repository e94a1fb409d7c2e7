"""Everything ``prep`` needs to know about one image file, in as few passes over it as possible.

- bare raw/ISO: one pass gives the file digest, and the content digest is that same hash extended with
  the zero padding qemu adds up to a whole sector (no second read);
- bare qcow2 (and fixed VHD): one pass for the file digest, one over the data clusters for the content;
- gzip/xz/zstd (optionally around tar/OVA): one streaming pass does inspection and all digests;
- uncompressed tar/OVA: the disk member is inspected in place.

An image with external references is reported without digests: it must be flattened before anyone
bothers hashing it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from uds_vm_operator.images import qcow2
from uds_vm_operator.images._magic import is_tar, sniff_compression
from uds_vm_operator.images._segments import DataRun, Segment, ZeroRun
from uds_vm_operator.images._source import ByteSource, FileSource
from uds_vm_operator.images.detect import inspect_source
from uds_vm_operator.images.digest import hash_segments
from uds_vm_operator.images.errors import TruncatedImageError
from uds_vm_operator.images.model import ISO, QCOW2, RAW, VPC, ImageInfo
from uds_vm_operator.images.vpc import VpcLayout


class ProgressSink(Protocol):
    """Where long reads report progress (a rich progress bar on a TTY, nothing otherwise)."""

    def start(self, description: str, total_bytes: int) -> None:
        """A new full read of ``total_bytes`` begins."""

    def advance(self, n_bytes: int) -> None:
        """``n_bytes`` more were processed (called from a worker thread)."""


class NotAFileError(OSError):
    """The path exists but is not a regular file (a directory, a device)."""


@dataclass
class ImageSurvey:
    """Facts and digests of one image file."""

    path: str
    info: ImageInfo
    file_size: int
    allocated_size: int
    digests: dict[str, str] = field(default_factory=dict)
    content_sha256: str | None = None
    content_note: str | None = None


def survey_image(
    path: str,
    *,
    sha512: bool = False,
    content_digest: bool = True,
    progress: ProgressSink | None = None,
) -> ImageSurvey:
    """Inspect ``path`` and compute its digests.

    Raises ``OSError`` when the file cannot be read (a usage problem) and ``ImageError`` when the image is
    broken or unsupported. Air-gap violations are *returned* (``info.backing_refs``), not raised, so callers
    can report every reference at once.
    """
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise NotAFileError(f"{path} is not a regular file")
    algorithms = ["sha256", "sha512"] if sha512 else ["sha256"]
    with FileSource(path) as source:
        _refuse_empty(source)
        head = source.read_at(0, min(source.size, 1024))
        survey = ImageSurvey(path, _placeholder(), source.size, st.st_blocks * 512)
        compression = sniff_compression(head)
        if compression or is_tar(head):
            # Decompressors (gzip, lzma, tarfile, zstandard) load only for wrapped images: faster start-up.
            from uds_vm_operator.images import wrappers  # noqa: PLC0415
        if compression:
            return _survey_compressed(
                survey,
                source,
                compression,
                algorithms=algorithms,
                content_digest=content_digest,
                progress=progress,
            )
        inner: ByteSource = source
        if is_tar(head):
            survey.info, inner = wrappers.inspect_plain_tar(source, os.path.basename(path))
        else:
            survey.info = inspect_source(source)
        if not survey.info.airgap_verified:
            return survey
        _digest_in_place(
            survey=survey,
            source=source,
            inner=inner,
            algorithms=algorithms,
            content_digest=content_digest,
            progress=progress,
        )
    return survey


def _digest_in_place(
    *,
    survey: ImageSurvey,
    source: FileSource,
    inner: ByteSource,
    algorithms: list[str],
    content_digest: bool,
    progress: ProgressSink | None,
) -> None:
    info = survey.info
    if progress:
        progress.start("sha256 of the file" if len(algorithms) == 1 else "sha256 + sha512", source.size)
    hashers = hash_segments(
        [DataRun(0, source.size)] if source.size else [],
        source,
        algorithms,
        progress.advance if progress else None,
    )
    survey.digests = {name: h.hexdigest() for name, h in hashers.items()}
    if not content_digest:
        return
    if inner is source and info.format in (RAW, ISO):
        # The virtual disk is the file plus qemu's zero padding to a whole sector: reuse the hash.
        content = hashers["sha256"].copy()
        content.update(bytes(info.virtual_size - source.size))
        survey.content_sha256 = content.hexdigest()
        return
    segments = content_segments(inner, info)
    if segments is None:
        survey.content_note = (
            f"content digest is computed for raw, iso, fixed vpc and qcow2 images, not {info.format}; "
            "convert to qcow2 or raw to get one"
        )
        return
    if progress:
        progress.start("sha256 of the virtual disk content", info.virtual_size)
    result = hash_segments(segments, inner, ["sha256"], progress.advance if progress else None)
    survey.content_sha256 = result["sha256"].hexdigest()


def content_segments(source: ByteSource, info: ImageInfo) -> Iterable[Segment] | None:
    """The virtual disk of ``info`` as segments of ``source``, or ``None`` if we cannot describe it."""
    if info.format in (RAW, ISO):
        return _raw_like(source.size, info.virtual_size)
    if info.format == QCOW2 and isinstance(info.layout, qcow2.Qcow2Header):
        return qcow2.content_segments(source, info.layout)
    if info.format == VPC and isinstance(info.layout, VpcLayout) and info.layout.fixed:
        return _raw_like(min(info.layout.footer_offset, info.virtual_size), info.virtual_size)
    return None


def _raw_like(data_bytes: int, virtual_size: int) -> list[Segment]:
    data = min(data_bytes, virtual_size)
    segments: list[Segment] = [DataRun(0, data)] if data else []
    if virtual_size > data:
        segments.append(ZeroRun(virtual_size - data))
    return segments


def content_sha256(path: str) -> str | None:
    """SHA-256 of the virtual disk content of the image at ``path`` (what CDI writes into the PVC).

    Only the content pass: no file digest. ``None`` when the format has no content digest (see
    ``content_segments``); air-gap violations raise ``AirGapViolation``.
    """
    survey = survey_image(path, content_digest=True) if _is_wrapped(path) else None
    if survey is not None:
        survey.info.ensure_airgap_safe()
        return survey.content_sha256
    with FileSource(path) as source:
        _refuse_empty(source)
        head = source.read_at(0, min(source.size, 1024))
        inner: ByteSource = source
        if is_tar(head):
            from uds_vm_operator.images import wrappers  # noqa: PLC0415 (see survey_image)

            info, inner = wrappers.inspect_plain_tar(source, os.path.basename(path))
        else:
            info = inspect_source(source)
        info.ensure_airgap_safe()
        segments = content_segments(inner, info)
        if segments is None:
            return None
        return hash_segments(segments, inner, ["sha256"])["sha256"].hexdigest()


def _is_wrapped(path: str) -> bool:
    with open(path, "rb") as handle:
        return sniff_compression(handle.read(8)) is not None


def inspect_image(path: str) -> ImageInfo:
    """Headers only (no digests): format, virtual size, references. Compressed files are streamed once."""
    with FileSource(path) as source:
        _refuse_empty(source)
        head = source.read_at(0, min(source.size, 1024))
        compression = sniff_compression(head)
        if not compression and not is_tar(head):
            return inspect_source(source)
        from uds_vm_operator.images import wrappers  # noqa: PLC0415 (see survey_image)

        if compression:
            result = wrappers.inspect_compressed(
                fd=source.fd,
                name=os.path.basename(path),
                kind=compression,
                algorithms=[],
                want_content=False,
                progress=None,
            )
            return result.info
        return wrappers.inspect_plain_tar(source, os.path.basename(path))[0]


def _survey_compressed(
    survey: ImageSurvey,
    source: FileSource,
    compression: str,
    *,
    algorithms: list[str],
    content_digest: bool,
    progress: ProgressSink | None,
) -> ImageSurvey:
    """A compressed image is inspected and digested in one streaming pass through its decompressor."""
    from uds_vm_operator.images import wrappers  # noqa: PLC0415  (see survey_image)

    if progress:
        progress.start(f"reading and decompressing ({compression})", source.size)
    result = wrappers.inspect_compressed(
        fd=source.fd,
        name=os.path.basename(survey.path),
        kind=compression,
        algorithms=algorithms,
        want_content=content_digest,
        progress=progress.advance if progress else None,
    )
    survey.info = result.info
    survey.digests = result.file_digests if result.info.airgap_verified else {}
    survey.content_sha256 = result.content_sha256 if result.info.airgap_verified else None
    if content_digest and survey.content_sha256 is None and result.info.airgap_verified:
        survey.content_note = (
            f"content digest of a compressed {result.info.format} is not computed; "
            "decompress it and run prep on the file"
        )
    return survey


def _refuse_empty(source: FileSource) -> None:
    """An empty file is a failed copy, not a disk."""
    if source.size == 0:
        raise TruncatedImageError(f"{source.name}: the file is empty; copy the image again")


def _placeholder() -> ImageInfo:
    return ImageInfo(format=RAW, virtual_size=0)
