"""What ``spec.monitoring`` adds to a Linux guest: its node exporter and a report of the hardened settings.

The guest runs Prometheus' node exporter (port 9100) from the distribution's package, and a small root service
on a systemd timer that writes the settings the operator promised into the exporter's textfile directory as
``uds_guest_*`` gauges: sshd's *effective* configuration (``sshd -T``, so a drop-in or a hand edit anywhere
counts), root's password lock, the update timer and FIPS mode. The operator reads those gauges and the guest
agent's user list and judges drift itself (controller.guest_checks); the guest only reports facts, never
verdicts, and nothing here is ever changed by the operator after boot.

The script is fixed text: no value from the spec reaches it, so no user input can become guest shell. It
holds no backslash, so the YAML dumper writes it in a style rego-cpp's ``yaml.unmarshal`` reads back (the
compliance checks parse this Secret; a double-quoted script with escapes made it unreadable to them on a
booted guest).
"""

from __future__ import annotations

from typing import Any

from uds_vm_operator.api.models import CloudInit
from uds_vm_operator.child_names import metrics_service_name
from uds_vm_operator.render.common import ROLE_LABEL, VM_LABEL, Owner, child_metadata
from uds_vm_operator.render.exposure import LAUNCHER_LABELS

EXPORTER_PORT = 9100
"""The node exporter's port (its default; the VM's NetworkPolicy opens exactly this one for monitoring)."""
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
"""Debian's and Ubuntu's packaged ``--collector.textfile.directory``; RHEL's service is pointed at it."""
REPORT_SCRIPT_PATH = "/usr/local/sbin/uds-guest-report"
REPORT_UNIT = "uds-guest-report"
REPORT_INTERVAL_S = 20
"""How often the guest refreshes its report: well inside the shortest check interval (15 s ... 86,400 s)."""
REPORT_METRIC_PREFIX = "uds_guest_"
METRICS_ROLE = "guest-metrics"
"""``uds.dev/role`` of the metrics Services: the chart's ServiceMonitor selects monitored guests by it."""
METRICS_PORT_NAME = "guest-metrics"

_EXPORTER = {
    "apt": ("prometheus-node-exporter", "prometheus-node-exporter.service"),
    "rhel": ("golang-github-prometheus-node-exporter", "node_exporter.service"),
}
_UPDATE_TIMER = {"apt": "apt-daily-upgrade.timer", "rhel": "dnf-automatic.timer"}

_REPORT_SCRIPT = """#!/bin/sh
# Managed by uds-vm-operator: the guest's hardened settings as node-exporter gauges (never changes them).
set -u
dir=@TEXTFILE_DIR@
mkdir -p "$dir"
cfg=$(mktemp) || exit 1
trap 'rm -f "$cfg"' EXIT
/usr/sbin/sshd -T > "$cfg" 2>/dev/null || : > "$cfg"
setting() { awk -v key="$1" '$1 == key { print $2; exit }' "$cfg"; }
is() { if [ "$1" = "$2" ]; then echo 1; else echo 0; fi; }
readable=0; [ -s "$cfg" ] && readable=1
password=$(is "$(setting passwordauthentication)" yes)
kbd=$(is "$(setting kbdinteractiveauthentication)" yes)
root=$(is "$(setting permitrootlogin)" no); root=$((1 - root))
timer=0; systemctl is-active --quiet @UPDATE_TIMER@ && timer=1
fips=$(cat /proc/sys/crypto/fips_enabled 2>/dev/null || echo 0)
locked=0; passwd -S root 2>/dev/null | awk '{ exit !($2 == "L" || $2 == "LK") }' && locked=1
tmp=$(mktemp "$dir/.uds_guest.XXXXXX") || exit 1
cat > "$tmp" <<EOF
# HELP uds_guest_sshd_config_readable 1 when sshd -T printed the effective sshd configuration.
# TYPE uds_guest_sshd_config_readable gauge
uds_guest_sshd_config_readable $readable
# HELP uds_guest_sshd_password_authentication 1 when sshd accepts passwords (PasswordAuthentication yes).
# TYPE uds_guest_sshd_password_authentication gauge
uds_guest_sshd_password_authentication $password
# HELP uds_guest_sshd_kbd_interactive_authentication 1 when sshd accepts keyboard-interactive logins.
# TYPE uds_guest_sshd_kbd_interactive_authentication gauge
uds_guest_sshd_kbd_interactive_authentication $kbd
# HELP uds_guest_sshd_permit_root_login 1 when PermitRootLogin is anything but no.
# TYPE uds_guest_sshd_permit_root_login gauge
uds_guest_sshd_permit_root_login $root
# HELP uds_guest_root_password_locked 1 when root's password is locked.
# TYPE uds_guest_root_password_locked gauge
uds_guest_root_password_locked $locked
# HELP uds_guest_update_timer_active 1 when @UPDATE_TIMER@ is active.
# TYPE uds_guest_update_timer_active gauge
uds_guest_update_timer_active $timer
# HELP uds_guest_fips_enabled The kernel's crypto.fips_enabled.
# TYPE uds_guest_fips_enabled gauge
uds_guest_fips_enabled $fips
# HELP uds_guest_report_timestamp_seconds When the guest wrote this report (guest clock).
# TYPE uds_guest_report_timestamp_seconds gauge
uds_guest_report_timestamp_seconds $(date +%s)
EOF
chmod 0644 "$tmp" && mv -f "$tmp" "$dir/uds_guest.prom"
"""

_SERVICE = f"""[Unit]
Description=uds-vm-operator guest report (hardened settings as node-exporter gauges)
After=ssh.service sshd.service

[Service]
Type=oneshot
ExecStart={REPORT_SCRIPT_PATH}
"""

_TIMER = f"""[Unit]
Description=Refresh the uds-vm-operator guest report

[Timer]
OnActiveSec=0
OnUnitActiveSec={REPORT_INTERVAL_S}s
AccuracySec=2s

[Install]
WantedBy=timers.target
"""

_PATH = f"""[Unit]
Description=Refresh the uds-vm-operator guest report as soon as a watched setting's file changes

[Path]
PathChanged=/etc/ssh/sshd_config
PathChanged=/etc/ssh/sshd_config.d
PathChanged=/etc/shadow
PathChanged=/etc/passwd
Unit={REPORT_UNIT}.service

[Install]
WantedBy=paths.target
"""
"""A hand edit of sshd's configuration or of root's password is in the report within a second, so drift is
seen at the operator's next check instead of up to a timer period later."""

_RHEL_EXPORTER_DROPIN = f"""[Service]
ExecStart=
ExecStart=/usr/bin/node_exporter --collector.textfile.directory={TEXTFILE_DIR}
"""


def _family(cloud_init: CloudInit) -> str:
    return "rhel" if cloud_init.flavor == "rhel" else "apt"


def update_timer(cloud_init: CloudInit) -> str:
    """The systemd timer that installs the guest's security updates (SI-2) for its flavour."""
    return _UPDATE_TIMER[_family(cloud_init)]


def report_script(cloud_init: CloudInit) -> str:
    """The guest's report script for this flavour (fixed text; only the update timer's name differs)."""
    return _REPORT_SCRIPT.replace("@TEXTFILE_DIR@", TEXTFILE_DIR).replace(
        "@UPDATE_TIMER@", update_timer(cloud_init)
    )


def monitoring_parts(cloud_init: CloudInit) -> tuple[list[str], list[dict[str, Any]], list[str]]:
    """(packages, write_files, runcmd) that install the exporter and start the guest report on a timer."""
    family = _family(cloud_init)
    package, exporter_unit = _EXPORTER[family]
    files: list[dict[str, Any]] = [
        {
            "path": REPORT_SCRIPT_PATH,
            "owner": "root:root",
            "permissions": "0755",
            "content": report_script(cloud_init),
        },
        {
            "path": f"/etc/systemd/system/{REPORT_UNIT}.service",
            "owner": "root:root",
            "permissions": "0644",
            "content": _SERVICE,
        },
        {
            "path": f"/etc/systemd/system/{REPORT_UNIT}.timer",
            "owner": "root:root",
            "permissions": "0644",
            "content": _TIMER,
        },
        {
            "path": f"/etc/systemd/system/{REPORT_UNIT}.path",
            "owner": "root:root",
            "permissions": "0644",
            "content": _PATH,
        },
    ]
    if family == "rhel":
        files.append(
            {
                "path": f"/etc/systemd/system/{exporter_unit}.d/10-uds-textfile.conf",
                "owner": "root:root",
                "permissions": "0644",
                "content": _RHEL_EXPORTER_DROPIN,
            }
        )
    commands = [
        "systemctl daemon-reload",
        f"systemctl enable --now {exporter_unit} {REPORT_UNIT}.timer {REPORT_UNIT}.path",
    ]
    return [package], files, commands


def render_metrics_service(owner: Owner) -> dict[str, Any]:
    """``<name>-metrics``: a headless Service on the guest's exporter, for Prometheus' service discovery.

    Headless, because Prometheus scrapes the endpoints, never the virtual IP: a ClusterIP per monitored VM
    exhausted a /24 Service range at 250 VMs (measured: 748 of 1,000 VMs refused with "range is full").

    The chart's ServiceMonitor (rendered where the Prometheus Operator's CRDs exist) selects these Services by
    their role label, so a site's Prometheus finds every monitored guest without a per-VM object of its CRD.
    Scrapes still pass through the VM's NetworkPolicy, which admits only Prometheus and the operator.
    """
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": child_metadata(
            owner, metrics_service_name(owner.name), labels={ROLE_LABEL: METRICS_ROLE}
        ),
        "spec": {
            "type": "ClusterIP",
            "clusterIP": "None",
            "selector": {VM_LABEL: owner.name, **LAUNCHER_LABELS},
            "ports": [
                {
                    "name": METRICS_PORT_NAME,
                    "protocol": "TCP",
                    "port": EXPORTER_PORT,
                    "targetPort": EXPORTER_PORT,
                }
            ],
        },
    }
