"""A real Debian guest booted with the user data the running operator rendered, attacked with a real ssh.

Three variants, one boot each (the guests run at the same time):

* ``base``: one declared sudo user with its key, defaults otherwise (flavor debian, fips true).
* ``hostile``: several users and keys, ``packages`` and ``autoUpdate`` pointed at a mirror that cannot be
  reached, and ``userData`` that tries to turn password SSH back on (a ``bootcmd``/``runcmd`` sshd drop-in
  that sorts before ours, a line above sshd_config's ``Include``), allow root, set root's password and add
  a passworded user.
* ``mirror``: ``packages`` and ``autoUpdate`` from the signed apt mirror on 127.0.0.1 (apt_mirror.py), its key
  given as ``autoUpdate.aptMirrorKey``.

Each boot writes a JSON report (.envtest/guest/reports/<variant>.json) with what the guest really does,
collected through qemu-guest-agent. While the operator runs, its own view of these Debian VMs (status
conditions, /metrics, ``uds-vmctl compliance validate`` OSCAL results) is captured too: ``fips: true`` on
Debian must not be reported satisfied in any of them.
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
import yaml

from tests.guest.apt_mirror import CANARY, AptMirror, SigningKey, build_canary, cached_debs
from tests.guest.conftest import REPORTS_DIR
from tests.guest.guest_machine import (
    Accelerator,
    Guest,
    build_seed,
    detect_accelerator,
    nocloud_meta_data,
    ssh_keypair,
)
from tests.integration.operator_fixtures import (
    compliance_validate,
    core_path,
    kv_path,
    running_operator,
    status_of,
    udsvm,
    vm_path,
)
from tests.integration.operator_harness import Api
from tests.kube_helpers import TEST_NAMESPACE_LABEL, wait_for

pytestmark = pytest.mark.timeout(3600)
"""The first test pays for three boots under software emulation on a shared 2-core machine (setup counts)."""
SCHEDULE = "Sat *-*-* 05:17:00"
MIRROR = "http://127.0.0.1:9/debian"  # the guest's own loopback: refused at once, never leaves the guest
OPEN_DROPIN = "0-open.conf"  # sorts before 00-uds-hardening.conf: sshd would read it first
# (Not "AuthenticationMethods any": after an earlier AuthenticationMethods sshd -t refuses it, so sshd would
# simply not start, which proves nothing about which value wins.)
OPEN_PATH = f"/etc/ssh/sshd_config.d/{OPEN_DROPIN}"
HOSTILE_USER_DATA = f"""\
ssh_pwauth: true
disable_root: false
password: hunter2
chpasswd: {{expire: false, list: ["root:hunter2", "ops:hunter2"]}}
users:
  - {{name: eve, plain_text_passwd: hunter2, lock_passwd: false, shell: /bin/bash}}
bootcmd:
  - mkdir -p /etc/ssh/sshd_config.d
  - printf 'PasswordAuthentication yes\\nPermitRootLogin yes\\n' > {OPEN_PATH}
runcmd:
  - printf 'KbdInteractiveAuthentication yes\\nAuthenticationMethods password\\n' >> {OPEN_PATH}
  - sed -i '1i PasswordAuthentication yes' /etc/ssh/sshd_config
  - systemctl restart ssh
"""
HOSTILE_PACKAGES = ["hello"]  # offered by no reachable mirror: cloud-init must say it failed


@dataclass
class Booted:
    """One variant: its keys, its guest and the report collected from inside it."""

    name: str
    keys: dict[str, Path]
    guest: Guest
    report: dict[str, Any]
    user_data: str
    view: OperatorView


def _specs(pub: dict[str, str], mirror: AptMirror) -> dict[str, dict[str, Any]]:
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
            "packages": HOSTILE_PACKAGES,
            "autoUpdate": {"schedule": SCHEDULE, "aptMirror": MIRROR},
            "userData": HOSTILE_USER_DATA,
        },
        "mirror": {
            "flavor": "debian",
            "users": [{"name": "ops", "sshAuthorizedKeys": [pub["ops"]], "sudo": True}],
            "packages": ["hello", "tree", CANARY],
            "autoUpdate": {
                "schedule": SCHEDULE,
                "aptMirror": mirror.guest_uri,
                "aptMirrorKey": mirror.key.armored,
            },
        },
    }


CONTRAST = {"flavor": "rhel", "users": [{"name": "ops", "sshAuthorizedKeys": [], "sudo": True}]}
"""Rendered, never booted: a FIPS-capable flavour, so the SC-13 checks are seen to tell the two apart."""


@dataclass
class OperatorView:
    """What the running operator and the compliance CLI said about the VMs (per VM name)."""

    conditions: dict[str, list[dict[str, Any]]]
    metrics: str
    controls: dict[str, dict[str, str]]
    oscal_states: dict[str, str]


def _compliance(
    kubeconfig: Path, namespace: str, out: Path
) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """``uds-vmctl compliance validate``: per-VM control states (JSON) and the OSCAL findings' states."""
    result = compliance_validate(kubeconfig, namespace, out)
    summary = json.loads(result.stdout)
    controls = {row["name"]: row["controls"] for row in summary["vms"]}
    results = yaml.safe_load(out.read_text())["assessment-results"]["results"]
    states: dict[str, str] = {}  # "<control> <vm name>" -> state, from each OSCAL finding
    for finding in results[0].get("findings", []):
        control, vm = finding["title"].split(" ", 1)
        assert finding["target"]["target-id"] == f"{control}_smt"
        states[f"{control} {vm.rsplit('/', 1)[1]}"] = finding["target"]["status"]["state"]
    return controls, states


def _rendered(
    control_plane: Any, workdir: Path, specs: dict[str, dict[str, Any]]
) -> tuple[dict[str, tuple[str, str]], OperatorView]:
    """(user data, meta-data) per variant, read from what the running operator wrote, and its view of them."""
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
        with running_operator(control_plane, namespace, workdir) as operator:
            for name, cloud_init in [*specs.items(), ("contrast", CONTRAST)]:
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
            names = [*specs, "contrast"]
            conditions = {
                n: wait_for(
                    lambda n=n: status_of(api, namespace, n).get("conditions") or None,
                    90,
                    0.3,
                    what=f"{n} conditions",
                )
                for n in names
            }
            metrics = wait_for(
                lambda: text if all(f'vm="{n}"' in (text := operator.metrics()) for n in names) else None,
                90,
                0.5,
                what="per-VM metrics of every VM",
            )
            controls, oscal = _compliance(Path(control_plane.kubeconfig), namespace, workdir / "oscal.yaml")
    finally:
        api.delete(f"/api/v1/namespaces/{namespace}")
        api.close()
    return out, OperatorView(conditions, metrics, controls, oscal)


WATCHED = ["ops", "dev", "eve", "mallory", "debian"]


@pytest.fixture(scope="module")
def accelerator() -> Accelerator:
    return detect_accelerator()


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AptMirror]:
    """The signed loopback mirror: the pinned Debian .debs and the canary at 1.0."""
    work = tmp_path_factory.mktemp("mirror")
    served = AptMirror(work / "www", SigningKey.create(work / "gnupg"))
    try:
        served.publish([*cached_debs(), build_canary(work, "1.0")])
        served.start()
        yield served
    finally:
        served.stop()


@pytest.fixture(scope="module")
def operator_view(booted: dict[str, Booted]) -> OperatorView:
    return booted["base"].view


@pytest.fixture(scope="module")
def booted(
    control_plane: Any,
    guest_image: Path,
    accelerator: Accelerator,
    mirror: AptMirror,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, Booted]]:
    work = tmp_path_factory.mktemp("guests")
    keys: dict[str, Path] = {}
    pub: dict[str, str] = {}
    for who in ("ops", "dev", "dev2", "default", "stranger"):
        keys[who], pub[who] = ssh_keypair(work, who)
    rendered, view = _rendered(control_plane, work / "operator", _specs(pub, mirror))
    guests: dict[str, Guest] = {}
    try:
        for name, (user_data, meta_data) in rendered.items():
            (work / name).mkdir()
            seed = build_seed(work / name / "seed", user_data, meta_data)
            forward = mirror.guestfwd() if name == "mirror" else None
            guests[name] = Guest(work / name, guest_image, seed, accelerator, guestfwd=forward)
            guests[name].start()
        result: dict[str, Booted] = {}
        REPORTS_DIR.mkdir(parents=True, exist_ok=True)
        for name, guest in guests.items():
            guest.wait_for_login("ops", keys["ops"])
            started = time.monotonic()
            report = guest.probe_via_agent(WATCHED)
            report["boot"] = {
                "accelerator": accelerator.name,
                "accelerator_reason": accelerator.reason,
                "login_wall_s": round(guest.login_wall_s or 0.0, 1),
                "probe_wall_s": round(time.monotonic() - started, 1),
                "image": str(guest_image.resolve()),
                "image_prep": json.loads((guest_image.parent / "prep-qcow2.json").read_text()),
            }
            (REPORTS_DIR / f"{name}.json").write_text(json.dumps(report, indent=2, sort_keys=True))
            result[name] = Booted(name, keys, guest, report, rendered[name][0], view)
        yield result
    finally:
        for guest in guests.values():
            guest.stop()
            if guest.console.exists():
                shutil.copy(guest.console, REPORTS_DIR / f"{guest.workdir.name}-console.log")


VARIANTS = ["base", "hostile", "mirror"]


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
    report = booted[variant].report
    assert report["sshd_config_first_line"] == "Include /etc/ssh/sshd_config.d/00-uds-hardening.conf"
    # The hostile runcmd really landed: a drop-in sshd reads before ours, a line above the Include.
    assert (OPEN_DROPIN in report["sshd_dropins"]) is (variant == "hostile")
    sshd_config = report["agent_files"]["/etc/ssh/sshd_config"]
    assert ("PasswordAuthentication yes" in sshd_config.splitlines()) is (variant == "hostile")
    assert "00-uds-hardening.conf" in report["sshd_dropins"]


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


def test_auto_update_schedules_unattended_upgrades_from_the_mirror(
    booted: dict[str, Booted], mirror: AptMirror
) -> None:
    hostile, base, mirrored = booted["hostile"].report, booted["base"].report, booted["mirror"].report
    for report, uri in ((hostile, MIRROR), (mirrored, mirror.guest_uri)):
        assert report["apt_daily_upgrade_timer"]["active"] == "active"
        assert "05:17:00" in report["timer_schedule"]
        assert uri in report["apt_sources"]
        assert report["unattended_upgrades_installed"].endswith("installed")
    assert "05:17:00" not in base["timer_schedule"]
    assert MIRROR not in base["apt_sources"]


def test_packages_come_from_the_signed_loopback_mirror(booted: dict[str, Booted], mirror: AptMirror) -> None:
    report = booted["mirror"].report
    for name in ("hello", "tree", CANARY):
        assert report["packages"][name]["installed"], (name, report["cloud_init_package_failures"])
    assert report["packages"][CANARY]["version"] == "1.0"
    assert f"http://{mirror.guest_uri.split('//')[1]} bookworm/main amd64 Packages" in report["apt_policy"]
    assert "uds-mirror.asc" in report["apt_trusted"]
    assert any(name.endswith("_debian_dists_bookworm_InRelease") for name in report["apt_lists"])
    # The guest really fetched them from the HTTP server on 127.0.0.1 (through the guestfwd relay).
    fetched = [r for r in mirror.requests if r.startswith("GET /debian/pool/main/")]
    for name in ("hello_", "tree_", f"{CANARY}_1.0"):
        assert any(name in r and r.endswith("200") for r in fetched), (name, mirror.requests)
    assert report["cloud_init_package_failures"] == []
    errors = report["cloud_init_result"].get("v1", {}).get("errors")
    assert errors == [], errors


def test_packages_from_an_unreachable_mirror_are_refused_clearly(booted: dict[str, Booted]) -> None:
    report = booted["hostile"].report
    assert not report["packages"]["hello"]["installed"]
    # cloud-init says so: the module failed, the run ended in error (status exits 1), the log names the
    # packages. (Under guest-exec `cloud-init status` prints nothing; its exit code and result.json speak.)
    assert report["cloud_init"]["status_rc"] == 1
    errors = " ".join(str(e) for e in report["cloud_init_result"]["v1"]["errors"])
    assert "package-update-upgrade-install" in errors and "'install', 'hello'" in errors, errors
    assert any("hello" in line for line in report["cloud_init_package_failures"]), report[
        "cloud_init_package_failures"
    ]
    # ... and the hardening still ran after the failure.
    assert report["sshd_effective"]["passwordauthentication"] == "no"


def test_unattended_upgrade_installs_a_newer_package_from_the_mirror(
    booted: dict[str, Booted], mirror: AptMirror, tmp_path: Path
) -> None:
    guest = booted["mirror"].guest
    mirror.publish([*mirror.debs, build_canary(tmp_path, "2.0")])
    agent = guest.agent()
    try:
        agent.connect(timeout_s=120)
        # What the timers start: apt-daily (lists) then apt-daily-upgrade (unattended-upgrade), oneshot units.
        for unit in ("apt-daily.service", "apt-daily-upgrade.service"):
            done = agent.exec(["/usr/bin/systemctl", "start", unit], timeout_s=900)
            assert done.exitcode == 0, (unit, done.stderr)
        version = agent.exec(["/usr/bin/dpkg-query", "-W", "-f=${Version}", CANARY])
        log = agent.read_file("/var/log/unattended-upgrades/unattended-upgrades.log") or b""
    finally:
        agent.close()
    assert version.stdout == "2.0", (version.stdout, log.decode(errors="replace")[-3000:])
    assert CANARY in log.decode(errors="replace")
    assert any(f"{CANARY}_2.0_all.deb" in r and r.endswith("200") for r in mirror.requests)


def test_the_mirror_key_is_what_apt_trusts(booted: dict[str, Booted]) -> None:
    agent = booted["mirror"].guest.agent()
    key = "/etc/apt/trusted.gpg.d/uds-mirror.asc"
    try:
        agent.connect(timeout_s=120)
        moved = agent.exec(["/bin/mv", key, "/root/uds-mirror.asc"])
        assert moved.exitcode == 0, moved.stderr
        try:
            untrusted = agent.exec(["/usr/bin/apt-get", "update"], timeout_s=600)
        finally:
            agent.exec(["/bin/mv", "/root/uds-mirror.asc", key])
        trusted = agent.exec(["/usr/bin/apt-get", "update"], timeout_s=600)
    finally:
        agent.close()
    output = untrusted.stdout + untrusted.stderr
    assert "NO_PUBKEY" in output or "not signed" in output, output[-3000:]
    assert trusted.exitcode == 0 and "NO_PUBKEY" not in trusted.stdout + trusted.stderr, trusted.stderr


@pytest.mark.parametrize("variant", VARIANTS)
def test_report_was_collected_through_the_guest_agent(booted: dict[str, Booted], variant: str) -> None:
    report = booted[variant].report
    assert report["collected_via"] == "qemu-guest-agent" and report["qemu_guest_agent"] == "active"
    assert report["agent"]["version"]
    assert json.loads(report["agent_files"]["/run/cloud-init/result.json"]) == report["cloud_init_result"]
    assert report["hostname"] == variant


@pytest.mark.parametrize("variant", VARIANTS)
def test_operator_never_reports_debian_fips_satisfied(booted: dict[str, Booted], variant: str) -> None:
    view = booted[variant].view
    # Conditions: none that is True speaks of FIPS; the hardening condition says only what it checked.
    for condition in view.conditions[variant]:
        text = f"{condition.get('type')} {condition.get('reason')} {condition.get('message')}".lower()
        assert "fips" not in text and "sc-13" not in text, condition
    # Metrics: no SC-13 series reads 1 for a Debian VM.
    verified = [line for line in view.metrics.splitlines() if line.startswith("uds_vm_compliance_verified{")]
    assert any(f'vm="{variant}"' in line for line in verified)
    assert not any(
        f'vm="{variant}"' in line and "SC-13" in line.upper() and line.endswith(" 1.0") for line in verified
    )
    # OSCAL (uds-vmctl compliance validate): SC-13 not satisfied for the Debian VM, satisfied for RHEL.
    assert view.controls[variant]["sc-13"] == "not-satisfied"
    assert view.oscal_states[f"sc-13 {variant}"] == "not-satisfied"
    assert view.controls["contrast"]["sc-13"] == "satisfied"
    assert view.oscal_states["sc-13 contrast"] == "satisfied"


@pytest.mark.parametrize("variant", VARIANTS)
def test_debian_guest_is_not_in_fips_mode(booted: dict[str, Booted], variant: str) -> None:
    # fips: true (the default) on Debian: the guest really is not in FIPS mode, which is why SC-13 says so.
    assert booted[variant].report["fips_enabled"] in (None, "0")
    assert booted[variant].report["os_release"]["ID"] == "debian"
