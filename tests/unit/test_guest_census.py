"""tools/guest_census: boots counted by guest kind, the kind read from the boot disk's own bytes."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

from tools.guest_census import LABEL_OFFSET, QCOW2_MAGIC, GuestCensus, disk_kind


def raw_disk(path: Path, label: bytes) -> Path:
    with path.open("wb") as disk:
        disk.truncate(LABEL_OFFSET + 512)
        disk.seek(LABEL_OFFSET)
        disk.write(label.ljust(11))
    return path


def qcow2_overlay(path: Path, backing: str) -> Path:
    """A qcow2 header whose backing file is ``backing`` (the fields disk_kind reads)."""
    name = backing.encode()
    header = QCOW2_MAGIC + struct.pack(">IQI", 3, 104, len(name))
    path.write_bytes(header.ljust(104, b"\0") + name)
    return path


def test_raw_disks_are_told_apart_by_their_boot_partition_label(tmp_path: Path) -> None:
    assert disk_kind(raw_disk(tmp_path / "a.img", b"UDSTINY")) == "tiny"
    assert disk_kind(raw_disk(tmp_path / "b.img", b"UDSBOOT")) == "debian"
    assert disk_kind(raw_disk(tmp_path / "c.img", b"NO NAME")) == "other"
    assert disk_kind(tmp_path / "missing.img") == "other"


def test_a_qcow2_overlay_is_followed_to_its_image(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    base = raw_disk(cache / "disk.raw", b"UDSTINY")
    overlay = qcow2_overlay(tmp_path / "overlay.qcow2", str(base))
    assert disk_kind(overlay) == "tiny"
    relative = qcow2_overlay(cache / "relative.qcow2", "disk.raw")
    assert disk_kind(relative) == "tiny"
    named = qcow2_overlay(cache / "debian-12.qcow2", "")  # no backing: the image's own name
    named.write_bytes(QCOW2_MAGIC + bytes(100))
    assert disk_kind(named) == "debian"


def test_each_qemu_process_is_one_boot_of_its_disks_kind(tmp_path: Path) -> None:
    """Real processes named as QEMU is (a copy of bash, waiting on its stdin), with QEMU's and libvirt's ways
    of naming a disk."""
    fake_qemu = tmp_path / "qemu-system-x86_64"
    shutil.copy(shutil.which("bash") or "/bin/bash", fake_qemu)
    tiny = raw_disk(tmp_path / "tiny.img", b"UDSTINY")
    debian = raw_disk(tmp_path / "debian.img", b"UDSBOOT")
    census = GuestCensus()
    census.sample()
    already = set(census.kinds)  # under make test the node tier's guests may be booting beside this test
    argvs = [
        ["-drive", f"file={tiny},if=virtio,format=raw"],
        ["-blockdev", f'{{"driver":"file","filename":"{debian}","node-name":"x"}}'],
        ["-drive", f"file={tmp_path / 'seed.iso'},if=virtio"],
    ]
    wait = "read -r -t 60 _"
    processes = [
        subprocess.Popen([str(fake_qemu), "-c", wait, *argv], stdin=subprocess.PIPE) for argv in argvs
    ]
    try:
        census.sample()
        census.sample()  # a process seen twice is still one boot
    finally:
        for process in processes:
            process.kill()
            process.wait()
    ours = {pid: kind for (pid, _), kind in census.kinds.items() if (pid, _) not in already}
    assert sorted(ours.get(p.pid, "unseen") for p in processes) == ["debian", "other", "tiny"], ours
    assert len(census.kinds) - len(already) == 3, census.kinds
    assert census.summary()["tiny"]["boots"] >= 1
    assert "tiny " in census.line() and "QEMU CPU-s" in census.line(), census.line()
