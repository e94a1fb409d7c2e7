"""The verifier pod's requests and limits: a site's overrides over the defaults, and what is refused."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.test_render_verifier import OWNER, REQUEST
from uds_vm_operator.api.errors import SpecError
from uds_vm_operator.api.quantity import parse_millicores
from uds_vm_operator.controller.verification_io import VERIFIER_RESOURCES_ENV, verifier_resources_from_env
from uds_vm_operator.render.verifier import VerifierRequest, render_verifier_pod
from uds_vm_operator.render.verifier_resources import DEFAULT_RESOURCES, verifier_resources


@pytest.mark.parametrize(
    ("text", "millicores"),
    [("100m", 100), ("1", 1000), ("0.5", 500), ("2", 2000), ("0.0001", 1), (" 250m ", 250), (3, 3000)],
)
def test_cpu_quantities_are_read_in_millicores_rounding_up(text: str | int, millicores: int) -> None:
    assert parse_millicores(text, field="f") == millicores


@pytest.mark.parametrize("text", ["", "lots", "-1", "1.5.0", "1e3", "10 m", "0", "0m", "1Ki", True])
def test_what_is_not_a_positive_cpu_quantity_is_refused_with_the_field(text: Any) -> None:
    with pytest.raises(SpecError, match=r"^f: "):
        parse_millicores(text, field="f")


def test_unset_means_the_defaults_and_a_pod_rendered_without_any_carries_them() -> None:
    assert verifier_resources_from_env({}) == DEFAULT_RESOURCES
    assert verifier_resources_from_env({VERIFIER_RESOURCES_ENV: "  "}) == DEFAULT_RESOURCES
    pod = render_verifier_pod(OWNER, REQUEST)
    assert pod["spec"]["containers"][0]["resources"] == DEFAULT_RESOURCES


def test_an_override_changes_only_what_it_names_and_reaches_the_pod() -> None:
    env = {VERIFIER_RESOURCES_ENV: json.dumps({"requests": {"cpu": "10m"}, "limits": {"memory": "512Mi"}})}
    resources = verifier_resources_from_env(env)
    assert resources["requests"] == {**DEFAULT_RESOURCES["requests"], "cpu": "10m"}
    assert resources["limits"] == {**DEFAULT_RESOURCES["limits"], "memory": "512Mi"}
    pod = render_verifier_pod(OWNER, VerifierRequest(**{**REQUEST.__dict__, "resources": resources}))
    assert pod["spec"]["containers"][0]["resources"] == resources
    assert DEFAULT_RESOURCES["requests"]["cpu"] == "100m", "the defaults themselves are never changed"


def test_the_pod_gets_its_own_copy_of_the_resources() -> None:
    resources = verifier_resources({"requests": {"cpu": "50m"}})
    pod = render_verifier_pod(OWNER, VerifierRequest(**{**REQUEST.__dict__, "resources": resources}))
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "9"
    assert resources["requests"]["cpu"] == "50m"


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ({"request": {"cpu": "10m"}}, "'request' is not requests or limits"),
        ({"requests": "10m"}, "requests must map cpu, memory or ephemeral-storage"),
        ({"requests": {"gpu": "1"}}, "requests.gpu is not cpu, memory or ephemeral-storage"),
        ({"requests": {"cpu": "lots"}}, "requests.cpu: 'lots' is not a CPU quantity"),
        ({"limits": {"memory": "big"}}, "limits.memory: 'big' is not a size"),
        ({"limits": {"memory": ["1Gi"]}}, "limits.memory: expected a size"),
        ({"requests": {"cpu": "2"}}, "requests.cpu 2 is above its limit 1"),
        (
            {"limits": {"memory": "32Mi"}},
            "64Mi is above its limit 32Mi; Kubernetes refuses such a pod: raise "
            "limits.memory or lower requests.memory",
        ),
    ],
)
def test_what_kubernetes_would_refuse_is_refused_at_start_naming_the_chart_value(
    overrides: dict[str, Any], says: str
) -> None:
    with pytest.raises(SpecError) as refused:
        verifier_resources_from_env({VERIFIER_RESOURCES_ENV: json.dumps(overrides)})
    assert str(refused.value).startswith(
        "chart value verifier.resources (operator env UDS_VM_VERIFIER_RESOURCES)"
    )
    assert says in str(refused.value)


@pytest.mark.parametrize(("raw", "says"), [("{cpu: 1}", "not JSON"), ('["10m"]', "expected an object")])
def test_an_env_value_that_is_not_a_json_object_is_refused(raw: str, says: str) -> None:
    with pytest.raises(SpecError, match=says):
        verifier_resources_from_env({VERIFIER_RESOURCES_ENV: raw})
