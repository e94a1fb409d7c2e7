"""Integration-tier fixtures: one real control plane per session, a fresh namespace per test.

The plane is the real kube-apiserver + etcd + kube-controller-manager (garbage collector and namespace
controllers) from tools/envtest/controlplane.py, with the upstream CDI, KubeVirt and Gateway API CRDs
installed. Set UDS_TEST_KUBECONFIG=.envtest/kubeconfig (after `make cluster-up`) to reuse a running plane
between runs.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from lightkube import ApiError, Client
from lightkube.generic_resource import create_namespaced_resource
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace
from lightkube.types import PatchType

from tests.kube_helpers import REUSE_ENV, TEST_NAMESPACE_LABEL, ControlPlaneHandle, apply_strict
from tools.envtest.controlplane import (
    LAUNCH_ERRORS,
    ControlPlaneError,
    attach,
    find_bin_dir,
    running_control_plane,
)
from uds_vm_operator.controller.release import without_release

_INTEGRATION_DIR = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/integration carries the `integration` marker (select with -m integration)."""
    for item in items:
        if _INTEGRATION_DIR in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.integration)


def _reused_plane(kubeconfig: str) -> ControlPlaneHandle:
    path = Path(kubeconfig)
    if not path.is_file():
        pytest.fail(
            f"{REUSE_ENV}={kubeconfig} does not exist; run `make cluster-up` or unset it", pytrace=False
        )
    plane = attach(path.resolve().parent)
    if plane is not None and not plane.is_healthy():
        pytest.fail(
            f"the control plane of {kubeconfig} is not healthy; run `make cluster-down cluster-up`",
            pytrace=False,
        )
    return ControlPlaneHandle(path.resolve(), plane)


def _missing_binaries() -> str:
    """The launcher's 'run make envtest-bins' message when a binary is missing, else ''."""
    try:
        find_bin_dir()
    except ControlPlaneError as error:
        return str(error)
    return ""


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlaneHandle]:
    """The session's control plane; KUBECONFIG points at it for code that reads the environment (kopf)."""
    reuse = os.environ.get(REUSE_ENV)
    with pytest.MonkeyPatch.context() as patch:
        if reuse:
            handle = _reused_plane(reuse)
            patch.setenv("KUBECONFIG", str(handle.kubeconfig))
            yield handle
            return
        problem = _missing_binaries()
        if problem:
            pytest.fail(problem, pytrace=False)
        stack = contextlib.ExitStack()
        failure = ""
        try:
            plane = stack.enter_context(running_control_plane())
        except LAUNCH_ERRORS as error:
            failure = f"could not start the test control plane: {error}"
        if failure:
            pytest.fail(failure, pytrace=False)
        with stack:  # stops the plane and removes its files, also when tests failed
            patch.setenv("KUBECONFIG", str(plane.kubeconfig))
            yield ControlPlaneHandle(plane.kubeconfig, plane)


@pytest.fixture(scope="session")
def kube_client(control_plane: ControlPlaneHandle) -> Iterator[Client]:
    """One admin client for the session (field manager `uds-vm-operator-tests`)."""
    client = control_plane.client()
    try:
        yield client
    finally:
        client.close()


GOLDEN_IMAGES_NAMESPACE = "golden-images"


@pytest.fixture(scope="session", autouse=True)
def golden_images_clonable_by_every_namespace(kube_client: Client) -> Iterator[None]:
    """The pool tests clone from ``golden-images``; the operator clones across namespaces only where the
    source namespace grants it (ADR 0016). This is the site-wide grant a platform team would write for a
    shared image namespace: `datavolumes/source` create there for every service account."""
    with contextlib.suppress(ApiError):
        _create_namespace(kube_client, GOLDEN_IMAGES_NAMESPACE, {})
    meta = {"name": "uds-vm-clone-source", "namespace": GOLDEN_IMAGES_NAMESPACE}
    rbac = "rbac.authorization.k8s.io"
    apply_strict(
        kube_client,
        {
            "apiVersion": f"{rbac}/v1",
            "kind": "Role",
            "metadata": meta,
            "rules": [
                {"apiGroups": ["cdi.kubevirt.io"], "resources": ["datavolumes/source"], "verbs": ["create"]}
            ],
        },
    )
    apply_strict(
        kube_client,
        {
            "apiVersion": f"{rbac}/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": rbac, "kind": "Role", "name": meta["name"]},
            "subjects": [{"apiGroup": rbac, "kind": "Group", "name": "system:serviceaccounts"}],
        },
    )
    yield


def _namespace_name(test_name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", test_name.lower()).strip("-")[:48].strip("-") or "t"
    return f"{slug}-{secrets.token_hex(3)}"


def _create_namespace(client: Client, name: str, labels: dict[str, str]) -> None:
    client.create(Namespace(metadata=ObjectMeta(name=name, labels={TEST_NAMESPACE_LABEL: "true", **labels})))


UDS_VM = create_namespaced_resource("uds.dev", "v1alpha1", "UDSVirtualMachine", "udsvirtualmachines")


def _let_members_go(client: Client, namespace: str) -> None:
    """Play the operator's release of pool members (its process has stopped by now), or they would hold the
    namespace in Terminating for the rest of the session (their children go with the namespace anyway)."""
    try:
        vms = list(client.list(UDS_VM, namespace=namespace))
    except ApiError as error:
        if error.status.code == 404:  # no CRD in this plane
            return
        raise
    for vm in vms:
        remaining = without_release({"finalizers": vm.metadata.finalizers})
        if remaining is not None:
            with contextlib.suppress(ApiError):
                client.patch(
                    UDS_VM,
                    vm.metadata.name,
                    {"metadata": {"finalizers": remaining}},
                    namespace=namespace,
                    patch_type=PatchType.MERGE,
                )


def _delete_namespace(client: Client, name: str) -> None:
    _let_members_go(client, name)
    try:
        client.delete(Namespace, name)
    except ApiError as error:
        if error.status.code != 404:
            raise


@pytest.fixture
def namespace(kube_client: Client, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace named after the test; deleted afterwards (the namespace controller finishes it)."""
    name = _namespace_name(request.node.name)
    _create_namespace(kube_client, name, {})
    try:
        yield name
    finally:
        _delete_namespace(kube_client, name)


@pytest.fixture
def restricted_namespace(kube_client: Client, request: pytest.FixtureRequest) -> Iterator[str]:
    """Like `namespace`, labelled so PodSecurity enforces the `restricted` profile (as UDS sites do)."""
    name = _namespace_name(request.node.name)
    labels = {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
    }
    _create_namespace(kube_client, name, labels)
    try:
        yield name
    finally:
        _delete_namespace(kube_client, name)
