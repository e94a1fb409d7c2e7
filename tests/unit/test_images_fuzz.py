"""Hostile input: ≥ 10,000 mutated headers of every format must yield an ``ImageError`` or a valid result.

Mutations are deterministic (seeded), so a failure names a case that can be replayed. Inputs are small and
every size read from a mutated header is validated before use, so each case is bounded in time and memory;
there is no timing assertion.
"""

from __future__ import annotations

import gzip
import io
import lzma
import random
import struct
import tarfile
from collections.abc import Callable
from pathlib import Path

import zstandard

from tests.unit import image_builders as build
from uds_vm_operator.images import ImageError, survey_image
from uds_vm_operator.images._segments import segments_length
from uds_vm_operator.images._source import BytesSource
from uds_vm_operator.images.detect import inspect_source
from uds_vm_operator.images.survey import content_segments

CASES_PER_SEED = 900
CONTENT_WALK_LIMIT = 8 << 20
C = 1 << 16

# Seed image and the byte ranges where its headers and tables live.
SEEDS: dict[str, tuple[Callable[[], bytes], list[tuple[int, int]]]] = {
    "qcow2-v2": (
        lambda: build.qcow2(version=2, clusters={0: ("data", b"a")}),
        [(0, 128), (C, 64), (2 * C, 64)],
    ),
    "qcow2-v3-zlib": (
        lambda: build.qcow2(clusters={0: ("zlib", b"hello" * 1000), 2: ("zero", 0)}),
        [(0, 128), (C, 64), (2 * C, 64), (3 * C, 64)],
    ),
    "qcow2-zstd-extl2": (
        lambda: build.qcow2(
            extended_l2=True, compression_type=1, clusters={0: ("sub", 0xF0F0), 1: ("zstd", b"z")}
        ),
        [(0, 128), (C, 64), (2 * C, 64), (4 * C, 64)],
    ),
    "qcow2-backing-datafile": (
        lambda: build.qcow2(backing=b"base.qcow2", data_file=b"d.raw", data_file_bit=True),
        [(0, 256)],
    ),
    "vpc-dynamic": (lambda: build.vpc_dynamic(size=1 << 20, chs=(2, 16, 63)), [(0, 512), (512, 1024)]),
    "vpc-differencing": (
        lambda: build.vpc_dynamic(
            size=1 << 20, chs=(2, 16, 63), parent_name="p.vhd", locator="p.vhd", disk_type=4
        ),
        [(0, 512), (512, 1024), (2048, 64)],
    ),
    "vpc-fixed": (
        lambda: bytes(4096) + build.vpc_footer(size=4096, creator=b"win ", disk_type=2, chs=(1, 1, 8)),
        [(4096, 512)],
    ),
    "vhdx": (
        lambda: build.vhdx(size=1 << 20),
        [
            (0, 16),
            (64 << 10, 16),
            (192 << 10, 80),
            (256 << 10, 80),
            (2 << 20, 160),
            ((2 << 20) + (64 << 10), 16),
        ],
    ),
    "vhdx-parent": (
        lambda: build.vhdx(size=1 << 20, parent_paths={"relative_path": "b.vhdx", "parent_linkage": "x"}),
        [(192 << 10, 80), (2 << 20, 192), ((2 << 20) + (76 << 10), 120)],
    ),
    "vmdk-sparse": (
        lambda: build.vmdk_sparse(descriptor=build.vmdk_descriptor('parentFileNameHint="b.vmdk"')),
        [(0, 512), (512, 256)],
    ),
    "vmdk-descriptor": (
        lambda: build.vmdk_descriptor(extents='RW 100 FLAT "f.vmdk" 0\nRW 8 ZERO').encode(),
        [(0, 200)],
    ),
    "iso": (lambda: build.iso("LABEL", udf=True), [(16 * 2048, 128), (17 * 2048, 16), (18 * 2048, 16)]),
}


def mutate(data: bytes, regions: list[tuple[int, int]], rng: random.Random) -> bytes:
    """One of: flip bytes, plant an extreme integer, or truncate."""
    out = bytearray(data)
    choice = rng.random()
    if choice < 0.1:
        return bytes(out[: rng.randrange(0, len(out))])
    for _ in range(rng.randint(1, 4)):
        start, length = rng.choice(regions)
        pos = start + rng.randrange(length)
        if pos >= len(out):
            continue
        if choice < 0.55:
            out[pos] = rng.randrange(256)
        else:
            width = rng.choice((2, 4, 8))
            value = rng.choice(
                (0, 1, 511, 512, (1 << (8 * width)) - 1, 1 << (8 * width - 1), rng.getrandbits(8 * width))
            )
            fmt = rng.choice("<>") + {2: "H", 4: "I", 8: "Q"}[width]
            if pos + width <= len(out):
                struct.pack_into(fmt, out, pos, value)
    return bytes(out)


def check_one(data: bytes) -> bool:
    """Inspection, and the content walk for small disks, may only raise ImageError; True if accepted."""
    source = BytesSource(data, "fuzz.img")
    try:
        info = inspect_source(source)
        if info.virtual_size <= CONTENT_WALK_LIMIT and info.airgap_verified:
            segments = content_segments(source, info)
            if segments is not None:
                assert segments_length(segments) == info.virtual_size
    except ImageError as exc:
        assert str(exc).strip(), "an ImageError must carry a message"
        assert "\n" not in str(exc), "messages are one line"
        return False
    return True


def test_mutated_headers_only_raise_image_errors() -> None:
    total = accepted = 0
    for name, (factory, regions) in SEEDS.items():
        seed_bytes = factory()
        inspect_source(BytesSource(seed_bytes, name))  # the unmutated seed must be valid
        rng = random.Random(f"uds-vm-operator:{name}")
        for case in range(CASES_PER_SEED):
            mutated = mutate(seed_bytes, regions, rng)
            try:
                accepted += check_one(mutated)
            except AssertionError:
                raise
            except Exception as exc:  # anything else is a crash the user would see as a traceback
                raise AssertionError(f"seed {name} case {case}: {type(exc).__name__}: {exc}") from exc
            total += 1
    assert total >= 10_000
    assert 0 < accepted < total, "mutations must exercise both the accepting and the refusing paths"


def _wrapped_seeds() -> dict[str, bytes]:
    raw = bytes(range(256)) * 64
    qcow = build.qcow2(size=C, clusters={0: ("zlib", b"q" * 100)})
    tar_buffer = io.BytesIO()
    with tarfile.open(fileobj=tar_buffer, mode="w") as archive:
        for member_name, payload in (("vm.ovf", b"<ovf/>"), ("disk.qcow2", qcow)):
            entry = tarfile.TarInfo(member_name)
            entry.size = len(payload)
            archive.addfile(entry, io.BytesIO(payload))
    return {
        "gz": gzip.compress(raw),
        "xz": lzma.compress(qcow),
        "zst": zstandard.ZstdCompressor().compress(raw),
        "ova": tar_buffer.getvalue(),
        "ova.gz": gzip.compress(tar_buffer.getvalue()),
    }


def test_mutated_wrappers_only_raise_image_errors(tmp_path: Path) -> None:
    rng = random.Random("uds-vm-operator:wrappers")
    target = tmp_path / "fuzz.bin"
    for name, seed_bytes in _wrapped_seeds().items():
        target.write_bytes(seed_bytes)
        survey_image(str(target))  # the unmutated seed must be valid
        regions = [(0, min(len(seed_bytes), 64)), (len(seed_bytes) - 16, 16), (0, min(len(seed_bytes), 1024))]
        for case in range(120):
            target.write_bytes(mutate(seed_bytes, regions, rng))
            try:
                survey_image(str(target))
            except ImageError:
                pass
            except Exception as exc:
                raise AssertionError(f"wrapper {name} case {case}: {type(exc).__name__}: {exc}") from exc


def test_forged_tar_header_size_in_a_gzip_bomb_is_refused(tmp_path: Path) -> None:
    """A pax header claiming 1 GiB, backed by compressible zeros, must not be buffered by tarfile."""
    header = tarfile.TarInfo("././@PaxHeader")
    header.type = tarfile.XHDTYPE
    header.size = 1 << 30
    target = tmp_path / "bomb.tar.gz"
    with gzip.open(target, "wb", compresslevel=1) as handle:
        handle.write(header.tobuf(format=tarfile.USTAR_FORMAT))
        zeros = bytes(1 << 20)
        for _ in range(100):
            handle.write(zeros)
    try:
        survey_image(str(target))
    except ImageError as exc:
        assert "absurd size" in str(exc)
    else:
        raise AssertionError("a forged tar header size was accepted")
