"""What the host looked like before the node started, and how to put it back.

The kubelet, kube-proxy, kube-router and the CNI plugins each leave their own marks on the machine (iptables
chains and rules, ipsets, network namespaces, veths, cgroups, shim sockets). Rather than knowing every name
each of them may use, `node-up` records a baseline first and `node-down` removes whatever is new. Rules are
deleted by number, never by re-parsing `iptables -S` text (kube-router's comments contain spaces and quotes).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

TABLES = ("filter", "nat", "mangle", "raw")
BUILTIN_CHAINS = {"INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING"}
NETNS_DIR = Path("/var/run/netns")
SHIM_SOCKET_DIR = Path("/run/containerd/s")
CGROUP_ROOT = Path("/sys/fs/cgroup")
KUBEPODS = "kubepods"
DEVICES = (Path("/dev/kvm"), Path("/dev/net/tun"), Path("/dev/vhost-net"))
"""Device nodes KubeVirt's node half may touch (its node labeller makes /dev/kvm world-writable when it can
reach it); node-down puts their modes back."""


def _run(argv: list[str], *, check: bool = False) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
    return result.stdout if result.returncode == 0 else ""


def iptables_rules(tool: str, table: str) -> dict[str, list[str]]:
    """Chain -> its rules in order (rule N is element N-1), as `iptables -S` prints them."""
    chains: dict[str, list[str]] = {}
    for line in _run([tool, "-w", "-t", table, "-S"]).splitlines():
        parts = line.split(" ", 2)
        if len(parts) >= 2 and parts[0] in ("-P", "-N"):
            chains.setdefault(parts[1], [])
        elif len(parts) == 3 and parts[0] == "-A":
            chains.setdefault(parts[1], []).append(parts[2])
    return chains


def ipset_names() -> list[str]:
    return sorted(_run(["ipset", "list", "-n"]).split())


def netns_names() -> list[str]:
    with contextlib.suppress(OSError):
        return sorted(entry.name for entry in NETNS_DIR.iterdir())
    return []


def veth_names() -> list[str]:
    names = []
    for line in _run(["ip", "-o", "link", "show", "type", "veth"]).splitlines():
        fields = line.split(":", 2)
        if len(fields) >= 2:
            names.append(fields[1].strip().split("@", 1)[0])
    return sorted(names)


def shim_sockets() -> list[str]:
    with contextlib.suppress(OSError):
        return sorted(entry.name for entry in SHIM_SOCKET_DIR.iterdir())
    return []


def kubepods_cgroups() -> list[str]:
    """Controller hierarchies that already had a kubepods cgroup (another node's; we leave those alone)."""
    found = []
    with contextlib.suppress(OSError):
        for controller in CGROUP_ROOT.iterdir():
            if (controller / KUBEPODS).is_dir():
                found.append(controller.name)
    return sorted(found)


def device_modes() -> dict[str, int]:
    """Permission bits of the KubeVirt-relevant device nodes that exist on this host."""
    modes = {}
    for device in DEVICES:
        with contextlib.suppress(OSError):
            modes[str(device)] = device.stat().st_mode & 0o7777
    return modes


def restore_device_modes(baseline: HostBaseline) -> list[str]:
    """chmod back every recorded device node whose mode changed while the node ran; return what changed."""
    restored = []
    for name, mode in baseline.device_modes.items():
        with contextlib.suppress(OSError):
            if Path(name).stat().st_mode & 0o7777 != mode:
                os.chmod(name, mode)
                restored.append(f"{name} mode {mode:o}")
    return restored


# Folders the kubelet makes at fixed host paths whatever its --root-dir (its device-plugin socket directory).
KUBELET_FIXED_DIRS = (Path("/var/lib/kubelet/device-plugins"), Path("/var/lib/kubelet"))


def existing_fixed_dirs() -> list[str]:
    return [str(path) for path in KUBELET_FIXED_DIRS if path.exists()]


def remove_new_fixed_dirs(baseline: HostBaseline) -> list[str]:
    """Remove the kubelet's fixed-path folders that did not exist before node-up (sockets inside included)."""
    removed = []
    for path in KUBELET_FIXED_DIRS:  # innermost first
        if str(path) in baseline.fixed_dirs or not path.is_dir():
            continue
        for entry in path.iterdir():
            if not entry.is_dir() or entry.is_symlink():
                with contextlib.suppress(OSError):
                    entry.unlink()
        with contextlib.suppress(OSError):
            path.rmdir()
            removed.append(str(path))
    return removed


def read_sysctl(name: str) -> str:
    return Path("/proc/sys", *name.split(".")).read_text(encoding="ascii").strip()


def write_sysctl(name: str, value: str) -> None:
    Path("/proc/sys", *name.split(".")).write_text(value + "\n", encoding="ascii")


@dataclass
class HostBaseline:
    """The host before `node-up`; node-down removes everything not listed here."""

    iptables: dict[str, dict[str, dict[str, list[str]]]] = field(default_factory=dict)
    ipsets: list[str] = field(default_factory=list)
    netns: list[str] = field(default_factory=list)
    veths: list[str] = field(default_factory=list)
    shim_sockets: list[str] = field(default_factory=list)
    kubepods: list[str] = field(default_factory=list)
    sysctls: dict[str, str] = field(default_factory=dict)
    device_modes: dict[str, int] = field(default_factory=dict)
    fixed_dirs: list[str] = field(default_factory=list)

    @classmethod
    def capture(cls, sysctls: tuple[str, ...]) -> HostBaseline:
        return cls(
            iptables={
                tool: {table: iptables_rules(tool, table) for table in TABLES}
                for tool in ("iptables", "ip6tables")
            },
            ipsets=ipset_names(),
            netns=netns_names(),
            veths=veth_names(),
            shim_sockets=shim_sockets(),
            kubepods=kubepods_cgroups(),
            sysctls={name: read_sysctl(name) for name in sysctls},
            device_modes=device_modes(),
            fixed_dirs=existing_fixed_dirs(),
        )

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=1) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> HostBaseline | None:
        if not path.is_file():
            return None
        return cls(**json.loads(path.read_text(encoding="utf-8")))


def _rule_target(rule: str) -> str:
    with contextlib.suppress(ValueError):
        tokens = shlex.split(rule)
        for flag in ("-j", "-g"):
            if flag in tokens:
                return tokens[tokens.index(flag) + 1]
    return ""


def remove_new_iptables(baseline: HostBaseline) -> list[str]:
    """Delete rules and chains that were not there before; return what was removed (for the log)."""
    removed: list[str] = []
    for tool, tables in baseline.iptables.items():
        for table, before in tables.items():
            now = iptables_rules(tool, table)
            new_chains = [chain for chain in now if chain not in before]
            for chain, rules in now.items():
                if chain in new_chains:
                    continue
                remaining = list(before.get(chain, []))
                doomed: list[int] = []
                for number, rule in enumerate(rules, start=1):
                    if rule in remaining and _rule_target(rule) not in new_chains:
                        remaining.remove(rule)
                    else:
                        doomed.append(number)
                for number in reversed(doomed):
                    _run([tool, "-w", "-t", table, "-D", chain, str(number)])
                    removed.append(f"{tool} -t {table} rule {chain}#{number}")
            for chain in new_chains:
                _run([tool, "-w", "-t", table, "-F", chain])
            for chain in new_chains:
                _run([tool, "-w", "-t", table, "-X", chain])
                removed.append(f"{tool} -t {table} chain {chain}")
    return removed


def remove_new_ipsets(baseline: HostBaseline) -> list[str]:
    doomed = [name for name in ipset_names() if name not in baseline.ipsets]
    for name in doomed:
        _run(["ipset", "destroy", name])
    return doomed


def remove_new_netns(baseline: HostBaseline) -> list[str]:
    """The CNI network namespaces containerd made for our pods (deleting one deletes its veth pair)."""
    doomed = [name for name in netns_names() if name not in baseline.netns and name.startswith("cni-")]
    for name in doomed:
        _run(["ip", "netns", "delete", name])
    for name in [v for v in veth_names() if v not in baseline.veths]:
        _run(["ip", "link", "delete", name])
        doomed.append(name)
    return doomed


def remove_new_shim_sockets(baseline: HostBaseline) -> list[str]:
    doomed = [name for name in shim_sockets() if name not in baseline.shim_sockets]
    for name in doomed:
        with contextlib.suppress(OSError):
            (SHIM_SOCKET_DIR / name).unlink()
    return doomed


def kubepods_pids(baseline: HostBaseline) -> set[int]:
    """Every process in the kubepods cgroups this node created: the containers of our pods."""
    pids: set[int] = set()
    for controller in ("pids", "memory", "cpu"):
        if controller in baseline.kubepods:
            continue
        top = CGROUP_ROOT / controller / KUBEPODS
        if not top.is_dir():
            continue
        for procs in top.rglob("cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(line) for line in procs.read_text(encoding="ascii").split())
    return pids


def remove_new_kubepods(baseline: HostBaseline) -> list[str]:
    """rmdir the kubepods cgroup trees this node's kubelet made (deepest first; only empty ones go)."""
    removed = []
    with contextlib.suppress(OSError):
        for controller in CGROUP_ROOT.iterdir():
            top = controller / KUBEPODS
            if controller.name in baseline.kubepods or not top.is_dir() or top.is_symlink():
                continue
            for folder in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                with contextlib.suppress(OSError):
                    folder.rmdir()
            with contextlib.suppress(OSError):
                top.rmdir()
                removed.append(str(top))
    return removed


def mounts_under(*roots: Path) -> list[str]:
    """Mount points at or below any root, deepest first (so children unmount before parents)."""
    resolved = [str(root.resolve()) for root in roots]
    points: list[str] = []
    with open("/proc/self/mountinfo", encoding="utf-8") as mountinfo:
        for line in mountinfo:
            point = line.split()[4].replace("\\040", " ")
            if any(point == root or point.startswith(root + "/") for root in resolved):
                points.append(point)
    return sorted(set(points), key=lambda p: -p.count("/"))


def unmount_under(*roots: Path) -> list[str]:
    """Unmount everything below the roots; a busy mount is detached lazily so nothing stays mounted."""
    done = []
    for _ in range(3):
        points = mounts_under(*roots)
        if not points:
            break
        for point in points:
            if subprocess.run(["umount", point], capture_output=True, check=False).returncode != 0:
                subprocess.run(["umount", "-l", point], capture_output=True, check=False)
            done.append(point)
    return done


def kill_pids(pids: set[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, 9)
