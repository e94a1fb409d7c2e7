"""A real Debian guest booted with the user data the running operator rendered, attacked with a real ssh.

Two variant groups, one boot each (both guests run at the same time):

* ``base``: one declared sudo user with its key, defaults otherwise (flavor debian, fips true).
* ``hostile``: several users and keys, ``autoUpdate`` with a schedule and a mirror, and ``userData`` that
  tries to turn password SSH back on, allow root, set root's password and add a passworded user.

Each boot writes a JSON report (.envtest/guest/reports/<variant>.json) with what the guest really does.
"""

from __future__ import annotations

import base64
import json
import secrets
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import REPORTS_DIR
from guest_machine import Accelerator, Guest, build_seed, detect_accelerator, nocloud_meta_data, ssh_keypair
from operator_fixtures import core_path, kv_path, running_operator, udsvm, vm_path
from operator_harness import Api

from kube_helpers import TEST_NAMESPACE_LABEL, wait_for

SCHEDULE = "Sat *-*-* 05:17:00"
MIRROR = "http://127.0.0.1:9/debian"  # the guest's own loopback: refused at once, never leaves the guest
HOSTILE_USER_DATA = """\
ssh_pwauth: true
disable_root: false
password: hunter2
chpasswd: {expire: false, list: ["root:hunter2", "ops:hunter2"]}
users:
  - {name: eve, plain_text_passwd: hunter2, lock_passwd: false, shell: /bin/bash}
"""


@dataclass
class Booted:
    """One variant: its keys, its guest and the report collected from inside it."""

    name: str
    keys: dict[str, Path]
    guest: Guest
    report: dict[str, Any]
    user_data: str


def _specs(pub: dict[str, str]) -> dict[str, dict[str, Any]]:
    return {
        "base": {
            "flavor": "debian",
            "users": [{"name": "ops", "sshAuthorizedKeys": [pub["ops"]], "sudo": True}],
        },
        "hostile": {
            "flavor": "debian",
            "sshAuthorizedKeys": [pub["default"]],
            "users": [
                {"name": "ops", "sshAuthorizedKeys": [pub["ops"]], "sudo": True},
                {"name": "dev", "sshAuthorizedKeys": [pub["dev"], pub["dev2"]]},
            ],
            "autoUpdate": {"schedule": SCHEDULE, "aptMirror": MIRROR},
            "userData": HOSTILE_USER_DATA,
        },
    }


def _rendered(
    control_plane: Any, workdir: Path, specs: dict[str, dict[str, Any]]
) -> dict[str, tuple[str, str]]:
    """(user data, meta-data) per variant, read from what the running operator wrote."""
    api = Api(Path(control_plane.kubeconfig))
    namespace = f"guest-{secrets.token_hex(3)}"
    api.create(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": namespace, "labels": {TEST_NAMESPACE_LABEL: "true"}},
        },
        "/api/v1/namespaces",
    )
    out: dict[str, tuple[str, str]] = {}
    try:
        with running_operator(control_plane, namespace, workdir) as _:
            for name, cloud_init in specs.items():
                api.apply(udsvm(name, namespace, cloudInit=cloud_init), vm_path(namespace, name))
            for name in specs:
                secret = wait_for(
                    lambda n=name: api.get(core_path(namespace, "secrets", f"{n}-cloudinit")),
                    90,
                    0.3,
                    what=f"{name}-cloudinit Secret",
                )
                vm = wait_for(lambda n=name: api.get(kv_path(namespace, n)), 90, 0.3, what=f"{name} VM")
                template = vm["spec"]["template"]["spec"]
                firmware_uuid = ((template.get("domain") or {}).get("firmware") or {}).get("uuid")
                instance_id = firmware_uuid or str(uuid.uuid5(uuid.NAMESPACE_URL, vm["metadata"]["uid"]))
                hostname = template.get("hostname") or name
                user_data = base64.b64decode(secret["data"]["userdata"]).decode()
                out[name] = (user_data, nocloud_meta_data(instance_id, hostname))
    finally:
        api.delete(f"/api/v1/namespaces/{namespace}")
        api.close()
    return out


WATCHED = ["ops", "dev", "eve", "mallory", "debian"]


@pytest.fixture(scope="module")
def accelerator() -> Accelerator:
    return detect_accelerator()


@pytest.fixture(scope="module")
def booted(
    control_plane: Any, guest_image: Path, accelerator: Accelerator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Booted]]:
    work = tmp_path_factory.mktemp("guests")
    keys: dict[str, Path] = {}
    pub: dict[str, str] = {}
    for who in ("ops", "dev", "dev2", "default", "stranger"):
        keys[who], pub[who] = ssh_keypair(work, who)
    rendered = _rendered(control_plane, work / "operator", _specs(pub))
    guests: dict[str, Guest] = {}
    try:
        for name, (user_data, meta_data) in rendered.items():
            (work / name).mkdir()
            seed = build_seed(work / name / "seed", user_data, meta_data)
            guests[name] = Guest(work / name, guest_image, seed, accelerator)
            guests[name].start()
        result: dict[str, Booted] = {}
        REPORTS_DIR.mkdir(parents=True, exist_ok=True)
        for name, guest in guests.items():
            guest.wait_for_login("ops", keys["ops"])
            started = time.monotonic()
            report = guest.probe("ops", keys["ops"], WATCHED)
            report["boot"] = {
                "accelerator": accelerator.name,
                "accelerator_reason": accelerator.reason,
                "login_wall_s": round(guest.login_wall_s or 0.0, 1),
                "probe_wall_s": round(time.monotonic() - started, 1),
                "image": str(guest_image.resolve()),
            }
            (REPORTS_DIR / f"{name}.json").write_text(json.dumps(report, indent=2, sort_keys=True))
            result[name] = Booted(name, keys, guest, report, rendered[name][0])
        yield result
    finally:
        for guest in guests.values():
            guest.stop()
            if guest.console.exists():
                shutil.copy(guest.console, REPORTS_DIR / f"{guest.workdir.name}-console.log")


VARIANTS = ["base", "hostile"]


def refused(result: Any) -> bool:
    return result.returncode == 255 and "Permission denied" in result.stderr


@pytest.mark.parametrize("variant", VARIANTS)
def test_declared_user_logs_in_with_its_key_and_nothing_else(booted: dict[str, Booted], variant: str) -> None:
    b = booted[variant]
    who = b.guest.ssh("ops", b.keys["ops"], "id -un")
    assert who.returncode == 0 and who.stdout.strip() == "ops"
    assert refused(b.guest.ssh("ops", b.keys["stranger"]))  # a key nobody declared
    # The refusal names the methods the server offers: publickey alone, no password.
    assert "Permission denied (publickey)." in b.guest.ssh("ops", b.keys["stranger"]).stderr


@pytest.mark.parametrize("variant", VARIANTS)
def test_effective_sshd_settings_are_the_hardening(booted: dict[str, Booted], variant: str) -> None:
    sshd = booted[variant].report["sshd_effective"]
    assert sshd["passwordauthentication"] == "no"
    assert sshd["permitrootlogin"] == "no"
    assert sshd["kbdinteractiveauthentication"] == "no"
    assert sshd["authenticationmethods"] == "publickey"
    assert sshd["permitemptypasswords"] == "no"
    assert booted[variant].report["sshd_dropins"][0] == "00-uds-hardening.conf"


@pytest.mark.parametrize("variant", VARIANTS)
def test_passwords_are_locked_in_shadow(booted: dict[str, Booted], variant: str) -> None:
    shadow = booted[variant].report["shadow"]
    for account in ("root", "ops"):
        assert shadow[account]["locked"] and not shadow[account]["usable_hash"], account
    if variant == "hostile":
        assert booted[variant].report["users"]["eve"]["exists"]  # userData's user is created ...
        assert shadow["eve"]["locked"] and not shadow["eve"]["usable_hash"]  # ... without its password


@pytest.mark.parametrize("variant", VARIANTS)
def test_undeclared_user_does_not_exist_and_cannot_log_in(booted: dict[str, Booted], variant: str) -> None:
    b = booted[variant]
    assert b.report["users"]["mallory"]["exists"] is False
    assert refused(b.guest.ssh("mallory", b.keys["ops"]))


@pytest.mark.parametrize("variant", VARIANTS)
def test_root_is_refused_with_a_key_and_with_a_password(booted: dict[str, Booted], variant: str) -> None:
    b = booted[variant]
    # Give root a real password and our key first, so only sshd's policy stands in the way.
    setup = b.guest.ssh(
        "ops",
        b.keys["ops"],
        "echo 'root:Guest-Tier-Pw1' | sudo -n chpasswd && sudo -n install -d -m 700 /root/.ssh && "
        "sudo -n cp ~/.ssh/authorized_keys /root/.ssh/authorized_keys",
    )
    assert setup.returncode == 0, setup.stderr
    assert refused(b.guest.ssh("root", b.keys["ops"], "id -un"))
    asked = b.guest.workdir / "askpass.asked"
    asked.unlink(missing_ok=True)
    assert refused(b.guest.ssh("root", None, "id -un", password="Guest-Tier-Pw1"))
    assert not asked.exists()  # the server never even offered a password prompt


@pytest.mark.parametrize("variant", VARIANTS)
def test_declared_user_is_refused_with_a_real_password(booted: dict[str, Booted], variant: str) -> None:
    b = booted[variant]
    setup = b.guest.ssh("ops", b.keys["ops"], "echo 'ops:Guest-Tier-Pw2' | sudo -n chpasswd")
    assert setup.returncode == 0, setup.stderr
    assert refused(b.guest.ssh("ops", None, "id -un", password="Guest-Tier-Pw2"))
    if variant == "hostile":
        assert refused(b.guest.ssh("eve", None, "id -un", password="hunter2"))


def test_several_users_each_log_in_with_their_own_keys(booted: dict[str, Booted]) -> None:
    b = booted["hostile"]
    for key in ("dev", "dev2"):
        result = b.guest.ssh("dev", b.keys[key], "id -un; sudo -n true")
        assert result.stdout.splitlines()[0] == "dev"
        assert result.returncode != 0  # dev has no sudo
    assert refused(b.guest.ssh("dev", b.keys["ops"]))
    assert b.report["users"]["dev"]["authorized_keys"] == 2
    assert b.report["users"]["ops"]["sudoers"] and not b.report["users"]["dev"]["sudoers"]


def test_hostile_user_data_was_really_offered_and_stripped(booted: dict[str, Booted]) -> None:
    text = booted["hostile"].user_data
    assert "hunter2" not in text and "chpasswd" not in text
    assert "eve" in text and "ssh_pwauth: false" in text


def test_auto_update_schedules_unattended_upgrades_from_the_mirror(booted: dict[str, Booted]) -> None:
    hostile, base = booted["hostile"].report, booted["base"].report
    assert hostile["apt_daily_upgrade_timer"]["active"] == "active"
    assert "05:17:00" in hostile["timer_schedule"]
    assert "05:17:00" not in base["timer_schedule"]
    assert MIRROR in hostile["apt_sources"] and MIRROR not in base["apt_sources"]
    assert hostile["unattended_upgrades_installed"].endswith("installed")


@pytest.mark.parametrize("variant", VARIANTS)
def test_debian_guest_is_not_in_fips_mode(booted: dict[str, Booted], variant: str) -> None:
    # fips: true (the default) on Debian: the guest really is not in FIPS mode, which is why SC-13 says so.
    assert booted[variant].report["fips_enabled"] in (None, "0")
    assert booted[variant].report["os_release"]["ID"] == "debian"
