"""The real KubeVirt v1.8.4 (virt-api with its webhooks and subresources API, virt-controller) on the node.

Installed once per session by tools/kubevirt (images pushed into the node's registry, then virt-operator's
install strategy applied; ADR 0008). Nothing of KubeVirt is played: admission answers come from virt-api,
VMIs and virt-launcher pods from virt-controller.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import kubevirt_install
import pytest
from node_cluster import NodeHandle

from pinned_versions import pinned_versions

ROOT = Path(__file__).resolve().parents[2]
VM_API = "/apis/kubevirt.io/v1"


@pytest.fixture(scope="session", name="kubevirt")
def kubevirt_fixture(node: NodeHandle) -> NodeHandle:
    """The node with virt-api and virt-controller running and their webhooks registered."""
    images = subprocess.run(
        [str(ROOT / "tools" / "kubevirt" / "images.sh"), str(node.state_dir)],
        capture_output=True,
        text=True,
        check=False,
    )
    if images.returncode != 0:
        pytest.fail(f"KubeVirt's images could not be built or pushed: {images.stderr[-2000:]}", pytrace=False)
    try:
        timings = kubevirt_install.up(node.state_dir, pinned_versions().kubevirt)
    except kubevirt_install.InstallError as error:
        pytest.fail(f"KubeVirt could not be installed on the node: {error}", pytrace=False)
    print(f"KubeVirt up: {timings}")
    return node


def vm_path(namespace: str, name: str | None = None) -> str:
    """The VirtualMachine collection (or one VM) in a namespace."""
    base = f"{VM_API}/namespaces/{namespace}/virtualmachines"
    return f"{base}/{name}" if name else base


def vmi_path(namespace: str, name: str) -> str:
    """One VirtualMachineInstance."""
    return f"{VM_API}/namespaces/{namespace}/virtualmachineinstances/{name}"


def launcher_pods(node: NodeHandle, namespace: str, vm_name: str) -> list[dict[str, Any]]:
    """The virt-launcher pods virt-controller made for a VM, selected by KubeVirt's own labels."""
    return node.api.items(
        f"/api/v1/namespaces/{namespace}/pods",
        label_selector=f"kubevirt.io=virt-launcher,vm.kubevirt.io/name={vm_name}",
    )


def dry_run_create(node: NodeHandle, namespace: str, vm: dict[str, Any]) -> tuple[int, Any]:
    """POST a VirtualMachine with dryRun=All: the API server runs the schema and every admission webhook
    (virt-api's are declared sideEffects: None) and stores nothing."""
    body = {**vm, "metadata": {**vm["metadata"], "namespace": namespace}}
    body["metadata"].pop("ownerReferences", None)  # the owning UDSVirtualMachine does not exist here
    return node.api.call(
        "POST",
        vm_path(namespace),
        body,
        params={"dryRun": "All", "fieldValidation": "Strict"},
        expect=(200, 201, 400, 403, 422),
    )


def component_logs(node: NodeHandle, component: str = "virt-controller", lines: int = 40) -> str:
    """The last log lines of a KubeVirt component's pods, for a failing test's message."""
    out = []
    for pod in node.api.items("/api/v1/namespaces/kubevirt/pods", label_selector=f"kubevirt.io={component}"):
        name = pod["metadata"]["name"]
        try:
            text = node.api.text(f"/api/v1/namespaces/kubevirt/pods/{name}/log?tailLines={lines}")
        except Exception as error:  # diagnostics only: never mask the real failure
            text = f"(no log: {error})"
        out.append(f"--- {name} ({pod['status'].get('phase')}) ---\n{text}")
    return "\n".join(out)
