"""Reference images made by the real ``qemu-img`` (Debian qemu-utils), once per session.

A missing tool is a failure that says how to install it, never a skip. The fixture is exposed by conftest.
"""

from __future__ import annotations

import gzip
import io
import json
import lzma
import os
import random
import shutil
import subprocess
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import zstandard

MIB = 1 << 20
GIB = 1 << 30


@dataclass(frozen=True)
class Case:
    """One reference image and what qemu-img says about it."""

    name: str
    path: Path
    qemu_path: Path  # the file qemu-img inspects (the inner disk for wrapped images)
    qemu_format: str | None = None  # forced -f (fixed VHD and ISO are probed as raw by qemu)
    violation: bool = False
    content: bool = False  # our content digest must equal qemu-img convert -O raw + sha256
    extra: dict[str, Any] = field(default_factory=dict)


def require_tool(name: str, package: str) -> str:
    """Path of a tool the image tier needs, or a failure saying how to install it."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"{name} not found: install {package} (apt-get install -y {package}, or make system-deps)"
        )
    return path


def qemu_img(*args: str | Path) -> str:
    return subprocess.run(["qemu-img", *map(str, args)], check=True, capture_output=True, text=True).stdout


def qemu_info(case: Case) -> dict[str, Any]:
    fmt = ["-f", case.qemu_format] if case.qemu_format else []
    result: dict[str, Any] = json.loads(qemu_img("info", "--output=json", *fmt, case.qemu_path))
    return result


def semi_random(size: int, seed: int) -> bytes:
    """Disk-like data: random blocks, repetitive text, and holes, so compression and zero detection matter."""
    rng = random.Random(seed)
    out = bytearray()
    block = 64 * 1024
    while len(out) < size:
        kind = rng.randrange(4)
        if kind == 0:
            out += rng.randbytes(block)
        elif kind == 1:
            out += (b"uds-vm-operator air gap %d\n" % rng.randrange(1000)) * (block // 28) + bytes(block % 28)
        elif kind == 2:
            out += bytes(block)
        else:
            out += rng.randbytes(block // 2) + bytes(block // 2)
    return bytes(out[:size])


def _tar(path: Path, members: list[tuple[str, Path | bytes]], compress: bool = False) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, payload in members:
            data = payload.read_bytes() if isinstance(payload, Path) else payload
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    path.write_bytes(gzip.compress(buffer.getvalue(), 1) if compress else buffer.getvalue())


@pytest.fixture(scope="session")
def reference_images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Case]:
    require_tool("qemu-img", "qemu-utils")
    require_tool("qemu-io", "qemu-utils")
    require_tool("xorriso", "xorriso")
    d = tmp_path_factory.mktemp("reference-images")
    cases: list[Case] = []

    def add(name: str, file_name: str, **kwargs: Any) -> None:
        path = d / file_name
        cases.append(Case(name, path, kwargs.pop("qemu_path", path), **kwargs))

    base = d / "base.raw"
    base.write_bytes(semi_random(10 * MIB, 1))
    odd = d / "odd.raw"
    odd.write_bytes(semi_random(3 * MIB + 7, 2))
    big = d / "big.raw"
    with big.open("wb") as handle:  # 1 GiB + 512 B, sparse with data at both ends
        handle.write(semi_random(MIB, 3))
        handle.seek(GIB)
        handle.write(b"\x5a" * 512)
    add("raw-10MiB", "base.raw", content=True)
    add("raw-3MiB+7", "odd.raw", content=True)
    add("raw-1GiB+512", "big.raw", content=True)

    _qcow2_cases(d, base, odd, add)

    _vmdk_vhdx_vpc_cases(d, base, odd, add)

    _iso_case(d, add)

    _wrapper_cases(d, base, odd, add)
    os.sync()
    return {case.name: case for case in cases}


Add = Callable[..., None]


def _qcow2_cases(d: Path, base: Path, odd: Path, add: Add) -> None:
    """qcow2 v2/v3, odd sizes, zlib/zstd clusters, extended L2, sparse 1 GiB, backing and data files."""
    qemu_img("convert", "-O", "qcow2", "-o", "compat=0.10", base, d / "v2.qcow2")
    add("qcow2-v2", "v2.qcow2", content=True)
    qemu_img("convert", "-O", "qcow2", base, d / "v3.qcow2")
    add("qcow2-v3", "v3.qcow2", content=True)
    qemu_img("convert", "-O", "qcow2", odd, d / "odd.qcow2")
    add("qcow2-3MiB+7", "odd.qcow2", content=True)
    qemu_img("convert", "-c", "-O", "qcow2", base, d / "zlib.qcow2")
    add("qcow2-zlib", "zlib.qcow2", content=True)
    qemu_img("convert", "-c", "-O", "qcow2", "-o", "compression_type=zstd", base, d / "zstd.qcow2")
    add("qcow2-zstd", "zstd.qcow2", content=True)
    qemu_img("convert", "-O", "qcow2", "-o", "extended_l2=on", base, d / "extl2.qcow2")
    add("qcow2-extended-l2", "extl2.qcow2", content=True)
    qemu_img("create", "-f", "qcow2", d / "big.qcow2", str(GIB + 512))
    subprocess.run(
        [
            "qemu-io",
            "-f",
            "qcow2",
            "-c",
            "write -P 0x11 0 1M",
            "-c",
            "write -z 1M 1M",
            "-c",
            f"write -P 0x22 {GIB} 512",
            str(d / "big.qcow2"),
        ],
        check=True,
        capture_output=True,
    )
    add("qcow2-1GiB+512", "big.qcow2", content=True)
    qemu_img("create", "-f", "qcow2", "-b", "v3.qcow2", "-F", "qcow2", d / "backed.qcow2")
    add("qcow2-backing-file", "backed.qcow2", violation=True, extra={"ref": "v3.qcow2"})
    qemu_img("create", "-f", "qcow2", "-o", f"data_file={d / 'ext.data'}", d / "datafile.qcow2", "10M")
    add("qcow2-data-file", "datafile.qcow2", violation=True, extra={"ref": str(d / "ext.data")})


def _vmdk_vhdx_vpc_cases(d: Path, base: Path, odd: Path, add: Add) -> None:
    """Every vmdk subformat qemu-img writes, dynamic/fixed vhdx and vpc (with and without force_size)."""
    qemu_img("convert", "-O", "vmdk", base, d / "sparse.vmdk")
    add("vmdk-monolithicSparse", "sparse.vmdk")
    qemu_img("convert", "-O", "vmdk", "-o", "subformat=streamOptimized", base, d / "stream.vmdk")
    add("vmdk-streamOptimized", "stream.vmdk")
    qemu_img("convert", "-O", "vmdk", "-o", "subformat=monolithicFlat", base, d / "flat.vmdk")
    add("vmdk-monolithicFlat", "flat.vmdk", violation=True, extra={"ref": "flat-flat.vmdk"})
    qemu_img("convert", "-O", "vmdk", "-o", "subformat=twoGbMaxExtentSparse", base, d / "split.vmdk")
    add("vmdk-twoGbMaxExtentSparse", "split.vmdk", violation=True, extra={"ref": "split-s001.vmdk"})
    qemu_img("create", "-f", "vmdk", "-b", "sparse.vmdk", "-F", "vmdk", d / "delta.vmdk")
    add("vmdk-backing", "delta.vmdk", violation=True, extra={"ref": "sparse.vmdk"})

    qemu_img("convert", "-O", "vhdx", base, d / "dynamic.vhdx")
    add("vhdx-dynamic", "dynamic.vhdx")
    qemu_img("convert", "-O", "vhdx", "-o", "subformat=fixed", odd, d / "fixed.vhdx")
    add("vhdx-fixed", "fixed.vhdx")
    qemu_img("convert", "-O", "vpc", base, d / "dynamic.vhd")
    add("vpc-dynamic", "dynamic.vhd", qemu_format="vpc")
    qemu_img("convert", "-O", "vpc", "-o", "subformat=fixed", odd, d / "fixed.vhd")
    add("vpc-fixed", "fixed.vhd", qemu_format="vpc", content=True)
    qemu_img("convert", "-O", "vpc", "-o", "force_size=on", odd, d / "forced.vhd")
    add("vpc-force-size", "forced.vhd", qemu_format="vpc")


def _iso_case(d: Path, add: Add) -> None:
    """An ISO 9660 medium made by xorriso, read as raw."""
    (d / "iso-root").mkdir()
    (d / "iso-root" / "README.TXT").write_bytes(semi_random(300_000, 4))
    subprocess.run(
        [
            "xorriso",
            "-as",
            "mkisofs",
            "-V",
            "UDS_TEST_MEDIA",
            "-o",
            str(d / "media.iso"),
            str(d / "iso-root"),
        ],
        check=True,
        capture_output=True,
    )
    add("iso", "media.iso", qemu_format="raw", content=True, extra={"label": "UDS_TEST_MEDIA"})


def _wrapper_cases(d: Path, base: Path, odd: Path, add: Add) -> None:
    """gzip/xz/zstd/tar/ova wrappers around images made above."""
    (d / "base.raw.gz").write_bytes(gzip.compress(base.read_bytes(), 6))
    add("gzip-raw", "base.raw.gz", qemu_path=base, content=True)
    (d / "odd.raw.xz").write_bytes(lzma.compress(odd.read_bytes()))
    add("xz-raw-3MiB+7", "odd.raw.xz", qemu_path=odd, content=True)
    (d / "base.raw.zst").write_bytes(zstandard.ZstdCompressor().compress(base.read_bytes()))
    add("zstd-raw", "base.raw.zst", qemu_path=base, content=True)
    (d / "v3.qcow2.gz").write_bytes(gzip.compress((d / "v3.qcow2").read_bytes(), 1))
    add("gzip-qcow2", "v3.qcow2.gz", qemu_path=d / "v3.qcow2")
    (d / "backed.qcow2.xz").write_bytes(lzma.compress((d / "backed.qcow2").read_bytes()))
    add("xz-qcow2-backing", "backed.qcow2.xz", qemu_path=d / "backed.qcow2", violation=True)
    _tar(d / "disk.tar", [("odd.raw", odd)])
    add("tar-raw", "disk.tar", qemu_path=odd, content=True)
    _tar(
        d / "appliance.ova",
        [("appliance.ovf", b"<Envelope/>"), ("disk1.qcow2", d / "v3.qcow2"), ("x.mf", b"")],
    )
    add("ova-qcow2", "appliance.ova", qemu_path=d / "v3.qcow2", content=True)
    _tar(
        d / "appliance-vmdk.ova.gz",
        [("a.ovf", b"<Envelope/>"), ("disk1.vmdk", d / "stream.vmdk")],
        compress=True,
    )
    add("ova-gzip-vmdk", "appliance-vmdk.ova.gz", qemu_path=d / "stream.vmdk")
