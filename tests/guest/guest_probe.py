"""Run INSIDE the booted guest (``python3 -`` as root, stdlib only): what the guest does, as one JSON object.

Sent on stdin by the guest tier (qemu-guest-agent guest-exec); never imported on the host. It waits for
cloud-init to finish, then reads the effective sshd settings (``sshd -T``), the password state of every
account of interest from /etc/shadow (only whether a usable hash exists, never the hash), the packages and
apt sources, and the update/FIPS/audit facts.
"""

import json
import os
import subprocess
import sys

WATCHED = sys.argv[1:]  # account names to report on (declared, hostile, undeclared)
MIRROR_PACKAGES = ("hello", "tree", "uds-guest-canary")  # what the guest tier's apt mirror offers
SSHD_KEYS = (
    "passwordauthentication",
    "permitrootlogin",
    "kbdinteractiveauthentication",
    "challengeresponseauthentication",
    "permitemptypasswords",
    "pubkeyauthentication",
    "authenticationmethods",
    "maxauthtries",
    "x11forwarding",
    "ciphers",
    "macs",
    "kexalgorithms",
)


def run(*argv):
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    return done.returncode, done.stdout.strip()


def read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return None


def shadow_state():
    accounts = {}
    for line in (read("/etc/shadow") or "").splitlines():
        fields = line.split(":")
        if len(fields) > 1 and (fields[0] in WATCHED or fields[0] == "root"):
            field = fields[1]
            accounts[fields[0]] = {
                "locked": field.startswith("!") or field in ("*", "!*"),
                "usable_hash": bool(field) and not field.startswith(("!", "*")),
                "empty": field == "",
            }
    return accounts


def main():
    status_rc, status = run("cloud-init", "status", "--wait", "--long")
    _, sshd = run("sshd", "-T")
    effective = {}
    for line in sshd.splitlines():
        key, _, value = line.partition(" ")
        if key in SSHD_KEYS:
            effective[key] = value
    users = {}
    for name in WATCHED:
        rc, entry = run("getent", "passwd", name)
        home = entry.split(":")[5] if rc == 0 else None
        keys = read(f"{home}/.ssh/authorized_keys") if home else None
        rc_groups, groups = run("id", "-nG", name)
        users[name] = {
            "exists": rc == 0,
            "shell": entry.split(":")[6] if rc == 0 else None,
            "authorized_keys": len([k for k in (keys or "").splitlines() if k.strip()]),
            "groups": groups.split() if rc_groups == 0 else [],
            "sudoers": any(
                name in (read(os.path.join("/etc/sudoers.d", f)) or "")
                for f in (os.listdir("/etc/sudoers.d") if os.path.isdir("/etc/sudoers.d") else [])
            ),
        }
    timer_active = run("systemctl", "is-active", "apt-daily-upgrade.timer")[1]
    timer_enabled = run("systemctl", "is-enabled", "apt-daily-upgrade.timer")[1]
    sources = "".join(read(os.path.join(d, f)) or "" for d in ("/etc/apt",) for f in ("sources.list",))
    if os.path.isdir("/etc/apt/sources.list.d"):
        sources += "".join(
            read(os.path.join("/etc/apt/sources.list.d", f)) or ""
            for f in os.listdir("/etc/apt/sources.list.d")
        )
    packages = {}
    for name in MIRROR_PACKAGES:
        rc, version = run("dpkg-query", "-W", "-f=${Status}|${Version}", name)
        status, _, version = version.partition("|")
        packages[name] = {"installed": rc == 0 and status.endswith(" installed"), "version": version or None}
    log = read("/var/log/cloud-init.log") or ""
    report = {
        "uptime_s": float((read("/proc/uptime") or "0").split()[0]),
        "hostname": run("hostname")[1],
        "kernel": os.uname().release,
        "os_release": dict(
            line.split("=", 1) for line in (read("/etc/os-release") or "").splitlines() if "=" in line
        ),
        "cloud_init": {"status_rc": status_rc, "status": status},
        "cloud_init_result": json.loads(read("/run/cloud-init/result.json") or "{}"),
        "sshd_effective": effective,
        "sshd_dropins": sorted(os.listdir("/etc/ssh/sshd_config.d")),
        "shadow": shadow_state(),
        "users": users,
        "fips_enabled": (read("/proc/sys/crypto/fips_enabled") or "").strip() or None,
        "auditd_active": run("systemctl", "is-active", "auditd")[1],
        "audit_rules": run("auditctl", "-l")[1].splitlines(),
        "apt_daily_upgrade_timer": {"active": timer_active, "enabled": timer_enabled},
        "timer_schedule": run("systemctl", "show", "-p", "TimersCalendar", "apt-daily-upgrade.timer")[1],
        "auto_upgrades_conf": read("/etc/apt/apt.conf.d/20auto-upgrades"),
        "apt_sources": sources,
        "unattended_upgrades_installed": run("dpkg-query", "-W", "-f=${Status}", "unattended-upgrades")[1],
        "qemu_guest_agent": run("systemctl", "is-active", "qemu-guest-agent")[1],
        "systemd_analyze": run("systemd-analyze", "time")[1],
        "sshd_config_first_line": (read("/etc/ssh/sshd_config") or "").split("\n", 1)[0],
        "packages": packages,
        "apt_policy": run("apt-cache", "policy", *MIRROR_PACKAGES)[1],
        "apt_lists": sorted(os.listdir("/var/lib/apt/lists")) if os.path.isdir("/var/lib/apt/lists") else [],
        "apt_trusted": sorted(os.listdir("/etc/apt/trusted.gpg.d"))
        if os.path.isdir("/etc/apt/trusted.gpg.d")
        else [],
        "cloud_init_package_failures": [
            line
            for line in log.splitlines()
            if "Failed to install packages" in line or "Package update failed" in line
        ],
    }
    json.dump(report, sys.stdout, sort_keys=True)


main()
