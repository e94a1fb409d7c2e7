"""Scale a pool 5 → 2 → 5 with the whole operator (VM + pool controllers): Retain data disks survive.

Here the UDSVirtualMachine controller runs too and derives member readiness from the KubeVirt/CDI objects
it creates; the test plays CDI (DataVolume ``Succeeded``) and KubeVirt (VirtualMachine ready) for them.
Removed members are deleted in the foreground, so the garbage collector (kube-controller-manager) removes
their DataVolume, VirtualMachine, Secrets and NetworkPolicy; their ``Retain`` data-disk PVCs carry no
ownerReference and must survive, and come back attached when the same ordinal returns.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.operator_fixtures import running_operator
from tests.integration.operator_harness import Api, OperatorProcess
from tests.integration.pool_play import (
    ClusterPlayer,
    http_client,
    members_path,
    pool_path,
    release_pvc_protection,
    wait_until,
)
from uds_vm_operator.fleet import POOL_LABEL

POOL = "db"
REPLICAS_PATH = "/scale"


@pytest.fixture
def api(control_plane: Any) -> Iterator[Api]:
    client = Api(Path(control_plane.kubeconfig))
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def pvcs_released(control_plane: Any, namespace: str) -> Iterator[None]:
    """After the test, let the namespace's Retain PVCs go with it (see ``release_pvc_protection``)."""
    yield
    client = http_client(Path(control_plane.kubeconfig))
    try:
        release_pvc_protection(client, namespace)
    finally:
        client.close()


@pytest.fixture
def full_operator(control_plane: Any, namespace: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    with running_operator(control_plane, namespace, tmp_path) as process:
        yield process


def pool(namespace: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "uds.dev/v1alpha1",
        "kind": "UDSVirtualMachinePool",
        "metadata": {"name": POOL, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "template": {
                "spec": {
                    "source": {"dataSource": {"name": "postgres-golden", "namespace": "golden-images"}},
                    "resources": {"cpu": 1, "memory": "1Gi"},
                    "dataDisks": [{"name": "data", "size": "1Gi", "retentionPolicy": "Retain"}],
                }
            },
            "progressDeadlineSeconds": 300,
        },
    }


def data_pvcs(api: Api, namespace: str) -> dict[str, dict[str, Any]]:
    items = api.items(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims")
    return {p["metadata"]["name"]: p for p in items if p["metadata"]["name"].endswith("-data-data")}


def member_names(api: Api, namespace: str) -> list[str]:
    return sorted(m["metadata"]["name"] for m in api.items(members_path(namespace), f"{POOL_LABEL}={POOL}"))


def wait_fleet(api: Api, operator: OperatorProcess, namespace: str, replicas: int) -> None:
    wanted = sorted(f"{POOL}-{i}" for i in range(replicas))

    def settled() -> bool:
        status = (api.get(pool_path(namespace, POOL)) or {}).get("status") or {}
        return (
            member_names(api, namespace) == wanted
            and status.get("readyReplicas") == replicas
            and status.get("replicas") == replicas
        )

    try:
        wait_until(settled, 240, f"{replicas} Ready members {wanted}")
    except AssertionError as error:
        status = (api.get(pool_path(namespace, POOL)) or {}).get("status")
        raise AssertionError(
            f"{error}\nmembers: {member_names(api, namespace)}\nstatus: {status}\n{operator.logs()[-6000:]}"
        ) from None


def test_scale_five_two_five_keeps_retain_disks(api, namespace, full_operator, control_plane, pvcs_released):  # type: ignore[no-untyped-def]
    with ClusterPlayer(Path(control_plane.kubeconfig), namespace):
        api.create(pool(namespace, 5), pool_path(namespace))
        wait_fleet(api, full_operator, namespace, 5)
        wait_until(lambda: len(data_pvcs(api, namespace)) == 5, 60, "5 data-disk PVCs")
        original = {name: pvc["metadata"]["uid"] for name, pvc in data_pvcs(api, namespace).items()}
        assert sorted(original) == [f"{POOL}-{i}-data-data" for i in range(5)]

        api.merge(pool_path(namespace, POOL) + REPLICAS_PATH, {"spec": {"replicas": 2}})
        wait_fleet(api, full_operator, namespace, 2)
        # The removed members' owned children are garbage-collected (foreground deletion waited for them) ...
        for gone in (f"{POOL}-2", f"{POOL}-3", f"{POOL}-4"):
            assert api.get(f"/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachines/{gone}") is None
            assert (
                api.get(f"/apis/cdi.kubevirt.io/v1beta1/namespaces/{namespace}/datavolumes/{gone}-dv") is None
            )
        # ... while every Retain data disk is still there, untouched and unowned.
        kept = data_pvcs(api, namespace)
        assert {name: pvc["metadata"]["uid"] for name, pvc in kept.items()} == original
        assert all(
            not pvc["metadata"].get("ownerReferences")
            for name, pvc in kept.items()
            if "-0-" not in name and "-1-" not in name
        )

        api.merge(pool_path(namespace, POOL) + REPLICAS_PATH, {"spec": {"replicas": 5}})
        wait_fleet(api, full_operator, namespace, 5)

    assert {name: pvc["metadata"]["uid"] for name, pvc in data_pvcs(api, namespace).items()} == original
    for ordinal in (2, 3, 4):
        vm = api.get(f"/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachines/{POOL}-{ordinal}")
        assert vm is not None
        claims = [
            v.get("persistentVolumeClaim", {}).get("claimName")
            for v in vm["spec"]["template"]["spec"]["volumes"]
        ]
        assert f"{POOL}-{ordinal}-data-data" in claims  # the returning ordinal re-attached its own disk
