"""Desired-versus-observed: a write happens only when the live object lacks something we set."""

from __future__ import annotations

import base64
import copy
from typing import Any

from uds_vm_operator.controller.compare import (
    APPLIED_HASH_ANNOTATION,
    is_subset,
    manifest_hash,
    needs_apply,
    with_applied_hash,
)

OWNER_REF = {
    "apiVersion": "uds.dev/v1alpha1",
    "kind": "UDSVirtualMachine",
    "name": "vm1",
    "uid": "u1",
    "controller": True,
    "blockOwnerDeletion": True,
}


def desired_policy() -> dict[str, Any]:
    return with_applied_hash(
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {
                "name": "vm1-netpol",
                "namespace": "ns",
                "labels": {"uds.dev/vm": "vm1"},
                "ownerReferences": [OWNER_REF],
            },
            "spec": {
                "podSelector": {"matchLabels": {"uds.dev/vm": "vm1"}},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [],
                "egress": [{"ports": [{"port": 53, "protocol": "UDP"}]}],
            },
        }
    )


def as_stored(manifest: dict[str, Any]) -> dict[str, Any]:
    """What the API server returns: our fields plus server-side ones."""
    stored = copy.deepcopy(manifest)
    stored["metadata"].update(
        {
            "uid": "x",
            "resourceVersion": "42",
            "generation": 1,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [{"manager": "m"}],
        }
    )
    stored["spec"].pop("ingress")  # the server omits empty lists
    stored["status"] = {}
    return stored


def test_unchanged_object_needs_no_write() -> None:
    desired = desired_policy()
    assert not needs_apply(desired, as_stored(desired))


def test_missing_object_needs_a_write() -> None:
    assert needs_apply(desired_policy(), None)


def test_a_field_changed_by_someone_else_needs_a_write() -> None:
    desired = desired_policy()
    stored = as_stored(desired)
    stored["spec"]["egress"][0]["ports"][0]["port"] = 5353
    assert needs_apply(desired, stored)


def test_fields_added_by_others_are_not_ours_to_judge() -> None:
    desired = desired_policy()
    stored = as_stored(desired)
    stored["metadata"]["labels"]["team"] = "blue"
    stored["metadata"]["annotations"]["other"] = "x"
    assert not needs_apply(desired, stored)


def test_adoption_needs_a_write_for_the_owner_reference() -> None:
    desired = desired_policy()
    stored = as_stored(desired)
    stored["metadata"]["ownerReferences"] = []
    assert needs_apply(desired, stored)
    stored["metadata"]["ownerReferences"] = [{"kind": "Other", "uid": "z"}, OWNER_REF]
    assert not needs_apply(desired, stored)


def test_a_removed_field_is_caught_by_the_hash() -> None:
    old = desired_policy()
    stored = as_stored(old)
    smaller = copy.deepcopy(old)
    del smaller["metadata"]["labels"]["uds.dev/vm"]
    smaller["metadata"]["annotations"].pop(APPLIED_HASH_ANNOTATION)
    new = with_applied_hash(smaller)
    assert (
        new["metadata"]["annotations"][APPLIED_HASH_ANNOTATION]
        != old["metadata"]["annotations"][APPLIED_HASH_ANNOTATION]
    )
    assert needs_apply(new, stored)


def test_hash_ignores_key_order() -> None:
    assert manifest_hash({"a": 1, "b": {"c": 2, "d": 3}}) == manifest_hash({"b": {"d": 3, "c": 2}, "a": 1})


def test_quantities_compare_by_value() -> None:
    assert is_subset({"storage": "1024Mi"}, {"storage": "1Gi"})
    assert not is_subset({"storage": "1025Mi"}, {"storage": "1Gi"})
    assert not is_subset({"runStrategy": "Halted"}, {"runStrategy": "Always"})


def test_secret_string_data_compares_with_stored_data() -> None:
    desired = with_applied_hash(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "s", "namespace": "ns"},
            "stringData": {"userdata": "#cloud"},
        }
    )
    stored = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": dict(desired["metadata"]),
        "data": {"userdata": base64.b64encode(b"#cloud").decode()},
    }
    assert not needs_apply(desired, stored)
    stored["data"]["userdata"] = base64.b64encode(b"#evil").decode()
    assert needs_apply(desired, stored)


def test_scalar_lists_must_match_exactly_and_booleans_are_not_numbers() -> None:
    assert not is_subset(
        {"accessModes": ["ReadWriteOnce"]}, {"accessModes": ["ReadWriteOnce", "ReadWriteMany"]}
    )
    assert not is_subset({"ready": True}, {"ready": 1})
    assert is_subset({"x": None, "y": {}, "z": []}, {})


def test_a_rule_another_writer_added_to_our_network_policy_is_drift() -> None:
    desired = {"kind": "NetworkPolicy", "spec": {"podSelector": {}, "ingress": [], "egress": [{"to": []}]}}
    served = {"kind": "NetworkPolicy", "spec": {"podSelector": {}, "egress": [{"to": []}]}}
    assert not needs_apply(desired, served), "the server omits empty lists: that is not drift"
    widened = {"kind": "NetworkPolicy", "spec": {"podSelector": {}, "ingress": [{}], "egress": [{"to": []}]}}
    assert needs_apply(desired, widened)
    extra_egress = {"kind": "NetworkPolicy", "spec": {"podSelector": {}, "egress": [{"to": []}, {}]}}
    assert needs_apply(desired, extra_egress)
