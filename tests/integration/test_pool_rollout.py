"""UDSVirtualMachinePool against the real control plane: rollouts, stalls, rollbacks, CRD validation.

The operator runs as a real process with only the pool controller (``--controllers pool``); the test plays
KubeVirt and the UDSVirtualMachine controller by marking members Ready after a delay (or never), see
``pool_play.py``. A watch records the Ready count at every change of any member.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.operator_fixtures import api, running_operator
from tests.integration.operator_harness import Api, OperatorProcess, apiserver_writes, terminating_namespaces
from tests.integration.pool_play import ReadinessPlayer, ReadyWatcher, members_path, pool_path, wait_until
from uds_vm_operator.fleet import POOL_LABEL, REVISION_LABEL, revision_hash

__all__ = ["api"]  # fixture used by name

POOL = "web"


def pool_manifest(namespace: str, *, replicas: int, image: str, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "replicas": replicas,
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {
                "source": {"dataSource": {"name": image, "namespace": "golden-images"}},
                "resources": {"cpu": 1, "memory": "1Gi"},
            },
        },
        "progressDeadlineSeconds": 120,
    }
    body.update(copy.deepcopy(spec))
    return {
        "apiVersion": "uds.dev/v1alpha1",
        "kind": "UDSVirtualMachinePool",
        "metadata": {"name": POOL, "namespace": namespace},
        "spec": body,
    }


@pytest.fixture
def pool_operator(control_plane: Any, namespace: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    extra = ["--controllers", "pool", "--log-level", "DEBUG"]
    with running_operator(control_plane, namespace, tmp_path, extra) as process:
        yield process


def members(api: Api, namespace: str) -> dict[str, dict[str, Any]]:
    return {m["metadata"]["name"]: m for m in api.items(members_path(namespace), f"{POOL_LABEL}={POOL}")}


def pool_status(api: Api, namespace: str) -> dict[str, Any]:
    return dict((api.get(pool_path(namespace, POOL)) or {}).get("status") or {})


def stored_revision(api: Api, namespace: str) -> str:
    """The revision of the template as the API server stored it (CRD defaults included)."""
    pool = api.get(pool_path(namespace, POOL))
    assert pool is not None
    return revision_hash(pool["spec"]["template"])


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == kind), {})


def wait_rolled_out(
    api: Api, operator: OperatorProcess, namespace: str, revision: str, replicas: int
) -> None:
    def done() -> bool:
        status = pool_status(api, namespace)
        current = members(api, namespace)
        return (
            status.get("currentRevision") == revision
            and status.get("readyReplicas") == replicas
            and status.get("updatedReplicas") == replicas
            and sorted(current) == sorted(f"{POOL}-{i}" for i in range(replicas))
            and all(m["metadata"]["labels"][REVISION_LABEL] == revision for m in current.values())
        )

    try:
        wait_until(done, 240, f"pool rolled out to {revision} with {replicas} Ready members")
    except AssertionError as error:
        raise AssertionError(
            f"{error}\nstatus: {pool_status(api, namespace)}\n{operator.logs()[-4000:]}"
        ) from None


def events_of(api: Api, namespace: str) -> list[str]:
    items = api.items(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
    return [
        e.get("reason", "")
        for e in items
        if (e.get("regarding") or {}).get("kind") == "UDSVirtualMachinePool"
    ]


def test_five_member_rollout_never_drops_below_five_ready(api, namespace, pool_operator, control_plane):  # type: ignore[no-untyped-def]
    kubeconfig = Path(control_plane.kubeconfig)
    player = ReadinessPlayer(kubeconfig, namespace, POOL, delay_s=1.0).start()
    try:
        api.create(pool_manifest(namespace, replicas=5, image="ubuntu-a"), pool_path(namespace))
        first = stored_revision(api, namespace)
        wait_rolled_out(api, pool_operator, namespace, first, 5)
        uids_before = {name: m["metadata"]["uid"] for name, m in members(api, namespace).items()}

        watcher = ReadyWatcher(kubeconfig, namespace, POOL).start()
        api.merge(
            pool_path(namespace, POOL),
            {"spec": {"template": {"spec": {"source": {"dataSource": {"name": "ubuntu-b"}}}}}},
        )
        second = stored_revision(api, namespace)
        assert second != first
        wait_rolled_out(api, pool_operator, namespace, second, 5)
        watcher.stop()
    finally:
        player.stop()

    assert watcher.min_ready >= 5, watcher.ready_counts
    assert watcher.max_members <= 6, watcher.member_counts  # maxSurge 1
    assert watcher.events >= 20  # 6 creations, readiness, 6 deletions: every step was observed
    # Every deleted member (the 5 old ones and the surge ordinal 5) was timed from its deletion timestamp.
    assert len(watcher.deletion_waits_s) >= 6 and all(w >= 0 for w in watcher.deletion_waits_s)
    after = members(api, namespace)
    assert not set(uids_before.values()) & {m["metadata"]["uid"] for m in after.values()}  # all replaced
    status = pool_status(api, namespace)
    assert (status["outdatedReplicas"], status["updateRevision"]) == (0, second)
    assert condition(status, "Ready")["status"] == "True"
    assert condition(status, "RolloutStalled")["status"] == "False"
    reasons = events_of(api, namespace)
    assert reasons.count("MemberCreated") >= 11 and "RolloutComplete" in reasons
    for member in after.values():
        owner = member["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("UDSVirtualMachinePool", POOL, True)
        assert member["metadata"]["labels"]["app"] == "web"


def test_stalled_rollout_halts_without_deleting_more_members(api, namespace, pool_operator, control_plane):  # type: ignore[no-untyped-def]
    kubeconfig = Path(control_plane.kubeconfig)
    player = ReadinessPlayer(kubeconfig, namespace, POOL, delay_s=0.5).start()
    try:
        api.create(
            pool_manifest(namespace, replicas=3, image="ubuntu-a", progressDeadlineSeconds=5),
            pool_path(namespace),
        )
        first = stored_revision(api, namespace)
        wait_rolled_out(api, pool_operator, namespace, first, 3)
        old_uids = {m["metadata"]["uid"] for m in members(api, namespace).values()}

        api.merge(
            pool_path(namespace, POOL),
            {"spec": {"template": {"spec": {"source": {"dataSource": {"name": "broken-image"}}}}}},
        )
        broken = stored_revision(api, namespace)
        player.never_ready.add(broken)
        watcher = ReadyWatcher(kubeconfig, namespace, POOL).start()
        wait_until(
            lambda: condition(pool_status(api, namespace), "RolloutStalled").get("status") == "True",
            120,
            "RolloutStalled=True",
        )
        stalled_status = pool_status(api, namespace)
        before = len(watcher.member_counts)
        wait_until(lambda: "RolloutStalled" in events_of(api, namespace), 30, "a RolloutStalled Event")
        # An observation window longer than the deadline (not a timing assertion): a halted pool must not
        # create or delete anything more.
        time.sleep(8)
        assert pool_operator.healthy()
        watcher.stop()
    finally:
        player.stop()

    current = members(api, namespace)
    assert {m["metadata"]["uid"] for m in current.values()} >= old_uids  # no old member was deleted
    assert len(current) == 4  # the three old ones + the one surge member that never became Ready
    assert watcher.min_ready == 3
    assert len(watcher.member_counts) - before <= 1  # nothing but status noise after the halt
    assert stalled_status["currentRevision"] == first and stalled_status["updateRevision"] == broken
    message = condition(stalled_status, "RolloutStalled")["message"]
    assert "not Ready" in message and "spec.template" in message


def test_stalled_rollout_rolls_back_to_the_old_revision(api, namespace, pool_operator, control_plane):  # type: ignore[no-untyped-def]
    kubeconfig = Path(control_plane.kubeconfig)
    player = ReadinessPlayer(kubeconfig, namespace, POOL, delay_s=0.5).start()
    try:
        api.create(
            pool_manifest(
                namespace, replicas=3, image="ubuntu-a", progressDeadlineSeconds=5, rollbackOnFailure=True
            ),
            pool_path(namespace),
        )
        first = stored_revision(api, namespace)
        wait_rolled_out(api, pool_operator, namespace, first, 3)
        old_uids = {m["metadata"]["uid"] for m in members(api, namespace).values()}
        watcher = ReadyWatcher(kubeconfig, namespace, POOL).start()
        api.merge(
            pool_path(namespace, POOL),
            {"spec": {"template": {"spec": {"source": {"dataSource": {"name": "broken-image"}}}}}},
        )
        broken = stored_revision(api, namespace)
        player.never_ready.add(broken)
        wait_until(
            lambda: condition(pool_status(api, namespace), "RolledBack").get("status") == "True",
            120,
            "RolledBack=True",
        )
        wait_rolled_out(api, pool_operator, namespace, first, 3)
        watcher.stop()
    finally:
        player.stop()

    status = pool_status(api, namespace)
    assert (status["currentRevision"], status["updateRevision"], status["failedRevision"]) == (
        first,
        first,
        broken,
    )
    assert {m["metadata"]["uid"] for m in members(api, namespace).values()} == old_uids  # never touched
    assert watcher.min_ready >= 3
    assert "RolledBack" in events_of(api, namespace)
    assert "change spec.template" in condition(status, "RolledBack")["message"]


def test_invalid_pools_are_refused_by_the_api_server(api, namespace):  # type: ignore[no-untyped-def]
    bad = [
        pool_manifest(namespace, replicas=2, image="a", strategy={"rollingUpdate": {"maxSurge": "lots"}}),
        pool_manifest(namespace, replicas=-1, image="a"),
        pool_manifest(namespace, replicas=2, image="a", template={"spec": {"source": {"upload": {}}}}),
        {
            **pool_manifest(namespace, replicas=1, image="a"),
            "metadata": {"name": "p" * 48, "namespace": namespace},
        },
    ]
    for manifest in bad:
        code, payload = api.create(manifest, pool_path(namespace))
        assert code == 422, (manifest["spec"], payload)
    code, _ = api.create(
        pool_manifest(namespace, replicas=2, image="a", strategy={"rollingUpdate": {"maxSurge": "25%"}}),
        pool_path(namespace),
    )
    assert code == 201


def test_scale_subresource_and_printer_columns(api, namespace):  # type: ignore[no-untyped-def]
    api.create(pool_manifest(namespace, replicas=2, image="a"), pool_path(namespace))
    scale = api.get(pool_path(namespace, POOL) + "/scale")
    assert scale is not None and scale["spec"]["replicas"] == 2
    api.merge(pool_path(namespace, POOL) + "/scale", {"spec": {"replicas": 4}})
    assert (api.get(pool_path(namespace, POOL)) or {})["spec"]["replicas"] == 4
    crd = api.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/udsvirtualmachinepools.uds.dev")
    assert crd is not None
    columns = [c["name"] for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert columns == ["DESIRED", "READY", "UPDATED", "OUTDATED", "REVISION", "AGE"]
    assert crd["spec"]["names"]["shortNames"] == ["udsvmpool"]


def revisions_stored(api: Api, namespace: str) -> dict[str, str]:
    items = api.items(f"/apis/apps/v1/namespaces/{namespace}/controllerrevisions", f"{POOL_LABEL}={POOL}")
    return {i["metadata"]["labels"][REVISION_LABEL]: i["metadata"]["name"] for i in items}


def pool_series(operator: OperatorProcess, namespace: str) -> dict[str, float]:
    series = {}
    for line in operator.metrics().splitlines():
        if line.startswith("uds_vm_pool_replicas{") and f'namespace="{namespace}"' in line:
            labels, value = line.rsplit(" ", 1)
            state = labels.split('state="', 1)[1].split('"', 1)[0]
            series[state] = float(value)
    return series


def test_history_metrics_invalid_spec_and_deletion(api, namespace, pool_operator, control_plane):  # type: ignore[no-untyped-def]
    player = ReadinessPlayer(Path(control_plane.kubeconfig), namespace, POOL, delay_s=0.2).start()
    try:
        api.create(pool_manifest(namespace, replicas=2, image="v0"), pool_path(namespace))
        seen = [stored_revision(api, namespace)]
        wait_rolled_out(api, pool_operator, namespace, seen[-1], 2)
        for version in range(1, 6):
            api.merge(
                pool_path(namespace, POOL),
                {"spec": {"template": {"spec": {"source": {"dataSource": {"name": f"v{version}"}}}}}},
            )
            seen.append(stored_revision(api, namespace))
            wait_rolled_out(api, pool_operator, namespace, seen[-1], 2)
    finally:
        player.stop()

    stored = revisions_stored(api, namespace)
    assert seen[-1] in stored and len(stored) <= 4, stored  # pruned to a short history
    cr = api.get(f"/apis/apps/v1/namespaces/{namespace}/controllerrevisions/{stored[seen[-1]]}")
    assert cr is not None and revision_hash(cr["data"]) == seen[-1]  # the template, stored verbatim
    wait_until(
        lambda: (
            pool_series(pool_operator, namespace)
            == {"desired": 2.0, "active": 2.0, "ready": 2.0, "updated": 2.0, "outdated": 0.0}
        ),
        30,
        "uds_vm_pool_replicas series",
    )

    uids = {m["metadata"]["uid"] for m in members(api, namespace).values()}
    api.merge(
        pool_path(namespace, POOL),
        {"spec": {"strategy": {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}}}},
    )
    wait_until(
        lambda: condition(pool_status(api, namespace), "Ready").get("reason") == "InvalidSpec",
        60,
        "Ready=False InvalidSpec",
    )
    assert "cannot both be 0" in condition(pool_status(api, namespace), "Ready")["message"]
    wait_until(lambda: "InvalidSpec" in events_of(api, namespace), 30, "an InvalidSpec Event")
    assert {m["metadata"]["uid"] for m in members(api, namespace).values()} == uids  # nothing touched

    # The collector deletes the members with their pool; each is held by its release finalizer until the
    # VM controller (played here: it removes the finalizer) has deleted the member's children.
    player = ReadinessPlayer(Path(control_plane.kubeconfig), namespace, POOL, delay_s=0.2).start()
    try:
        api.call("DELETE", pool_path(namespace, POOL), {"propagationPolicy": "Background"}, expect=(200, 202))
        wait_until(lambda: pool_series(pool_operator, namespace) == {}, 60, "pool series removed")
        wait_until(lambda: not members(api, namespace), 120, "members garbage-collected with their pool")
    finally:
        player.stop()
    assert sorted(player.released) == sorted(f"{POOL}-{ordinal}" for ordinal in range(2))


def test_a_foreign_vm_holding_a_member_name_is_reported(api, namespace, pool_operator):  # type: ignore[no-untyped-def]
    squatter = {
        "apiVersion": "uds.dev/v1alpha1",
        "kind": "UDSVirtualMachine",
        "metadata": {"name": f"{POOL}-1", "namespace": namespace},
        "spec": {"source": {"dataSource": {"name": "other"}}},
    }
    code, _ = api.create(squatter, members_path(namespace))
    assert code == 201
    api.create(pool_manifest(namespace, replicas=2, image="a"), pool_path(namespace))
    wait_until(lambda: "MemberNameTaken" in events_of(api, namespace), 60, "a MemberNameTaken Event")
    assert sorted(members(api, namespace)) == [f"{POOL}-0"]  # the foreign VM is not adopted or touched
    assert pool_operator.healthy()


def test_a_settled_pool_costs_no_writes_on_resync(api, namespace, pool_operator, control_plane):  # type: ignore[no-untyped-def]
    player = ReadinessPlayer(Path(control_plane.kubeconfig), namespace, POOL, delay_s=0.2).start()
    try:
        api.create(pool_manifest(namespace, replicas=3, image="a"), pool_path(namespace))
        wait_rolled_out(api, pool_operator, namespace, stored_revision(api, namespace), 3)
    finally:
        player.stop()
    resources = {"udsvirtualmachinepools", "udsvirtualmachines", "controllerrevisions", "events"}
    wait_until(lambda: condition(pool_status(api, namespace), "Ready").get("status") == "True", 30, "Ready")
    # The counters are cluster-wide: earlier tests' namespaces must be finalised first, or the collector
    # deleting their pools' members writes during the window (seen once in CI: one write too many).
    wait_until(lambda: not terminating_namespaces(api), 180, "no namespace left in Terminating", 1.0)
    pool_operator.stop()
    before = apiserver_writes(api, resources)
    pool_operator.start()  # a fresh process lists everything again: every pool and member is reconciled
    wait_until(lambda: "pool reconciled" in pool_operator.logs(), 60, "a pool reconcile after the restart")
    time.sleep(2)  # let the member events of the initial listing drain (observation window)
    assert apiserver_writes(api, resources) == before


def test_a_failed_member_rolls_back_without_waiting_for_the_deadline(
    api, namespace, pool_operator, control_plane
):  # type: ignore[no-untyped-def]
    player = ReadinessPlayer(Path(control_plane.kubeconfig), namespace, POOL, delay_s=0.3).start()
    try:
        api.create(
            pool_manifest(
                namespace, replicas=2, image="good", progressDeadlineSeconds=3600, rollbackOnFailure=True
            ),
            pool_path(namespace),
        )
        first = stored_revision(api, namespace)
        wait_rolled_out(api, pool_operator, namespace, first, 2)
        api.merge(
            pool_path(namespace, POOL),
            {"spec": {"template": {"spec": {"source": {"dataSource": {"name": "tampered"}}}}}},
        )
        player.fail.add(stored_revision(api, namespace))
        # Far sooner than the one-hour deadline: a Failed member needs no waiting.
        wait_until(
            lambda: condition(pool_status(api, namespace), "RolledBack").get("status") == "True",
            60,
            "RolledBack",
        )
        wait_rolled_out(api, pool_operator, namespace, first, 2)
    finally:
        player.stop()
    notes = [
        e.get("note", "")
        for e in api.items(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
        if e.get("reason") == "RolledBack"
    ]
    assert notes and "failed (status.phase Failed" in notes[0]
