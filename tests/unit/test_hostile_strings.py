"""Hostile strings into every free-text field that reaches a guest's configuration (issue 32).

A deterministic generator (no hypothesis in the dev dependencies) crosses plausible values with injections
that break line-, key-, quote- or markup-based formats. For each field and each string the outcome must be one
of two: the model refuses it (SpecError), or the rendered files keep exactly their structure: the cloud-config
is one YAML mapping with the same keys, the systemd drop-in has its three ``Key=value`` lines, apt.conf and
dnf's automatic.conf have their fixed lines, each authorized key stays one line, and the unattend.xml parses
with the value round-tripping unchanged. Nothing else (no crash, no extra line) is acceptable.
"""

from __future__ import annotations

import base64
import itertools
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from uds_vm_operator.api import SpecError, parse_vm_spec
from uds_vm_operator.api.calendar import calendar_problem
from uds_vm_operator.render import Owner
from uds_vm_operator.render.cloudinit import render_user_data, writes_sshd_config
from uds_vm_operator.render.sysprep import render_sysprep_secret

OWNER = Owner("web", "apps", "uid-1")
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE me@host"
INJECTIONS = (
    "\n",
    "\r\n",
    "\r",
    "\x00",
    "\x0b",
    "\x0c",
    "\x1b[2J",
    "\x7f",
    "\t",
    "\u2028",
    "\u0085",
    " ",
    '"',
    "'",
    ";",
    "=",
    "#",
    "[",
    "]",
    "{",
    "}",
    "<",
    ">",
    "&",
    "\\",
    "%0a",
    "$(reboot)",
    "`id`",
)
PAYLOADS = (
    "Unit=poweroff.target",
    "[Service]\nExecStart=/bin/sh",
    "deb [trusted=yes] http://evil/ x main",
    "gpgcheck=0",
    'PermitRootLogin yes"',
    "</Value></AdministratorPassword><x>",
    "]]>",
    "--- !!python/object:os.system",
)


def hostile(seeds: tuple[str, ...]) -> Iterator[str]:
    """seed, seed+injection, seed+injection+payload, injection+seed: every combination, deterministic."""
    for seed in seeds:
        yield seed
        for injection in INJECTIONS:
            yield seed + injection
            yield injection + seed
            for payload in PAYLOADS:
                yield seed + injection + payload


def base_spec() -> dict[str, Any]:
    return {
        "source": {"upload": {}},
        "disk": {"virtualSize": "1Gi"},
        "cloudInit": {"sshAuthorizedKeys": [KEY]},
    }


def _with_update(flavor: str, **update: Any) -> dict[str, Any]:
    spec = base_spec()
    spec["cloudInit"] = {"flavor": flavor, "sshAuthorizedKeys": [KEY], "autoUpdate": update}
    return spec


def _files(document: dict[str, Any]) -> dict[str, str]:
    return {f["path"]: f["content"] for f in document.get("write_files") or []}


def render(spec: dict[str, Any]) -> dict[str, Any] | None:
    """The cloud-config document, or None when the spec is refused (the acceptable other outcome)."""
    try:
        parsed = parse_vm_spec(spec)
        text = render_user_data(OWNER, parsed)
    except SpecError:
        return None
    assert text.startswith("#cloud-config\n")
    document = yaml.safe_load(text)
    assert isinstance(document, dict)
    return document


REFERENCE_KEYS = {flavor: set(render(_with_update(flavor)) or {}) for flavor in ("ubuntu", "rhel")}


def _keeps_timer(document: dict[str, Any], value: str) -> None:
    (dropin,) = [c for p, c in _files(document).items() if p.endswith("50-uds-schedule.conf")]
    assert dropin.splitlines() == ["[Timer]", "OnCalendar=", f"OnCalendar={value}", "RandomizedDelaySec=0"]
    assert calendar_problem(value) is None


def check_schedule(value: str) -> None:
    for flavor in ("ubuntu", "rhel"):
        document = render(_with_update(flavor, schedule=value))
        if document is not None:
            assert set(document) == REFERENCE_KEYS[flavor]
            _keeps_timer(document, value)


def check_apt_mirror(value: str) -> None:
    document = render(_with_update("ubuntu", aptMirror=value))
    if document is not None:
        (primary,) = document["apt"]["primary"]
        assert primary["uri"] == value and value.split() == [value], "one token on the sources.list line"
        assert set(document) == REFERENCE_KEYS["ubuntu"] | {"apt"}


def check_yum_mirror(value: str) -> None:
    document = render(_with_update("rhel", yumMirror=value))
    if document is not None:
        repo = document["yum_repos"]["uds-mirror"]
        assert repo["baseurl"] == value and value.split() == [value]
        assert repo["gpgcheck"] is True and set(repo) == {"name", "baseurl", "enabled", "gpgcheck"}


def check_reboot_window(value: str) -> None:
    for flavor in ("ubuntu", "rhel"):
        document = render(_with_update(flavor, rebootWindow=value))
        if document is None:
            continue
        files = _files(document)
        if flavor == "ubuntu":
            lines = files["/etc/apt/apt.conf.d/52uds-unattended-upgrades"].splitlines()
            assert lines == [
                'Unattended-Upgrade::Automatic-Reboot "true";',
                f'Unattended-Upgrade::Automatic-Reboot-Time "{value}";',
            ]
        else:
            lines = files["/etc/dnf/automatic.conf"].splitlines()
            assert len(lines) == 8 and f'reboot_command = "shutdown -r {value}"' in lines


def check_ssh_key(value: str) -> None:
    spec = base_spec()
    spec["cloudInit"] = {
        "sshAuthorizedKeys": [value],
        "users": [{"name": "ops", "sshAuthorizedKeys": [value]}],
    }
    document = render(spec)
    if document is not None:
        keys = [*document["ssh_authorized_keys"], *document["users"][1]["ssh_authorized_keys"]]
        assert keys == [value, value] and all(len(k.splitlines()) == 1 for k in keys)


def check_user_name(value: str) -> None:
    spec = base_spec()
    spec["cloudInit"] = {"sshAuthorizedKeys": [KEY], "users": [{"name": value, "sshAuthorizedKeys": [KEY]}]}
    document = render(spec)
    if document is not None:
        assert document["users"][1]["name"] == value and value.isprintable() and " " not in value


def check_package(value: str) -> None:
    spec = base_spec()
    spec["cloudInit"] = {"sshAuthorizedKeys": [KEY], "packages": [value]}
    document = render(spec)
    if document is not None:
        assert value in document["packages"] and value.split() == [value]


def _unattend(spec: dict[str, Any], password: str) -> ET.Element | None:
    try:
        secret = render_sysprep_secret(OWNER, parse_vm_spec(spec), password, efi=True)
    except SpecError:
        return None
    ((_, encoded),) = secret["data"].items()
    return ET.fromstring(base64.b64decode(encoded))


def check_computer_name(value: str) -> None:
    spec = {"os": "windows", "source": {"upload": {}}, "disk": {"virtualSize": "1Gi"}}
    spec["windows"] = {"computerName": value, "sysprep": {"mode": "clone"}}
    root = _unattend(spec, "Generated-Passw0rd")
    if root is not None:
        names = [e.text for e in root.iter() if e.tag.endswith("ComputerName")]
        assert names == [value]


def check_admin_password(value: str) -> None:
    spec = {"os": "windows", "source": {"upload": {}}, "disk": {"virtualSize": "1Gi"}}
    spec["windows"] = {"sysprep": {"mode": "clone"}}
    root = _unattend(spec, value)
    if root is not None:
        values = [e.text for e in root.iter() if e.tag.endswith("Value")]
        assert values and all(v == value for v in values), "the password round-trips, nothing more"


def check_source_url(value: str) -> None:
    spec = base_spec()
    spec["source"] = {"http": {"url": value}}
    try:
        parsed = parse_vm_spec(spec)
    except SpecError:
        return
    assert parsed.source.http is not None and parsed.source.http.url.split() == [value]
    assert value.isprintable()


FIELDS: dict[str, tuple[tuple[str, ...], Callable[[str], None]]] = {
    "autoUpdate.schedule": (("*-*-* 03:00:00", "daily", "Mon..Fri 04:30"), check_schedule),
    "autoUpdate.aptMirror": (("http://mirror.site/debian",), check_apt_mirror),
    "autoUpdate.yumMirror": (("https://mirror.site/el9",), check_yum_mirror),
    "autoUpdate.rebootWindow": (("03:00",), check_reboot_window),
    "sshAuthorizedKeys": ((KEY,), check_ssh_key),
    "users[].name": (("ops",), check_user_name),
    "packages": (("curl",), check_package),
    "windows.computerName": (("WEB01",), check_computer_name),
    "adminPasswordSecretRef value": (("Corr3ct-Horse",), check_admin_password),
    "source.http.url": (("https://images.site/x.qcow2",), check_source_url),
}


@pytest.mark.parametrize("field", sorted(FIELDS))
def test_hostile_strings_are_refused_or_keep_the_file_structure(field: str) -> None:
    seeds, check = FIELDS[field]
    values = list(dict.fromkeys(hostile(seeds)))
    assert len(values) > 250
    for value in values:
        check(value)


def test_the_plain_seeds_are_accepted_so_the_checks_are_not_vacuous() -> None:
    assert render(_with_update("ubuntu", schedule="daily", aptMirror="http://mirror.site/debian")) is not None
    assert render(_with_update("rhel", yumMirror="https://mirror.site/el9", rebootWindow="03:00")) is not None
    spec = {"os": "windows", "source": {"upload": {}}, "disk": {"virtualSize": "1Gi"}}
    spec["windows"] = {"computerName": "WEB01", "sysprep": {"mode": "clone"}}
    assert _unattend(spec, "Corr3ct-Horse") is not None


@pytest.mark.parametrize(
    "path",
    [
        "/etc/ssh/sshd_config",
        "/etc/ssh//sshd_config.d/x.conf",
        "/etc/ssh/./sshd_config",
        "//etc/ssh/sshd_config",
        "/etc/ssh/../ssh/sshd_config.d/00-a.conf",
        "/etc//ssh/sshd_config.d/../sshd_config",
        " /etc/ssh/sshd_config",
    ],
)
def test_the_sshd_guard_sees_through_path_spellings(path: str) -> None:
    assert writes_sshd_config(path)
    spec = base_spec()
    spec["cloudInit"]["userData"] = yaml.safe_dump({"write_files": [{"path": path, "content": "x"}]})
    assert render(spec) is None


@pytest.mark.parametrize(
    "path", ["/etc/ssh/ssh_config.d/x", "/etc/sshd_config", "/home/ops/etc/ssh/sshd_config"]
)
def test_the_sshd_guard_leaves_other_paths_alone(path: str) -> None:
    assert not writes_sshd_config(path)


def test_every_combination_of_injection_is_generated_once() -> None:
    values = list(hostile(("a",)))
    assert len(values) == len(set(values)) == 1 + len(INJECTIONS) * (2 + len(PAYLOADS))
    assert all(a != b for a, b in itertools.pairwise(values))
