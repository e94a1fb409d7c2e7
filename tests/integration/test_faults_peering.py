"""Two operator replicas with kopf peering: only the higher-priority one reconciles; when it dies (SIGKILL,
no goodbye), the other takes over once the dead replica's peering record expires (kopf's 60 s lifetime).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from operator_fixtures import api, udsvm, vm_path, wait_phase
from operator_harness import Api, OperatorProcess

from kube_helpers import wait_for

__all__ = ["api"]  # fixture used by name

PEERING = "uds-vm-operator"
FAILOVER_TIMEOUT_S = 110  # kopf peering lifetime (60 s) + keep-alive slack + reconcile


def test_only_the_leading_replica_reconciles_and_the_other_takes_over_when_it_dies(
    api: Api, control_plane: Any, namespace: str, tmp_path: Path
) -> None:
    api.call(
        "POST",
        f"/apis/kopf.dev/v1/namespaces/{namespace}/kopfpeerings",
        {"apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": PEERING}},
        expect=(201,),
    )
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
        first = [f"first{i}" for i in range(5)]
        for name in first:
            api.apply(udsvm(name, namespace), vm_path(namespace, name))
        for name in first:
            wait_phase(api, leader, namespace, name, "Pending")
        leader.wait_quiet(minimum=len(first))
        assert standby.reconciles() == 0, "the paused replica reconciled while the leader was alive"

        leader.kill()
        second = [f"second{i}" for i in range(3)]
        for name in second:
            api.apply(udsvm(name, namespace), vm_path(namespace, name))
        for name in second:
            wait_phase(api, standby, namespace, name, "Pending", timeout_s=FAILOVER_TIMEOUT_S)
        assert "Resuming operations after the pause" in standby.logs(10**6)
        assert standby.reconciles() >= len(second)
    finally:
        leader.stop()
        standby.stop()
        print(f"--- standby ---\n{standby.logs()}")
