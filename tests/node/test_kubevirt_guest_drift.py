"""The guest speaks for itself (issue 34): a booted guest's hardening drift, its exporter behind its policy.

Real: the operator (a host process), the whole KubeVirt v1.8.4 (the guest boots under software emulation in
its launcher pod; virt-api answers the guest agent's ``userlist`` through virt-handler), the node and
kube-router enforcing the VM's NetworkPolicy, and Prometheus (Debian's package, in a pod of the monitoring
namespace; prometheus_pod). Played (kubevirt_node): only CDI's import, which puts the guest image on a real
node volume.

The VM declares ``spec.monitoring``. Its guest runs the node exporter and the operator's guest report; the
operator reads both and the agent's user list every 15 s. The test then does what the issue's assessor fears:
it logs into the guest and re-enables password SSH by hand. The VM must say so (GuestCompliant=False naming
PasswordAuthentication, a Warning Event, IA-5 not satisfied in the OSCAL results), the guest must be left as
the user made it, and undoing the change must flip everything back. The real Prometheus of the monitoring
namespace scrapes the guest's node exporter through the VM's policy, and KubeVirt's per-VMI series from
virt-handler; the same Prometheus in another namespace, and the VM's own admin on that port, are refused.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.operator_harness import OperatorProcess
from tests.node.kubevirt_guest import (  # noqa: F401 (guest_image_fixture, keys_fixture: shared fixtures)
    GUEST_DISK,
    GUEST_USER,
    GuestKeys,
    booted_cloud_init,
    guest_image_fixture,
    keys_fixture,
    ssh,
)
from tests.node.kubevirt_node import (  # noqa: F401 (kubevirt_fixture: the session fixture)
    kubevirt_fixture,
    play_cdi_import,
    udsvm,
    udsvm_spec,
)
from tests.node.node_cluster import NodeHandle, running_operator, wait_until
from tests.node.prometheus_pod import Prometheus, run_prometheus
from tests.node.test_kubevirt_launcher_packets import booted_launcher
from tools.node import probes

UDS_VM_API = "/apis/uds.dev/v1alpha1"
VMCTL = (sys.executable, "-m", "uds_vm_operator.cli.main")
CHECK_INTERVAL_S = 15
HARDENING_DROPIN = "/etc/ssh/sshd_config.d/00-uds-hardening.conf"
NETWORK = {
    "allow": [
        {"direction": "Ingress", "podSelector": {"matchLabels": {"app": "admin"}}, "ports": [{"port": 22}]},
    ]
}


@pytest.fixture
def monitoring_ns(kubevirt: NodeHandle) -> Iterator[str]:
    """The namespace of 'Prometheus' (test namespaces get a random suffix: the operator is told its name)."""
    name = kubevirt.namespace("monitoring")
    try:
        yield name
    finally:
        kubevirt.delete_namespace(name)


@pytest.fixture
def operator(
    kubevirt: NodeHandle, ns: str, monitoring_ns: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[OperatorProcess]:
    monkeypatch.setenv("UDS_VM_PROMETHEUS_NAMESPACE", monitoring_ns)  # the chart's networkPolicy value
    with running_operator(kubevirt, ns, tmp_path / "logs") as process:
        yield process


def guest_status(node: NodeHandle, namespace: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(status.guest, the GuestCompliant condition) of the VM `web`."""
    status = (node.api.get(f"{UDS_VM_API}/namespaces/{namespace}/udsvirtualmachines/web") or {}).get(
        "status"
    ) or {}
    condition = next((c for c in status.get("conditions") or [] if c["type"] == "GuestCompliant"), {})
    return status.get("guest") or {}, condition


def wait_compliant(
    node: NodeHandle, namespace: str, want: str, timeout_s: float
) -> tuple[dict[str, Any], float]:
    """status.guest once its verdict is `want`, and the seconds it took."""
    started = time.monotonic()

    def verdict() -> tuple[dict[str, Any], dict[str, Any]] | None:
        found = guest_status(node, namespace)
        return found if found[0].get("compliant") == want else None

    found = wait_until(f"GuestCompliant={want} ({guest_status(node, namespace)})", verdict, timeout_s, 1.0)
    print(f"GuestCompliant={want} after {time.monotonic() - started:.1f} s: {found}")
    return found[0], time.monotonic() - started


def events(node: NodeHandle, namespace: str, reason: str | None) -> list[dict[str, Any]]:
    """The VM's Events with `reason` (None: every guest Event)."""
    items = node.api.items(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
    wanted = {reason} if reason else {"GuestDrifted", "GuestHardened"}
    return [e for e in items if e.get("reason") in wanted and (e.get("regarding") or {}).get("name") == "web"]


def compliance(node: NodeHandle, namespace: str) -> dict[str, str]:
    """`uds-vmctl compliance validate --json`: control -> result for the VM `web`."""
    done = subprocess.run(
        [*VMCTL, "compliance", "validate", "-n", namespace, "--json", "--kubeconfig", str(node.kubeconfig)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode in (0, 1) and done.stdout.strip(), done.stderr[-2000:]
    try:
        summary = json.loads(done.stdout)
    except json.JSONDecodeError as exc:
        raise AssertionError(f"not JSON ({exc}):\n{done.stdout[:3000]}\n{done.stderr[-2000:]}") from exc
    return next(vm["controls"] for vm in summary["vms"] if vm["name"] == "web")


def scrape_configs(guest_ip: str, handler_ip: str) -> list[dict[str, Any]]:
    """The guest's node exporter, and virt-handler's metrics (KubeVirt's per-VMI series; self-signed TLS)."""
    return [
        {"job_name": "guest", "static_configs": [{"targets": [f"{guest_ip}:9100"]}]},
        {
            "job_name": "kubevirt",
            "scheme": "https",
            "tls_config": {"insecure_skip_verify": True},
            "static_configs": [{"targets": [f"{handler_ip}:8443"]}],
        },
    ]


def virt_handler_ip(node: NodeHandle) -> str:
    pods = node.api.items("/api/v1/namespaces/kubevirt/pods", label_selector="kubevirt.io=virt-handler")
    assert pods and pods[0]["status"].get("podIP"), pods
    return str(pods[0]["status"]["podIP"])


def assert_scraped_through_the_policy(prometheus: Prometheus, outsider: Prometheus, namespace: str) -> None:
    """The monitoring namespace's Prometheus gets the guest's and KubeVirt's series; another namespace's does
    not."""
    found = prometheus.wait_for('uds_guest_sshd_password_authentication{job="guest"} == 0', 120)
    print(f"guest report scraped by Prometheus: {found}")
    assert prometheus.wait_for('node_boot_time_seconds{job="guest"}', 60), "the node exporter's own series"
    vmi = prometheus.wait_for(
        f'count by (__name__) ({{__name__=~"kubevirt_vmi_.+", namespace="{namespace}"}})', 120
    )
    print(f"KubeVirt's VMI series for the VM: {sorted(r['metric']['__name__'] for r in vmi)}")
    refused = outsider.wait_for('up{job="guest"} == 0', 120)
    assert refused, "the same Prometheus in another namespace is refused by the VM's policy"
    print(f"outsider's scrape: {[t.get('lastError') for t in outsider.targets() if 'guest' in str(t)]}")


def set_password_ssh(admin: int, ip: str, keys: GuestKeys, value: str) -> None:
    """As the guest's own admin: edit the operator's sshd drop-in by hand and reload sshd."""
    command = (
        f"sudo sed -i 's/^PasswordAuthentication .*/PasswordAuthentication {value}/' {HARDENING_DROPIN} && "
        "sudo systemctl reload ssh && sudo sshd -T | grep -i '^passwordauthentication'"
    )
    done = ssh(admin, ip, GUEST_USER, keys.ops, command)
    assert done.returncode == 0 and done.stdout.strip() == f"passwordauthentication {value}", done


def assert_hiding_the_agent_keeps_the_drift(
    node: NodeHandle, ns: str, admin: int, ip: str, keys: GuestKeys
) -> None:
    """The guest's admin stops the agent: Unknown, never compliant, the drift kept until shown undone."""
    # Hiding the evidence does not clear it: with the agent stopped the guest is Unknown, never compliant,
    # and the drift last seen stays (and keeps IA-5 failed) until a check shows it undone.
    assert ssh(admin, ip, GUEST_USER, keys.ops, "sudo systemctl stop qemu-guest-agent").returncode == 0
    guest, took = wait_compliant(node, ns, "Unknown", 180)
    print(f"agent stopped: Unknown after {took:.1f} s, drift carried: {guest.get('drift')}")
    assert guest["reason"] in {"NoGuestAgent", "GuestAgentUnanswered"}, guest
    assert [d["setting"] for d in guest["drift"]] == ["PasswordAuthentication"], guest
    assert compliance(node, ns)["ia-5"] == "not-satisfied"
    assert ssh(admin, ip, GUEST_USER, keys.ops, "sudo systemctl start qemu-guest-agent").returncode == 0
    wait_compliant(node, ns, "False", 180)
    # Reported, never corrected: after all those checks the guest still has what its admin wrote.
    still = ssh(admin, ip, GUEST_USER, keys.ops, "sudo sshd -T | grep -i '^passwordauthentication'")
    assert still.stdout.strip() == "passwordauthentication yes", still


@pytest.mark.timeout(1500)
def test_a_hand_edit_inside_the_guest_is_reported_as_drift_and_its_undo_clears_it(  # noqa: PLR0917
    kubevirt: NodeHandle,
    operator: OperatorProcess,
    ns: str,
    monitoring_ns: str,
    guest_image: Path,
    keys: GuestKeys,
) -> None:
    node = kubevirt
    admin = node.container_pid(node.client_pod(ns, "admin", {"app": "admin"}))
    other = node.namespace("outsider")
    try:
        body = udsvm(ns)
        body["spec"] = {
            **udsvm_spec(),
            "disk": GUEST_DISK,
            "network": NETWORK,
            "cloudInit": booted_cloud_init(keys),
            "monitoring": {"enabled": True, "checkIntervalSeconds": CHECK_INTERVAL_S},
        }
        node.api.create(body, f"{UDS_VM_API}/namespaces/{ns}/udsvirtualmachines")
        play_cdi_import(node, ns, "web-dv", guest_image)
        pod = booted_launcher(node, ns, "web", admin, keys)
        ip = pod["status"]["podIP"]

        # Compliant once the guest reported: every hardened setting as rendered, only declared users.
        guest, _ = wait_compliant(node, ns, "True", 600)
        assert guest["reason"] == "GuestHardened" and not guest.get("drift"), guest
        assert compliance(node, ns)["ia-5"] == "satisfied"

        # The Service a ServiceMonitor selects (chart, with the Prometheus Operator) has the guest behind it.
        slices = node.api.items(
            f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices",
            label_selector="kubernetes.io/service-name=web-metrics",
        )
        addresses = {a for sl in slices for e in sl.get("endpoints") or [] for a in e.get("addresses") or []}
        assert ip in addresses, slices
        # The exporter, through the VM's policy: the monitoring namespace's Prometheus only.
        targets = scrape_configs(ip, virt_handler_ip(node))
        prometheus = run_prometheus(node, monitoring_ns, targets)
        outsider = run_prometheus(node, other, targets)
        assert_scraped_through_the_policy(prometheus, outsider, ns)
        assert probes.tcp_blocked(admin, ip, 9100), "the VM's admin is admitted on 22, not on 9100"
        assert probes.tcp(admin, ip, 22) == "connected"

        # The assessor's fear: someone re-enables password SSH by hand inside the guest.
        set_password_ssh(admin, ip, keys, "yes")
        guest, took = wait_compliant(node, ns, "False", 180)
        print(f"drift reported {took:.1f} s after the hand edit (check interval {CHECK_INTERVAL_S} s)")
        drift = {item["setting"]: item for item in guest["drift"]}
        assert set(drift) == {"PasswordAuthentication"}, guest
        assert drift["PasswordAuthentication"]["control"] == "ia-5"
        _, condition = guest_status(node, ns)
        assert condition["status"] == "False" and "PasswordAuthentication" in condition["message"], condition
        assert events(node, ns, "GuestDrifted"), "a Warning Event names the drift"
        controls = compliance(node, ns)
        assert controls["ia-5"] == "not-satisfied" and controls["ac-3"] == "satisfied", controls
        assert_hiding_the_agent_keeps_the_drift(node, ns, admin, ip, keys)
        # Undone by hand: compliant again, an Event says so, the OSCAL result follows.
        set_password_ssh(admin, ip, keys, "no")
        guest, took = wait_compliant(node, ns, "True", 180)
        print(f"compliance restored {took:.1f} s after the undo")
        hardened = events(node, ns, "GuestHardened")
        print(f"guest Events: {[(e['reason'], e.get('note')) for e in events(node, ns, None)]}")
        assert any("drift is gone" in str(e.get("note")) for e in hardened), (
            "a Normal Event says the drift is gone"
        )
        assert compliance(node, ns)["ia-5"] == "satisfied"
        print(f"guest reads by the operator: logged in users seen {guest.get('loggedInUsers')}")
    finally:
        node.delete_namespace(other)
