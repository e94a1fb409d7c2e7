"""The test control plane is real: upstream schemas, Strict field validation, GC, namespace deletion, RBAC.

These tests pin down the behaviour every other integration test relies on (issue 3 acceptance), and the
launcher's own contract: `controlplane.py up`/`down` leave no process and no temp dir behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import ApiError, Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.authentication_v1 import SelfSubjectReview
from lightkube.resources.core_v1 import ConfigMap, Namespace, Pod, Secret
from lightkube.types import CascadeType

from tests.kube_helpers import (
    ControlPlaneHandle,
    DataVolume,
    VirtualMachine,
    api_error_text,
    apply_strict,
    create_strict,
    is_gone,
    wait_for,
)
from tools.envtest.controlplane import attach
from tools.envtest.fetch_crds import CDI_KINDS, ensure_crds
from tools.envtest.go_raw_strings import GoSourceError, extract_string_map
from tools.envtest.kubevirt_crd_wrappers import KubevirtWrapperError, check_against_go_source
from tools.envtest.pinned_versions import REPO_ROOT, pinned_versions
from tools.envtest.processes import ProcessRecord

CHECKSUM = "sha256:" + "ab" * 32
GC_DEADLINE_S = 120.0  # GC rediscovers resources every 30 s; be generous, never sleep blindly
NAMESPACE_DEADLINE_S = 120.0
CONTROLPLANE = (sys.executable, "-m", "tools.envtest.controlplane")
"""The launcher as `make cluster-up` runs it: a module, from the repository root."""


def datavolume(name: str, **http_extra: Any) -> dict[str, Any]:
    """A minimal valid DataVolume importing over HTTP with a digest (what our operator will render)."""
    return {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {"name": name},
        "spec": {
            "source": {"http": {"url": "http://127.0.0.1:9/disk.qcow2", "checksum": CHECKSUM, **http_extra}},
            "storage": {"resources": {"requests": {"storage": "11Mi"}}},
        },
    }


def virtual_machine(name: str) -> dict[str, Any]:
    """A minimal valid VirtualMachine (stopped) booting a PVC."""
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {
            "runStrategy": "Halted",
            "template": {
                "spec": {
                    "domain": {
                        "cpu": {"cores": 1},
                        "memory": {"guest": "128Mi"},
                        "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
                    },
                    "volumes": [{"name": "root", "persistentVolumeClaim": {"claimName": f"{name}-root"}}],
                }
            },
        },
    }


def owner_reference(owner: Any) -> dict[str, Any]:
    return {
        "apiVersion": owner.apiVersion,
        "kind": owner.kind,
        "name": owner.metadata.name,
        "uid": owner.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


# --- (a) Strict field validation on the real CDI schema
# -------------------------------------------------------


def test_valid_datavolume_is_accepted_with_its_checksum(kube_client: Client, namespace: str) -> None:
    created = create_strict(kube_client, datavolume("dv-valid"), namespace=namespace)
    assert created.metadata.uid
    stored = kube_client.get(DataVolume, "dv-valid", namespace=namespace)
    assert stored["spec"]["source"]["http"]["checksum"] == CHECKSUM


def test_datavolume_with_unknown_field_is_rejected_under_strict(kube_client: Client, namespace: str) -> None:
    with pytest.raises(ApiError) as rejected:
        create_strict(kube_client, datavolume("dv-typo", checksumm=CHECKSUM), namespace=namespace)
    assert rejected.value.status.code in (400, 422)
    assert 'unknown field "spec.source.http.checksumm"' in api_error_text(rejected.value)
    assert is_gone(kube_client, DataVolume, "dv-typo", namespace)


def test_apply_strict_also_rejects_unknown_fields(kube_client: Client, namespace: str) -> None:
    manifest = datavolume("dv-apply")
    manifest["spec"]["storage"]["volumeMod"] = "Block"
    with pytest.raises(ApiError) as rejected:
        apply_strict(kube_client, manifest, namespace=namespace)
    assert "volumeMod" in api_error_text(rejected.value)
    applied = apply_strict(kube_client, datavolume("dv-apply"), namespace=namespace)
    assert applied["spec"]["source"]["http"]["checksum"] == CHECKSUM


def test_without_strict_the_server_silently_prunes_unknown_fields(
    kube_client: Client, namespace: str
) -> None:
    """Why the Strict helpers exist: the default (Warn) accepts the typo and drops it."""
    lenient = kube_client.create(
        DataVolume.from_dict(datavolume("dv-lenient", checksumm=CHECKSUM)), namespace=namespace
    )
    assert "checksumm" not in lenient["spec"]["source"]["http"]


# --- (b) the upstream KubeVirt schema is enforced
# ------------------------------------------------------------


def test_valid_virtual_machine_is_accepted(kube_client: Client, namespace: str) -> None:
    created = create_strict(kube_client, virtual_machine("vm-valid"), namespace=namespace)
    assert created["spec"]["runStrategy"] == "Halted"


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda vm: vm["spec"].pop("template"), "spec.template: Required value"),
        (
            lambda vm: vm["spec"]["template"]["spec"]["domain"].pop("devices"),
            "spec.template.spec.domain.devices",
        ),
        (lambda vm: vm["spec"]["template"]["spec"]["domain"]["cpu"].update(cores="two"), "cores"),
        (lambda vm: vm["spec"].update(runStrategie="Always"), 'unknown field "spec.runStrategie"'),
    ],
    ids=["missing-template", "missing-devices", "cores-not-integer", "unknown-field"],
)
def test_virtual_machine_violating_the_upstream_schema_is_rejected(
    kube_client: Client, namespace: str, mutate: Any, expected: str
) -> None:
    manifest = virtual_machine("vm-bad")
    mutate(manifest)
    with pytest.raises(ApiError) as rejected:
        create_strict(kube_client, manifest, namespace=namespace)
    assert expected in api_error_text(rejected.value)


def test_vm_data_volume_templates_do_not_know_http_checksum(kube_client: Client, namespace: str) -> None:
    """KubeVirt vendors an older DataVolumeSpec: put a checksum on a standalone DataVolume, not a template."""
    manifest = virtual_machine("vm-dvt")
    template = datavolume("vm-dvt-root")
    manifest["spec"]["dataVolumeTemplates"] = [{"metadata": template["metadata"], "spec": template["spec"]}]
    with pytest.raises(ApiError) as rejected:
        create_strict(kube_client, manifest, namespace=namespace)
    assert "checksum" in api_error_text(rejected.value)


# --- (c) garbage collection and (d) namespace deletion
# -------------------------------------------------------


def test_deleting_an_owner_garbage_collects_its_dependents(kube_client: Client, namespace: str) -> None:
    owner = create_strict(kube_client, virtual_machine("vm-owner"), namespace=namespace)
    dependent_dv = datavolume("vm-owner-root")
    dependent_dv["metadata"]["ownerReferences"] = [owner_reference(owner)]
    create_strict(kube_client, dependent_dv, namespace=namespace)
    secret = Secret(
        metadata=ObjectMeta(name="vm-owner-cloudinit", ownerReferences=[owner_reference(owner)]),
        stringData={"userdata": "#cloud-config\n"},
    )
    create_strict(kube_client, secret, namespace=namespace)

    kube_client.delete(VirtualMachine, "vm-owner", namespace=namespace, cascade=CascadeType.BACKGROUND)

    wait_for(
        lambda: (
            is_gone(kube_client, DataVolume, "vm-owner-root", namespace)
            and is_gone(kube_client, Secret, "vm-owner-cloudinit", namespace)
        ),
        GC_DEADLINE_S,
        what="the garbage collector to delete the VM's DataVolume and Secret",
    )


def test_a_namespace_with_custom_resources_is_deleted_completely(kube_client: Client) -> None:
    name = f"ns-delete-{os.getpid()}"
    kube_client.create(Namespace(metadata=ObjectMeta(name=name)))
    create_strict(kube_client, datavolume("dv-in-ns"), namespace=name)
    create_strict(kube_client, virtual_machine("vm-in-ns"), namespace=name)
    create_strict(kube_client, ConfigMap(metadata=ObjectMeta(name="cm"), data={"k": "v"}), namespace=name)

    kube_client.delete(Namespace, name)

    wait_for(
        lambda: is_gone(kube_client, Namespace, name), NAMESPACE_DEADLINE_S, what=f"namespace {name} to go"
    )


# --- (e) the installed CRDs are the pinned upstream ones ----------------------------------------------------


def _served_schema(kube_client: Client, crd_name: str, version: str) -> dict[str, Any]:
    crd = kube_client.get(CustomResourceDefinition, crd_name)
    conditions = {c.type: c.status for c in crd.status.conditions}
    assert conditions.get("Established") == "True", f"{crd_name} is not Established"
    (served,) = [v for v in crd.spec.versions if v.name == version]
    schema: dict[str, Any] = served.schema.openAPIV3Schema.to_dict()
    return schema


def test_cdi_datavolume_crd_has_http_checksum(kube_client: Client) -> None:
    schema = _served_schema(kube_client, "datavolumes.cdi.kubevirt.io", "v1beta1")
    http = schema["properties"]["spec"]["properties"]["source"]["properties"]["http"]
    assert http["properties"]["checksum"]["type"] == "string"
    assert http["required"] == ["url"]


def test_kubevirt_crds_are_wrapped_like_upstream(kube_client: Client) -> None:
    vm = kube_client.get(CustomResourceDefinition, "virtualmachines.kubevirt.io")
    assert vm.spec.names.shortNames == ["vm", "vms"]
    assert [(v.name, v.storage) for v in vm.spec.versions] == [("v1", True), ("v1alpha3", False)]
    assert vm.spec.versions[0].subresources.status is not None
    pool = kube_client.get(CustomResourceDefinition, "virtualmachinepools.pool.kubevirt.io")
    assert pool.spec.versions[0].subresources.scale.specReplicasPath == ".spec.replicas"
    schema = _served_schema(kube_client, "virtualmachines.kubevirt.io", "v1")
    assert schema["properties"]["spec"]["required"] == ["template"]


def test_every_upstream_crd_is_established(control_plane: ControlPlaneHandle, kube_client: Client) -> None:
    expected = {f"{kind}s.cdi.kubevirt.io" for kind in CDI_KINDS} | {
        "virtualmachines.kubevirt.io",
        "virtualmachineinstances.kubevirt.io",
        "virtualmachinepools.pool.kubevirt.io",
        "kubevirts.kubevirt.io",
        "httproutes.gateway.networking.k8s.io",
        "gateways.gateway.networking.k8s.io",
        "gatewayclasses.gateway.networking.k8s.io",
        "referencegrants.gateway.networking.k8s.io",
    }
    established = {
        crd.metadata.name
        for crd in kube_client.list(CustomResourceDefinition)
        if any(c.type == "Established" and c.status == "True" for c in crd.status.conditions)
    }
    assert expected <= established
    sources = json.loads((ensure_crds() / "sources.json").read_text())
    pins = pinned_versions()
    assert set(sources) == {
        f"kubevirt.io/containerized-data-importer@{pins.cdi}",
        f"kubevirt.io/kubevirt@{pins.kubevirt}",
        f"sigs.k8s.io/gateway-api@{pins.gateway_api}",
    }


# --- security posture of the plane -------------------------------------------------------------------------


def test_minted_identity_has_only_what_rbac_grants(control_plane: ControlPlaneHandle, namespace: str) -> None:
    kubeconfig = control_plane.kubeconfig_for(
        "system:serviceaccount:uds:operator-under-test", ("uds-operators",)
    )
    with control_plane.client(kubeconfig=kubeconfig) as limited:
        with pytest.raises(ApiError) as denied:
            list(limited.list(DataVolume, namespace=namespace))
        assert denied.value.status.code == 403
        assert "system:serviceaccount:uds:operator-under-test" in api_error_text(denied.value)


def test_minted_identity_is_who_the_api_server_sees_even_with_a_long_name(
    control_plane: ControlPlaneHandle,
) -> None:
    """ServiceAccount-style names exceed X.509's 64-character CN bound; the API server must still see them."""
    user = f"system:serviceaccount:{'n' * 63}:uds-vm-operator"
    groups = ("system:serviceaccounts", f"system:serviceaccounts:{'n' * 63}")
    kubeconfig = control_plane.kubeconfig_for(user, groups)
    with control_plane.client(kubeconfig=kubeconfig) as impersonal:
        review = impersonal.create(SelfSubjectReview())
    assert review.status.userInfo.username == user
    assert set(groups) <= set(review.status.userInfo.groups)


def test_pod_security_admission_enforces_restricted(kube_client: Client, restricted_namespace: str) -> None:
    privileged = Pod.from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "privileged"},
            "spec": {"containers": [{"name": "c", "image": "x", "securityContext": {"privileged": True}}]},
        }
    )
    with pytest.raises(ApiError) as rejected:
        create_strict(kube_client, privileged, namespace=restricted_namespace)
    assert 'violates PodSecurity "restricted:latest"' in api_error_text(rejected.value)


# --- the launcher's own contract ---------------------------------------------------------------------------


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CONTROLPLANE, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_cli_up_and_down_leave_no_process_and_no_temp_dir(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = _run("up", "--state-dir", str(state))
    assert first.returncode == 0, first.stderr
    records = [ProcessRecord.from_json(item) for item in json.loads((state / "pids.json").read_text())]
    assert [record.name for record in records] == ["etcd", "kube-apiserver", "kube-controller-manager"]
    assert all(record.is_alive() for record in records)
    run_dir = Path(json.loads((state / "state.json").read_text())["run_dir"])
    assert run_dir.is_dir()

    again = _run("up", "--state-dir", str(state))
    assert again.returncode == 0 and "already running" in again.stdout
    assert _run("status", "--state-dir", str(state)).returncode == 0

    down = _run("down", "--state-dir", str(state))
    assert down.returncode == 0, down.stderr
    assert not any(record.is_alive() for record in records)
    assert not run_dir.exists()
    assert not (state / "pids.json").exists() and not (state / "kubeconfig").exists()
    assert _run("down", "--state-dir", str(state)).returncode == 0
    assert _run("status", "--state-dir", str(state)).returncode == 1


def test_cli_up_without_binaries_fails_with_the_fix(tmp_path: Path) -> None:
    result = subprocess.run(
        [*CONTROLPLANE, "up", "--state-dir", str(tmp_path / "state")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "ENVTEST_BIN_DIR": str(tmp_path / "no-bins")},
    )
    assert result.returncode == 1
    assert "make envtest-bins" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "state" / "pids.json").exists()


def test_a_recycled_pid_is_never_mistaken_for_ours() -> None:
    """Stopping by PID must not hit an unrelated process that got the same PID later."""
    stat = Path(f"/proc/{os.getpid()}/stat").read_text()
    ticks = int(stat[stat.rindex(")") + 2 :].split()[19])
    assert ProcessRecord("self", os.getpid(), ticks, sys.executable).is_alive()
    assert not ProcessRecord("self", os.getpid(), ticks + 1, sys.executable).is_alive()


def test_cli_rejects_a_bad_command_with_usage_exit_code() -> None:
    result = _run("sideways")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr


def test_attach_reads_what_up_recorded(control_plane: ControlPlaneHandle) -> None:
    assert control_plane.plane is not None
    attached = attach(control_plane.plane.state_dir)
    assert attached is not None
    assert attached.server == control_plane.plane.server
    assert attached.is_healthy()


# --- CRD extraction from Go sources ------------------------------------------------------------------------


def test_go_raw_string_extraction_joins_spliced_backticks() -> None:
    source = (
        "package x\n// c\nvar M map[string]string = map[string]string{\n"
        '\t"a": `one ` + "`" + `two`,\n\t"b": "q\\n",\n}\n'
    )
    assert extract_string_map(source, "M") == {"a": "one `two", "b": "q\n"}


def test_go_raw_string_extraction_fails_loudly_on_an_unexpected_shape() -> None:
    with pytest.raises(GoSourceError, match="no `var M"):
        extract_string_map("package x\n", "M")
    with pytest.raises(GoSourceError, match="not a string literal"):
        extract_string_map('var M = map[string]string{"a": someFunc()}', "M")


def test_kubevirt_wrapper_drift_is_reported_by_name() -> None:
    """A KubeVirt bump that renames a short name or column must fail the fetch, naming what changed."""
    with pytest.raises(KubevirtWrapperError) as drift:
        check_against_go_source('Plural: "virtualmachines" ShortNames: []string{"vm"}', "")
    message = str(drift.value)
    assert 'VirtualMachine: \'ShortNames: []string{"vm", "vms"}\'' in message
    assert "v1alpha3" in message


def test_cached_crd_files_are_valid_crd_yaml() -> None:
    for path in sorted(ensure_crds().glob("*.yaml")):
        document = yaml.safe_load(path.read_text())
        assert document["kind"] == "CustomResourceDefinition"
        assert path.name == f"{document['metadata']['name']}.yaml"
