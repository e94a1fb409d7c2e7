"""The golden-image factory end to end on the real API server (the test plays CDI and KubeVirt).

Build VM runs → the guest's sysprep shuts it down (KubeVirt reports Stopped) → the operator clones the
system disk into ``<golden>-v<version>`` → CDI reports the clone Succeeded → the DataSource ``<golden>``
points at it.
Bumping the version repeats the cycle and repoints the DataSource; versions beyond ``keep`` are deleted.
"""

from __future__ import annotations

import json
from typing import Any

from tests.integration.operator_fixtures import (
    api,
    dv_path,
    kv_path,
    operator,
    play_cdi,
    play_kubevirt,
    status_of,
    vm_path,
)
from tests.integration.operator_harness import (
    OPERATOR_RESOURCES,
    Api,
    OperatorProcess,
    apiserver_writes,
    terminating_namespaces,
)
from tests.kube_helpers import wait_for

__all__ = ["api", "operator"]  # fixtures used by name

GOLDEN = "win2022"


def ds_path(namespace: str, name: str | None = None) -> str:
    base = f"/apis/cdi.kubevirt.io/v1beta1/namespaces/{namespace}/datasources"
    return f"{base}/{name}" if name else base


def build_vm(namespace: str, version: int, keep: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "uds.dev/v1alpha1",
        "kind": "UDSVirtualMachine",
        "metadata": {"name": "win-build", "namespace": namespace},
        "spec": {
            "os": "windows",
            "source": {"http": {"url": "https://images.site.internal/windows-server-2022.iso"}},
            "disk": {"virtualSize": "6Mi"},
            "resources": {"cpu": 2, "memory": "4Gi"},
            "windows": {
                "sysprep": {"mode": "iso"},
                "systemDiskSize": "20Mi",
                "goldenImage": {"name": GOLDEN, "version": version, "keep": keep},
            },
        },
    }


def golden_status(api: Api, namespace: str) -> dict[str, Any]:
    return dict(status_of(api, namespace, "win-build").get("goldenImage") or {})


def wait_until(check: Any, what: str, operator: OperatorProcess, api: Api, namespace: str) -> Any:
    try:
        return wait_for(check, 60, 0.2, what=what)
    except AssertionError as error:
        raise AssertionError(
            f"{error}\nstatus.goldenImage: {golden_status(api, namespace)}\n{operator.logs()}"
        ) from None


def build_one_version(api: Api, operator: OperatorProcess, namespace: str, version: int) -> dict[str, Any]:
    """Play one build: the VM runs, the guest shuts down, CDI finishes the clone; return the clone DV."""
    clone_name = f"{GOLDEN}-v{version}"
    wait_until(
        lambda: (
            (api.get(kv_path(namespace, "win-build")) or {}).get("spec", {}).get("runStrategy")
            == "RerunOnFailure"
        ),
        f"build VM v{version} released with runStrategy RerunOnFailure",
        operator,
        api,
        namespace,
    )
    assert api.get(dv_path(namespace, clone_name)) is None, "no clone before the build ran"
    play_kubevirt(api, namespace, "win-build", "Running", True)
    wait_until(
        lambda: golden_status(api, namespace).get("startedVersion") == version,
        f"status.goldenImage.startedVersion == {version}",
        operator,
        api,
        namespace,
    )
    play_kubevirt(api, namespace, "win-build", "Stopped", False)  # sysprep /generalize /shutdown
    clone = wait_until(
        lambda: api.get(dv_path(namespace, clone_name)),
        f"clone DataVolume {clone_name}",
        operator,
        api,
        namespace,
    )
    # The operator creates the clone, then records the phase: wait for the status, not just the clone.
    wait_until(
        lambda: golden_status(api, namespace).get("phase") == "Cloning",
        f"status.goldenImage.phase Cloning for v{version}",
        operator,
        api,
        namespace,
    )
    assert api.get(kv_path(namespace, "win-build"))["spec"]["runStrategy"] == "Halted"
    play_cdi(api, namespace, clone_name, "Succeeded", "100.0%")
    wait_until(
        lambda: golden_status(api, namespace).get("publishedVersion") == version,
        f"status.goldenImage.publishedVersion == {version}",
        operator,
        api,
        namespace,
    )
    return dict(clone)


def test_build_vm_is_cloned_published_repointed_and_pruned(
    api: Api, operator: OperatorProcess, namespace: str
) -> None:
    created = api.apply(build_vm(namespace, 1), vm_path(namespace, "win-build"))
    # The KubeVirt VirtualMachine is applied after both DataVolumes: waiting for it (not the first DataVolume)
    # means every status played below has its object (a 404 on the VM's status was seen in CI).
    wait_until(
        lambda: api.get(kv_path(namespace, "win-build")),
        "the build VirtualMachine (applied after both DataVolumes)",
        operator,
        api,
        namespace,
    )
    play_cdi(api, namespace, "win-build-dv", "Succeeded", "100.0%")
    play_cdi(api, namespace, "win-build-system", "Succeeded", "100.0%")
    # Stopped before it ever ran (KubeVirt's state for a new VM): not a finished build, nothing is cloned.
    play_kubevirt(api, namespace, "win-build", "Stopped", False)

    clone = build_one_version(api, operator, namespace, 1)
    system = api.get(dv_path(namespace, "win-build-system"))
    assert system is not None
    assert clone["spec"]["source"] == {"pvc": {"name": "win-build-system", "namespace": namespace}}
    assert clone["spec"]["pvc"]["resources"]["requests"]["storage"] == "300Mi"  # pvc_size(20Mi), explicit
    assert clone["spec"]["pvc"]["resources"] == system["spec"]["pvc"]["resources"]
    assert "ownerReferences" not in clone["metadata"], "the image must outlive the build VM"
    assert clone["metadata"]["labels"]["uds.dev/golden-image"] == GOLDEN
    assert clone["metadata"]["labels"]["uds.dev/golden-image-version"] == "1"

    source = api.get(ds_path(namespace, GOLDEN))
    assert source is not None and "ownerReferences" not in source["metadata"]
    assert source["spec"]["source"]["pvc"] == {"name": f"{GOLDEN}-v1", "namespace": namespace}
    status = golden_status(api, namespace)
    assert status == {
        "name": GOLDEN,
        "phase": "Published",
        "startedVersion": 1,
        "publishedVersion": 1,
        "dataSource": GOLDEN,
        "cloneDataVolume": f"{GOLDEN}-v1",
    }
    assert api.get(kv_path(namespace, "win-build"))["spec"]["runStrategy"] == "Halted"  # stays generalized
    assert status_of(api, namespace, "win-build")["phase"] == "Stopped"

    # v2 and v3: each bump runs the build again and repoints the DataSource; keep: 2 deletes v1.
    for version in (2, 3):
        api.apply(build_vm(namespace, version), vm_path(namespace, "win-build"))
        build_one_version(api, operator, namespace, version)
        source = api.get(ds_path(namespace, GOLDEN))
        assert source is not None
        assert source["spec"]["source"]["pvc"]["name"] == f"{GOLDEN}-v{version}"

    def remaining() -> list[str] | None:
        names = sorted(
            dv["metadata"]["name"]
            for dv in api.items(dv_path(namespace), label_selector=f"uds.dev/golden-image={GOLDEN}")
            if not dv["metadata"].get("deletionTimestamp")
        )
        return names if names == [f"{GOLDEN}-v2", f"{GOLDEN}-v3"] else None

    wait_until(remaining, "only the two newest versions kept", operator, api, namespace)

    events = [
        e
        for e in api.items(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
        if e["regarding"]["uid"] == created["metadata"]["uid"]
    ]
    reasons = [e["reason"] for e in events]
    assert reasons.count("GoldenImagePublished") == 3 and "GoldenImagePruned" in reasons, reasons

    # A published factory is at rest: a full resync (operator restart) writes nothing, DataSource included.
    operator.wait_quiet(minimum=1)
    wait_for(lambda: not terminating_namespaces(api), 180, 1.0, what="no namespace left in Terminating")
    operator.stop()
    before = apiserver_writes(api, OPERATOR_RESOURCES | {"datasources"})
    operator.start()
    operator.wait_quiet(minimum=1)
    writes = apiserver_writes(api, OPERATOR_RESOURCES | {"datasources"}) - before
    assert writes == 0, f"{writes} write requests during a resync\n{operator.logs()}"

    # Deleting the build VM leaves the published images and the DataSource in place.
    api.delete(vm_path(namespace, "win-build"))
    wait_for(lambda: api.get(vm_path(namespace, "win-build")) is None, 30, 0.2, what="build VM deleted")
    assert api.get(ds_path(namespace, GOLDEN)) is not None
    assert api.get(dv_path(namespace, f"{GOLDEN}-v3")) is not None
    assert json.dumps(api.get(ds_path(namespace, GOLDEN))).count(f"{GOLDEN}-v3") == 1
