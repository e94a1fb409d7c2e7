"""Which guests a test run booted, by kind, and the CPU seconds their emulators spent: read from /proc.

Each guest boot is one QEMU process (the guest tier's, or KubeVirt's inside a virt-launcher pod), so counting
QEMU processes counts boots. A sampler sees every one that lives longer than its interval (a boot under
software emulation takes tens of seconds). The kind is read from the boot disk itself, never from a test's
own word: the raw disks KubeVirt boots carry the FAT label of the image they came from (tools/guest:
UDSBOOT for the Debian image, UDSTINY for the tiny test guest), a qcow2 overlay names its backing file,
followed to the image in the cache. A disk of neither kind (a blank disk, another image) counts as "other".
"""

from __future__ import annotations

import os
import re
import struct
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")
LABEL_OFFSET = (1 << 20) + 0x2B
"""The FAT16 volume label of the images' first partition (it starts at 1 MiB: build-image.sh and
build-tiny-image.sh), 11 bytes."""
LABELS = {b"UDSBOOT": "debian", b"UDSTINY": "tiny"}
QCOW2_MAGIC = b"QFI\xfb"
_FILE_OPTION = re.compile(r"(?:^|,)file=([^,]+)")
_BLOCKDEV_FILENAME = re.compile(r'"filename":"([^"]+)"')
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def disk_kind(path: Path, depth: int = 0) -> str:
    """ "debian", "tiny" or "other": what the disk at ``path`` (a raw disk or a qcow2 chain) was made from."""
    try:
        with path.open("rb") as disk:
            head = disk.read(24)
            if head[:4] == QCOW2_MAGIC:
                offset, size = struct.unpack(">QI", head[8:20])
                if offset == 0 or depth > 4:
                    return _kind_from_name(path.name)
                disk.seek(offset)
                backing = Path(disk.read(size).decode(errors="replace"))
                return disk_kind(backing if backing.is_absolute() else path.parent / backing, depth + 1)
            disk.seek(LABEL_OFFSET)
            label = disk.read(11).rstrip(b" \0")
    except OSError:
        return "other"
    return LABELS.get(label, "other")


def _kind_from_name(name: str) -> str:
    return "tiny" if name.startswith("tiny") else "debian" if name.startswith("debian") else "other"


def boot_disk(pid: int) -> Path | None:
    """The first disk file on a QEMU process's command line, as that process sees it (its mount namespace:
    a virt-launcher's disks exist only inside its pod)."""
    try:
        argv = (PROC / str(pid) / "cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return None
    for argument in argv:
        for match in (*_BLOCKDEV_FILENAME.finditer(argument), *_FILE_OPTION.finditer(argument)):
            name = match.group(1)
            if name.startswith("/") and not name.endswith((".iso", ".sock")):
                return PROC / str(pid) / "root" / name.lstrip("/")
    return None


def _is_qemu(pid: int) -> bool:
    try:
        comm = (PROC / str(pid) / "comm").read_text().strip()
    except OSError:
        return False
    return comm.startswith("qemu-system") or comm == "qemu-kvm"


def stat_fields(pid: int | str) -> list[str] | None:
    """/proc/PID/stat after the command name (field 3 on: state, ... utime at [11], stime [12], start [19]),
    or None once the process is gone."""
    try:
        return (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


@dataclass
class GuestCensus:
    """Samples /proc every ``interval_s`` in a thread of its own (``start``/``stop``)."""

    interval_s: float = 2.0
    kinds: dict[tuple[int, float], str] = field(default_factory=dict)
    cpu_s: dict[tuple[int, float], float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def sample(self) -> None:
        """One look at every process: a QEMU process not seen before is a boot; record its kind and CPU."""
        for entry in PROC.iterdir():
            if not entry.name.isdigit() or not _is_qemu(pid := int(entry.name)):
                continue
            fields = stat_fields(pid)
            if fields is None:
                continue
            key = (pid, float(fields[19]))  # its start: a PID reused later is a different boot
            if key not in self.kinds:
                disk = boot_disk(pid)
                self.kinds[key] = disk_kind(disk) if disk is not None else "other"
            self.cpu_s[key] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime

    def start(self) -> GuestCensus:
        def loop() -> None:
            while not self._stop.wait(self.interval_s):
                self.sample()

        self.sample()
        self._thread = threading.Thread(target=loop, name="guest-census", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def summary(self) -> dict[str, dict[str, float]]:
        """Per kind: boots and the QEMU CPU seconds seen (up to each process's last sample)."""
        boots = Counter(self.kinds.values())
        cpu: Counter[str] = Counter()
        for key, seconds in self.cpu_s.items():
            cpu[self.kinds[key]] += seconds
        return {kind: {"boots": boots[kind], "qemu_cpu_s": round(cpu[kind], 1)} for kind in sorted(boots)}

    def line(self) -> str:
        """The summary as one line for a log; "no guest booted" when none was seen."""
        parts = [
            f"{kind} {v['boots']:.0f} ({v['qemu_cpu_s']:.0f} QEMU CPU-s)"
            for kind, v in self.summary().items()
        ]
        return ", ".join(parts) if parts else "no guest booted"
