"""cloud-init: the hardening baseline per flavour, user data merged under it, and the size guard."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import yaml
from regopy import Input, Interpreter

from uds_vm_operator.api import SpecError, parse_vm_spec
from uds_vm_operator.render import Owner
from uds_vm_operator.render.cloudinit import (
    APT_MIRROR_KEY_PATH,
    MAX_USERDATA_BYTES,
    SSHD_DROPIN_PATH,
    SSHD_INCLUDE_FIRST,
    USERDATA_KEY,
    YAML_DUMPER,
    deep_merge_under,
    dump_yaml,
    render_cloudinit_secret,
    render_user_data,
)

OWNER = Owner("web", "apps", "uid-1")
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE me@host"


def user_data(cloud_init: dict[str, Any] | None = None) -> dict[str, Any]:
    raw: dict[str, Any] = {"source": {"upload": {}}, "disk": {"virtualSize": "1Gi"}}
    if cloud_init is not None:
        raw["cloudInit"] = cloud_init
    text = render_user_data(OWNER, parse_vm_spec(raw))
    assert text.startswith("#cloud-config\n")
    document: dict[str, Any] = yaml.safe_load(text)
    return document


def files(document: dict[str, Any]) -> dict[str, str]:
    return {entry["path"]: entry["content"] for entry in document["write_files"]}


@pytest.mark.parametrize("flavor", ["ubuntu", "rhel"])
def test_baseline_for_each_flavour(flavor: str) -> None:
    doc = user_data(
        {
            "flavor": flavor,
            "sshAuthorizedKeys": [KEY],
            "users": [{"name": "ops", "sshAuthorizedKeys": [KEY], "sudo": True}],
        }
    )
    assert doc["ssh_pwauth"] is False
    assert doc["disable_root"] is True
    assert doc["ssh_authorized_keys"] == [KEY]
    assert doc["users"][0] == "default"
    ops = doc["users"][1]
    assert ops["lock_passwd"] is True and ops["ssh_authorized_keys"] == [KEY]
    assert ops["sudo"] == "ALL=(ALL) NOPASSWD:ALL"
    sshd = files(doc)[SSHD_DROPIN_PATH]
    for line in ("PasswordAuthentication no", "PermitRootLogin no", "KbdInteractiveAuthentication no"):
        assert line in sshd.splitlines()
    assert ("auditd" if flavor == "ubuntu" else "audit") in doc["packages"]
    assert "systemctl enable --now auditd" in doc["runcmd"]
    assert doc["runcmd"][-1 if flavor == "ubuntu" else -2].startswith("systemctl restart ssh")


def test_sshd_dropin_sorts_first_so_its_values_win() -> None:
    # sshd keeps the first value it reads; drop-ins are read in lexical order.
    assert SSHD_DROPIN_PATH.rsplit("/", 1)[1] < "50-cloud-init.conf"


def test_fips_per_flavour_and_opt_out() -> None:
    ubuntu = user_data({"flavor": "ubuntu"})
    assert ubuntu["ubuntu_pro"] == {"enable": ["fips-updates"]}
    assert "Ciphers" in files(ubuntu)[SSHD_DROPIN_PATH]
    rhel = user_data({"flavor": "rhel"})
    assert any("fips-mode-setup --enable" in cmd for cmd in rhel["runcmd"])
    assert rhel["power_state"]["mode"] == "reboot"
    off = user_data({"flavor": "rhel", "fips": False})
    assert "power_state" not in off and not any("fips" in cmd for cmd in off["runcmd"])
    assert "Ciphers" not in files(off)[SSHD_DROPIN_PATH]


def test_ubuntu_auto_updates_with_mirror_schedule_and_reboot_window() -> None:
    doc = user_data(
        {
            "autoUpdate": {
                "schedule": "Sun *-*-* 02:00:00",
                "rebootWindow": "03:30",
                "aptMirror": "https://apt.local/ubuntu",
            }
        }
    )
    written = files(doc)
    assert 'APT::Periodic::Unattended-Upgrade "1";' in written["/etc/apt/apt.conf.d/20auto-upgrades"]
    assert 'Automatic-Reboot-Time "03:30"' in written["/etc/apt/apt.conf.d/52uds-unattended-upgrades"]
    assert (
        "OnCalendar=Sun *-*-* 02:00:00"
        in written["/etc/systemd/system/apt-daily-upgrade.timer.d/50-uds-schedule.conf"]
    )
    assert doc["apt"]["primary"][0]["uri"] == "https://apt.local/ubuntu"
    assert doc["apt"]["preserve_sources_list"] is False  # else Debian's cloud.cfg keeps the image's sources
    assert "unattended-upgrades" in doc["packages"]


def test_rhel_auto_updates_with_mirror() -> None:
    doc = user_data(
        {"flavor": "rhel", "autoUpdate": {"yumMirror": "https://yum.local/rhel9", "rebootWindow": "01:00"}}
    )
    conf = files(doc)["/etc/dnf/automatic.conf"]
    assert "apply_updates = yes" in conf and "reboot = when-needed" in conf and "shutdown -r 01:00" in conf
    assert doc["yum_repos"]["uds-mirror"]["baseurl"] == "https://yum.local/rhel9"
    assert "systemctl enable --now dnf-automatic.timer" in doc["runcmd"]


def test_disabled_auto_updates_turn_the_timer_off() -> None:
    doc = user_data({"autoUpdate": {"enabled": False}})
    assert "systemctl disable --now apt-daily-upgrade.timer" in doc["runcmd"]
    assert 'Unattended-Upgrade "0"' in files(doc)["/etc/apt/apt.conf.d/20auto-upgrades"]


def test_user_data_is_merged_under_the_hardening() -> None:
    extra = """
ssh_pwauth: true
disable_root: false
password: hunter2
chpasswd: {expire: false}
packages: [nginx]
runcmd: [echo user-first]
users:
  - name: app
    passwd: $6$hash
    lock_passwd: false
ubuntu_pro: {token: abc}
timezone: Europe/Berlin
"""
    doc = user_data({"userData": extra, "packages": ["htop"]})
    assert doc["ssh_pwauth"] is False and doc["disable_root"] is True
    assert "password" not in doc and "chpasswd" not in doc
    app = next(u for u in doc["users"] if isinstance(u, dict) and u["name"] == "app")
    assert app["lock_passwd"] is True and "passwd" not in app
    assert doc["runcmd"][0] == "echo user-first", "user commands first, hardening last"
    assert doc["packages"][0] == "nginx" and "htop" in doc["packages"] and "auditd" in doc["packages"]
    assert doc["ubuntu_pro"] == {"token": "abc", "enable": ["fips-updates"]}
    assert doc["timezone"] == "Europe/Berlin"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[1, 2]", "must be a #cloud-config mapping"),
        ("key: [unclosed", "not valid YAML"),
        (
            "write_files: [{path: /etc/ssh/sshd_config.d/01-open.conf, content: x}]",
            "sshd configuration belongs",
        ),
    ],
)
def test_bad_user_data_is_a_spec_error(text: str, fragment: str) -> None:
    with pytest.raises(SpecError, match=fragment):
        user_data({"userData": text})


def test_user_data_text_is_capped_by_the_schema() -> None:
    with pytest.raises(SpecError, match="at most 32768"):
        user_data({"userData": "x: " + "y" * 40000})


def test_rendered_size_guard() -> None:
    long_key = "ssh-rsa " + "A" * 4000
    users = [{"name": f"user{i}", "sshAuthorizedKeys": [long_key] * 2} for i in range(10)]
    with pytest.raises(SpecError, match=f"above the {MAX_USERDATA_BYTES}-byte limit"):
        user_data({"users": users})


def test_merge_rules() -> None:
    assert deep_merge_under({"a": {"b": 1, "c": 2}}, {"a": {"b": 9}}) == {"a": {"b": 9, "c": 2}}
    assert deep_merge_under({"l": [1]}, {"l": [2]}) == {"l": [1, 2]}
    assert deep_merge_under({"s": "user"}, {"s": "ours"}) == {"s": "ours"}
    assert deep_merge_under({"x": [1]}, {"x": "ours"}) == {"x": "ours"}


def test_secret_uses_the_key_kubevirt_reads_and_no_password_ever() -> None:
    spec = parse_vm_spec(
        {"source": {"upload": {}}, "disk": {"virtualSize": "1Gi"}, "cloudInit": {"sshAuthorizedKeys": [KEY]}}
    )
    secret = render_cloudinit_secret(OWNER, spec)
    assert (secret["kind"], secret["metadata"]["name"], secret["type"]) == (
        "Secret",
        "web-cloudinit",
        "Opaque",
    )
    assert set(secret["data"]) == {USERDATA_KEY} == {"userdata"}
    assert "stringData" not in secret, "stringData is write-only and would make every resync a write"
    decoded = base64.b64decode(secret["data"]["userdata"]).decode()
    assert decoded == render_user_data(OWNER, spec)
    assert "passwd:" not in decoded.replace("lock_passwd", "")


def test_libyaml_and_the_python_emitter_write_the_same_user_data() -> None:
    """The operator dumps with libyaml for speed; a VM's Secret must not change with the emitter."""
    hostile = (
        "#cloud-config\nwrite_files:\n - path: /etc/x\n   content: |\n     a: 'q' \"dq\" é ✓\n     \\t tab\n"
    )
    document = {
        "users": [{"name": "bob", "ssh_authorized_keys": [KEY]}],
        "nested": {"list": [1, 2.5, True, None, "0123", "yes", "a: b", "- x", "#c", ""]},
        "unicode": "é ✓ 🚀",
        "multiline": "line1\nline2\n",
        "user": yaml.safe_load(hostile),
    }
    assert YAML_DUMPER is yaml.CSafeDumper  # CI installs PyYAML with libyaml
    assert dump_yaml(document) == dump_yaml(document, yaml.SafeDumper)
    assert yaml.safe_load(dump_yaml(document)) == document


MIRROR_KEY = "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmDMEZ0site\n=abcd\n-----END PGP PUBLIC KEY BLOCK-----\n"


def test_apt_mirror_key_is_trusted_by_apt_in_the_guest() -> None:
    doc = user_data(
        {
            "flavor": "debian",
            "autoUpdate": {"aptMirror": "http://apt.site/debian", "aptMirrorKey": MIRROR_KEY},
        }
    )
    assert files(doc)[APT_MIRROR_KEY_PATH] == MIRROR_KEY
    assert APT_MIRROR_KEY_PATH.startswith("/etc/apt/trusted.gpg.d/") and APT_MIRROR_KEY_PATH.endswith(".asc")
    assert doc["apt"]["primary"] == [{"arches": ["default"], "uri": "http://apt.site/debian"}]
    assert APT_MIRROR_KEY_PATH not in files(user_data({"autoUpdate": {"aptMirror": "http://apt.site/d"}}))


@pytest.mark.parametrize(
    "auto_update",
    [
        {"aptMirrorKey": MIRROR_KEY},  # a key for no mirror
        {"aptMirror": "http://apt.site/debian", "aptMirrorKey": "mDMEZ0site"},  # not armored
        {"aptMirror": "http://apt.site/debian", "aptMirrorKey": MIRROR_KEY.replace("PUBLIC", "PRIVATE")},
    ],
)
def test_apt_mirror_key_refusals(auto_update: dict[str, Any]) -> None:
    with pytest.raises(SpecError):
        user_data({"flavor": "debian", "autoUpdate": auto_update})


@pytest.mark.parametrize("flavor", ["ubuntu", "rhel", "debian"])
def test_hardening_drop_in_is_included_first_before_sshd_restarts(flavor: str) -> None:
    commands = user_data({"flavor": flavor, "userData": "runcmd: [echo user-first]"})["runcmd"]
    include = next(i for i, c in enumerate(commands) if SSHD_INCLUDE_FIRST in c)
    restart = next(i for i, c in enumerate(commands) if c.startswith("systemctl restart ssh"))
    assert 0 < include < restart and commands[0] == "echo user-first"
    assert f"Include {SSHD_DROPIN_PATH}" == SSHD_INCLUDE_FIRST


def test_backslashes_in_user_data_stay_readable_to_the_compliance_checks() -> None:
    # rego-cpp's yaml.unmarshal mis-reads "\n" inside a plain scalar and drops the whole document.
    command = "printf 'a\\nb' > /etc/motd"
    text = render_user_data(
        OWNER,
        parse_vm_spec(
            {
                "source": {"upload": {}},
                "disk": {"virtualSize": "1Gi"},
                "cloudInit": {"userData": yaml.safe_dump({"runcmd": [command]})},
            }
        ),
    )
    assert yaml.safe_load(text)["runcmd"][0] == command
    interpreter = Interpreter()
    interpreter.add_module("p", "package p\nimport rego.v1\ncmd := yaml.unmarshal(input.t).runcmd[0]\n")
    interpreter.set_input(Input({"t": text}))
    # regopy prints the string raw (no JSON escaping); unreadable user data would answer "undefined".
    assert str(interpreter.query("data.p.cmd")) == '{"expressions":["' + command + '"]}'
