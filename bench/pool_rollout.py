"""Rolling update of a 10-member UDSVirtualMachinePool on the real control plane, with simulated boot time.

The operator runs as a real process (``--controllers pool``); a player marks each member Ready a fixed
``READY_DELAY_S`` after it appears (standing in for KubeVirt + the VM controller); a watch records the
number of Ready members at every change. For each strategy the figures are the total rollout time (template
change → every member updated and Ready), the minimum Ready count observed (the promise: never below
``replicas - maxUnavailable``) and the largest member count (never above ``replicas + maxSurge``).

Anchor, from the same run's parameters: a perfect surge-first rollout is gated by boot time only. The
first ``maxSurge`` members boot at surge ordinals; every later batch re-creates outdated ordinals in place
once the previous batch is Ready, so ``ideal_s = (ceil(replicas / maxSurge) + 1) * READY_DELAY_S``;
``overhead_ratio = total_s / ideal_s`` is what the controller, API server and garbage collector add.

Uses ``$UDS_TEST_KUBECONFIG`` (a plane from ``make cluster-up``) when set, else starts a private plane.
"""

from __future__ import annotations

import math
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._harness import api_server, fresh_namespace

REPLICAS = 10
READY_DELAY_S = 2.0
STRATEGIES = ({"maxSurge": 1, "maxUnavailable": 0}, {"maxSurge": 3, "maxUnavailable": 0})
POOL = "bench"


def _pool(namespace: str, image: str, strategy: dict[str, int]) -> dict[str, Any]:
    return {
        "apiVersion": "uds.dev/v1alpha1",
        "kind": "UDSVirtualMachinePool",
        "metadata": {"name": POOL, "namespace": namespace},
        "spec": {
            "replicas": REPLICAS,
            "strategy": {"rollingUpdate": strategy},
            "progressDeadlineSeconds": 300,
            "template": {
                "spec": {
                    "source": {"dataSource": {"name": image, "namespace": "golden-images"}},
                    "resources": {"cpu": 1, "memory": "1Gi"},
                }
            },
        },
    }


def _rolled_out(api: Any, namespace: str, revision: str) -> bool:
    from tests.integration.pool_play import members_path, pool_path  # noqa: PLC0415
    from uds_vm_operator.fleet import POOL_LABEL, REVISION_LABEL  # noqa: PLC0415

    status = (api.get(pool_path(namespace, POOL)) or {}).get("status") or {}
    members = api.items(members_path(namespace), f"{POOL_LABEL}={POOL}")
    return (
        status.get("currentRevision") == revision
        and status.get("readyReplicas") == REPLICAS
        and len(members) == REPLICAS
        and all(m["metadata"]["labels"].get(REVISION_LABEL) == revision for m in members)
    )


def _scenario(kubeconfig: Path, strategy: dict[str, int]) -> dict[str, Any]:
    from tests.integration.operator_harness import Api, OperatorProcess  # noqa: PLC0415
    from tests.integration.pool_play import ReadinessPlayer, ReadyWatcher, pool_path, wait_until  # noqa: PLC0415
    from uds_vm_operator.fleet import revision_hash  # noqa: PLC0415

    api = Api(kubeconfig)
    namespace = fresh_namespace(api, "bench-pool")
    operator = OperatorProcess(
        kubeconfig,
        namespace,
        Path(tempfile.mkdtemp(prefix="bench-pool-")),
        extra_args=["--controllers", "pool"],
    )
    player = ReadinessPlayer(kubeconfig, namespace, POOL, delay_s=READY_DELAY_S)
    try:
        operator.start()
        player.start()
        api.create(_pool(namespace, "image-a", strategy), pool_path(namespace))
        first = revision_hash((api.get(pool_path(namespace, POOL)) or {})["spec"]["template"])
        wait_until(lambda: _rolled_out(api, namespace, first), 300, "initial rollout")

        watcher = ReadyWatcher(kubeconfig, namespace, POOL).start()
        started = time.perf_counter()
        api.merge(
            pool_path(namespace, POOL),
            {"spec": {"template": {"spec": {"source": {"dataSource": {"name": "image-b"}}}}}},
        )
        second = revision_hash((api.get(pool_path(namespace, POOL)) or {})["spec"]["template"])
        wait_until(lambda: _rolled_out(api, namespace, second), 600, "rollout to the new revision", 0.05)
        total_s = time.perf_counter() - started
        watcher.stop()
    finally:
        player.stop()
        operator.stop()
        api.call("DELETE", f"/api/v1/namespaces/{namespace}", expect=(200, 202, 404))
        api.close()
    surge = strategy["maxSurge"]
    ideal_s = (math.ceil(REPLICAS / surge) + 1) * READY_DELAY_S
    return {
        "strategy": strategy,
        "total_s": round(total_s, 2),
        "ideal_s": ideal_s,
        "overhead_ratio": round(total_s / ideal_s, 2),
        "min_ready_observed": watcher.min_ready,
        "ready_floor": REPLICAS - strategy["maxUnavailable"],
        "max_members_observed": watcher.max_members,
        "member_ceiling": REPLICAS + surge,
        "watch_events": watcher.events,
    }


def run() -> dict[str, Any]:
    """Run every strategy once against one control plane; the dict becomes bench/results/pool_rollout.json."""
    with api_server() as kubeconfig:
        scenarios = [_scenario(kubeconfig, strategy) for strategy in STRATEGIES]
    for scenario in scenarios:
        if scenario["min_ready_observed"] < scenario["ready_floor"]:
            raise SystemExit(f"availability floor broken: {scenario}")
    return {
        "replicas": REPLICAS,
        "ready_delay_s": READY_DELAY_S,
        "scenarios": scenarios,
        "summary": {
            f"surge{s['strategy']['maxSurge']}": {
                "total_s": s["total_s"],
                "min_ready": s["min_ready_observed"],
                "overhead_ratio": s["overhead_ratio"],
            }
            for s in scenarios
        },
    }


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
