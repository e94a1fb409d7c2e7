"""The UDSVirtualMachinePool spec: defaults, and every refusal names the field and the fix."""

from __future__ import annotations

import pytest

from uds_vm_operator.api import SpecError, validate_vm_name
from uds_vm_operator.api.pool import (
    MAX_POOL_NAME_LENGTH,
    UDSVirtualMachinePoolStatus,
    parse_pool_spec,
    validate_pool_name,
)
from uds_vm_operator.fleet import member_name, parameters_of

TEMPLATE = {"spec": {"source": {"dataSource": {"name": "ubuntu", "namespace": "golden"}}}}


def test_defaults_are_surge_first():
    spec = parse_pool_spec({"template": TEMPLATE})
    assert spec.replicas == 1
    assert (spec.strategy.rolling_update.max_surge, spec.strategy.rolling_update.max_unavailable) == (1, 0)
    assert spec.progress_deadline_seconds == 600
    assert spec.rollback_on_failure is False
    p = parameters_of(spec)
    assert (p.replicas, p.max_surge, p.max_unavailable) == (1, 1, 0)


def test_percentages_are_accepted():
    spec = parse_pool_spec(
        {
            "replicas": 8,
            "template": TEMPLATE,
            "strategy": {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "10%"}},
        }
    )
    assert (parameters_of(spec).max_surge, parameters_of(spec).max_unavailable) == (2, 0)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({}, "spec.template: required field is missing"),
        ({"template": TEMPLATE, "replicas": -1}, "spec.replicas"),
        ({"template": TEMPLATE, "replicas": 1001}, "spec.replicas"),
        ({"template": TEMPLATE, "strategy": {"rollingUpdate": {"maxSurge": 0}}}, "cannot both be 0"),
        (
            {"template": TEMPLATE, "strategy": {"rollingUpdate": {"maxSurge": "0%", "maxUnavailable": "0%"}}},
            "cannot both be 0",
        ),
        ({"template": TEMPLATE, "strategy": {"rollingUpdate": {"maxSurge": "lots"}}}, "maxSurge"),
        ({"template": TEMPLATE, "strategy": {"rollingUpdate": {"maxUnavailable": "120%"}}}, "maxUnavailable"),
        ({"template": TEMPLATE, "progressDeadlineSeconds": 0}, "spec.progressDeadlineSeconds"),
        ({"template": {"spec": {"source": {"upload": {}}}}}, "source.dataSource"),
        ({"template": {"spec": {"source": {"blank": {}}}}}, "disk.virtualSize"),
        ({"template": {**TEMPLATE, "metadata": {"name": "x"}}}, "spec.template.metadata.name: unknown field"),
        ({"template": TEMPLATE, "paused": True}, "spec.paused: unknown field"),
    ],
)
def test_invalid_specs_are_refused_with_the_field_named(spec, message):  # type: ignore[no-untyped-def]
    with pytest.raises(SpecError, match=None) as caught:
        parse_pool_spec(spec)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_non_mapping_spec_is_a_spec_error():
    with pytest.raises(SpecError, match="expected a mapping"):
        parse_pool_spec([])  # type: ignore[arg-type]


def test_pool_names_leave_room_for_the_ordinal():
    longest = "p" * MAX_POOL_NAME_LENGTH
    validate_pool_name(longest)
    validate_vm_name(member_name(longest, 9999))
    with pytest.raises(SpecError, match="at most"):
        validate_pool_name(longest + "p")
    with pytest.raises(SpecError, match="start with a letter"):
        validate_pool_name("1pool")


def test_status_model_accepts_what_the_controller_writes():
    status = UDSVirtualMachinePoolStatus.model_validate(
        {
            "replicas": 2,
            "readyReplicas": 1,
            "updatedReplicas": 1,
            "outdatedReplicas": 1,
            "currentRevision": "a",
            "updateRevision": "b",
            "failedRevision": None,
            "labelSelector": "uds.dev/pool=web",
            "observedGeneration": 3,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "RollingUpdate",
                    "message": "m",
                    "lastTransitionTime": "2025-01-01T00:00:00Z",
                    "observedGeneration": 3,
                }
            ],
        }
    )
    assert status.ready_replicas == 1


def test_pool_crd_is_generated_with_scale_columns_and_the_vm_schema():
    from uds_vm_operator.api.crdgen import POOL_CRD, crd_yaml, render_crd  # noqa: PLC0415

    crd = render_crd(POOL_CRD)
    version = crd["spec"]["versions"][0]
    assert crd["metadata"]["name"] == "udsvirtualmachinepools.uds.dev"
    assert crd["spec"]["names"]["shortNames"] == ["udsvmpool"]
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.labelSelector",
    }
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "DESIRED",
        "READY",
        "UPDATED",
        "OUTDATED",
        "REVISION",
        "AGE",
    ]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    template_spec = spec["properties"]["template"]["properties"]["spec"]
    assert "source" in template_spec["properties"] and "dataDisks" in template_spec["properties"]
    surge = spec["properties"]["strategy"]["properties"]["rollingUpdate"]["properties"]["maxSurge"]
    assert surge["x-kubernetes-int-or-string"] is True
    assert "%" in surge["x-kubernetes-validations"][0]["rule"]
    assert crd_yaml(POOL_CRD) == crd_yaml(POOL_CRD)
    assert "propertyNames" not in crd_yaml(POOL_CRD)
