"""The chart's RBAC and Deployment on the real API server: Strict validation, restricted pod security, and a
SelfSubjectAccessReview matrix run *as the operator's ServiceAccount user* (a client certificate whose only
rights come from the chart's bindings)."""

from __future__ import annotations

import copy
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.models.authorization_v1 import ResourceAttributes, SelfSubjectAccessReviewSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.authorization_v1 import SelfSubjectAccessReview
from lightkube.resources.core_v1 import Namespace, Secret

from release import deploy_manifests
from tests.integration.operator_harness import Api
from tests.integration.test_deploy_helm import helm_path
from tests.kube_helpers import apply_strict, as_resource, create_strict

SA = "uds-vm-operator"
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "RoleBinding")

# (verb, group, resource, subresource) the operator MUST be able to do in any VM namespace.
MUST_ALLOW = [
    ("watch", "uds.dev", "udsvirtualmachines", ""),
    ("patch", "uds.dev", "udsvirtualmachines", "status"),
    ("create", "uds.dev", "udsvirtualmachines", ""),  # pool members
    ("delete", "uds.dev", "udsvirtualmachines", ""),
    ("patch", "uds.dev", "udsvirtualmachines", ""),  # a deleting member's release finalizer only (VAP)
    ("delete", "kubevirt.io", "virtualmachines", ""),  # a deleting member's children (ADR 0018)
    ("delete", "", "secrets", ""),
    ("delete", "", "persistentvolumeclaims", ""),
    ("patch", "uds.dev", "udsvirtualmachinepools", "status"),
    ("create", "apps", "controllerrevisions", ""),  # pool revision history
    ("delete", "apps", "controllerrevisions", ""),
    ("patch", "uds.dev", "packages", ""),
    ("create", "cdi.kubevirt.io", "datavolumes", ""),
    ("patch", "cdi.kubevirt.io", "datavolumes", ""),  # server-side apply and the SI-7 verdict annotation
    ("delete", "cdi.kubevirt.io", "datavolumes", ""),
    ("create", "cdi.kubevirt.io", "datavolumes", "source"),
    ("create", "cdi.kubevirt.io", "datasources", ""),
    ("create", "kubevirt.io", "virtualmachines", ""),
    ("patch", "kubevirt.io", "virtualmachines", ""),
    ("list", "kubevirt.io", "virtualmachineinstances", ""),
    ("create", "", "secrets", ""),
    ("create", "", "persistentvolumeclaims", ""),
    ("create", "", "pods", ""),  # SI-7 verifier
    ("patch", "", "pods", ""),
    ("watch", "", "pods", ""),
    ("delete", "", "pods", ""),
    ("get", "", "configmaps", ""),  # image records
    ("create", "networking.k8s.io", "networkpolicies", ""),
    ("patch", "networking.k8s.io", "networkpolicies", ""),
    ("create", "", "services", ""),
    ("delete", "", "services", ""),  # stale exposure is pruned
    ("create", "gateway.networking.k8s.io", "httproutes", ""),
    ("delete", "gateway.networking.k8s.io", "httproutes", ""),
    ("delete", "networking.k8s.io", "networkpolicies", ""),
    ("create", "events.k8s.io", "events", ""),
    ("patch", "kopf.dev", "kopfpeerings", ""),
]
MUST_ALLOW_CLUSTER = [
    ("get", "apiextensions.k8s.io", "customresourcedefinitions", ""),
    ("list", "", "nodes", ""),
    ("patch", "kopf.dev", "clusterkopfpeerings", ""),
    ("list", "kubevirt.io", "kubevirts", ""),
    ("get", "cdi.kubevirt.io", "cdiconfigs", ""),
    ("create", "authorization.k8s.io", "subjectaccessreviews", ""),  # the clone-grant proof (ADR 0016)
]
MUST_DENY = [
    ("patch", "", "nodes", "", None),
    ("delete", "", "nodes", "", None),
    ("create", "rbac.authorization.k8s.io", "clusterrolebindings", "", None),
    ("escalate", "rbac.authorization.k8s.io", "clusterroles", "", None),
    ("bind", "rbac.authorization.k8s.io", "clusterroles", "", None),
    ("create", "rbac.authorization.k8s.io", "rolebindings", "", "vm"),
    ("impersonate", "", "users", "", None),
    ("impersonate", "", "serviceaccounts", "", "vm"),
    ("create", "", "pods", "exec", "vm"),
    ("create", "", "pods", "attach", "vm"),
    ("patch", "", "pods", "status", "vm"),  # only kubelet reports a verdict
    ("create", "", "serviceaccounts", "token", "vm"),
    ("list", "", "configmaps", "", "vm"),  # image records are read by name only
    ("patch", "", "configmaps", "", "vm"),
    ("update", "apiextensions.k8s.io", "customresourcedefinitions", "", None),
    ("list", "apiextensions.k8s.io", "customresourcedefinitions", "", None),  # kopf scanning is off
    ("watch", "", "namespaces", "", None),
    ("patch", "cdi.kubevirt.io", "cdiconfigs", "", None),
    ("update", "uds.dev", "udsvirtualmachines", "", "vm"),
    ("update", "uds.dev", "udsvirtualmachinepools", "scale", "vm"),
    ("create", "", "events", "", "vm"),  # only events.k8s.io/v1 Events are recorded
]


def can(  # noqa: PLR0917 (mirrors the review's attribute tuple)
    client: Client, verb: str, group: str, resource: str, sub: str, namespace: str | None
) -> bool:
    review = SelfSubjectAccessReview(
        spec=SelfSubjectAccessReviewSpec(
            resourceAttributes=ResourceAttributes(
                verb=verb, group=group, resource=resource, subresource=sub or None, namespace=namespace
            )
        )
    )
    return bool(client.create(review).status.allowed)


def install(admin: Client, objects: list[dict[str, Any]]) -> None:
    for obj in objects:
        apply_strict(admin, obj)


def remove(admin: Client, objects: list[dict[str, Any]]) -> None:
    for obj in objects:
        res = as_resource(obj)
        try:
            admin.delete(type(res), obj["metadata"]["name"], namespace=obj["metadata"].get("namespace"))
        except ApiError as error:
            if error.status.code != 404:
                raise


def retarget(objects: list[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    """Place the chart's namespaced objects (and binding subjects) into the test's namespace."""
    out = copy.deepcopy(objects)
    for obj in out:
        meta = obj["metadata"]
        # deploy/'s RoleBinding is for its example VM namespace (vms); a rendered flavour's are already right.
        if "namespace" in meta and (obj["kind"] != "RoleBinding" or meta["namespace"] == "vms"):
            meta["namespace"] = namespace
        for subject in obj.get("subjects", []):
            subject["namespace"] = namespace
    return out


@pytest.fixture
def short_namespace(kube_client: Client) -> Iterator[str]:
    """A namespace with a short name: the ServiceAccount user name goes into a cert CN (<= 64 B)."""
    name = f"rbac-{secrets.token_hex(3)}"
    labels = {"uds-vm-operator.dev/test": "true", "pod-security.kubernetes.io/enforce": "restricted"}
    kube_client.create(Namespace(metadata=ObjectMeta(name=name, labels=labels)))
    try:
        yield name
    finally:
        kube_client.delete(Namespace, name)


@pytest.fixture
def operator_identity(
    control_plane: Any, kube_client: Client, short_namespace: str
) -> Iterator[tuple[Client, str]]:
    restricted_namespace = short_namespace
    # The opt-in cluster flavour (rbac.scope=cluster): what it grants, and that it is still not dangerous.
    objects = retarget(
        deploy_manifests.render_chart(helm_path(), "--set", "rbac.scope=cluster"), restricted_namespace
    )
    objects = [o for o in objects if o["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")]
    install(kube_client, [o for o in objects if o["kind"] != "Deployment"])
    user = f"system:serviceaccount:{restricted_namespace}:{SA}"
    kubeconfig = control_plane.kubeconfig_for(
        user, ("system:serviceaccounts", f"system:serviceaccounts:{restricted_namespace}")
    )
    client = control_plane.client(kubeconfig=kubeconfig)
    try:
        yield client, restricted_namespace
    finally:
        client.close()
        remove(kube_client, [o for o in objects if "namespace" not in o["metadata"]])


def test_deploy_manifests_pass_strict_validation_and_the_restricted_profile(
    kube_client: Client, restricted_namespace: str
) -> None:
    objects = retarget(deploy_manifests.load_deploy_objects(), restricted_namespace)
    try:
        for obj in objects:
            create_strict(kube_client, obj)
        deployment = next(o for o in objects if o["kind"] == "Deployment")
        # PodSecurity admission judges pods, not Deployments: create the Deployment's pod the way its
        # ReplicaSet would, in a namespace that enforces `restricted`.
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "uds-vm-operator-probe", "namespace": restricted_namespace},
            "spec": deployment["spec"]["template"]["spec"],
        }
        create_strict(kube_client, pod)
        weakened = copy.deepcopy(pod)
        weakened["metadata"]["name"] = "weakened"
        weakened["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
        with pytest.raises(ApiError) as refused:
            create_strict(kube_client, weakened)
        assert refused.value.status.code == 403 and "restricted" in (refused.value.status.message or "")
    finally:
        remove(kube_client, [o for o in objects if "namespace" not in o["metadata"]])


def test_cluster_flavour_allows_what_the_operator_needs_and_nothing_dangerous(
    operator_identity: tuple[Client, str], kube_client: Client
) -> None:
    client, namespace = operator_identity
    other = "default"
    for verb, group, resource, sub in MUST_ALLOW:
        for ns in (namespace, other):
            assert can(client, verb, group, resource, sub, ns), (
                f"must allow {verb} {group}/{resource}/{sub} in {ns}"
            )
    for verb, group, resource, sub in MUST_ALLOW_CLUSTER:
        assert can(client, verb, group, resource, sub, None), f"must allow {verb} {group}/{resource}"
    for verb, group, resource, sub, ns in MUST_DENY:
        target = namespace if ns == "vm" else ns
        assert not can(client, verb, group, resource, sub, target), (
            f"must deny {verb} {group}/{resource}/{sub}"
        )


def test_namespaced_flavour_cannot_read_secrets_outside_its_namespaces(
    control_plane: Any, kube_client: Client, short_namespace: str
) -> None:
    restricted_namespace = short_namespace
    objects = deploy_manifests.render_chart(
        helm_path(), "--set", "rbac.scope=namespaced", "--set", f"watchNamespaces={{{restricted_namespace}}}"
    )
    objects = retarget(objects, restricted_namespace)
    install(kube_client, [o for o in objects if o["kind"] != "Deployment"])
    user = f"system:serviceaccount:{restricted_namespace}:{SA}"
    kubeconfig = control_plane.kubeconfig_for(user, ("system:serviceaccounts",))
    client = control_plane.client(kubeconfig=kubeconfig)
    try:
        assert can(client, "get", "", "secrets", "", restricted_namespace)
        assert can(client, "create", "kubevirt.io", "virtualmachines", "", restricted_namespace)
        assert not can(client, "get", "", "secrets", "", "kube-system")
        assert not can(client, "list", "", "secrets", "", None)
        assert not can(client, "create", "kubevirt.io", "virtualmachines", "", "default")
        assert can(client, "list", "", "nodes", "", None)  # the KVM guard still works
        assert not can(client, "patch", "", "nodes", "", None)
        # Not just reviews: the real request is refused.
        with pytest.raises(ApiError) as refused:
            list(client.list(Secret, namespace="kube-system"))
        assert refused.value.status.code == 403
    finally:
        client.close()
        remove(kube_client, [o for o in objects if "namespace" not in o["metadata"]])


def test_default_chart_rbac_by_impersonation_no_kube_system_secret_no_pod_outside_managed_namespaces(
    control_plane: Any, kube_client: Client, short_namespace: str
) -> None:
    """Issue 32 item 2, on the real control plane: the committed deploy/ (the chart's default, namespaced
    flavour) installed; the admin sends real requests as the operator's service account with
    ``Impersonate-User``/``Impersonate-Group`` (what ``kubectl auth can-i --as`` and ``kubectl --as`` do)."""
    managed = short_namespace
    objects = [
        o for o in retarget(deploy_manifests.load_deploy_objects(), managed) if o["kind"] in RBAC_KINDS
    ]
    assert {o["metadata"]["namespace"] for o in objects if o["kind"] == "RoleBinding"} == {managed}
    other = f"rbac-other-{secrets.token_hex(3)}"
    kube_client.create(Namespace(metadata=ObjectMeta(name=other)))
    install(kube_client, objects)
    api = Api(Path(control_plane.kubeconfig))
    user = f"system:serviceaccount:{managed}:{SA}"
    as_operator = {"Impersonate-User": user, "Impersonate-Group": "system:serviceaccounts"}
    try:
        kube_client.create(
            Secret(metadata=ObjectMeta(name="canary", namespace="kube-system"), stringData={"k": "v"})
        )

        def request(method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
            return api.call(
                method,
                path,
                body,
                params={"dryRun": "All"} if method == "POST" else None,
                expect=range(200, 600),
                headers=as_operator,
            )

        def pod(namespace: str) -> dict[str, Any]:
            return {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "probe", "namespace": namespace},
                "spec": {
                    # restricted-profile clean, so PodSecurity admission never is the reason for an answer
                    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [
                        {
                            "name": "c",
                            "image": "registry.invalid/x:1",
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]},
                            },
                        }
                    ],
                },
            }

        code, body = request("GET", "/api/v1/namespaces/kube-system/secrets/canary")
        assert code == 403 and user in body["message"], body
        code, body = request("GET", "/api/v1/secrets")
        assert code == 403, "no Secret list anywhere but the managed namespaces"
        code, body = request("GET", f"/api/v1/namespaces/{other}/secrets")
        assert code == 403, body
        code, body = request("POST", f"/api/v1/namespaces/{other}/pods", pod(other))
        assert code == 403 and "pods" in body["message"], body
        code, body = request("POST", "/api/v1/namespaces/kube-system/pods", pod("kube-system"))
        assert code == 403, body
        # The control: in its managed namespace the same identity may do both (so the 403s are about scope).
        code, body = request("GET", f"/api/v1/namespaces/{managed}/secrets")
        assert code == 200, body
        code, body = request("POST", f"/api/v1/namespaces/{managed}/pods", pod(managed))
        assert code == 201, body
        # And the SubjectAccessReview the admin would run (`kubectl auth can-i --as`): same answers.
        for namespace, verb, resource, allowed in (
            ("kube-system", "get", "secrets", False),
            (other, "create", "pods", False),
            (managed, "create", "pods", True),
        ):
            review = {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": user,
                    "groups": ["system:serviceaccounts", f"system:serviceaccounts:{managed}"],
                    "resourceAttributes": {"verb": verb, "resource": resource, "namespace": namespace},
                },
            }
            _, answer = api.call("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
            assert answer["status"]["allowed"] is allowed, (namespace, verb, resource, answer["status"])
    finally:
        api.close()
        kube_client.delete(Secret, "canary", namespace="kube-system")
        kube_client.delete(Namespace, other)
        remove(kube_client, [o for o in objects if "namespace" not in o["metadata"]])
