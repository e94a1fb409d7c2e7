"""`make demo`'s namespaces on the real control plane: a namespace still being deleted (an earlier run's
teardown, a test's) is waited for, then made again, instead of failing the demo's next stage with "it is
being terminated" (seen in CI: the Zarf test's namespace was still going when the demo's helm install ran)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from tests.kube_helpers import ControlPlaneHandle
from tools.demo import NAMESPACES, Demo
from uds_vm_operator.cli._kube import KubeClient

HOLD = "uds.dev/test-hold"


def test_a_namespace_being_deleted_is_waited_for_then_made_again(
    control_plane: ControlPlaneHandle, tmp_path: Path
) -> None:
    name = "demo-namespace-being-deleted"
    with KubeClient(control_plane.kubeconfig, timeout_s=30.0) as client:
        demo = Demo(tmp_path, client, tmp_path)
        path = NAMESPACES.path(name=name)
        demo.post(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "finalizers": [HOLD]}},
            NAMESPACES.path(),
        )
        client.request("DELETE", path, what="delete namespace")
        held = demo.get(path) or {}
        assert "deletionTimestamp" in held["metadata"], "the finalizer holds the namespace in Terminating"

        made = threading.Thread(target=demo.namespace, args=(name, {"made-by": "demo"}))
        made.start()
        time.sleep(3)
        assert made.is_alive(), "namespace() waits while the old namespace is being deleted"
        with KubeClient(control_plane.kubeconfig, timeout_s=30.0) as other:
            other.request(
                "PATCH",
                path,
                body={"metadata": {"finalizers": None}},
                content_type="application/merge-patch+json",
                what="release the namespace",
            )
        made.join(timeout=240)
        assert not made.is_alive(), "namespace() returned once the old namespace was gone"
        again = demo.get(path) or {}
        assert "deletionTimestamp" not in again["metadata"], again["metadata"]
        assert again["metadata"]["labels"]["made-by"] == "demo"
        assert again["metadata"]["uid"] != held["metadata"]["uid"], "a new namespace, not the old one"
        client.request("DELETE", path, what="delete namespace")
