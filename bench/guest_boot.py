"""Guest boot: QEMU start → first SSH login as the declared user, with the guest tier's QEMU, median of 3.

Each sample boots the cached guest image (``make guest-image``; ``UDS_GUEST_IMAGE`` points at another one,
e.g. an older build for a before/after figure) exactly as ``tests/guest`` does (``guest_machine.Guest``:
the same QEMU argv, TCG unless hardware KVM works, a copy-on-write overlay, the NoCloud ``cidata`` ISO) with
the user data the operator renders for a plain Debian VM (``render_user_data``: one sudo user with a key, the
hardening baseline). The clock starts just before QEMU is started and stops at the first
``ssh ops@guest true`` that succeeds (``Guest.wait_for_login``). Boots run one after another, so they do
not compete with each other; ``UDS_GUEST_BOOT_PARALLEL=3`` boots three at once instead (as the guest tier
does), clock per guest. ``UDS_GUEST_BOOT_REPEATS`` changes the number of sequential boots, ``UDS_GUEST_SMP``
the vCPUs (2).

After the login, the boot's own breakdown is read over SSH (``sudo``): the guest's uptime at login (QEMU
start → kernel clock start is the rest: firmware, bootloader, loading the kernel and initrd), systemd's
timestamps (userspace start = kernel + initramfs; when each unit of the path to sshd became active),
``systemd-analyze critical-chain ssh.service`` and ``blame``, ``cloud-init analyze blame`` and the journal's
login milestones; with ``UDS_GUEST_BOOT_FIRST_BOOT=1`` the sample first waits for ``cloud-init status --wait``
(the packages and runcmd of cloud-final) and records when the whole first boot ended.

QEMU's CPU seconds up to the login are recorded beside the wall time: on a shared machine they move less with
the load than the wall time does. ``UDS_GUEST_BOOT_NICE=-10`` (root) starts QEMU at a higher priority, so the
wall time approaches that of a machine nobody else is using; the load average at each start is recorded.
"""

from __future__ import annotations

import concurrent.futures
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

REPEATS = int(os.environ.get("UDS_GUEST_BOOT_REPEATS", "3"))
UNITS = (
    "systemd-journald.service",
    "systemd-udevd.service",
    "cloud-init-local.service",
    "networking.service",
    "systemd-networkd-wait-online.service",
    "cloud-init.service",
    "network-online.target",
    "cloud-config.service",
    "qemu-guest-agent.service",
    "cloud-final.service",
    "multi-user.target",
)
"""Units whose activation time (seconds since the kernel started) each sample records. (Not ssh.service: the
hardening restarts it, and systemd keeps only the last activation; the journal's milestones say when sshd
first listened.)"""
MILESTONES = {
    "cloud_init_local_done_s": "Finished cloud-init-local.service",
    "cloud_init_done_s": "Finished cloud-init.service",
    "sshd_listening_s": "Server listening on 0.0.0.0",
    "first_accepted_publickey_s": "Accepted publickey",
}
"""Journal lines (first occurrence, seconds since the kernel started) the summary reports the median of."""


def _image() -> Path:
    chosen = os.environ.get("UDS_GUEST_IMAGE")
    if chosen:
        return Path(chosen).resolve()
    out = subprocess.run(
        [str(ROOT / "tools" / "guest" / "image.sh")], capture_output=True, text=True, check=True, timeout=3600
    )
    return (Path(out.stdout.strip()) / "debian-12.qcow2").resolve()


def _user_data(name: str, public_key: str) -> str:
    """What the operator writes into ``<name>-cloudinit`` for a plain Debian VM with one sudo user."""
    from tests.integration.operator_fixtures import udsvm  # noqa: PLC0415
    from uds_vm_operator.api import parse_vm_spec  # noqa: PLC0415
    from uds_vm_operator.render import Owner  # noqa: PLC0415
    from uds_vm_operator.render.cloudinit import render_user_data  # noqa: PLC0415

    cloud_init = {
        "flavor": "debian",
        "users": [{"name": "ops", "sshAuthorizedKeys": [public_key], "sudo": True}],
    }
    spec = parse_vm_spec(udsvm(name, "bench", cloudInit=cloud_init)["spec"])
    return render_user_data(Owner(name, "bench", str(uuid.uuid4())), spec)


def _boot_once(image: Path, workdir: Path, name: str) -> dict[str, Any]:
    from tests.guest.guest_machine import (  # noqa: PLC0415
        Guest,
        build_seed,
        detect_accelerator,
        nocloud_meta_data,
        ssh_keypair,
    )

    workdir.mkdir(parents=True)
    key, public = ssh_keypair(workdir, "ops")
    seed = build_seed(workdir / "seed", _user_data(name, public), nocloud_meta_data(str(uuid.uuid4()), name))
    guest = Guest(workdir, image, seed, detect_accelerator())
    load_at_start = os.getloadavg()[0]
    guest.start()
    try:
        login_s = guest.wait_for_login("ops", key)
        assert guest.process is not None
        login_cpu_s = _cpu_seconds(guest.process.pid)
        uptime = guest.ssh("ops", key, "cut -d' ' -f1 /proc/uptime", timeout_s=120)
        uptime_at_login_s = float(uptime.stdout.split()[0]) if uptime.returncode == 0 else None
        first_boot_done_wall_s: float | None = None
        first_boot_done_uptime_s: float | None = None
        if os.environ.get("UDS_GUEST_BOOT_FIRST_BOOT"):  # also wait for cloud-final (packages, runcmd)
            waited = guest.ssh(
                "ops", key, "sudo -n cloud-init status --wait >/dev/null; cat /proc/uptime", timeout_s=900
            )
            first_boot_done_wall_s = round(time.monotonic() - guest.started_at, 1)
            if waited.returncode == 0:
                first_boot_done_uptime_s = float(waited.stdout.split()[0])
        script = (
            "systemctl show -p UserspaceTimestampMonotonic -p FinishTimestampMonotonic --value; "
            f"for u in {' '.join(UNITS)}; do "
            'echo "$u $(systemctl show -p ActiveEnterTimestampMonotonic --value $u)"; done; '
            "echo ===; systemd-analyze time; "
            "echo ===; systemd-analyze critical-chain --no-pager ssh.service; "
            "echo ===; systemd-analyze blame --no-pager | head -n 25; "
            "echo ===; sudo -n cloud-init analyze blame | head -n 25; "
            "echo ===; uname -r; sudo -n du -sh /boot/initrd.img-$(uname -r); "
            "echo ===; sudo -n journalctl -b -o short-monotonic --no-pager | grep -E "
            "'Server listening|Accepted publickey|Started user@|Finished systemd-user-sessions|"
            "Finished cloud-|Started ssh|Reached target (network-online|multi-user)' | head -n 40"
        )
        # cloud-config may restart sshd just after the first login (it closes that connection): try again.
        for _attempt in range(3):
            facts = guest.ssh("ops", key, script, timeout_s=300)
            if facts.stdout.strip():
                break
            time.sleep(3)
    finally:
        guest.stop()
    if not facts.stdout.strip():
        raise RuntimeError(f"the boot's breakdown could not be read over SSH: {facts.stderr[-2000:]}")
    parts = facts.stdout.split("===\n")
    head = parts[0].splitlines()
    userspace_us, finish_us = int(head[0] or 0), int(head[1] or 0)
    units = {}
    for line in head[2:]:
        unit, _, value = line.partition(" ")
        units[unit] = round(int(value) / 1e6, 2) if value.strip().isdigit() and int(value) else None
    sample = {
        "login_wall_s": round(login_s, 1),
        "login_qemu_cpu_s": login_cpu_s,
        "load_average_at_start": round(load_at_start, 1),
        "guest_uptime_at_login_s": uptime_at_login_s,
        "before_kernel_s": round(login_s - uptime_at_login_s, 1) if uptime_at_login_s else None,
        "kernel_and_initramfs_s": round(userspace_us / 1e6, 2),
        "systemd_finished_s": round(finish_us / 1e6, 2) if finish_us else None,
        "unit_active_s": units,
        "first_boot_done_wall_s": first_boot_done_wall_s,
        "first_boot_done_uptime_s": first_boot_done_uptime_s,
        "systemd_analyze_time": parts[1].strip() if len(parts) > 1 else None,
        "critical_chain_ssh": parts[2].strip().splitlines() if len(parts) > 2 else [],
        "blame": parts[3].strip().splitlines() if len(parts) > 3 else [],
        "cloud_init_blame": parts[4].strip().splitlines() if len(parts) > 4 else [],
        "kernel": parts[5].strip().splitlines() if len(parts) > 5 else [],
        "login_journal": parts[6].strip().splitlines() if len(parts) > 6 else [],
    }
    print(f"guest_boot {name}: {sample['login_wall_s']} s to login", file=sys.stderr, flush=True)
    return sample


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time QEMU has used (every vCPU thread): what the boot cost, whatever else ran."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return round((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), 1)


def _milestone(journal: list[str], needle: str) -> float | None:
    """The monotonic time of the first ``journalctl -o short-monotonic`` line containing ``needle``."""
    for line in journal:
        if needle in line:
            return float(line.split("]", 1)[0].strip("[ "))
    return None


def _median(samples: list[dict[str, Any]], key: str) -> float | None:
    values = [s[key] for s in samples if s.get(key) is not None]
    return round(statistics.median(values), 1) if values else None


def run() -> dict[str, Any]:
    """Boot the image ``REPEATS`` times (or ``UDS_GUEST_BOOT_PARALLEL`` at once); medians and every sample."""
    from tests.guest.guest_machine import detect_accelerator  # noqa: PLC0415

    image = _image()
    nice = os.environ.get("UDS_GUEST_BOOT_NICE")
    if nice:  # QEMU and its vCPU threads inherit it: the boot as on a machine nobody else is using
        os.setpriority(os.PRIO_PROCESS, 0, int(nice))
    parallel = int(os.environ.get("UDS_GUEST_BOOT_PARALLEL", "1"))
    with tempfile.TemporaryDirectory(prefix="uds-guest-boot-") as tmp:
        work = Path(tmp)
        if parallel > 1:
            with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
                futures = [
                    pool.submit(_boot_once, image, work / f"g{i}", f"bench{i}") for i in range(parallel)
                ]
                samples = [f.result() for f in futures]
        else:
            samples = [_boot_once(image, work / f"g{i}", f"bench{i}") for i in range(REPEATS)]
    keys = (
        "login_wall_s",
        "login_qemu_cpu_s",
        "load_average_at_start",
        "before_kernel_s",
        "kernel_and_initramfs_s",
        "guest_uptime_at_login_s",
        "first_boot_done_wall_s",
    )
    summary: dict[str, Any] = {key: _median(samples, key) for key in keys}
    for unit in UNITS:
        values = [s["unit_active_s"].get(unit) for s in samples]
        present = [v for v in values if v is not None]
        summary[f"{unit} active at (s since kernel start)"] = (
            round(statistics.median(present), 1) if present else None
        )
    for label, needle in MILESTONES.items():
        found = [t for t in (_milestone(s["login_journal"], needle) for s in samples) if t is not None]
        summary[label] = round(statistics.median(found), 1) if found else None
    accelerator = detect_accelerator()
    return {
        "summary": {
            "image": str(image),
            "accelerator": accelerator.name,
            "boots_at_once": parallel,
            "nice": int(nice) if nice else 0,
            "samples": len(samples),
            **summary,
        },
        "samples": samples,
        "login_wall_s": [s["login_wall_s"] for s in samples],
        "systemd_analyze": [s["systemd_analyze_time"] for s in samples],
    }
