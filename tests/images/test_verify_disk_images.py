"""verify-disk on what CDI really writes: qcow2 images converted to raw by ``qemu-img``.

CDI converts qcow2 to raw in the PVC and pads disk.img to the volume size, so the verifier must compare
the first virtual_size bytes with the *content* digest ``uds-vmctl prep`` records (images package), not
with the digest of the qcow2 file that was transferred.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from uds_vm_operator.images import survey_image
from uds_vm_operator.verify import verify_disk

pytestmark = pytest.mark.images

VIRTUAL_SIZE = 8 * 1024 * 1024 + 4096 * 3  # not cluster aligned


def qemu_img() -> str:
    path = shutil.which("qemu-img")
    assert path, (
        "qemu-img is required for the image tier: run `make system-deps` (Debian: apt-get install qemu-utils)"
    )
    return path


def sha256_label(hex_or_label: str) -> str:
    return hex_or_label if hex_or_label.startswith("sha256:") else f"sha256:{hex_or_label}"


@pytest.fixture(scope="module")
def source_raw(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A raw disk with data, holes and a non-zero last byte, so every part of the content matters."""
    path = tmp_path_factory.mktemp("verify-images") / "source.raw"
    with path.open("wb") as handle:
        handle.truncate(VIRTUAL_SIZE)
        handle.seek(0)
        handle.write(os.urandom(1 << 20))
        handle.seek(5 << 20)
        handle.write(os.urandom(300_000))
        handle.seek(VIRTUAL_SIZE - 1)
        handle.write(b"\x7f")
    return path


def convert(src: Path, dst: Path, fmt: str, *extra: str) -> Path:
    subprocess.run([qemu_img(), "convert", "-O", fmt, *extra, str(src), str(dst)], check=True)
    return dst


def cdi_writes(qcow2: Path, pvc_bytes: int) -> Path:
    """What CDI leaves on a filesystem PVC: the qcow2 converted to raw, grown to fill the volume."""
    disk = convert(qcow2, qcow2.with_suffix(".disk.img"), "raw")
    subprocess.run([qemu_img(), "resize", "-f", "raw", str(disk), str(pvc_bytes)], check=True)
    return disk


@pytest.mark.parametrize(
    "options", [(), ("-c",), ("-o", "compat=0.10")], ids=["qcow2v3", "compressed", "qcow2v2"]
)
def test_converted_qcow2_matches_the_recorded_content_digest(
    source_raw: Path, tmp_path: Path, options: tuple[str, ...]
) -> None:
    qcow2 = convert(source_raw, tmp_path / "image.qcow2", "qcow2", *options)
    survey = survey_image(str(qcow2))
    assert survey.info.virtual_size == VIRTUAL_SIZE
    assert survey.content_sha256, survey.content_note
    content = sha256_label(survey.content_sha256)
    disk = cdi_writes(qcow2, VIRTUAL_SIZE + (64 << 20))

    result = verify_disk(str(disk), VIRTUAL_SIZE, content)
    assert result.result == "match", result

    # The digest of the transferred qcow2 file is NOT what lands in the PVC: that is why prep records both.
    file_digest = sha256_label(survey.digests["sha256"])
    assert verify_disk(str(disk), VIRTUAL_SIZE, file_digest).result == "mismatch"


def test_one_flipped_byte_in_the_converted_disk_is_found(source_raw: Path, tmp_path: Path) -> None:
    qcow2 = convert(source_raw, tmp_path / "image.qcow2", "qcow2")
    content = sha256_label(survey_image(str(qcow2)).content_sha256 or "")
    disk = cdi_writes(qcow2, VIRTUAL_SIZE + (1 << 20))
    with disk.open("r+b") as handle:
        handle.seek(VIRTUAL_SIZE - 1)
        last = handle.read(1)
        handle.seek(VIRTUAL_SIZE - 1)
        handle.write(bytes([last[0] ^ 0x01]))
    result = verify_disk(str(disk), VIRTUAL_SIZE, content)
    assert result.result == "mismatch" and result.actual != content


def test_verify_disk_command_on_the_converted_disk(source_raw: Path, tmp_path: Path) -> None:
    qcow2 = convert(source_raw, tmp_path / "image.qcow2", "qcow2")
    content = sha256_label(survey_image(str(qcow2)).content_sha256 or "")
    disk = cdi_writes(qcow2, VIRTUAL_SIZE + (16 << 20))
    log = tmp_path / "termination-log"
    exe = Path(sys.executable).with_name("uds-vm-operator")
    proc = subprocess.run(
        [
            str(exe),
            "verify-disk",
            "--path",
            str(disk),
            "--virtual-size",
            str(VIRTUAL_SIZE),
            "--expected",
            content,
            "--termination-log",
            str(log),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert f'"actual":"{content}"' in log.read_text()
