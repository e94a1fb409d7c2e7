"""Drift of a running guest's hardening (spec.monitoring): read on a schedule, judged here, never corrected.

Two channels, because KubeVirt exposes no guest-agent exec to its users (docs/adr/0019):

- the guest agent, through KubeVirt's ``userlist`` subresource: who is logged in (root, or anyone the VM does
  not declare, is drift), and ``AgentConnected`` on the VMI: without an agent the guest is *unknown*;
- the guest's own report (render.guestmonitor): sshd's effective settings, root's password lock, the update
  timer and FIPS mode as ``uds_guest_*`` gauges on the node exporter, fetched through the VM's own
  NetworkPolicy, which admits the operator on that one port.

Judging is pure (:func:`judge`); :class:`GuestChecker` does the reads, at most once per
``checkIntervalSeconds`` per VM and again on every new boot (a new VMI UID). A guest is reported compliant
only when every channel answered and nothing drifted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from uds_vm_operator.api.models import CloudInit, UDSVirtualMachineSpec
from uds_vm_operator.render.cloudinit import FIPS_CAPABLE_FLAVORS
from uds_vm_operator.render.guestmonitor import EXPORTER_PORT, REPORT_METRIC_PREFIX, update_timer
from uds_vm_operator.runtime import kube
from uds_vm_operator.runtime.conditions import FALSE, TRUE, UNKNOWN, Condition
from uds_vm_operator.runtime.errors import KubeApiError, KubeUnreachableError

CONDITION_TYPE = "GuestCompliant"
DEFAULT_USERS = {"debian": "debian", "ubuntu": "ubuntu", "rhel": "cloud-user"}
"""The image's default user cloud-init creates (``users: [default, ...]``) for each flavour."""
FETCH_TIMEOUT_S = 5.0
MAX_REPORT_BYTES = 1 << 20
REPORT_PATH = "/metrics?collect[]=textfile"
"""Only the textfile collector: the report is a few hundred bytes instead of the whole node's series."""

Fetch = Callable[[str, int, str], Awaitable[str]]
"""(host, port, path) → the HTTP body; raises OSError or TimeoutError when the guest does not answer."""


@dataclass(frozen=True)
class GuestFacts:
    """What one check read from the guest; ``None`` for a channel that did not answer, with why."""

    report: Mapping[str, float] | None = None
    users: tuple[str, ...] | None = None
    problem: tuple[str, str] | None = None
    """(reason, message) when the guest could not be read at all."""


@dataclass(frozen=True)
class GuestVerdict:
    """The condition and the ``status.guest`` block one check yields."""

    condition: Condition
    drift: tuple[Mapping[str, str], ...] = ()
    users: tuple[str, ...] = ()

    def status(self) -> dict[str, Any]:
        """``status.guest`` in its stored (camelCase) form."""
        return {
            "compliant": self.condition.status,
            "reason": self.condition.reason,
            "drift": [dict(item) for item in self.drift] or None,
            "loggedInUsers": list(self.users) or None,
        }


def parse_report(text: str) -> dict[str, float]:
    """The ``uds_guest_*`` samples of a Prometheus text exposition (anything else, and junk, is ignored)."""
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith(REPORT_METRIC_PREFIX):
            continue
        parts = line.split()
        if len(parts) < 2 or "{" in parts[0]:
            continue
        try:
            samples[parts[0].removeprefix(REPORT_METRIC_PREFIX)] = float(parts[1])
        except ValueError:
            continue
    return samples


def users_of(userlist: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The distinct logged-in user names in KubeVirt's ``VirtualMachineInstanceGuestOSUserList``."""
    names = {str(item.get("userName") or "") for item in (userlist or {}).get("items") or []}
    return tuple(sorted(name for name in names if name))


def expected_users(spec: UDSVirtualMachineSpec) -> frozenset[str]:
    """Who may be logged in: the declared users, the image's default user and monitoring.allowedUsers."""
    cloud_init = spec.cloud_init or CloudInit()
    names = {user.name for user in cloud_init.users} | set(spec.monitoring.allowed_users)
    names.add(DEFAULT_USERS[cloud_init.flavor])
    names.discard("root")
    return frozenset(names)


def _drift(setting: str, control: str, observed: str, expected: str) -> dict[str, str]:
    return {"setting": setting, "control": control, "observed": observed, "expected": expected}


def _report_drift(spec: UDSVirtualMachineSpec, report: Mapping[str, float]) -> list[dict[str, str]]:
    cloud_init = spec.cloud_init or CloudInit()
    found: list[dict[str, str]] = []
    if report.get("sshd_config_readable") != 1:
        found.append(_drift("sshd configuration", "ia-5", "unreadable (sshd -T failed)", "readable"))
    if report.get("sshd_password_authentication") != 0:
        found.append(_drift("PasswordAuthentication", "ia-5", "yes", "no"))
    if report.get("sshd_kbd_interactive_authentication") != 0:
        found.append(_drift("KbdInteractiveAuthentication", "ia-5", "yes", "no"))
    if report.get("sshd_permit_root_login") != 0:
        found.append(_drift("PermitRootLogin", "ac-3", "not no", "no"))
    if report.get("root_password_locked") != 1:
        found.append(_drift("root password", "ac-3", "not locked", "locked"))
    update = cloud_init.auto_update
    if update is not None and update.enabled and report.get("update_timer_active") != 1:
        found.append(_drift(update_timer(cloud_init), "si-2", "inactive", "active"))
    fips_claimed = cloud_init.fips and cloud_init.flavor in FIPS_CAPABLE_FLAVORS
    if fips_claimed and report.get("fips_enabled") != 1:
        found.append(_drift("FIPS mode", "sc-13", "off", "on"))
    return found


def judge(spec: UDSVirtualMachineSpec, facts: GuestFacts) -> GuestVerdict:
    """Compare what the guest reported with what the operator promised for it."""
    if facts.problem is not None:
        return GuestVerdict(Condition(UNKNOWN, *facts.problem))
    if facts.report is None or facts.users is None:
        return GuestVerdict(Condition(UNKNOWN, "NoGuestReport", "The guest did not report its settings."))
    found = _report_drift(spec, facts.report)
    strangers = sorted(set(facts.users) - expected_users(spec))
    if strangers:
        found.append(_drift("logged-in users", "ac-3", ", ".join(strangers)[:256], "declared users only"))
    if found:
        named = "; ".join(f"{d['setting']} is {d['observed']} (expected {d['expected']})" for d in found)
        message = f"The running guest drifted from its hardening: {named}. The operator does not change it."
        return GuestVerdict(Condition(FALSE, "GuestDrifted", message[:1000]), tuple(found), facts.users)
    return GuestVerdict(
        Condition(TRUE, "GuestHardened", "The running guest reports every hardened setting it was given."),
        (),
        facts.users,
    )


def running_guest(vmi: Mapping[str, Any] | None) -> tuple[str | None, str | None]:
    """(problem, address): why a VMI cannot be checked, or the address its exporter answers on."""
    status = (vmi or {}).get("status") or {}
    if status.get("phase") != "Running":
        return "GuestNotRunning", None
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    if conditions.get("AgentConnected") != "True":
        return "NoGuestAgent", None
    for interface in status.get("interfaces") or []:
        address = interface.get("ipAddress")
        if address:
            return None, str(address)
    return "NoGuestAddress", None


_PROBLEMS = {
    "GuestNotRunning": "The guest is not running; its settings cannot be checked.",
    "NoGuestAgent": "The guest agent is not connected: a guest without an agent is never reported compliant.",
    "NoGuestAddress": "KubeVirt reports no address for the guest yet.",
}


async def _read_all(reader: asyncio.StreamReader) -> bytes:
    """The whole response (a server may send it in pieces), refused past MAX_REPORT_BYTES."""
    parts: list[bytes] = []
    total = 0
    while chunk := await reader.read(65536):
        total += len(chunk)
        if total > MAX_REPORT_BYTES:
            raise OSError(f"the exporter's answer exceeds {MAX_REPORT_BYTES} bytes")
        parts.append(chunk)
    return b"".join(parts)


async def fetch_http(host: str, port: int, path: str) -> str:
    """GET ``path`` over plain HTTP/1.0 with a bounded wait and size (the exporter speaks nothing else)."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), FETCH_TIMEOUT_S)
    try:
        target = f"[{host}]" if ":" in host else host
        writer.write(f"GET {path} HTTP/1.0\r\nHost: {target}:{port}\r\nAccept: text/plain\r\n\r\n".encode())
        await writer.drain()
        raw = await asyncio.wait_for(_read_all(reader), FETCH_TIMEOUT_S)
    finally:
        writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].decode(errors="replace")
    if " 200 " not in f"{status_line} ":
        raise OSError(f"the exporter answered {status_line!r}")
    return body.decode(errors="replace")


@dataclass
class _LastCheck:
    vmi_uid: str
    at: float
    verdict: GuestVerdict


@dataclass
class GuestChecker:
    """Reads a monitored guest at most once per interval (and on each new boot); remembers the verdict."""

    api: kube.KubeApi
    fetch: Fetch = fetch_http
    monotonic: Callable[[], float] = time.monotonic
    calls: int = 0
    """Guest reads made (one userlist through the agent plus one report fetch per check): the cost figure."""
    _last: dict[tuple[str, str], _LastCheck] = field(default_factory=dict)

    def forget(self, namespace: str, name: str) -> None:
        """Drop a deleted or unmonitored VM's last verdict."""
        self._last.pop((namespace, name), None)

    def due_in(self, namespace: str, name: str, spec: UDSVirtualMachineSpec) -> float | None:
        """Seconds until this VM's next check (None: it has no check to wait for)."""
        last = self._last.get((namespace, name))
        if last is None or not spec.monitoring.enabled:
            return None
        return max(1.0, spec.monitoring.check_interval_seconds - (self.monotonic() - last.at))

    async def check(
        self, namespace: str, name: str, spec: UDSVirtualMachineSpec, vmi: Mapping[str, Any] | None
    ) -> GuestVerdict | None:
        """This VM's current verdict: a fresh check when one is due, else the last (None: not monitored)."""
        if not spec.monitoring.enabled:
            self.forget(namespace, name)
            return None
        problem, address = running_guest(vmi)
        if problem is not None:
            self.forget(namespace, name)
            return GuestVerdict(Condition(UNKNOWN, problem, _PROBLEMS[problem]))
        uid = str(((vmi or {}).get("metadata") or {}).get("uid") or "")
        last = self._last.get((namespace, name))
        now = self.monotonic()
        if (
            last is not None
            and last.vmi_uid == uid
            and now - last.at < spec.monitoring.check_interval_seconds
        ):
            return last.verdict
        verdict = judge(spec, await self._read(namespace, name, str(address)))
        self._last[(namespace, name)] = _LastCheck(uid, now, verdict)
        return verdict

    async def _read(self, namespace: str, name: str, address: str) -> GuestFacts:
        self.calls += 2
        path = kube.VIRTUAL_MACHINE_INSTANCE_ACTIONS.path(namespace, name, "userlist")
        try:
            userlist = await self.api.request("GET", path, what=f"guest user list of {namespace}/{name}")
        except (KubeApiError, KubeUnreachableError) as exc:
            return GuestFacts(
                problem=("GuestAgentUnanswered", f"The guest agent's user list failed: {exc}"[:500])
            )
        if userlist is None:
            message = "KubeVirt has no user list for this guest (404): the agent channel did not answer."
            return GuestFacts(problem=("GuestAgentUnanswered", message))
        try:
            body = await self.fetch(address, EXPORTER_PORT, REPORT_PATH)
        except (OSError, TimeoutError) as exc:
            why = str(exc) or type(exc).__name__
            message = f"The guest's report on {address}:{EXPORTER_PORT} could not be read: {why}"
            return GuestFacts(problem=("NoGuestReport", message[:500]))
        report = parse_report(body)
        if not report:
            return GuestFacts(
                problem=("NoGuestReport", "The guest's node exporter serves no uds_guest_* report.")
            )
        return GuestFacts(report=report, users=users_of(userlist))


def carry_drift(
    verdict: GuestVerdict | None, previous_guest: Mapping[str, Any] | None
) -> GuestVerdict | None:
    """An Unknown verdict keeps the drift last seen: a guest that stops answering (its agent stopped, the VM
    halted) must not clear a control it failed; only a check that finds the setting undone clears it."""
    last = tuple((previous_guest or {}).get("drift") or ())
    if verdict is None or verdict.condition.status != UNKNOWN or not last:
        return verdict
    named = "; ".join(str(item.get("setting")) for item in last)
    message = f"{verdict.condition.message} Drift last seen, not shown undone since: {named}."
    return GuestVerdict(Condition(UNKNOWN, verdict.condition.reason, message[:1000]), last, verdict.users)


def guest_event(previous: Mapping[str, Any], desired: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """The Event a guest check's change deserves: Warning when drift appears or changes, Normal when a check
    finds the guest hardened after anything else (its first check, drift undone, a guest answering again)."""
    before, after = previous.get("guest") or {}, desired.get("guest") or {}
    condition: Mapping[str, Any] = next(
        (c for c in desired.get("conditions") or [] if c.get("type") == CONDITION_TYPE), {}
    )
    message = str(condition.get("message") or "")
    if after.get("compliant") == FALSE and (before.get("compliant"), before.get("drift")) != (
        FALSE,
        after.get("drift"),
    ):
        return "Warning", "GuestDrifted", message
    if after.get("compliant") == TRUE and before.get("compliant") != TRUE:
        if before.get("drift"):
            return "Normal", "GuestHardened", "The guest's drift is gone: " + message
        return "Normal", "GuestHardened", message
    return None
