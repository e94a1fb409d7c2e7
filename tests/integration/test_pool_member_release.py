"""A replaced pool member's children are deleted by the operator while the member is held (ADR 0018).

Both controllers run as the real operator process; CDI and KubeVirt are played for the namespace (every
DataVolume Succeeded, every VirtualMachine ready) so members become Ready as in production. The real API
server and garbage collector run beside it. The proof that the operator, not the collector, deletes the
children: the collector never deletes a dependent while its owner exists, and here the old member exists (held
by its finalizer) while its children go. A finalizer of the test's own on one child holds that child, and with
it the member and its ordinal, until the test lets it go.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.integration.operator_fixtures import api, running_operator
from tests.integration.operator_harness import Api
from tests.integration.pool_play import ClusterPlayer, members_path, pool_path, wait_until
from uds_vm_operator.render.common import RELEASE_FINALIZER

__all__ = ["api"]  # fixtures used by name

POOL = "rel"
HOLD = "uds-vm-operator.dev/test-hold"


def pool(namespace: str, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "uds.dev/v1alpha1",
        "kind": "UDSVirtualMachinePool",
        "metadata": {"name": POOL, "namespace": namespace},
        "spec": {
            "replicas": 1,
            "strategy": {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "progressDeadlineSeconds": 300,
            "template": {
                "spec": {
                    "source": {"dataSource": {"name": image, "namespace": "golden-images"}},
                    "resources": {"cpu": 1, "memory": "1Gi"},
                }
            },
        },
    }


def child_paths(namespace: str, member: str) -> dict[str, str]:
    return {
        "Secret": f"/api/v1/namespaces/{namespace}/secrets/{member}-cloudinit",
        "DataVolume": f"/apis/cdi.kubevirt.io/v1beta1/namespaces/{namespace}/datavolumes/{member}-dv",
        "NetworkPolicy": f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies/{member}-netpol",
        "VirtualMachine": f"/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachines/{member}",
    }


def test_a_replaced_member_is_released_by_the_operator_while_it_is_held(
    api: Api, namespace: str, control_plane: Any, tmp_path: Path
) -> None:
    member = f"{POOL}-0"
    paths = child_paths(namespace, member)
    with (
        ClusterPlayer(Path(control_plane.kubeconfig), namespace),
        running_operator(control_plane, namespace, tmp_path),
    ):
        api.create(pool(namespace, "image-a"), pool_path(namespace))

        def ready_with_children() -> dict[str, Any] | None:
            body = api.get(members_path(namespace, member))
            if body is None or (body.get("status") or {}).get("phase") != "Ready":
                return None
            return body if all(api.get(path) is not None for path in paths.values()) else None

        first = wait_until(ready_with_children, 180, "the first member Ready with its children")
        assert first["metadata"]["finalizers"] == [RELEASE_FINALIZER]
        api.merge(paths["Secret"], {"metadata": {"finalizers": [HOLD]}})

        api.merge(
            pool_path(namespace, POOL),
            {"spec": {"template": {"spec": {"source": {"dataSource": {"name": "image-b"}}}}}},
        )

        def children_going_while_member_held() -> bool:
            body = api.get(members_path(namespace, member)) or {}
            held = body.get("metadata", {}).get("uid") == first["metadata"]["uid"]
            secret = api.get(paths["Secret"]) or {}
            others_gone = all(api.get(paths[kind]) is None for kind in ("DataVolume", "NetworkPolicy"))
            return held and bool(secret.get("metadata", {}).get("deletionTimestamp")) and others_gone

        wait_until(children_going_while_member_held, 120, "the operator deleting children of a held member")
        held = api.get(members_path(namespace, member)) or {}
        assert held["metadata"].get("deletionTimestamp"), "the member is being deleted"
        assert held["metadata"]["finalizers"] == [RELEASE_FINALIZER], "and held by its release finalizer"
        assert api.get(paths["VirtualMachine"]) is None

        api.merge(paths["Secret"], {"metadata": {"finalizers": None}})

        def replaced() -> dict[str, Any] | None:
            body = api.get(members_path(namespace, member))
            if body is None or body["metadata"]["uid"] == first["metadata"]["uid"]:
                return None
            return body if (body.get("status") or {}).get("phase") == "Ready" else None

        second = wait_until(replaced, 180, "the ordinal back with the new revision, Ready")
        assert second["spec"]["source"]["dataSource"]["name"] == "image-b"
        secret = api.get(paths["Secret"]) or {}
        assert secret["metadata"]["ownerReferences"][0]["uid"] == second["metadata"]["uid"]
