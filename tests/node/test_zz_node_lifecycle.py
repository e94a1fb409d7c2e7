"""The node's life cycle on this machine: a crash (every process SIGKILLed, plane included) is followed by a
working `node-up`, and `cluster-down` leaves nothing behind — no process, mount, veth, bridge, loop device,
network namespace, ipset or iptables chain/rule that was not there before the node came up.

Two crashes: after the first, `node-up` in the same state dir (a user's `.envtest`); after the second,
`node-up` in a new state dir, as the next CI run after a killed one does: it must find the dead node and
remove its pods' sandboxes, mounts and chains before it starts.

Runs last in the tier (file name), and leaves the session's node stopped.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.node.node_cluster import NodeHandle, load_handle, wait_until
from tools.envtest.processes import ProcessRecord
from tools.node import host_baseline, probes
from tools.node import node as node_launcher
from tools.node import node_configs as cfg

# Alone on the node (tests/node/lanes.py): it crashes and stops the node.
pytestmark = pytest.mark.alone_on_the_node

CRASH_DEATH_TIMEOUT_S = 30.0


def _all_records(state: Path) -> list[ProcessRecord]:
    records = [
        ProcessRecord.from_json(r) for r in json.loads(node_launcher.paths_for(state).pids.read_text())
    ]
    plane = json.loads((state / "pids.json").read_text())
    return records + [ProcessRecord.from_json(r) for r in plane]


def _processes_mentioning(*needles: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(needle in cmdline for needle in needles) and "pytest" not in cmdline:
            found.append(f"{entry.name}: {cmdline[:160]}")
    return found


def _loop_devices_backed_by(folder: Path) -> list[str]:
    listing = json.loads(
        subprocess.run(["losetup", "-J"], capture_output=True, text=True, check=True).stdout
        or '{"loopdevices": []}'
    )
    return [
        d["name"]
        for d in listing.get("loopdevices", [])
        if str(d.get("back-file", "")).startswith(str(folder))
    ]


def _crash(state: Path) -> None:
    """Every process we started dies at once; containers and shims keep running, as after an OOM.

    Returns once each is really gone: SIGKILL takes effect only when a process leaves the kernel (one in
    uninterruptible I/O, e.g. the kubelet unmounting, lingers), and a node-up in that moment rightly sees a
    live node (seen once: the next node-up refused to start beside it)."""
    killed = [record for record in _all_records(state) if record.is_alive()]
    for record in killed:
        os.kill(record.pid, signal.SIGKILL)
    wait_until(
        "the killed processes to be gone",
        lambda: not any(record.is_alive() for record in killed),
        CRASH_DEATH_TIMEOUT_S,
        0.1,
    )


def _iptables_drift(before: dict[str, list[str]], now: dict[str, list[str]]) -> dict[str, object]:
    """What differs from the baseline, chain by chain (the assertion message names the culprit)."""
    return {
        chain: {"before": before.get(chain), "now": now.get(chain)}
        for chain in sorted(set(before) | set(now))
        if before.get(chain) != now.get(chain)
    }


def test_a_crashed_node_comes_back_and_cluster_down_leaves_nothing(node: NodeHandle) -> None:
    state = node.state_dir.resolve()
    paths = node_launcher.paths_for(state)
    baseline = host_baseline.HostBaseline.load(paths.host_state)
    assert baseline is not None
    # Something on the node that leaves marks: a pod (veth, netns, mounts, cgroups) and a loop-backed volume.
    ns = node.namespace("lifecycle")
    node.client_pod(ns, "survivor", {"app": "survivor"})
    node.volume(16 * 1024 * 1024, "Filesystem", "ext4")

    node.api.close()
    _crash(state)

    node_launcher.up(state)
    assert node_launcher.status(state, quiet=True), "node-up after a crash brings a Ready node back"
    again = load_handle(state)
    try:
        ns2 = again.namespace("after-crash")
        pod = again.client_pod(ns2, "phoenix", {"app": "phoenix"})
        assert probes.dns(
            again.container_pid(pod), "kube-dns.kube-system.svc.cluster.local", cfg.CLUSTER_DNS_IP
        )["addresses"] == [cfg.CLUSTER_DNS_IP]
        again.volume(16 * 1024 * 1024, "Block")
    finally:
        again.api.close()

    # The second crash, with a pod running; the next node starts in a state dir of its own.
    crashed_plane_files = Path(json.loads((state / "state.json").read_text())["run_dir"])
    _crash(state)
    assert crashed_plane_files.is_dir(), "the crash left the plane's run folder (the premise)"
    assert host_baseline.mounts_under(state, paths.run_dir), "the crash left the pods' mounts (the premise)"
    fresh = Path(tempfile.mkdtemp(prefix="udsn-", dir="/tmp"))  # as the conftest makes one
    node_launcher.up(fresh)
    assert not host_baseline.mounts_under(state, paths.run_dir), "node-up removed the dead node's mounts"
    assert not crashed_plane_files.exists(), "node-up removed the dead plane's etcd data and certificates"
    fresh_paths = node_launcher.paths_for(fresh)
    assert (fresh / "pids.json").is_file() and fresh_paths.pids.is_file()
    removed = node_launcher.down(fresh, stop_plane=True)
    assert removed, "down removed what the node had made"
    assert not _processes_mentioning(str(state), str(paths.run_dir), str(fresh), str(fresh_paths.run_dir)), (
        "no process of either node or plane is left"
    )
    assert not host_baseline.mounts_under(state, paths.run_dir, fresh, fresh_paths.run_dir), "a mount is left"
    assert (
        subprocess.run(["ip", "link", "show", cfg.BRIDGE], capture_output=True, check=False).returncode != 0
    ), "the bridge is gone"
    assert host_baseline.veth_names() == baseline.veths, "no veth is left"
    assert [n for n in host_baseline.netns_names() if n not in baseline.netns] == [], (
        "no network namespace is left"
    )
    assert not _loop_devices_backed_by(state) and not _loop_devices_backed_by(fresh), "no loop device is left"
    assert host_baseline.ipset_names() == baseline.ipsets, "no ipset is left"
    for tool, tables in baseline.iptables.items():
        for table, chains in tables.items():
            now = host_baseline.iptables_rules(tool, table)
            assert now == chains, f"{tool} -t {table} is not as it was: {_iptables_drift(chains, now)}"
    assert host_baseline.kubepods_pids(baseline) == set()
    assert all(host_baseline.read_sysctl(k) == v for k, v in baseline.sysctls.items()), "sysctls restored"
    assert host_baseline.device_modes() == baseline.device_modes, "/dev/kvm and /dev/net/tun keep their modes"
    assert host_baseline.existing_fixed_dirs() == baseline.fixed_dirs, "the kubelet's fixed folders are gone"
    assert not fresh_paths.pids.exists() and not (fresh / "pids.json").exists()
    shutil.rmtree(fresh)
