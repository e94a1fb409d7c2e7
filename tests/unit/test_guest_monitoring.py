"""spec.monitoring (issue 34): what it renders and how the operator judges a running guest.

Covered: the user data with monitoring on and off (exporter package per flavour, the report script, its
service and timer, the runcmd that starts them); the report script itself (``sh -n``, then run for real with
stub ``sshd``/``systemctl``/``passwd`` on a fake PATH, its gauges read back with ``parse_report``); the
NetworkPolicy rule for the exporter's port; spec validation; ``judge`` per control; ``running_guest``;
``GuestChecker`` (schedule, new boot, cost counter, unreadable guest) with a fake API and fetch;
``guest_event``; ``parse_report`` on junk; ``fetch_http`` against a real loopback HTTP server; and the
reconciler's ``_controls`` losing AC-3/IA-5 to drift.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from uds_vm_operator.api import SpecError, parse_vm_spec
from uds_vm_operator.api.models import CloudInit, UDSVirtualMachineSpec
from uds_vm_operator.controller.guest_checks import (
    CONDITION_TYPE,
    REPORT_PATH,
    GuestChecker,
    GuestFacts,
    GuestVerdict,
    carry_drift,
    expected_users,
    fetch_http,
    guest_event,
    judge,
    parse_report,
    running_guest,
    users_of,
)
from uds_vm_operator.controller.reconciler import _controls
from uds_vm_operator.render import Owner
from uds_vm_operator.render.cloudinit import render_user_data
from uds_vm_operator.render.guestmonitor import (
    EXPORTER_PORT,
    REPORT_SCRIPT_PATH,
    REPORT_UNIT,
    TEXTFILE_DIR,
    report_script,
)
from uds_vm_operator.render.networkpolicy import render_network_policy
from uds_vm_operator.runtime.conditions import Condition

OWNER = Owner("web", "apps", "uid-1")
BASE: dict[str, Any] = {"source": {"upload": {}}, "disk": {"virtualSize": "1Gi"}}
SERVICE_PATH = f"/etc/systemd/system/{REPORT_UNIT}.service"
TIMER_PATH = f"/etc/systemd/system/{REPORT_UNIT}.timer"
EXPORTERS = {
    "debian": ("prometheus-node-exporter", "prometheus-node-exporter.service"),
    "ubuntu": ("prometheus-node-exporter", "prometheus-node-exporter.service"),
    "rhel": ("golang-github-prometheus-node-exporter", "node_exporter.service"),
}
HARDENED: dict[str, float] = {
    "sshd_config_readable": 1,
    "sshd_password_authentication": 0,
    "sshd_kbd_interactive_authentication": 0,
    "sshd_permit_root_login": 0,
    "root_password_locked": 1,
    "update_timer_active": 1,
    "fips_enabled": 1,
}
"""The report of a guest that kept every hardened setting."""


def spec(
    flavor: str = "debian", monitoring: dict[str, Any] | None = None, **cloud_init: Any
) -> UDSVirtualMachineSpec:
    raw = {
        **BASE,
        "cloudInit": {"flavor": flavor, **cloud_init},
        "monitoring": {"enabled": True} if monitoring is None else monitoring,
    }
    return parse_vm_spec(raw)


def user_data(vm: UDSVirtualMachineSpec) -> dict[str, Any]:
    text = render_user_data(OWNER, vm)
    assert text.startswith("#cloud-config\n")
    document: dict[str, Any] = yaml.safe_load(text)
    return document


def files_of(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["path"]: item for item in document["write_files"]}


# --------------------------------------------------------------------------------------- rendered user data


@pytest.mark.parametrize("flavor", sorted(EXPORTERS))
def test_monitoring_installs_the_exporter_and_the_report_on_a_timer(flavor: str) -> None:
    package, unit = EXPORTERS[flavor]
    document = user_data(spec(flavor))
    assert package in document["packages"]
    files = files_of(document)
    script = files[REPORT_SCRIPT_PATH]
    assert script["permissions"] == "0755"
    assert script["owner"] == "root:root"
    assert script["content"] == report_script(CloudInit(flavor=flavor))  # type: ignore[arg-type]
    assert script["content"].startswith("#!/bin/sh\n")
    assert f"ExecStart={REPORT_SCRIPT_PATH}" in files[SERVICE_PATH]["content"]
    assert "Type=oneshot" in files[SERVICE_PATH]["content"]
    timer = files[TIMER_PATH]["content"]
    assert "OnUnitActiveSec=" in timer
    assert "WantedBy=timers.target" in timer
    enable = [c for c in document["runcmd"] if isinstance(c, str) and c.startswith("systemctl enable --now")]
    assert f"systemctl enable --now {unit} {REPORT_UNIT}.timer {REPORT_UNIT}.path" in enable
    watched = files[f"/etc/systemd/system/{REPORT_UNIT}.path"]["content"]
    assert "PathChanged=/etc/ssh/sshd_config.d" in watched and f"Unit={REPORT_UNIT}.service" in watched
    # Started after the units are written and systemd has read them.
    runcmd = document["runcmd"]
    reload_at = max(i for i, c in enumerate(runcmd) if c == "systemctl daemon-reload")
    assert reload_at < runcmd.index(f"systemctl enable --now {unit} {REPORT_UNIT}.timer {REPORT_UNIT}.path")


def test_rhel_points_its_exporter_at_the_report_directory() -> None:
    """Debian's package reads TEXTFILE_DIR already; RHEL's service is told to with a drop-in."""
    files = files_of(user_data(spec("rhel")))
    dropin = files["/etc/systemd/system/node_exporter.service.d/10-uds-textfile.conf"]["content"]
    assert f"--collector.textfile.directory={TEXTFILE_DIR}" in dropin
    assert "ExecStart=\n" in dropin  # clears the packaged ExecStart instead of adding a second one
    debian_paths = files_of(user_data(spec("debian")))
    assert not any("node_exporter.service.d" in path for path in debian_paths)


@pytest.mark.parametrize("flavor", sorted(EXPORTERS))
def test_monitoring_off_renders_none_of_it(flavor: str) -> None:
    document = user_data(spec(flavor, monitoring={"enabled": False}))
    packages = " ".join(document["packages"])
    assert "node-exporter" not in packages
    text = yaml.safe_dump(document)
    assert "node_exporter" not in text
    assert "node-exporter" not in text
    assert REPORT_UNIT not in text
    assert REPORT_SCRIPT_PATH not in text
    # And the default (no monitoring block at all) is off.
    assert user_data(parse_vm_spec({**BASE, "cloudInit": {"flavor": flavor}})) == document


def test_user_packages_come_first_and_survive_monitoring() -> None:
    document = user_data(spec("ubuntu", packages=["htop"]))
    assert document["packages"][0] == "htop"
    assert "prometheus-node-exporter" in document["packages"]


# ------------------------------------------------------------------------------------------- report script


@pytest.mark.parametrize("flavor", sorted(EXPORTERS))
def test_report_script_passes_sh_syntax_check(flavor: str, tmp_path: Path) -> None:
    script = tmp_path / "report"
    script.write_text(report_script(CloudInit(flavor=flavor)))  # type: ignore[arg-type]
    result = subprocess.run(
        ["/bin/sh", "-n", str(script)], check=False, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("flavor", sorted(EXPORTERS))
def test_report_script_is_fixed_text_without_backslashes(flavor: str) -> None:
    """No backslash: the renderer then writes it in a YAML style rego-cpp's yaml.unmarshal reads back."""
    script = report_script(CloudInit(flavor=flavor))  # type: ignore[arg-type]
    assert "\\" not in script
    assert "@" not in script  # every placeholder was filled
    assert f"dir={TEXTFILE_DIR}\n" in script


def _stub(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def run_report(
    tmp_path: Path,
    *,
    flavor: str = "debian",
    sshd_output: str | None,
    timer_active: bool,
    passwd_status: str,
    fips: str | None,
) -> tuple[dict[str, float], str]:
    """Run the real report script with stub sshd/systemctl/passwd; return its gauges and the raw file."""
    bin_dir, out_dir, tmp_dir = tmp_path / "bin", tmp_path / "textfile", tmp_path / "tmp"
    bin_dir.mkdir()
    tmp_dir.mkdir()
    calls = tmp_path / "calls.log"
    if sshd_output is None:
        _stub(bin_dir / "sshd", "exit 255\n")
    else:
        (tmp_path / "sshd-T").write_text(sshd_output)
        _stub(bin_dir / "sshd", f'[ "$1" = -T ] || exit 2\n/bin/cat {tmp_path / "sshd-T"}\n')
    _stub(bin_dir / "systemctl", f'echo "systemctl $*" >> {calls}\nexit {0 if timer_active else 3}\n')
    _stub(
        bin_dir / "passwd",
        f'echo "passwd $*" >> {calls}\n[ "$1" = -S ] && [ "$2" = root ] || exit 2\necho "{passwd_status}"\n',
    )
    fips_path = tmp_path / "fips_enabled"  # absent when fips is None, like a kernel without the sysctl
    if fips is not None:
        fips_path.write_text(fips)

    text = report_script(CloudInit(flavor=flavor))  # type: ignore[arg-type]
    for real, fake in (
        ("/usr/sbin/sshd -T", "sshd -T"),
        ("/proc/sys/crypto/fips_enabled", str(fips_path)),
        (f"dir={TEXTFILE_DIR}\n", f"dir={out_dir}\n"),
    ):
        assert real in text, f"the report script no longer holds {real!r}: update this test's stubs"
        text = text.replace(real, fake)
    script = tmp_path / "uds-guest-report"
    script.write_text(text)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "TMPDIR": str(tmp_dir), "LC_ALL": "C"}
    result = subprocess.run(
        ["/bin/sh", str(script)], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stderr
    assert list(tmp_dir.iterdir()) == [], "the sshd -T scratch file was left behind"
    assert sorted(p.name for p in out_dir.iterdir()) == ["uds_guest.prom"], "a temporary report was left"
    report = (out_dir / "uds_guest.prom").read_text()
    logged = calls.read_text()
    assert "passwd -S root" in logged
    timer = "dnf-automatic.timer" if flavor == "rhel" else "apt-daily-upgrade.timer"
    assert f"systemctl is-active --quiet {timer}" in logged
    return parse_report(report), report


def _without_timestamp(report: dict[str, float]) -> dict[str, float]:
    stamp = report.pop("report_timestamp_seconds")
    assert abs(stamp - time.time()) < 120
    return report


SSHD_HARDENED = (
    "port 22\npasswordauthentication no\nkbdinteractiveauthentication no\npermitrootlogin no\n"
    "pubkeyauthentication yes\n"
)


def test_report_of_a_hardened_guest(tmp_path: Path) -> None:
    gauges, raw = run_report(
        tmp_path,
        sshd_output=SSHD_HARDENED,
        timer_active=True,
        passwd_status="root L 2024-01-01 0 99999 7 -1",
        fips="1\n",
    )
    assert _without_timestamp(gauges) == HARDENED
    # The whole file is valid exposition (the node exporter drops a textfile that is not).
    families = {family.name: family for family in text_string_to_metric_families(raw)}
    assert set(families) == {f"uds_guest_{name}" for name in [*HARDENED, "report_timestamp_seconds"]}
    assert all(family.type == "gauge" for family in families.values())
    assert (
        judge(spec("debian", autoUpdate={}), GuestFacts(report=gauges, users=())).condition.status == "True"
    )


def test_report_of_a_drifted_guest(tmp_path: Path) -> None:
    gauges, _ = run_report(
        tmp_path,
        sshd_output="passwordauthentication yes\nkbdinteractiveauthentication yes\n"
        "permitrootlogin prohibit-password\n",
        timer_active=False,
        passwd_status="root P 2024-01-01 0 99999 7 -1",
        fips=None,
    )
    assert _without_timestamp(gauges) == {
        "sshd_config_readable": 1,
        "sshd_password_authentication": 1,
        "sshd_kbd_interactive_authentication": 1,
        "sshd_permit_root_login": 1,
        "root_password_locked": 0,
        "update_timer_active": 0,
        "fips_enabled": 0,
    }


def test_report_when_only_password_auth_came_back(tmp_path: Path) -> None:
    gauges, _ = run_report(
        tmp_path,
        sshd_output=SSHD_HARDENED.replace("passwordauthentication no", "passwordauthentication yes"),
        timer_active=True,
        passwd_status="root L 2024-01-01 0 99999 7 -1",
        fips="1\n",
    )
    assert _without_timestamp(gauges) == {**HARDENED, "sshd_password_authentication": 1}
    verdict = judge(spec("debian"), GuestFacts(report=gauges, users=()))
    assert [(d["setting"], d["control"]) for d in verdict.drift] == [("PasswordAuthentication", "ia-5")]


def test_report_when_sshd_cannot_print_its_configuration(tmp_path: Path) -> None:
    gauges, _ = run_report(
        tmp_path,
        sshd_output=None,
        timer_active=True,
        passwd_status="root L 2024-01-01 0 99999 7 -1",
        fips="0\n",
    )
    assert _without_timestamp(gauges) == {
        **HARDENED,
        "sshd_config_readable": 0,
        "sshd_permit_root_login": 1,  # nothing says "no", so it is not reported as refused
        "fips_enabled": 0,
    }
    verdict = judge(spec("debian"), GuestFacts(report=gauges, users=()))
    assert ("sshd configuration", "ia-5") in [(d["setting"], d["control"]) for d in verdict.drift]


def test_report_names_the_rhel_update_timer(tmp_path: Path) -> None:
    gauges, _ = run_report(
        tmp_path,
        flavor="rhel",
        sshd_output=SSHD_HARDENED,
        timer_active=True,
        passwd_status="root L 2024-01-01 0 99999 7 -1",
        fips="1\n",
    )
    assert gauges["update_timer_active"] == 1


def test_report_reads_rhels_locked_root(tmp_path: Path) -> None:
    gauges, _ = run_report(
        tmp_path,
        flavor="rhel",
        sshd_output=SSHD_HARDENED,
        timer_active=True,
        passwd_status="root LK 2024-01-01 0 99999 7 -1 (Password locked.)",
        fips="1\n",
    )
    assert gauges["root_password_locked"] == 1


# ------------------------------------------------------------------------------------------ NetworkPolicy


def test_monitoring_admits_prometheus_and_the_operator_on_the_exporter_port_only() -> None:
    policy = render_network_policy(OWNER, spec(), operator_namespace="ops")
    rules = [
        rule
        for rule in policy["spec"]["ingress"]
        if {"protocol": "TCP", "port": 9100} in rule.get("ports", [])
    ]
    assert rules == [
        {
            "from": [
                {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
                },
                {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}},
                    "podSelector": {
                        "matchLabels": {
                            "app.kubernetes.io/name": "uds-vm-operator",
                            "app.kubernetes.io/component": "operator",
                        }
                    },
                },
            ],
            "ports": [{"protocol": "TCP", "port": EXPORTER_PORT}],
        }
    ]
    # Nothing else was opened: without monitoring the ingress list is what remains.
    without = render_network_policy(OWNER, spec(monitoring={"enabled": False}), operator_namespace="ops")
    assert policy["spec"]["ingress"] == [*without["spec"]["ingress"], *rules]
    assert policy["spec"]["egress"] == without["spec"]["egress"]


def test_no_exporter_port_without_monitoring() -> None:
    policy = render_network_policy(OWNER, spec(monitoring={"enabled": False}))
    ports = [port for rule in policy["spec"]["ingress"] for port in rule.get("ports", [])]
    assert {"protocol": "TCP", "port": 9100} not in ports
    assert "9100" not in yaml.safe_dump(policy)


# ------------------------------------------------------------------------------------------ validation


def test_monitoring_a_windows_vm_is_refused() -> None:
    with pytest.raises(SpecError, match=r"monitoring\.enabled is for os: linux"):
        parse_vm_spec({**BASE, "os": "windows", "monitoring": {"enabled": True}})
    parse_vm_spec({**BASE, "os": "windows", "monitoring": {"enabled": False}})  # off is fine


@pytest.mark.parametrize(("seconds", "accepted"), [(14, False), (0, False), (15, True), (86400, True)])
def test_check_interval_bounds(seconds: int, accepted: bool) -> None:
    raw = {**BASE, "monitoring": {"enabled": True, "checkIntervalSeconds": seconds}}
    if accepted:
        assert parse_vm_spec(raw).monitoring.check_interval_seconds == seconds
    else:
        with pytest.raises(SpecError, match=r"spec\.monitoring\.checkIntervalSeconds"):
            parse_vm_spec(raw)


def test_monitoring_defaults_off_every_five_minutes() -> None:
    monitoring = parse_vm_spec(BASE).monitoring
    assert (monitoring.enabled, monitoring.check_interval_seconds, monitoring.allowed_users) == (
        False,
        300,
        [],
    )


# ------------------------------------------------------------------------------------------------- judge


def verdict_of(vm: UDSVirtualMachineSpec, users: tuple[str, ...] = (), **report: float) -> Any:
    return judge(vm, GuestFacts(report={**HARDENED, **report}, users=users))


def drift_of(verdict: Any) -> list[tuple[str, str]]:
    return [(d["setting"], d["control"]) for d in verdict.drift]


def test_a_hardened_guest_is_compliant() -> None:
    verdict = verdict_of(spec(users=[{"name": "ops"}]), users=("debian", "ops"))
    assert verdict.condition.status == "True"
    assert verdict.condition.reason == "GuestHardened"
    assert verdict.drift == ()
    assert verdict.status() == {
        "compliant": "True",
        "reason": "GuestHardened",
        "drift": None,
        "loggedInUsers": ["debian", "ops"],
    }


def test_password_authentication_back_on_is_ia5_drift() -> None:
    verdict = verdict_of(spec(), sshd_password_authentication=1)
    assert verdict.condition.status == "False"
    assert verdict.condition.reason == "GuestDrifted"
    assert verdict.drift == (
        {"setting": "PasswordAuthentication", "control": "ia-5", "observed": "yes", "expected": "no"},
    )
    assert "PasswordAuthentication is yes (expected no)" in verdict.condition.message
    stored = verdict.status()
    assert stored["compliant"] == "False"
    assert stored["drift"] == [dict(d) for d in verdict.drift]


def test_keyboard_interactive_is_ia5_drift() -> None:
    assert drift_of(verdict_of(spec(), sshd_kbd_interactive_authentication=1)) == [
        ("KbdInteractiveAuthentication", "ia-5")
    ]


def test_root_login_is_ac3_drift() -> None:
    assert drift_of(verdict_of(spec(), sshd_permit_root_login=1)) == [("PermitRootLogin", "ac-3")]


def test_root_password_unlocked_is_ac3_drift() -> None:
    assert drift_of(verdict_of(spec(), root_password_locked=0)) == [("root password", "ac-3")]


def test_a_stranger_and_root_logged_in_are_ac3_drift() -> None:
    vm = spec(users=[{"name": "ops"}], monitoring={"enabled": True, "allowedUsers": ["audit"]})
    assert expected_users(vm) == {"ops", "audit", "debian"}
    verdict = verdict_of(vm, users=("audit", "debian", "mallory", "ops", "root"))
    assert verdict.drift == (
        {
            "setting": "logged-in users",
            "control": "ac-3",
            "observed": "mallory, root",
            "expected": "declared users only",
        },
    )
    assert verdict.users == ("audit", "debian", "mallory", "ops", "root")
    assert verdict.status()["loggedInUsers"] == ["audit", "debian", "mallory", "ops", "root"]


def test_root_is_never_an_allowed_user() -> None:
    vm = spec(monitoring={"enabled": True, "allowedUsers": ["root"]})
    assert "root" not in expected_users(vm)
    assert drift_of(verdict_of(vm, users=("root",))) == [("logged-in users", "ac-3")]


@pytest.mark.parametrize(
    ("flavor", "default_user"), [("debian", "debian"), ("ubuntu", "ubuntu"), ("rhel", "cloud-user")]
)
def test_the_images_default_user_is_expected(flavor: str, default_user: str) -> None:
    assert verdict_of(spec(flavor, fips=False), users=(default_user,)).condition.status == "True"
    assert drift_of(verdict_of(spec(flavor, fips=False), users=("someone",))) == [("logged-in users", "ac-3")]


def test_an_inactive_update_timer_is_si2_drift_only_when_auto_update_is_on() -> None:
    assert drift_of(verdict_of(spec(), update_timer_active=0)) == []  # no autoUpdate block
    assert drift_of(verdict_of(spec(autoUpdate={"enabled": False}), update_timer_active=0)) == []
    assert drift_of(verdict_of(spec(autoUpdate={}), update_timer_active=0)) == [
        ("apt-daily-upgrade.timer", "si-2")
    ]
    rhel = verdict_of(spec("rhel", autoUpdate={}), update_timer_active=0)
    assert drift_of(rhel) == [("dnf-automatic.timer", "si-2")]


@pytest.mark.parametrize(
    ("flavor", "fips", "drifts"),
    [("rhel", True, True), ("ubuntu", True, True), ("rhel", False, False), ("debian", True, False)],
)
def test_fips_off_is_sc13_drift_only_where_fips_mode_was_promised(
    flavor: str, fips: bool, drifts: bool
) -> None:
    found = drift_of(verdict_of(spec(flavor, fips=fips), fips_enabled=0))
    assert found == ([("FIPS mode", "sc-13")] if drifts else [])


def test_a_missing_gauge_is_drift_not_compliance() -> None:
    report = {k: v for k, v in HARDENED.items() if k != "sshd_password_authentication"}
    verdict = judge(spec(), GuestFacts(report=report, users=()))
    assert drift_of(verdict) == [("PasswordAuthentication", "ia-5")]


def test_every_drift_at_once_is_reported_together() -> None:
    vm = spec("rhel", autoUpdate={})
    verdict = judge(
        vm,
        GuestFacts(
            report={name: 1 - value for name, value in HARDENED.items()},
            users=("root",),
        ),
    )
    assert {control for _, control in drift_of(verdict)} == {"ia-5", "ac-3", "si-2", "sc-13"}
    assert len(verdict.drift) == 8
    assert len(verdict.condition.message) <= 1000


def test_no_report_or_a_problem_is_unknown() -> None:
    for facts in (GuestFacts(), GuestFacts(report=HARDENED, users=None), GuestFacts(report=None, users=())):
        verdict = judge(spec(), facts)
        assert (verdict.condition.status, verdict.condition.reason) == ("Unknown", "NoGuestReport")
        assert verdict.drift == ()
    problem = judge(spec(), GuestFacts(report=HARDENED, users=(), problem=("NoGuestAgent", "no agent")))
    assert (problem.condition.status, problem.condition.reason, problem.condition.message) == (
        "Unknown",
        "NoGuestAgent",
        "no agent",
    )
    assert problem.status() == {
        "compliant": "Unknown",
        "reason": "NoGuestAgent",
        "drift": None,
        "loggedInUsers": None,
    }


# ------------------------------------------------------------------------------------------ running guest


def vmi(
    uid: str = "vmi-1",
    *,
    phase: str = "Running",
    agent: str | None = "True",
    address: str | None = "10.1.2.3",
) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "True"}]
    if agent is not None:
        conditions.append({"type": "AgentConnected", "status": agent})
    interfaces = [{"name": "default", "ipAddress": address}] if address else [{"name": "default"}]
    return {
        "metadata": {"uid": uid},
        "status": {"phase": phase, "conditions": conditions, "interfaces": interfaces},
    }


def test_running_guest_gives_the_exporter_address() -> None:
    assert running_guest(vmi()) == (None, "10.1.2.3")


@pytest.mark.parametrize(
    ("instance", "problem"),
    [
        (None, "GuestNotRunning"),
        ({}, "GuestNotRunning"),
        (vmi(phase="Scheduling"), "GuestNotRunning"),
        (vmi(phase="Succeeded"), "GuestNotRunning"),
        (vmi(agent=None), "NoGuestAgent"),
        (vmi(agent="False"), "NoGuestAgent"),
        (vmi(address=None), "NoGuestAddress"),
    ],
)
def test_a_guest_that_cannot_be_checked_says_why(instance: dict[str, Any] | None, problem: str) -> None:
    assert running_guest(instance) == (problem, None)


# ---------------------------------------------------------------------------------------------- checker


def prom(report: dict[str, float]) -> str:
    lines = ["# HELP node_textfile_scrape_error 1 if there was an error opening or reading a file."]
    lines += [f"uds_guest_{name} {value}" for name, value in report.items()]
    lines.append('node_textfile_mtime_seconds{file="/var/lib/prometheus/node-exporter/uds_guest.prom"} 1.7e9')
    return "\n".join(lines) + "\n"


class FakeApi:
    """KubeApi's ``request``: answers the userlist subresource, records what was asked."""

    def __init__(self, users: tuple[str, ...] = ("ops",)) -> None:
        self.users = users
        self.requests: list[tuple[str, str]] = []

    async def request(self, method: str, path: str, *, what: str, **_: Any) -> dict[str, Any]:
        self.requests.append((method, path))
        return {"items": [{"userName": name, "domain": "", "loginTime": 1.0} for name in self.users]}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeFetch:
    def __init__(self, body: str | Exception) -> None:
        self.body = body
        self.calls: list[tuple[str, int, str]] = []

    async def __call__(self, host: str, port: int, path: str) -> str:
        self.calls.append((host, port, path))
        if isinstance(self.body, Exception):
            raise self.body
        return self.body


def checker(fetch: FakeFetch, api: FakeApi | None = None) -> tuple[GuestChecker, FakeApi, Clock]:
    api = api or FakeApi()
    clock = Clock()
    return GuestChecker(api, fetch=fetch, monotonic=clock), api, clock  # type: ignore[arg-type]


def run(coro: Awaitable[Any]) -> Any:
    async def wrapped() -> Any:
        return await coro

    return asyncio.run(wrapped())


MONITORED = spec(users=[{"name": "ops"}], monitoring={"enabled": True, "checkIntervalSeconds": 60})


def test_checker_reads_both_channels_and_judges() -> None:
    fetch = FakeFetch(prom(HARDENED))
    guest, api, _ = checker(fetch)
    verdict = run(guest.check("apps", "web", MONITORED, vmi()))
    assert verdict.condition.status == "True"
    assert verdict.users == ("ops",)
    assert fetch.calls == [("10.1.2.3", EXPORTER_PORT, REPORT_PATH)]
    assert REPORT_PATH == "/metrics?collect[]=textfile"
    assert api.requests == [
        ("GET", "/apis/subresources.kubevirt.io/v1/namespaces/apps/virtualmachineinstances/web/userlist")
    ]
    assert guest.calls == 2


def test_checker_reads_once_per_interval() -> None:
    fetch = FakeFetch(prom(HARDENED))
    guest, _, clock = checker(fetch)
    first = run(guest.check("apps", "web", MONITORED, vmi()))
    assert guest.due_in("apps", "web", MONITORED) == 60
    clock.now += 59
    assert run(guest.check("apps", "web", MONITORED, vmi())) is first
    assert guest.due_in("apps", "web", MONITORED) == 1
    assert (len(fetch.calls), guest.calls) == (1, 2)
    clock.now += 1
    fetch.body = prom({**HARDENED, "sshd_password_authentication": 1})
    second = run(guest.check("apps", "web", MONITORED, vmi()))
    assert (len(fetch.calls), guest.calls) == (2, 4)
    assert second.condition.status == "False"
    assert drift_of(second) == [("PasswordAuthentication", "ia-5")]


def test_checker_rechecks_a_new_boot_at_once() -> None:
    fetch = FakeFetch(prom(HARDENED))
    guest, _, clock = checker(fetch)
    run(guest.check("apps", "web", MONITORED, vmi("boot-1")))
    clock.now += 5
    run(guest.check("apps", "web", MONITORED, vmi("boot-1")))
    assert guest.calls == 2
    run(guest.check("apps", "web", MONITORED, vmi("boot-2")))
    assert guest.calls == 4
    assert len(fetch.calls) == 2


def test_checker_keeps_vms_apart() -> None:
    fetch = FakeFetch(prom(HARDENED))
    guest, _, _ = checker(fetch)
    run(guest.check("apps", "web", MONITORED, vmi("a")))
    run(guest.check("apps", "db", MONITORED, vmi("b")))
    run(guest.check("other", "web", MONITORED, vmi("c")))
    assert guest.calls == 6


def test_checker_reports_unknown_when_the_report_cannot_be_read() -> None:
    fetch = FakeFetch(OSError("connection refused"))
    guest, _, _ = checker(fetch)
    verdict = run(guest.check("apps", "web", MONITORED, vmi()))
    assert (verdict.condition.status, verdict.condition.reason) == ("Unknown", "NoGuestReport")
    assert "10.1.2.3:9100" in verdict.condition.message
    assert "connection refused" in verdict.condition.message
    assert verdict.drift == ()
    assert guest.calls == 2


def test_checker_reports_unknown_on_a_timeout_and_on_an_exporter_without_the_report() -> None:
    for body in (TimeoutError(), "node_load1 0.5\n# uds_guest_fips_enabled 1\n"):
        guest, _, _ = checker(FakeFetch(body))
        verdict = run(guest.check("apps", "web", MONITORED, vmi()))
        assert (verdict.condition.status, verdict.condition.reason) == ("Unknown", "NoGuestReport")


def test_checker_does_not_read_a_guest_that_cannot_be_checked() -> None:
    fetch = FakeFetch(prom(HARDENED))
    guest, api, _ = checker(fetch)
    verdict = run(guest.check("apps", "web", MONITORED, vmi(agent="False")))
    assert (verdict.condition.status, verdict.condition.reason) == ("Unknown", "NoGuestAgent")
    assert (guest.calls, fetch.calls, api.requests) == (0, [], [])
    assert guest.due_in("apps", "web", MONITORED) is None


def test_checker_ignores_and_forgets_an_unmonitored_vm() -> None:
    fetch = FakeFetch(prom(HARDENED))
    guest, _, _ = checker(fetch)
    run(guest.check("apps", "web", MONITORED, vmi()))
    off = spec(monitoring={"enabled": False})
    assert run(guest.check("apps", "web", off, vmi())) is None
    assert guest.due_in("apps", "web", MONITORED) is None  # forgotten: the next monitored pass reads again
    run(guest.check("apps", "web", MONITORED, vmi()))
    assert guest.calls == 4


class NotFoundApi(FakeApi):
    """KubeApi.request answers ``None`` for a 404 (the VMI went away between the read and the request)."""

    async def request(self, method: str, path: str, *, what: str, **_: Any) -> dict[str, Any] | None:
        self.requests.append((method, path))
        return None


def test_a_user_list_that_was_not_found_is_not_an_empty_one() -> None:
    guest, _, _ = checker(FakeFetch(prom(HARDENED)), NotFoundApi())
    verdict = run(guest.check("apps", "web", MONITORED, vmi()))
    assert verdict.condition.status == "Unknown"


def test_users_of_the_agents_list() -> None:
    listing = {
        "items": [
            {"userName": "ops", "domain": "", "loginTime": 1.0},
            {"userName": "ops", "loginTime": 2.0},
            {"userName": "", "loginTime": 3.0},
            {"domain": "x"},
            {"userName": "root"},
        ]
    }
    assert users_of(listing) == ("ops", "root")
    assert users_of({"items": None}) == ()
    assert users_of(None) == ()


# ------------------------------------------------------------------------------------------------ events


def status(
    compliant: str | None, drift: list[dict[str, str]] | None = None, message: str = "m"
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "conditions": [{"type": CONDITION_TYPE, "status": compliant or "Unknown", "message": message}]
    }
    if compliant is not None:
        body["guest"] = {"compliant": compliant, "reason": "r", "drift": drift}
    return body


PASSWORDS = [{"setting": "PasswordAuthentication", "control": "ia-5", "observed": "yes", "expected": "no"}]
ROOT = [{"setting": "PermitRootLogin", "control": "ac-3", "observed": "not no", "expected": "no"}]


def test_new_drift_is_a_warning() -> None:
    assert guest_event(status("True"), status("False", PASSWORDS, "drifted!")) == (
        "Warning",
        "GuestDrifted",
        "drifted!",
    )
    assert guest_event(status(None), status("False", PASSWORDS, "x"))[:2] == ("Warning", "GuestDrifted")  # type: ignore[index]
    assert guest_event(status("False", PASSWORDS), status("False", ROOT, "x"))[:2] == (
        "Warning",
        "GuestDrifted",
    )  # type: ignore[index]


def test_drift_clearing_is_normal() -> None:
    event = guest_event(status("False", PASSWORDS), status("True", None, "all good"))
    assert event == ("Normal", "GuestHardened", "The guest's drift is gone: all good")


def test_a_guest_found_hardened_after_anything_else_is_a_normal_event() -> None:
    assert guest_event(status(None), status("True", None, "ok"))[:2] == ("Normal", "GuestHardened")  # type: ignore[index]
    assert guest_event(status("Unknown"), status("True", None, "ok")) == ("Normal", "GuestHardened", "ok")
    # drift carried through an Unknown check, then undone: the Event says the drift is gone
    event = guest_event(status("Unknown", PASSWORDS), status("True", None, "ok"))
    assert event == ("Normal", "GuestHardened", "The guest's drift is gone: ok")


def test_an_unknown_check_carries_the_drift_last_seen_and_only_a_real_check_clears_it() -> None:
    drift = [{"setting": "PasswordAuthentication", "control": "ia-5", "observed": "yes", "expected": "no"}]
    unknown = GuestVerdict(Condition("Unknown", "NoGuestAgent", "no agent."))
    carried = carry_drift(unknown, {"compliant": "False", "drift": drift})
    assert carried is not None and carried.condition.status == "Unknown"
    assert list(carried.drift) == drift and "PasswordAuthentication" in carried.condition.message
    assert carried.status()["drift"] == drift
    hardened = GuestVerdict(Condition("True", "GuestHardened", "ok"))
    assert carry_drift(hardened, {"compliant": "False", "drift": drift}) is hardened
    assert carry_drift(unknown, {"compliant": "True"}) is unknown
    assert carry_drift(None, {"compliant": "False", "drift": drift}) is None  # monitoring off: nothing kept


def test_no_event_when_nothing_changed() -> None:
    assert guest_event(status("False", PASSWORDS), status("False", PASSWORDS, "new words")) is None
    assert guest_event(status("True"), status("True")) is None
    assert guest_event(status("False", PASSWORDS), status("Unknown")) is None
    assert guest_event(status("True"), status(None)) is None  # monitoring turned off


# ------------------------------------------------------------------------------------------ parse_report


def test_parse_report_takes_only_plain_uds_guest_samples() -> None:
    text = "\n".join(
        [
            "# HELP uds_guest_fips_enabled The kernel's crypto.fips_enabled.",
            "# TYPE uds_guest_fips_enabled gauge",
            "uds_guest_fips_enabled 1",
            'uds_guest_sshd_password_authentication{source="x"} 1',
            "uds_guest_root_password_locked not-a-number",
            "uds_guest_sshd_permit_root_login",
            "uds_guest_update_timer_active 0 1700000000000",
            "  uds_guest_sshd_config_readable 0",
            "node_load1 3",
            'go_gc_duration_seconds{quantile="0.5"} 1e-05',
            "garbage \x00 line",
            "",
            "uds_guest_report_timestamp_seconds 1.7e+09",
        ]
    )
    assert parse_report(text) == {
        "fips_enabled": 1.0,
        "update_timer_active": 0.0,
        "report_timestamp_seconds": 1.7e9,
    }
    assert parse_report("") == {}


# ---------------------------------------------------------------------------------------------- fetch_http


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def serve(handler: Handler, client: Callable[[int], Awaitable[Any]]) -> Any:
    async def scenario() -> Any:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            return await client(port)

    return asyncio.run(scenario())


def responder(status_line: bytes, body: bytes, seen: list[bytes]) -> Handler:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(status_line + b"\r\nContent-Type: text/plain\r\n\r\n" + body)
        await writer.drain()
        writer.close()

    return handle


def test_fetch_http_returns_the_body_of_a_200() -> None:
    seen: list[bytes] = []
    body = prom(HARDENED).encode()
    text = serve(
        responder(b"HTTP/1.0 200 OK", body, seen),
        lambda port: fetch_http("127.0.0.1", port, REPORT_PATH),
    )
    assert text == body.decode()
    assert parse_report(text) == HARDENED
    request = seen[0].decode()
    assert request.startswith("GET /metrics?collect[]=textfile HTTP/1.0\r\n")
    assert "\r\nHost: 127.0.0.1:" in request


def test_fetch_http_raises_oserror_on_an_error_status() -> None:
    seen: list[bytes] = []

    async def client(port: int) -> None:
        with pytest.raises(OSError, match="500"):
            await fetch_http("127.0.0.1", port, REPORT_PATH)

    serve(responder(b"HTTP/1.0 500 Internal Server Error", b"boom", seen), client)
    assert len(seen) == 1


def test_fetch_http_raises_oserror_when_nothing_listens() -> None:
    with socket.socket() as probe:  # a port that was free a moment ago and has no listener now
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(OSError):
        asyncio.run(fetch_http("127.0.0.1", port, REPORT_PATH))


def test_fetch_http_reads_a_response_written_in_pieces() -> None:
    body = prom(HARDENED).encode()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.2)
        writer.write(body)
        await writer.drain()
        writer.close()

    text = serve(handle, lambda port: fetch_http("127.0.0.1", port, REPORT_PATH))
    assert text == body.decode()


# -------------------------------------------------------------------------------------------- _controls


def hardened_status(drift: list[dict[str, str]] | None = None, compliant: str = "False") -> dict[str, Any]:
    body: dict[str, Any] = {
        "checksumVerified": True,
        "conditions": [
            {"type": "Hardened", "status": "True"},
            {"type": "NetworkIsolated", "status": "True"},
        ],
    }
    if drift is not None:
        body["guest"] = {"compliant": compliant, "reason": "GuestDrifted", "drift": drift}
    return body


def test_controls_hold_without_drift() -> None:
    assert _controls(hardened_status()) == {"SI-7": True, "SC-7": True, "AC-3": True, "IA-5": True}
    assert _controls(hardened_status([], compliant="True")) == {
        "SI-7": True,
        "SC-7": True,
        "AC-3": True,
        "IA-5": True,
    }


def test_drift_takes_ac3_and_ia5_away_one_at_a_time() -> None:
    assert _controls(hardened_status(PASSWORDS)) == {"SI-7": True, "SC-7": True, "AC-3": True, "IA-5": False}
    assert _controls(hardened_status(ROOT)) == {"SI-7": True, "SC-7": True, "AC-3": False, "IA-5": True}
    both = _controls(hardened_status([*ROOT, *PASSWORDS]))
    assert (both["AC-3"], both["IA-5"]) == (False, False)


def test_drift_of_other_controls_leaves_ac3_and_ia5() -> None:
    fips = [{"setting": "FIPS mode", "control": "sc-13", "observed": "off", "expected": "on"}]
    assert _controls(hardened_status(fips)) == {"SI-7": True, "SC-7": True, "AC-3": True, "IA-5": True}
