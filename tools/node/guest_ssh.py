"""SSH into a guest as a user would, from inside a pod's network namespace (never around its NetworkPolicy).

The host's OpenSSH client runs in the network namespace of a pod's container (`nsenter -t PID -n`), so each
connection is subject to the VM's NetworkPolicy exactly as any pod's is. Used by `make demo` and the node
tier.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

GUEST_USER = "ops"
BOOT_TIMEOUT_S = 900.0
"""Software emulation on a shared 2-core machine: a boot takes minutes, several at once longer."""


@dataclass(frozen=True)
class SshResult:
    """One OpenSSH client run: its exit status and what it printed."""

    returncode: int
    stdout: str
    stderr: str


def keypair(directory: Path, name: str) -> tuple[Path, str]:
    """A fresh ed25519 key pair made by ssh-keygen: (private key path, public key line)."""
    private = directory / name
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{name}@uds-vm-operator", "-f", str(private)],
        check=True,
        timeout=60,
    )
    return private, private.with_suffix(".pub").read_text(encoding="utf-8").strip()


def ssh(
    pid: int,
    host: str,
    user: str,
    key: Path | None,
    command: str = "true",
    *,
    password: str | None = None,
    timeout_s: float = 60.0,
    workdir: Path | None = None,
) -> SshResult:
    """The real OpenSSH client, run in the network namespace of the pod whose container is host PID `pid`.
    A password goes through SSH_ASKPASS (so "refused" means the server refused it, not that none was sent)."""
    options = [
        "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
        "-o", "ConnectTimeout=10", "-o", "IdentitiesOnly=yes", "-F", "/dev/null",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("SSH_")}
    if password is None:
        options += ["-o", "BatchMode=yes", "-o", "PasswordAuthentication=no"]
        options += ["-i", str(key)] if key else ["-o", "PubkeyAuthentication=no"]
    else:
        assert workdir is not None, "a password login needs a workdir for its askpass helper"
        askpass = workdir / f"askpass-{user}.sh"
        askpass.write_text(f"#!/bin/sh\nprintf '%s\\n' '{password}'\n", encoding="utf-8")
        askpass.chmod(0o700)
        env |= {"SSH_ASKPASS": str(askpass), "SSH_ASKPASS_REQUIRE": "force", "DISPLAY": ":0"}
        options += ["-o", "PreferredAuthentications=password,keyboard-interactive"]
        options += ["-o", "PubkeyAuthentication=no", "-o", "NumberOfPasswordPrompts=1"]
    done = subprocess.run(
        ["nsenter", "-t", str(pid), "-n", "ssh", *options, f"{user}@{host}", command],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        env=env,
        timeout=timeout_s + 15,
        start_new_session=True,
        check=False,
    )
    return SshResult(
        done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
    )


BOOT_FINISHED = "/var/lib/cloud/instance/boot-finished"
"""Written by cloud-init at the very end of its final stage, after runcmd has restarted sshd with the hardened
configuration. Until then a login can succeed and the next connection be reset mid-handshake (seen in CI)."""


def wait_for_login(
    pid: int, host: str, key: Path, user: str = GUEST_USER, timeout_s: float = BOOT_TIMEOUT_S
) -> float:
    """Poll until `user` logs in with `key`, then until cloud-init has finished (both bounded by `timeout_s`);
    return the seconds from the call to the first login.

    The guest is only settled once cloud-init's final stage is done: that stage restarts sshd with the
    hardened configuration, so a probe made before it could meet the unhardened daemon, or a reset."""
    started = time.monotonic()
    login_s: float | None = None
    last = SshResult(255, "", "not tried")
    while time.monotonic() - started < timeout_s:
        last = ssh(
            pid, host, user, key, f"test -f {BOOT_FINISHED} && echo settled || echo booting", timeout_s=30
        )
        if last.returncode == 0 and login_s is None:
            login_s = time.monotonic() - started
        if last.returncode == 0 and last.stdout.strip().endswith("settled"):
            return login_s if login_s is not None else time.monotonic() - started
        time.sleep(3)
    state = "logged in but cloud-init did not finish" if login_s is not None else "could not log in"
    raise AssertionError(f"{user} {state} on {host} within {timeout_s:.0f} s: {last.stderr[-1500:]}")


def guest_tcp(pid: int, host: str, key: Path, target: str, port: int) -> str:
    """A TCP connect made by the guest itself (bash's /dev/tcp, 3 s): "connected" or "failed"."""
    script = f"timeout 3 bash -c '</dev/tcp/{target}/{port}' && echo connected || echo failed"
    result = ssh(pid, host, GUEST_USER, key, script)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def guest_dns_lookup(pid: int, host: str, key: Path, name: str, server: str) -> str:
    """An A query for ``name`` sent by the guest itself to ``server`` over UDP port 53 (3 s): the answer's
    address, or "failed".

    A raw query, because the guest's resolver (systemd-resolved) sends ``.local`` names, cluster names
    included, to mDNS only, never to a DNS server: a name lookup would prove nothing about the policy. The
    tiny test guest has no Python: there busybox's nslookup sends the same query straight to ``server``.
    """
    labels = "+".join(f"bytes([{len(part)}])+{part.encode()!r}" for part in name.split("."))
    script = (
        "import socket,struct\n"
        f"q=struct.pack('>HHHHHH',4660,256,1,0,0,0)+{labels}+bytes(1)+struct.pack('>HH',1,1)\n"
        "s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
        "s.settimeout(3)\n"
        f"s.sendto(q,('{server}',53))\n"
        "r=s.recv(512)\n"
        "print('.'.join(map(str,r[-4:])) if r[3]&15==0 and r[7] else 'failed')\n"
    )
    answer = "failed"
    for _ in range(5):  # UDP: a lost datagram on a loaded machine is not a refusal (bounded: 5 x 3 s)
        command = (
            f'if command -v python3 >/dev/null; then python3 -c "{script}" 2>/dev/null || echo failed; '
            f"else timeout 3 busybox nslookup -type=a {name} {server} 2>/dev/null "
            "| awk '/^Address/ && NR > 2 {a=$NF} END {print a ? a : \"failed\"}'; fi"
        )
        result = ssh(pid, host, GUEST_USER, key, command)
        answer = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else "failed"
        if answer != "failed":
            break
    return answer
