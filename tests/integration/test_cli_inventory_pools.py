"""`uds-vmctl inventory` against the real API server: pools get their own table and `--pools --json`
rows, pool members name their pool, and `--json` stays the array of VM rows scripts already parse.

No operator runs: the test writes the pool's status through the status subresource, as the pool
controller would, and labels a member the way the controller does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lightkube import Client
from lightkube.generic_resource import create_namespaced_resource
from lightkube.types import PatchType
from typer.testing import CliRunner

from tests.integration.operator_fixtures import udsvm
from tests.kube_helpers import ControlPlaneHandle, create_strict
from uds_vm_operator.cli.main import build_app
from uds_vm_operator.fleet import POOL_LABEL

UDSVM = create_namespaced_resource("uds.dev", "v1alpha1", "UDSVirtualMachine", "udsvirtualmachines")
"""Registered so `create_strict` can decode UDSVirtualMachine manifests."""
UDSVMPool = create_namespaced_resource(
    "uds.dev", "v1alpha1", "UDSVirtualMachinePool", "udsvirtualmachinepools"
)
POOL_STATUS = {
    "replicas": 3,
    "readyReplicas": 2,
    "updatedReplicas": 1,
    "outdatedReplicas": 2,
    "currentRevision": "aaaa1111",
    "updateRevision": "bbbb2222",
}


def pool_manifest(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "uds.dev/v1alpha1",
        "kind": "UDSVirtualMachinePool",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {
            "replicas": 3,
            "template": {
                "spec": {
                    "source": {"dataSource": {"name": "web-golden", "namespace": "golden-images"}},
                    "resources": {"cpu": 1, "memory": "1Gi"},
                }
            },
        },
    }


def inventory(kubeconfig: Path, *args: str) -> str:
    result = CliRunner().invoke(build_app("inventory"), ["inventory", *args, "--kubeconfig", str(kubeconfig)])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_inventory_shows_pools_and_members_and_keeps_the_json_array(
    control_plane: ControlPlaneHandle, kube_client: Client, namespace: str
) -> None:
    kubeconfig = control_plane.kubeconfig
    create_strict(kube_client, udsvm("db", namespace))
    member = udsvm("web-0", namespace)
    member["metadata"]["labels"] = {POOL_LABEL: "web"}
    create_strict(kube_client, member)

    without_pools = inventory(kubeconfig, "-n", namespace)
    assert "POOL" in without_pools and "Pools" not in without_pools

    create_strict(kube_client, pool_manifest(namespace))
    kube_client.patch(
        UDSVMPool.Status, "web", {"status": POOL_STATUS}, namespace=namespace, patch_type=PatchType.MERGE
    )

    vm_rows = json.loads(inventory(kubeconfig, "-n", namespace, "--json"))
    assert isinstance(vm_rows, list)  # the shape scripts rely on
    assert [(row["name"], row["pool"]) for row in vm_rows] == [("db", None), ("web-0", "web")]

    pool_rows = json.loads(inventory(kubeconfig, "-n", namespace, "--pools", "--json"))
    assert [
        (
            row["name"],
            row["desired"],
            row["ready"],
            row["updated"],
            row["outdated"],
            row["currentRevision"],
            row["updateRevision"],
        )
        for row in pool_rows
    ] == [("web", 3, 2, 1, 2, "aaaa1111", "bbbb2222")]

    table = inventory(kubeconfig, "-n", namespace)
    vm_part, pool_part = table.split("\nPools\n")
    member_line = next(line for line in vm_part.splitlines() if " web-0 " in f" {line} ")
    assert member_line.split()[:3] == [namespace, "web-0", "web"]
    assert "DESIRED" in pool_part and "OUTDATED" in pool_part
    pool_line = next(line for line in pool_part.splitlines() if line.startswith(namespace))
    assert pool_line.split()[:7] == [namespace, "web", "3", "2", "1", "2", "bbbb2222"]
