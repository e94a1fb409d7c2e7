"""Boot the guest image under QEMU with a NoCloud seed, and talk to it with a real OpenSSH client.

The seed is built the way KubeVirt builds it for ``cloudInitNoCloud`` (virt-launcher's cloud-init package):
``user-data`` from the Secret's ``userdata`` key, ``meta-data`` as JSON with ``instance-id`` and
``local-hostname``, ``network-config`` only when network data is given, written into an ISO 9660 volume
labelled ``cidata`` by ``xorrisofs -volid cidata -joliet -rock -partition_cyl_align on`` and attached as a
virtio disk. QEMU's user network is ``restrict=on`` (the guest reaches nothing), with one host forward on
127.0.0.1 to the guest's port 22 and, for a guest given one, a ``guestfwd`` to the loopback apt mirror.
qemu-guest-agent is reached on a virtio-serial port (``org.qemu.guest_agent.0``) whose host end is a unix
socket in the guest's work directory: the per-boot report is collected through it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.guest.guest_agent import GuestAgent
from tools.envtest.controlplane import free_loopback_port

LOGIN_TIMEOUT_S = 1500.0
"""Upper bound for boot + first login under software emulation on a busy, shared 2-core machine."""
LOGIN_POLL_S = 1.0
"""Pause between login attempts: a refused attempt costs the guest little (sshd not yet listening, or one
key exchange), and a long pause would add up to its own length to every measured boot."""
GUEST_VCPUS = os.environ.get("UDS_GUEST_SMP", "2")
"""vCPUs per guest (QEMU's -smp); ``UDS_GUEST_SMP`` lets `bench/guest_boot.py` compare one with two."""
PROBE = Path(__file__).with_name("guest_probe.py")
AGENT_FILES = (
    "/etc/ssh/sshd_config",
    "/etc/apt/sources.list",
    "/run/cloud-init/result.json",
    "/etc/apt/apt.conf.d/20auto-upgrades",
)
"""Files the report carries verbatim, read with guest-file-read (not through the probe)."""


@dataclass(frozen=True)
class Accelerator:
    """Which QEMU accelerator runs the guests, and why."""

    name: str
    reason: str


def detect_accelerator() -> Accelerator:
    """KVM only when it can run a normal guest: a PVM host KVM cannot (it needs PVM-built guest kernels)."""
    forced = os.environ.get("UDS_GUEST_ACCEL")
    if forced in ("kvm", "tcg"):
        return Accelerator(forced, "forced by UDS_GUEST_ACCEL")
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return Accelerator("tcg", "/dev/kvm is missing or not accessible")
    if Path("/sys/module/kvm_pvm").exists():
        return Accelerator("tcg", "the host KVM is PVM (kvm_pvm loaded): it cannot boot a stock guest kernel")
    if not any(Path(f"/sys/module/{m}").exists() for m in ("kvm_intel", "kvm_amd")):
        return Accelerator("tcg", "no hardware KVM module (kvm_intel/kvm_amd) is loaded")
    return Accelerator("kvm", "hardware KVM is available")


def nocloud_meta_data(instance_id: str, hostname: str) -> str:
    """KubeVirt's NoCloud meta-data: JSON, empty fields omitted."""
    return json.dumps({"instance-id": instance_id, "local-hostname": hostname})


def build_seed(directory: Path, user_data: str, meta_data: str, network_config: str | None = None) -> Path:
    """The ``cidata`` ISO, from a directory holding exactly the files KubeVirt writes."""
    data = directory / "data"
    data.mkdir(parents=True)
    (data / "user-data").write_text(user_data)
    (data / "meta-data").write_text(meta_data)
    if network_config:
        (data / "network-config").write_text(network_config)
    iso = directory / "noCloud.iso"
    subprocess.run(
        [
            "xorrisofs",
            "-output",
            str(iso),
            "-volid",
            "cidata",
            "-joliet",
            "-rock",
            "-partition_cyl_align",
            "on",
            str(data),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return iso


@dataclass
class SshResult:
    """One ssh client run."""

    returncode: int
    stdout: str
    stderr: str


@dataclass
class Guest:
    """One running QEMU guest (ended by its PID only, in ``stop``)."""

    workdir: Path
    image: Path
    seed: Path
    accelerator: Accelerator
    guestfwd: str | None = None
    vcpus: str = GUEST_VCPUS
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    login_wall_s: float | None = None
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def console(self) -> Path:
        return self.workdir / "console.log"

    @property
    def agent_socket(self) -> Path:
        return self.workdir / "qga.sock"

    @property
    def monitor_socket(self) -> Path:
        """QEMU's own monitor (QMP): the host side of the machine, e.g. its ACPI power button."""
        return self.workdir / "qmp.sock"

    def agent(self) -> GuestAgent:
        """A client for this guest's qemu-guest-agent (connect it before use)."""
        return GuestAgent(self.agent_socket)

    def start(self) -> None:
        """Start QEMU on a copy-on-write overlay, so the cached image is never written."""
        overlay = self.workdir / "disk.qcow2"
        subprocess.run(
            ["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", str(self.image), str(overlay)],
            check=True,
            timeout=60,
        )
        self.port = free_loopback_port()
        accel = ["-accel", "kvm", "-cpu", "host"] if self.accelerator.name == "kvm" else ["-accel", "tcg"]
        argv = [
            "qemu-system-x86_64",
            *accel,
            "-smp", self.vcpus, "-m", "1024", "-nodefaults", "-display", "none", "-no-user-config",
            "-serial", f"file:{self.console}",
            "-drive", f"file={overlay},if=virtio,format=qcow2",
            "-drive", f"file={self.seed},if=virtio,format=raw,readonly=on",
            "-netdev", f"user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:{self.port}-:22"
            + (f",guestfwd={self.guestfwd}" if self.guestfwd else ""),
            "-device", "virtio-net-pci,netdev=n0",
            "-device", "virtio-rng-pci",
            "-chardev", f"socket,id=qga0,path={self.agent_socket},server=on,wait=off",
            "-device", "virtio-serial-pci",
            "-device", "virtserialport,chardev=qga0,name=org.qemu.guest_agent.0",
            "-qmp", f"unix:{self.monitor_socket},server=on,wait=off",
        ]  # fmt: skip
        self.started_at = time.monotonic()
        with (self.workdir / "qemu.log").open("wb") as log:
            self.process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )

    def press_power_button(self) -> None:
        """Press the machine's ACPI power button (QMP ``system_powerdown``), as libvirt does when KubeVirt
        stops a VM: a guest that handles it powers off, and QEMU exits."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as monitor:
            monitor.settimeout(30)
            monitor.connect(str(self.monitor_socket))
            replies = monitor.makefile("rwb")
            replies.readline()  # the greeting
            for command in ("qmp_capabilities", "system_powerdown"):
                replies.write(json.dumps({"execute": command}).encode() + b"\n")
                replies.flush()
                while "return" not in (answer := json.loads(replies.readline())):
                    if "error" in answer:
                        raise AssertionError(f"QMP {command}: {answer['error']}")

    def wait_exited(self, timeout_s: float) -> int | None:
        """QEMU's exit status once the guest powered off (bounded), or None if it still runs."""
        assert self.process is not None
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> None:
        """End the QEMU process this guest started (by its PID, via the Popen handle)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=20)

    def ssh(
        self,
        user: str,
        key: Path | None,
        command: str = "true",
        *,
        password: str | None = None,
        stdin: str | None = None,
        timeout_s: float = 900.0,
    ) -> SshResult:
        """Run the real OpenSSH client against the forwarded port; a password goes through SSH_ASKPASS."""
        options = [
            "-p", str(self.port),
            "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "ConnectTimeout=20", "-o", "LogLevel=VERBOSE", "-o", "IdentitiesOnly=yes",
            "-F", "/dev/null",
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("SSH_")}
        if password is None:
            options += ["-o", "BatchMode=yes", "-o", "PasswordAuthentication=no"]
            options += ["-i", str(key)] if key else ["-o", "PubkeyAuthentication=no"]
        else:
            askpass = self.workdir / "askpass.sh"
            marker = self.workdir / "askpass.asked"
            askpass.write_text(f"#!/bin/sh\necho asked >> {marker}\nprintf '%s\\n' '{password}'\n")
            askpass.chmod(0o700)
            env |= {"SSH_ASKPASS": str(askpass), "SSH_ASKPASS_REQUIRE": "force", "DISPLAY": ":0"}
            options += ["-o", "PreferredAuthentications=password,keyboard-interactive"]
            options += ["-o", "PubkeyAuthentication=no", "-o", "NumberOfPasswordPrompts=1"]
        done = subprocess.run(
            ["ssh", *options, f"{user}@127.0.0.1", command],
            input=(stdin or "").encode(),
            capture_output=True,
            env=env,
            timeout=timeout_s,
            start_new_session=True,
            check=False,
        )
        return SshResult(
            done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
        )

    def wait_for_login(self, user: str, key: Path) -> float:
        """Poll until ``user`` logs in with ``key`` (bounded); return the wall time since QEMU started."""
        deadline = self.started_at + LOGIN_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise AssertionError(f"QEMU exited with {self.process.returncode}:\n{self.tail()}")
            result = self.ssh(user, key, "true", timeout_s=60)
            if result.returncode == 0:
                self.login_wall_s = time.monotonic() - self.started_at
                return self.login_wall_s
            time.sleep(LOGIN_POLL_S)
        raise AssertionError(f"{user} could not log in within {LOGIN_TIMEOUT_S:.0f} s:\n{self.tail()}")

    def probe_via_agent(self, watched: list[str], timeout_s: float = 900.0) -> dict[str, Any]:
        """Run guest_probe.py as root through qemu-guest-agent (guest-exec) and return its JSON report."""
        agent = self.agent()
        try:
            answered_s = agent.connect(timeout_s=min(timeout_s, 300.0))
            info = agent.call("guest-info")
            result = agent.exec(
                ["/usr/bin/python3", "-", *watched], stdin=PROBE.read_text(), timeout_s=timeout_s
            )
            if result.exitcode != 0:
                raise AssertionError(f"the guest probe failed ({result.exitcode}): {result.stderr[-3000:]}")
            report: dict[str, Any] = json.loads(result.stdout)
            report["collected_via"] = "qemu-guest-agent"
            report["agent"] = {"version": info.get("version"), "answered_after_s": round(answered_s, 1)}
            report["agent_files"] = {
                path: (content.decode(errors="replace") if content is not None else None)
                for path in AGENT_FILES
                for content in [agent.read_file(path)]
            }
            return report
        finally:
            agent.close()

    def tail(self, limit: int = 4000) -> str:
        text = self.console.read_text(errors="replace") if self.console.exists() else "(no console)"
        return text[-limit:]


REPO = Path(__file__).resolve().parents[2]
IMAGES_DIR = REPO / ".envtest" / "guest"
"""Where tools/guest/image.sh and tiny-image.sh link the cached images."""


def built_image(script: str, file_name: str, timeout_s: float = 3600) -> Path:
    """Run ``tools/guest/<script>`` (it builds the image or reuses the cache and links it into IMAGES_DIR)
    and return the linked ``file_name``, resolved; a failed build fails the test with the script's words."""
    import pytest  # noqa: PLC0415 (this module is also run by hand, without pytest)

    done = subprocess.run(
        [str(REPO / "tools" / "guest" / script)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"tools/guest/{script} failed:\n{done.stderr[-3000:]}", pytrace=False)
    image = (IMAGES_DIR / file_name).resolve()
    assert image.is_file(), done.stderr
    return image


def ssh_keypair(directory: Path, name: str) -> tuple[Path, str]:
    """A fresh ed25519 key pair made by ssh-keygen: (private key path, public key line)."""
    private = directory / name
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{name}@guest-tier", "-f", str(private)],
        check=True,
        timeout=60,
    )
    return private, private.with_suffix(".pub").read_text().strip()


if __name__ == "__main__":  # manual use: python guest_machine.py IMAGE USER_DATA_FILE
    print(detect_accelerator(), file=sys.stderr)
