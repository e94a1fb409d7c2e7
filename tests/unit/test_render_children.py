"""render_children: apply order, labels and ownership on every child, and determinism (property-based)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from uds_vm_operator import MANAGED_BY_LABEL
from uds_vm_operator.api import SpecError, parse_vm_spec
from uds_vm_operator.controller.pod_selection import policy_selects_vm
from uds_vm_operator.controller.reconciler import member_pod_labels
from uds_vm_operator.render import ClusterFacts, Owner, render_children
from uds_vm_operator.render.admission import virtual_machine_violations

SHA = "sha256:" + "d" * 64
PASSWORD = "Gen3rated!Password-For-Tests"

sources = st.sampled_from(
    [
        {"upload": {"checksum": SHA}},
        {"http": {"url": "https://img.local/x.qcow2", "checksum": SHA}},
        {"s3": {"url": "s3://b/x.img"}},
        {"registry": {"url": "docker://r/disk:1"}},
        {"dataSource": {"name": "golden", "namespace": "images"}},
        {"pvc": {"name": "base"}},
        {"blank": {}},
    ]
)
data_disks = st.lists(
    st.builds(
        lambda name, size, retain, backup: {
            "name": name,
            "size": f"{size}Gi",
            "retentionPolicy": "Retain" if retain else "Delete",
            **({"backup": False, "backupExemptionReason": "scratch"} if not backup else {}),
        },
        st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True),
        st.integers(1, 100),
        st.booleans(),
        st.booleans(),
    ),
    max_size=4,
    unique_by=lambda disk: disk["name"],
)
networks = st.sampled_from(
    [
        {},
        {"egress": "none"},
        {
            "egress": "internet",
            "allow": [{"direction": "Ingress", "cidr": "10.0.0.0/8", "ports": [{"port": 22}]}],
        },
        {"egress": "vpn", "vpnGateway": {"podSelector": {"matchLabels": {"app": "wg"}}}},
        {
            "expose": [
                {
                    "port": 443,
                    "http": {"hostname": "a.example.com", "gateway": {"name": "gw", "namespace": "gw"}},
                }
            ]
        },
        {"mode": "uds-package", "expose": [{"port": 22}]},
    ]
)


@st.composite
def vm_specs(draw: st.DrawFn) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "source": draw(sources),
        "disk": {"virtualSize": f"{draw(st.integers(1, 2048))}Mi"},
        "dataDisks": draw(data_disks),
        "network": draw(networks),
        "runStrategy": draw(st.sampled_from(["Always", "Halted", "Manual", "RerunOnFailure", "Once"])),
    }
    if draw(st.booleans()):
        raw["os"] = "windows"
        raw["windows"] = {"sysprep": {"mode": draw(st.sampled_from(["auto", "iso", "clone"]))}}
    else:
        raw["cloudInit"] = {"flavor": draw(st.sampled_from(["ubuntu", "rhel"])), "fips": draw(st.booleans())}
    if draw(st.booleans()):
        raw["firmware"] = {
            "type": draw(st.sampled_from(["bios", "efi", "efi-secureboot"])),
            "tpm": draw(st.booleans()),
        }
    return raw


OWNER = Owner("vm-under-test", "apps", "11111111-2222-3333-4444-555555555555")


def render(raw: dict[str, Any], facts: ClusterFacts | None = None) -> list[dict[str, Any]]:
    return render_children(
        OWNER, parse_vm_spec(raw), facts or ClusterFacts(), windows_admin_password=PASSWORD
    )


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(raw=vm_specs(), facts=st.builds(ClusterFacts, st.booleans(), st.booleans()))
def test_children_are_deterministic_labelled_and_owned(raw: dict[str, Any], facts: ClusterFacts) -> None:
    first = render(copy.deepcopy(raw), facts)
    assert first == render(copy.deepcopy(raw), facts), "same inputs must give the same children"
    names = [(child["kind"], child["metadata"]["name"]) for child in first]
    assert len(names) == len(set(names)), "child names collide"
    for child in first:
        meta = child["metadata"]
        assert child["apiVersion"] and child["kind"]
        assert meta["namespace"] == "apps"
        assert meta["name"].startswith("vm-under-test")
        assert meta["labels"]["uds.dev/vm"] == "vm-under-test"
        assert meta["labels"].items() >= MANAGED_BY_LABEL.items()
        retained = meta["labels"].get("uds.dev/retain") == "true"
        if retained:
            assert "ownerReferences" not in meta
        else:
            assert meta["ownerReferences"] == [OWNER.reference()]
    (vm,) = [child for child in first if child["kind"] == "VirtualMachine"]
    assert virtual_machine_violations(vm) == []
    assert vm["spec"]["runStrategy"] == raw["runStrategy"]


def test_apply_order() -> None:
    raw = {
        "source": {"upload": {"checksum": SHA}},
        "disk": {"virtualSize": "1Gi"},
        "dataDisks": [{"name": "data", "size": "1Gi"}],
        "network": {
            "expose": [
                {
                    "port": 443,
                    "http": {"hostname": "a.example.com", "gateway": {"name": "g", "namespace": "g"}},
                }
            ]
        },
    }
    kinds = [child["kind"] for child in render(raw)]
    assert kinds == [
        "Secret",
        "NetworkPolicy",
        "PersistentVolumeClaim",
        "DataVolume",
        "VirtualMachine",
        "Service",
        "HTTPRoute",
    ]


def test_owner_reference_shape() -> None:
    assert OWNER.reference() == {
        "apiVersion": "uds.dev/v1alpha1",
        "kind": "UDSVirtualMachine",
        "name": "vm-under-test",
        "uid": "11111111-2222-3333-4444-555555555555",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def test_live_migration_refusal_creates_nothing() -> None:
    raw = {"source": {"upload": {}}, "disk": {"virtualSize": "1Gi"}, "liveMigration": True}
    with pytest.raises(SpecError, match=r"spec\.liveMigration: .*ReadWriteMany"):
        render(raw)


def test_run_strategy_override_reaches_the_vm_only() -> None:
    raw = {"source": {"upload": {"checksum": SHA}}, "disk": {"virtualSize": "1Gi"}}
    halted = render_children(OWNER, parse_vm_spec(raw), ClusterFacts(), run_strategy="Halted")
    always = render_children(OWNER, parse_vm_spec(raw), ClusterFacts())
    assert [c for c in halted if c["kind"] != "VirtualMachine"] == [
        c for c in always if c["kind"] != "VirtualMachine"
    ]
    assert next(c for c in halted if c["kind"] == "VirtualMachine")["spec"]["runStrategy"] == "Halted"


def test_invalid_vm_name_is_refused() -> None:
    with pytest.raises(SpecError, match=r"metadata\.name"):
        render_children(
            Owner("9lives", "apps", "u"),
            parse_vm_spec({"source": {"blank": {}}, "disk": {"virtualSize": "1Gi"}}),
            ClusterFacts(),
        )


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(raw=vm_specs(), facts=st.builds(ClusterFacts, st.booleans(), st.booleans()))
def test_the_rendered_policy_selects_the_rendered_vms_launcher_pod(
    raw: dict[str, Any], facts: ClusterFacts
) -> None:
    """The operator reports NetworkIsolated=False for a policy that selects no launcher pod, so what we
    render must always select ours (labels from the VM template plus KubeVirt's own launcher label)."""
    children = render(copy.deepcopy(raw), facts)
    policies = [c for c in children if c["kind"] == "NetworkPolicy"]
    assume(policies)  # network.mode uds-package: the UDS Package, not us, writes the policies
    vm = next(c for c in children if c["kind"] == "VirtualMachine")
    policy = policies[0]
    assert policy_selects_vm(policy, vm)
    assert not policy_selects_vm(policy, {"spec": {"template": {"metadata": {"labels": {}}}}})


def test_a_pool_members_labels_reach_its_launcher_pod_and_ours_win() -> None:
    """A policy elsewhere can select a whole pool (`uds.dev/pool`) or its template's labels; a member's
    labels cannot replace the operator's own (the VM's policy and Services select by them)."""
    metadata = {
        "labels": {
            "uds.dev/pool": "web",
            "uds.dev/pool-revision": "4477b13da4",
            "app": "web",
            "uds.dev/vm": "someone-else",
            "app.kubernetes.io/managed-by": "someone-else",
        }
    }
    owner = Owner("web-0", "apps", OWNER.uid, pod_labels=member_pod_labels(metadata))
    children = render_children(
        owner, parse_vm_spec({"source": {"upload": {}}, "disk": {"virtualSize": "1Gi"}}), ClusterFacts()
    )
    vm = next(c for c in children if c["kind"] == "VirtualMachine")
    labels = vm["spec"]["template"]["metadata"]["labels"]
    assert labels == {
        "uds.dev/pool": "web",
        "uds.dev/pool-revision": "4477b13da4",
        "app": "web",
        "uds.dev/vm": "web-0",
        **MANAGED_BY_LABEL,
    }
    policy = next(c for c in children if c["kind"] == "NetworkPolicy")
    assert policy_selects_vm(policy, vm)


def test_a_standalone_vms_own_labels_stay_off_its_launcher_pod() -> None:
    """Editing a standalone VM's labels must not change its running VM's template (KubeVirt would ask for
    a restart); only pool members, whose labels never change, carry theirs."""
    assert member_pod_labels({"labels": {"app": "web", "team": "a"}}) == ()
    assert member_pod_labels({}) == ()
