"""Two operator replicas with kopf peering: only one reconciles; when it dies (SIGKILL, no goodbye), the other
takes over once the dead replica's peering record expires (``--peering-lifetime``, default 15 s).

Each test prints the failover it measured (SIGKILL → the standby has reconciled VMs applied after the kill).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tests.integration.operator_fixtures import api, udsvm, vm_path, wait_phase
from tests.integration.operator_harness import Api, OperatorProcess
from tests.kube_helpers import wait_for
from uds_vm_operator.runtime.peering import DEFAULT_LIFETIME_S

__all__ = ["api"]  # fixture used by name

PEERING = "uds-vm-operator"
SHORT_LIFETIME_S = 6
FAILOVER_SLACK_S = 30  # after the record expires: kopf re-lists, the standby reconciles (loaded 2-core CI)
RESUMED = "Resuming operations after the pause"
PAUSED = ("Pausing operations in favour of", "Pausing all operators")


def _create_peering(api: Api, namespace: str) -> str:
    path = f"/apis/kopf.dev/v1/namespaces/{namespace}/kopfpeerings"
    api.call(
        "POST",
        path,
        {"apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": PEERING}},
        expect=(201,),
    )
    return f"{path}/{PEERING}"


def _peer_records(api: Api, peering_path: str) -> dict[str, Any]:
    return dict((api.get(peering_path) or {}).get("status") or {})


def _reconciling(replica: OperatorProcess) -> bool:
    """kopf starts a peered replica paused and logs each resume and pause; the last one says which it is."""
    log = replica.logs(10**7)
    return log.rfind(RESUMED) > max(log.rfind(marker) for marker in PAUSED)


def _chosen_priority(replica: OperatorProcess) -> int:
    for line in replica.logs(10**7).splitlines():
        if '"peering priority chosen"' in line:
            return int(json.loads(line)["priority"])
    raise AssertionError(f"no chosen priority logged: {replica.logs()}")


def _apply_vms(api: Api, namespace: str, names: list[str]) -> None:
    for name in names:
        api.apply(udsvm(name, namespace), vm_path(namespace, name))


def _fail_over(
    api: Api, namespace: str, leader: OperatorProcess, standby: OperatorProcess, lifetime_s: int
) -> float:
    """SIGKILL the leader, apply VMs, wait until the standby reconciled them; returns the seconds taken."""
    resumes_before = standby.logs(10**7).count(RESUMED)
    killed_at = time.monotonic()
    leader.kill()
    second = [f"second{i}" for i in range(3)]
    _apply_vms(api, namespace, second)
    for name in second:
        wait_phase(api, standby, namespace, name, "Pending", timeout_s=lifetime_s + FAILOVER_SLACK_S)
    failover_s = time.monotonic() - killed_at
    assert standby.logs(10**7).count(RESUMED) > resumes_before, "the standby never resumed"
    assert standby.reconciles() >= len(second)
    return failover_s


def _only_the_leader_reconciles(api: Api, namespace: str, leader: Any, standby: Any) -> None:
    """Five VMs applied while both run: the leader reconciles every one, the standby none."""
    first = [f"first{i}" for i in range(5)]
    _apply_vms(api, namespace, first)
    for name in first:
        wait_phase(api, leader, namespace, name, "Pending")
    leader.wait_quiet(minimum=len(first))
    assert standby.reconciles() == 0, "the standby reconciled while the leader was alive"


def test_only_the_leading_replica_reconciles_and_the_other_takes_over_when_it_dies(
    api: Api, control_plane: Any, namespace: str, tmp_path: Path
) -> None:
    _create_peering(api, namespace)
    kubeconfig = Path(control_plane.kubeconfig)
    leader = OperatorProcess(
        kubeconfig, namespace, tmp_path / "logs", peering=PEERING, extra_args=["--priority", "100"]
    )
    standby = OperatorProcess(
        kubeconfig, namespace, tmp_path / "logs", peering=PEERING, extra_args=["--priority", "50"]
    )
    try:
        standby.start()
        leader.start()
        wait_for(
            lambda: "Pausing operations in favour of" in standby.logs(10**6),
            30,
            0.2,
            what="the standby replica pausing for the leader",
        )
        _only_the_leader_reconciles(api, namespace, leader, standby)

        failover_s = _fail_over(api, namespace, leader, standby, DEFAULT_LIFETIME_S)
        print(
            f"failover after SIGKILL (priorities 100/50, lifetime {DEFAULT_LIFETIME_S} s): {failover_s:.1f} s"
        )
    finally:
        leader.stop()
        standby.stop()
        print(f"--- standby ---\n{standby.logs()}")


def test_identical_replicas_never_tie_and_fail_over_within_the_lifetime(
    api: Api, control_plane: Any, namespace: str, tmp_path: Path
) -> None:
    """Two replicas of one Deployment: same arguments, no --priority (kopf would pause both on a tie)."""
    peering_path = _create_peering(api, namespace)
    kubeconfig = Path(control_plane.kubeconfig)
    args = ["--peering-lifetime", str(SHORT_LIFETIME_S)]
    replicas = [
        OperatorProcess(kubeconfig, namespace, tmp_path / "logs", peering=PEERING, extra_args=args)
        for _ in range(2)
    ]
    try:
        for replica in replicas:
            replica.start()
        assert _chosen_priority(replicas[0]) != _chosen_priority(replicas[1])

        def one_leader_for_a_while(state: dict[str, float]) -> bool:
            # Both records written and exactly one replica reconciling, unchanged for a second: a replica
            # started in the same second as the other may still take over right after its first look.
            settled = len(_peer_records(api, peering_path)) == 2 and sum(map(_reconciling, replicas)) == 1
            if not settled:
                state.pop("since", None)
                return False
            state.setdefault("since", time.monotonic())
            return time.monotonic() - state["since"] >= 1.0

        state: dict[str, float] = {}
        wait_for(lambda: one_leader_for_a_while(state), 30, 0.1, what="exactly one replica reconciling")
        leader, standby = replicas if _reconciling(replicas[0]) else replicas[::-1]

        _only_the_leader_reconciles(api, namespace, leader, standby)

        failover_s = _fail_over(api, namespace, leader, standby, SHORT_LIFETIME_S)
        print(
            f"failover after SIGKILL (chosen priorities, lifetime {SHORT_LIFETIME_S} s): {failover_s:.1f} s"
        )
        wait_for(
            lambda: len(_peer_records(api, peering_path)) == 1,
            SHORT_LIFETIME_S + FAILOVER_SLACK_S,
            0.2,
            what="the dead replica's peering record removed",
        )
    finally:
        for replica in replicas:
            replica.stop()
        for index, replica in enumerate(replicas):
            print(f"--- replica {index} ---\n{replica.logs()}")


def test_a_replica_whose_peering_object_is_missing_says_so_and_starts_once_it_exists(
    api: Api, control_plane: Any, namespace: str, tmp_path: Path
) -> None:
    replica = OperatorProcess(Path(control_plane.kubeconfig), namespace, tmp_path / "logs", peering=PEERING)
    try:
        replica.start()
        assert "peering object missing" in replica.logs(10**6)
        _apply_vms(api, namespace, ["early"])
        time.sleep(2)  # a window in which a replica that ignored the missing object would have reconciled
        assert replica.reconciles() == 0, "reconciled without its peering object"
        _create_peering(api, namespace)
        wait_phase(
            api, replica, namespace, "early", "Pending", timeout_s=DEFAULT_LIFETIME_S + FAILOVER_SLACK_S
        )
    finally:
        replica.stop()
        print(f"--- replica ---\n{replica.logs()}")
