"""A compliant VM and its children, rendered by the operator's own renderers, for the compliance tests.

Shared by the unit tests (pure evaluator) and the integration test (the same objects on a real API server),
so both judge exactly what the operator would create.
"""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import yaml

from uds_vm_operator.api.models import parse_vm_spec
from uds_vm_operator.render.cloudinit import dump_yaml, render_cloudinit_secret
from uds_vm_operator.render.common import ClusterFacts, Owner
from uds_vm_operator.render.datadisks import render_data_disks
from uds_vm_operator.render.networkpolicy import render_network_policy
from uds_vm_operator.render.virtualmachine import render_virtual_machine

DIGEST = "sha256:" + "ab" * 32
SPEC: dict[str, Any] = {
    "source": {"upload": {"checksum": DIGEST}},
    "disk": {"virtualSize": "10Mi"},
    "firmware": {"type": "efi-secureboot"},
    "cloudInit": {
        "sshAuthorizedKeys": [
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl op@site"
        ],
        "autoUpdate": {},
    },
    "dataDisks": [{"name": "data", "size": "1Gi", "retentionPolicy": "Retain"}],
}
STATUS: dict[str, Any] = {
    "phase": "Ready",
    "checksumVerified": True,
    "verifiedBy": "in-cluster-verifier",
    "verifiedDigest": DIGEST,
}
OPERATOR_CLUSTERROLES = ("uds-vm-operator", "uds-vm-operator-cluster")


def udsvm(name: str, namespace: str, uid: str = "00000000-0000-4000-8000-000000000001") -> dict[str, Any]:
    """The UDSVirtualMachine as the API server returns it (with status)."""
    return {
        "apiVersion": "uds.dev/v1alpha1",
        "kind": "UDSVirtualMachine",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "spec": copy.deepcopy(SPEC),
        "status": copy.deepcopy(STATUS),
    }


def children(
    name: str, namespace: str, uid: str = "00000000-0000-4000-8000-000000000001"
) -> list[dict[str, Any]]:
    """The child objects the operator renders for the compliant VM."""
    owner = Owner(name, namespace, uid)
    spec = parse_vm_spec(SPEC)
    return [
        render_network_policy(owner, spec),
        render_cloudinit_secret(owner, spec),
        render_virtual_machine(owner, spec, ClusterFacts(cdi_http_checksum=True)),
        *render_data_disks(owner, spec),
    ]


def chart_clusterroles() -> list[dict[str, Any]]:
    """The operator's ClusterRoles and ClusterRoleBindings exactly as deploy/rbac.yaml declares them."""
    text = (Path(__file__).resolve().parents[2] / "deploy" / "rbac.yaml").read_text()
    kinds = ("ClusterRole", "ClusterRoleBinding")
    return [doc for doc in yaml.safe_load_all(text) if doc and doc["kind"] in kinds]


PLURALS = {
    "UDSVirtualMachine": "udsvirtualmachines",
    "NetworkPolicy": "networkpolicies",
    "Secret": "secrets",
    "VirtualMachine": "virtualmachines",
    "PersistentVolumeClaim": "persistentvolumeclaims",
    "DataVolume": "datavolumes",
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
}


def api_key(obj: dict[str, Any]) -> tuple[str, str, str]:
    """(group, version, plural) of a manifest, as the evaluator's snapshot is keyed."""
    group, _, version = obj["apiVersion"].rpartition("/")
    return (group, version, PLURALS[obj["kind"]])


def snapshot_of(objects: list[dict[str, Any]]) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    """Group manifests into the evaluator's snapshot form."""
    snapshot: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for obj in objects:
        snapshot.setdefault(api_key(obj), []).append(obj)
    return snapshot


def find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    """The object of that kind and name (fails loudly when the fixture changed)."""
    matches = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind} {name}, found {len(matches)}"
    return matches[0]


def edit_userdata(secret: dict[str, Any], change: Any) -> None:
    """Decode the cloud-config in a <vm>-cloudinit Secret, let ``change`` edit it, encode it back."""
    text = base64.b64decode(secret["data"]["userdata"]).decode()
    document = yaml.safe_load(text)
    change(document)
    # The renderer's dumper: yaml.safe_dump folds long commands over lines, which rego-cpp's YAML misreads.
    new_text = "#cloud-config\n" + dump_yaml(document)
    secret["data"]["userdata"] = base64.b64encode(new_text.encode()).decode()


def _widen_ingress(objs: list[dict[str, Any]], vm: str) -> None:
    find(objs, "NetworkPolicy", f"{vm}-netpol")["spec"]["ingress"] = [{}]


def _open_egress(objs: list[dict[str, Any]], vm: str) -> None:
    rules = find(objs, "NetworkPolicy", f"{vm}-netpol")["spec"]["egress"]
    rules.append({"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]})


def _password_ssh(objs: list[dict[str, Any]], vm: str) -> None:
    edit_userdata(find(objs, "Secret", f"{vm}-cloudinit"), lambda d: d.update(ssh_pwauth=True))


def _root_allowed(objs: list[dict[str, Any]], vm: str) -> None:
    edit_userdata(find(objs, "Secret", f"{vm}-cloudinit"), lambda d: d.update(disable_root=False))


def _no_fips(objs: list[dict[str, Any]], vm: str) -> None:
    edit_userdata(find(objs, "Secret", f"{vm}-cloudinit"), lambda d: d.pop("ubuntu_pro"))


def _no_updates(objs: list[dict[str, Any]], vm: str) -> None:
    def drop(document: dict[str, Any]) -> None:
        document["packages"] = [p for p in document["packages"] if p != "unattended-upgrades"]

    edit_userdata(find(objs, "Secret", f"{vm}-cloudinit"), drop)


def _digest_removed(objs: list[dict[str, Any]], vm: str) -> None:
    find(objs, "UDSVirtualMachine", vm)["spec"]["source"]["upload"].pop("checksum")


def _not_verified(objs: list[dict[str, Any]], vm: str) -> None:
    find(objs, "UDSVirtualMachine", vm)["status"]["checksumVerified"] = False


def _graphics(objs: list[dict[str, Any]], vm: str) -> None:
    domain = find(objs, "VirtualMachine", vm)["spec"]["template"]["spec"]["domain"]
    domain["devices"]["autoattachGraphicsDevice"] = True


def _no_secure_boot(objs: list[dict[str, Any]], vm: str) -> None:
    domain = find(objs, "VirtualMachine", vm)["spec"]["template"]["spec"]["domain"]
    domain["firmware"]["bootloader"]["efi"]["secureBoot"] = False


def _unretained(objs: list[dict[str, Any]], vm: str) -> None:
    find(objs, "PersistentVolumeClaim", f"{vm}-data-data")["metadata"]["labels"].pop("uds.dev/retain")


def _wildcard_rbac(objs: list[dict[str, Any]], vm: str) -> None:
    find(objs, "ClusterRole", "uds-vm-operator")["rules"][0]["verbs"] = ["*"]


def _cluster_wide_secret_list(objs: list[dict[str, Any]], vm: str) -> None:
    # The cluster-bound role gains Secret list/watch: a read of every namespace's Secrets (issue 32).
    find(objs, "ClusterRole", "uds-vm-operator-cluster")["rules"].append(
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["list", "watch"]}
    )


def _cluster_wide_pod_create(objs: list[dict[str, Any]], vm: str) -> None:
    find(objs, "ClusterRole", "uds-vm-operator-cluster")["rules"].append(
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}
    )


TAMPERS = {
    "netpol-admits-all-ingress": ("sc-7", _widen_ingress),
    "netpol-opens-egress": ("sc-7", _open_egress),
    "ssh-password-auth": ("ia-5", _password_ssh),
    "root-login": ("ac-3", _root_allowed),
    "fips-off": ("sc-13", _no_fips),
    "no-guest-updates": ("si-2", _no_updates),
    "digest-removed": ("si-7", _digest_removed),
    "digest-not-verified": ("si-7", _not_verified),
    "graphics-device": ("cm-6", _graphics),
    "secure-boot-off": ("cm-6", _no_secure_boot),
    "data-disk-not-retained": ("cp-9", _unretained),
    "operator-rbac-wildcard": ("ac-6", _wildcard_rbac),
    "operator-reads-secrets-cluster-wide": ("ac-6", _cluster_wide_secret_list),
    "operator-creates-pods-cluster-wide": ("ac-6", _cluster_wide_pod_create),
}
"""Each tamper breaks one piece of evidence; the value names the only control that may flip."""
