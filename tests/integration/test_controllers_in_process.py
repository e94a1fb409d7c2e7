"""The controllers built in-process against the real control plane, as controller-runtime projects test
reconcilers with envtest: no operator process, no kopf, no watches — one ``reconcile`` call at a time, its
outcome and the API server's state asserted directly.

The black-box tests (``test_operator_*``) prove the process; these prove each reconcile step: what one
call writes, that a second call writes nothing, and that the pool controller's plan reaches the API server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from tests.integration.operator_fixtures import api, dv_path, kv_path, netpol_path, udsvm, vm_path
from tests.integration.operator_harness import Api
from tests.integration.pool_play import members_path, pool_path
from uds_vm_operator.controller import factory
from uds_vm_operator.controller.reconciler import Reconciler
from uds_vm_operator.fleet import POOL_LABEL
from uds_vm_operator.metrics import OperatorMetrics
from uds_vm_operator.runtime import kube
from uds_vm_operator.runtime.store import ObjectStore

__all__ = ["api"]  # fixture used by name

T = TypeVar("T")


def in_process(kubeconfig: Any, scenario: Callable[[kube.KubeApi], Awaitable[T]]) -> T:
    """Run ``scenario`` with the operator's own API client on a fresh event loop, then close the client."""

    async def main() -> T:
        client = kube.KubeApi.from_kubeconfig(kubeconfig)
        try:
            return await scenario(client)
        finally:
            await client.close()

    return asyncio.run(main())


def vm_reconciler(client: kube.KubeApi) -> tuple[Reconciler, ObjectStore]:
    """The VM controller built as the process builds it (controller.factory), its store filled by hand
    instead of by watches."""
    reconciler = factory.vm_controller(client, OperatorMetrics(process_collectors=False))
    return reconciler, reconciler.store


async def list_into(client: kube.KubeApi, store: ObjectStore, namespace: str, name: str) -> None:
    """Put the VM into the store as a watch's listing would (the tests fill the store by hand)."""
    vm = await client.get(kube.UDS_VM, namespace, name)
    assert vm is not None
    store.put(kube.UDS_VM, vm)


def test_one_reconcile_creates_the_children_and_a_second_writes_nothing(
    api: Api, control_plane: Any, namespace: str
) -> None:
    api.apply(udsvm("web", namespace), vm_path(namespace, "web"))

    async def scenario(client: kube.KubeApi) -> tuple[Any, Any]:
        reconciler, store = vm_reconciler(client)
        await list_into(client, store, namespace, "web")
        reconciler.verify_children(namespace, "web")  # the store is empty: confirm each miss with a GET
        first = await reconciler.reconcile(namespace, "web")
        second = await reconciler.reconcile(namespace, "web")
        return first, second

    first, second = in_process(control_plane.kubeconfig, scenario)
    # DataVolume, VirtualMachine, NetworkPolicy, cloud-init Secret, the status and its Event
    assert (first.writes, first.phase, first.deleted) == (6, "Pending", False)
    assert second.writes == 0 and second.phase == "Pending"
    dv = api.get(dv_path(namespace, "web-dv"))
    assert dv is not None
    assert dv["metadata"]["ownerReferences"][0]["kind"] == "UDSVirtualMachine"
    machine = api.get(kv_path(namespace, "web"))
    assert machine is not None
    assert machine["spec"]["runStrategy"] == "Halted"  # SI-7: a declared digest holds the VM until verified
    assert api.get(netpol_path(namespace, "web-netpol")) is not None
    status = (api.get(vm_path(namespace, "web")) or {})["status"]
    assert status["phase"] == "Pending"
    conditions = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert conditions == {
        "Ready": ("False", "DataVolumePending"),
        "DiskReady": ("False", "DataVolumePending"),
        "ChecksumVerified": ("False", "AwaitingDisk"),
        "NetworkIsolated": ("True", "NetworkPolicyApplied"),
        "Hardened": ("True", "CloudInitHardened"),
    }


def test_after_a_restart_a_pass_that_found_no_vm_does_not_make_its_children_trusted(
    api: Api, control_plane: Any, namespace: str
) -> None:
    """The restart race a 3,000-VM resync showed (345 needless applies): a child's listing enqueues its VM
    before the VM is listed; that pass finds no VM and ends well while the VM's listing marks it unverified.
    The VM's own pass must still confirm each store miss with a GET, not apply children it has not seen."""
    api.apply(udsvm("web", namespace), vm_path(namespace, "web"))

    async def scenario(client: kube.KubeApi) -> tuple[int, int]:
        before, store = vm_reconciler(client)
        await list_into(client, store, namespace, "web")
        created = (await before.reconcile(namespace, "web")).writes
        restarted, fresh_store = vm_reconciler(client)  # a new process: an empty store, nothing listed yet
        restarted.verify_children(namespace, "web")  # the VM's listing event, while a pass is under way
        await restarted._reconcile_with_retry((namespace, "web"))  # that pass: no VM in its store yet
        await list_into(client, fresh_store, namespace, "web")
        return created, (await restarted.reconcile(namespace, "web")).writes

    created, resynced = in_process(control_plane.kubeconfig, scenario)
    assert created == 6  # four children, the status, its Event
    assert resynced == 0  # each child confirmed by a GET and found as rendered: nothing applied


def test_a_refused_spec_is_published_without_children(api: Api, control_plane: Any, namespace: str) -> None:
    spec = {"liveMigration": True, "disk": {"virtualSize": "10Mi", "accessModes": ["ReadWriteOnce"]}}
    api.apply(udsvm("moving", namespace, **spec), vm_path(namespace, "moving"))

    async def scenario(client: kube.KubeApi) -> Any:
        reconciler, store = vm_reconciler(client)
        await list_into(client, store, namespace, "moving")
        return await reconciler.reconcile(namespace, "moving")

    outcome = in_process(control_plane.kubeconfig, scenario)
    assert outcome.phase == "Failed"
    assert api.get(dv_path(namespace, "moving-dv")) is None
    assert api.get(kv_path(namespace, "moving")) is None
    ready = next(
        c
        for c in (api.get(vm_path(namespace, "moving")) or {})["status"]["conditions"]
        if c["type"] == "Ready"
    )
    assert (ready["status"], ready["reason"]) == ("False", "LiveMigrationNeedsRWX")


def test_a_deleted_vm_is_forgotten_without_a_request(control_plane: Any, namespace: str) -> None:
    async def scenario(client: kube.KubeApi) -> Any:
        reconciler, _ = vm_reconciler(client)
        return await reconciler.reconcile(namespace, "never-existed")

    outcome = in_process(control_plane.kubeconfig, scenario)
    assert outcome.deleted and outcome.writes == 0


def test_the_pool_controller_creates_its_members_and_a_second_reconcile_creates_none(
    api: Api, control_plane: Any, namespace: str
) -> None:
    pool = {
        "apiVersion": "uds.dev/v1alpha1",
        "kind": "UDSVirtualMachinePool",
        "metadata": {"name": "db", "namespace": namespace},
        "spec": {
            "replicas": 2,
            "template": {
                "metadata": {"labels": {"app": "db"}},
                "spec": {
                    "source": {"dataSource": {"name": "debian", "namespace": "golden-images"}},
                    "resources": {"cpu": 1, "memory": "1Gi"},
                },
            },
        },
    }
    api.apply(pool, pool_path(namespace, "db"))

    async def scenario(client: kube.KubeApi) -> list[Any]:
        controller = factory.pool_controller(client, OperatorMetrics(process_collectors=False))
        return [await controller.reconcile(namespace, "db") for _ in range(3)]

    first, second, third = in_process(control_plane.kubeconfig, scenario)
    assert (first.created, first.deleted, first.status_written) == (2, 0, True)
    assert (second.created, second.deleted) == (0, 0)  # its status now counts the members it listed
    assert (third.created, third.deleted, third.status_written) == (0, 0, False)  # a resync writes nothing
    names = sorted(m["metadata"]["name"] for m in api.items(members_path(namespace), f"{POOL_LABEL}=db"))
    assert names == ["db-0", "db-1"]
    status = (api.get(pool_path(namespace, "db")) or {})["status"]
    assert (status["replicas"], status["updatedReplicas"], status["readyReplicas"]) == (2, 2, 0)
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "MembersNotReady")
