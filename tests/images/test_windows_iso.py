"""``uds-vmctl prep`` on Windows installation media: format ``iso`` and the volume label are reported.

The ISO is made by the real ``xorriso`` (an El Torito bootable ISO 9660 + Joliet image laid out like Windows
media: primary descriptor, boot record, terminator). xorriso cannot write UDF, so the UDF-bridged variant
(what Microsoft ships: the UDF recognition sequence BEA01/NSR02/TEA01 right after the ISO terminator) is
made by appending that sequence to xorriso's descriptors.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SECTOR = 2048
LABEL = "WIN11_EN"


def xorriso() -> str:
    path = shutil.which("xorriso")
    if path is None:
        pytest.fail(
            "xorriso is not installed; install it (apt-get install xorriso) to run this test", pytrace=False
        )
    return path


def windows_iso(tmp_path: Path) -> Path:
    tree = tmp_path / "media"
    (tree / "sources").mkdir(parents=True)
    (tree / "boot").mkdir()
    (tree / "sources" / "install.wim").write_bytes(b"MSWIM\x00\x00\x00" + b"\x00" * 4096)
    (tree / "boot" / "etfsboot.com").write_bytes(b"\xeb\x3c\x90" + b"\x00" * (SECTOR - 3))
    (tree / "autorun.inf").write_text("[AutoRun.Amd64]\nopen=setup.exe\n")
    image = tmp_path / "Win11_24H2_English_x64.iso"
    result = subprocess.run(
        [
            xorriso(),
            "-as",
            "mkisofs",
            "-V",
            LABEL,
            "-iso-level",
            "3",
            "-J",
            "-joliet-long",
            "-b",
            "boot/etfsboot.com",
            "-no-emul-boot",
            "-boot-load-size",
            "4",
            "-o",
            str(image),
            str(tree),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return image


def prep(image: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "uds_vm_operator.cli.main", "prep", str(image), "--no-content-digest", *extra],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def prep_json(image: Path) -> dict[str, Any]:
    result = prep(image, "--json")
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def descriptor_types(data: bytes) -> list[bytes]:
    return [data[s * SECTOR + 1 : s * SECTOR + 6] for s in range(16, 22)]


def test_xorriso_windows_iso_is_reported_as_iso_with_its_label(tmp_path: Path) -> None:
    image = windows_iso(tmp_path)
    data = image.read_bytes()
    assert data[16 * SECTOR] == 1 and data[17 * SECTOR] == 0, "expected primary descriptor + boot record"

    report = prep_json(image)
    assert report["format"] == "iso"
    assert report["iso_volume_label"] == LABEL
    assert report["details"] == {"udf": False}
    assert report["virtual_size_bytes"] == image.stat().st_size  # qemu reads an ISO as raw bytes

    table = prep(image)
    assert table.returncode == 0, table.stderr
    assert "ISO volume label" in table.stdout and LABEL in table.stdout


def test_udf_bridged_windows_media_report_the_iso_label_and_udf(tmp_path: Path) -> None:
    data = windows_iso(tmp_path).read_bytes()
    terminator = next(s for s in range(16, 32) if data[s * SECTOR] == 255)
    recognition = b"".join(
        bytes([0]) + ident + bytes([1]) + b"\x00" * (SECTOR - 7) for ident in (b"BEA01", b"NSR02", b"TEA01")
    )
    bridged = data[: (terminator + 1) * SECTOR] + recognition
    bridged += b"\x00" * (SECTOR * 64 - len(bridged) % (SECTOR * 64))
    image = tmp_path / "en-us_windows_server_2022.iso"
    image.write_bytes(bridged)
    assert b"NSR02" in descriptor_types(bridged)

    report = prep_json(image)
    assert report["format"] == "iso"
    assert report["iso_volume_label"] == LABEL
    assert report["details"] == {"udf": True}


def test_truncated_iso_is_not_mislabelled_as_installation_media(tmp_path: Path) -> None:
    data = windows_iso(tmp_path).read_bytes()
    image = tmp_path / "cut.iso"
    image.write_bytes(data[: 16 * SECTOR + 100])  # the primary descriptor is cut off
    result = prep(image, "--json")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    report = json.loads(result.stdout)
    assert report["format"] == "raw" and "iso_volume_label" not in report  # what qemu would see, too
