"""Golden-image namespace RBAC, checked by the real API server's authorizer and quota admission.

The manifests come from `uds-vmctl golden-image rbac`. The consumer identity is a client certificate with
exactly the user and groups a service account token of the consumer namespace resolves to, so only the
generated RoleBinding can grant it anything.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import ApiError, Client, codecs
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.authorization_v1 import SelfSubjectAccessReview
from lightkube.resources.core_v1 import Namespace, PersistentVolumeClaim, ResourceQuota
from lightkube.types import PatchType
from typer.testing import CliRunner

from tests.integration.conftest import TEST_NAMESPACE_LABEL
from tests.integration.pool_play import http_client, release_pvc_protection
from tests.kube_helpers import DataVolume, access_review, apply_strict, create_strict
from uds_vm_operator.cli.goldenimage import STORAGE_GUARD_QUOTA
from uds_vm_operator.cli.main import app


def _ssar(
    client: Client, namespace: str, verb: str, resource: str, *, subresource: str = "", group: str = ""
) -> bool:
    review = codecs.from_dict(access_review(namespace, verb, resource, group=group, subresource=subresource))
    result = client.create(review)
    assert isinstance(result, SelfSubjectAccessReview)
    return bool(result.status and result.status.allowed)


def _pvc(name: str, namespace: str, storage_class: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }


def _data_volume(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "source": {"blank": {}},
            "pvc": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        },
    }


@pytest.fixture
def golden(kube_client: Client, control_plane: Any) -> Iterator[tuple[str, str]]:
    """A golden-image namespace and a consumer namespace, made from the CLI's manifests.

    Short names: the consumer identity is a client certificate whose CN (at most 64 characters) is
    ``system:serviceaccount:<consumer>:default``.
    """
    suffix = secrets.token_hex(3)
    image_ns, consumer = f"golden-{suffix}", f"team-{suffix}"
    kube_client.create(Namespace(metadata=ObjectMeta(name=consumer, labels={TEST_NAMESPACE_LABEL: "true"})))
    result = CliRunner().invoke(
        app,
        [
            "golden-image",
            "rbac",
            "--image-namespace",
            image_ns,
            "--consumer-namespace",
            consumer,
            "--storage-class",
            "golden-sc",
            "--quota",
        ],
    )
    assert result.exit_code == 0, result.output
    try:
        for manifest in yaml.safe_load_all(result.stdout):
            apply_strict(kube_client, manifest)
        yield image_ns, consumer
    finally:
        client = http_client(Path(control_plane.kubeconfig))
        try:
            release_pvc_protection(client, consumer)
        finally:
            client.close()
        for name in (image_ns, consumer):
            try:
                kube_client.delete(Namespace, name)
            except ApiError as error:
                if error.status.code != 404:
                    raise


@pytest.fixture
def consumer_client(control_plane, golden: tuple[str, str]) -> Iterator[Client]:  # type: ignore[no-untyped-def]
    """A client that is a service account of the consumer namespace, as far as the authorizer can tell."""
    _, consumer = golden
    kubeconfig = control_plane.kubeconfig_for(
        f"system:serviceaccount:{consumer}:default",
        ("system:serviceaccounts", f"system:serviceaccounts:{consumer}", "system:authenticated"),
    )
    client = control_plane.client(kubeconfig=kubeconfig)
    try:
        yield client
    finally:
        client.close()


def test_consumer_may_clone_from_the_golden_namespace(golden, consumer_client):  # type: ignore[no-untyped-def]
    image_ns, _ = golden
    assert _ssar(
        consumer_client, image_ns, "create", "datavolumes", subresource="source", group="cdi.kubevirt.io"
    )
    assert _ssar(consumer_client, image_ns, "get", "datasources", group="cdi.kubevirt.io")


@pytest.mark.parametrize(
    ("verb", "resource", "group"),
    [
        ("create", "datavolumes", "cdi.kubevirt.io"),
        ("patch", "datavolumes", "cdi.kubevirt.io"),
        ("update", "datavolumes", "cdi.kubevirt.io"),
        ("delete", "datavolumes", "cdi.kubevirt.io"),
        ("create", "persistentvolumeclaims", ""),
        ("patch", "persistentvolumeclaims", ""),
        ("delete", "persistentvolumeclaims", ""),
        ("create", "datasources", "cdi.kubevirt.io"),
        ("delete", "datasources", "cdi.kubevirt.io"),
        ("create", "pods", ""),
    ],
)
def test_consumer_cannot_write_in_the_golden_namespace(golden, consumer_client, verb, resource, group):  # type: ignore[no-untyped-def]
    image_ns, _ = golden
    assert not _ssar(consumer_client, image_ns, verb, resource, group=group)


def test_real_writes_by_the_consumer_are_forbidden(kube_client, golden, consumer_client):  # type: ignore[no-untyped-def]
    image_ns, _ = golden
    with pytest.raises(ApiError) as denied_dv:
        create_strict(consumer_client, _data_volume("stolen", image_ns))
    assert denied_dv.value.status.code == 403
    with pytest.raises(ApiError) as denied_pvc:
        create_strict(consumer_client, _pvc("stolen", image_ns, "standard"))
    assert denied_pvc.value.status.code == 403
    create_strict(kube_client, _data_volume("golden-disk", image_ns))  # the admin can: the namespace works
    with pytest.raises(ApiError) as denied_delete:
        consumer_client.delete(DataVolume, "golden-disk", namespace=image_ns)
    assert denied_delete.value.status.code == 403
    with pytest.raises(ApiError) as denied_patch:
        consumer_client.patch(
            DataVolume, "golden-disk", {"metadata": {"labels": {"x": "y"}}}, namespace=image_ns
        )
    assert denied_patch.value.status.code == 403
    assert kube_client.get(DataVolume, "golden-disk", namespace=image_ns).metadata.labels is None


def test_other_namespaces_get_nothing(control_plane, golden):  # type: ignore[no-untyped-def]
    image_ns, _ = golden
    outsider = control_plane.kubeconfig_for(
        "system:serviceaccount:elsewhere:default",
        ("system:serviceaccounts", "system:serviceaccounts:elsewhere"),
    )
    client = control_plane.client(kubeconfig=outsider)
    try:
        assert not _ssar(
            client, image_ns, "create", "datavolumes", subresource="source", group="cdi.kubevirt.io"
        )
    finally:
        client.close()


def _play_the_quota_controller(client: Client, namespace: str) -> None:
    """Write the quota status kube-controller-manager's resourcequota controller would (it is not run here).

    Quota admission only enforces resources listed in ``status.hard``; the test control plane runs just the
    garbage-collector and namespace controllers, so we publish hard limits and zero usage ourselves.
    """
    quota = client.get(ResourceQuota, STORAGE_GUARD_QUOTA, namespace=namespace)
    hard = dict(quota.spec.hard or {})
    client.patch(
        ResourceQuota.Status,
        STORAGE_GUARD_QUOTA,
        {"status": {"hard": hard, "used": dict.fromkeys(hard, "0")}},
        namespace=namespace,
        patch_type=PatchType.MERGE,
    )


def test_quota_keeps_the_consumer_off_the_golden_storage_class(kube_client, golden):  # type: ignore[no-untyped-def]
    _, consumer = golden
    _play_the_quota_controller(kube_client, consumer)
    with pytest.raises(ApiError) as denied:
        create_strict(kube_client, _pvc("on-golden", consumer, "golden-sc"))
    assert denied.value.status.code == 403
    assert "golden-image-storage-guard" in (denied.value.status.message or "")
    created = create_strict(kube_client, _pvc("elsewhere", consumer, "standard"))
    assert isinstance(created, PersistentVolumeClaim)
