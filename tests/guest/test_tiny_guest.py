"""The tiny test guest (tools/guest/build-tiny-image.sh) under QEMU, with the user data the operator renders.

The node tier boots this guest wherever KubeVirt's and the operator's mechanics are the subject (policy
packets, power, pools and rolls), so what those tests rely on is proven here once, on one shared boot: the
NoCloud seed's users log in with their declared keys and nothing else does, commands run in bash as on the
Debian image, the QEMU guest agent answers what KubeVirt asks of it, and the ACPI power button (what libvirt
presses when KubeVirt stops a VM) powers the guest off. The hardening claims are not made for this guest:
they are the Debian image's (test_guest_hardening.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.guest.guest_machine import Guest, build_seed, detect_accelerator, nocloud_meta_data, ssh_keypair
from uds_vm_operator.api import UDSVirtualMachineSpec
from uds_vm_operator.render.cloudinit import render_user_data
from uds_vm_operator.render.common import Owner

KUBEVIRT_AGENT_COMMANDS = {
    "guest-ping",
    "guest-info",
    "guest-get-osinfo",
    "guest-get-host-name",
    "guest-get-users",
    "guest-get-fsinfo",
    "guest-network-get-interfaces",
    "guest-get-time",
    "guest-shutdown",
    "guest-exec",
    "guest-exec-status",
}
"""What virt-launcher's agent poller and virt-handler call (the guest's OS, interfaces, users, file systems,
time) and what a stop or an exec asks for."""


@dataclass(frozen=True)
class TinyBoot:
    guest: Guest
    ops: Path
    viewer: Path
    stranger: Path
    login_s: float


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory, tiny_image: Path) -> Iterator[TinyBoot]:
    """One boot of the tiny guest for the whole module, seeded with two declared users."""
    workdir = tmp_path_factory.mktemp("tiny")
    ops, ops_public = ssh_keypair(workdir, "ops")
    viewer, viewer_public = ssh_keypair(workdir, "viewer")
    stranger, _ = ssh_keypair(workdir, "stranger")
    spec = UDSVirtualMachineSpec.model_validate(
        {
            "source": {
                "http": {"url": "https://images.example/tiny.qcow2", "checksum": "sha256:" + "0" * 64}
            },
            "cloudInit": {
                "flavor": "debian",
                "users": [
                    {"name": "ops", "sshAuthorizedKeys": [ops_public], "sudo": True},
                    {"name": "viewer", "sshAuthorizedKeys": [viewer_public]},
                ],
            },
        }
    )
    user_data = render_user_data(Owner("tiny", "guests", "0000"), spec)
    seed = build_seed(workdir / "seed", user_data, nocloud_meta_data("tiny-0", "tiny"))
    guest = Guest(workdir, tiny_image, seed, detect_accelerator(), vcpus="1")
    guest.start()
    try:
        login_s = guest.wait_for_login("ops", ops)
        print(f"tiny guest: QEMU start -> first ops login {login_s:.1f} s")
        yield TinyBoot(guest, ops, viewer, stranger, login_s)
    finally:
        guest.stop()


def test_declared_users_log_in_with_their_keys_into_bash(tiny: TinyBoot) -> None:
    ops = tiny.guest.ssh(
        "ops",
        tiny.ops,
        'id -un; hostname; echo "$0"; cat /var/lib/cloud/instance/boot-finished && echo settled',
    )
    assert ops.returncode == 0, ops.stderr
    assert ops.stdout.split() == ["ops", "tiny", "bash", "settled"], ops.stdout
    viewer = tiny.guest.ssh("viewer", tiny.viewer, "id -un")
    assert (viewer.returncode, viewer.stdout.strip()) == (0, "viewer"), viewer.stderr


def test_a_listener_the_test_starts_accepts_and_an_unopened_port_refuses(tiny: TinyBoot) -> None:
    """What the node tier's policy test does inside the guest: it starts busybox's httpd on a port (it
    detaches, so the SSH session may end) and connects with bash's /dev/tcp; a port nobody opened fails."""
    connect = "timeout 3 bash -c '</dev/tcp/127.0.0.1/{port}' && echo connected || echo failed"
    before = tiny.guest.ssh("ops", tiny.ops, connect.format(port=8080))
    assert before.stdout.strip() == "failed", before
    started = tiny.guest.ssh("ops", tiny.ops, "busybox httpd -p 8080 -h /tmp; echo started")
    assert (started.returncode, started.stdout.strip()) == (0, "started"), started.stderr
    after = tiny.guest.ssh("ops", tiny.ops, connect.format(port=8080))
    assert after.stdout.strip() == "connected", after


def test_nothing_undeclared_logs_in(tiny: TinyBoot) -> None:
    """Held against the logins above: each refusal is for a key, user or method the seed did not give."""
    attempts = {
        "ops with an undeclared key": tiny.guest.ssh("ops", tiny.stranger),
        "viewer with ops's key": tiny.guest.ssh("viewer", tiny.ops),
        "root with a declared key": tiny.guest.ssh("root", tiny.ops),
        "ops by password": tiny.guest.ssh("ops", None, password="hunter2"),
        "a user nobody declared": tiny.guest.ssh("eve", tiny.ops),
    }
    let_in = {what: result.stdout for what, result in attempts.items() if result.returncode == 0}
    assert let_in == {}, let_in
    for what, result in attempts.items():
        assert "Permission denied" in result.stderr, (what, result.stderr[-500:])


def test_the_agent_answers_what_kubevirt_asks(tiny: TinyBoot) -> None:
    agent = tiny.guest.agent()
    try:
        agent.connect(timeout_s=120)
        info = agent.call("guest-info")
        enabled = {c["name"] for c in info["supported_commands"] if c["enabled"]}
        assert enabled >= KUBEVIRT_AGENT_COMMANDS, sorted(KUBEVIRT_AGENT_COMMANDS - enabled)
        osinfo = agent.call("guest-get-osinfo")
        assert (osinfo["id"], osinfo.get("variant-id")) == ("debian", "uds-tiny"), osinfo
        assert agent.call("guest-get-host-name") == {"host-name": "tiny"}
        interfaces = {i["name"]: i for i in agent.call("guest-network-get-interfaces")}
        addresses = [a["ip-address"] for a in interfaces["eth0"].get("ip-addresses", [])]
        assert "10.0.2.15" in addresses, interfaces["eth0"]  # QEMU's user network leased it by DHCP
        ran = agent.exec(["/bin/cat", "/proc/sys/kernel/random/boot_id"], timeout_s=60)
        assert ran.exitcode == 0 and len(ran.stdout.strip()) == 36, ran
    finally:
        agent.close()


def test_zz_the_power_button_powers_it_off(tiny: TinyBoot) -> None:
    """Last in the module: it ends the shared boot. A guest that ignored the button would keep QEMU
    running (KubeVirt would then wait out the grace period and kill it)."""
    tiny.guest.press_power_button()
    assert tiny.guest.wait_exited(120) == 0, tiny.guest.tail()
    assert "reboot: Power down" in tiny.guest.tail()
