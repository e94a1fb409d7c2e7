"""deploy/ and chart/: least privilege, restricted pod security, and one source of truth (helm template)."""

from __future__ import annotations

import json
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from release import deploy_manifests
from uds_vm_operator.controller.verification_io import VERIFIER_RESOURCES_ENV, verifier_resources_from_env

ROOT = Path(__file__).resolve().parents[2]

# (apiGroup, resource) -> verbs the operator needs (issue 7), asserted exactly: new grants are deliberate.
REQUIRED = {
    # patch: only the release finalizer of a deleting pool member (the own-writes admission policy holds it)
    ("uds.dev", "udsvirtualmachines"): {"get", "list", "watch", "create", "patch", "delete"},
    ("uds.dev", "udsvirtualmachines/status"): {"patch"},
    ("uds.dev", "udsvirtualmachinepools"): {"get", "list", "watch"},
    ("uds.dev", "udsvirtualmachinepools/status"): {"patch"},
    ("uds.dev", "udsvirtualmachinebackups"): {"get", "list", "watch", "create", "delete"},
    ("uds.dev", "udsvirtualmachinebackups/status"): {"patch"},
    ("apps", "controllerrevisions"): {"get", "list", "create", "delete"},
    ("uds.dev", "packages"): {"list", "create", "patch", "delete"},
    ("cdi.kubevirt.io", "datavolumes"): {"get", "list", "watch", "create", "patch", "delete"},
    ("cdi.kubevirt.io", "datasources"): {"get", "create", "patch"},
    ("cdi.kubevirt.io", "datavolumes/source"): {"create"},
    ("cdi.kubevirt.io", "cdiconfigs"): {"get"},
    ("kubevirt.io", "virtualmachines"): {"get", "list", "watch", "create", "patch", "delete"},
    ("kubevirt.io", "virtualmachineinstances"): {"get", "list", "watch"},
    ("subresources.kubevirt.io", "virtualmachineinstances/userlist"): {"get"},
    ("subresources.kubevirt.io", "virtualmachineinstances/freeze"): {"update"},
    ("subresources.kubevirt.io", "virtualmachineinstances/unfreeze"): {"update"},
    ("kubevirt.io", "kubevirts"): {"list"},
    ("", "secrets"): {"get", "list", "watch", "create", "patch", "delete"},
    ("", "persistentvolumeclaims"): {"get", "list", "watch", "create", "patch", "delete"},
    ("", "configmaps"): {"get"},
    ("", "services"): {"get", "list", "create", "patch", "delete"},
    ("", "pods"): {"get", "list", "watch", "create", "patch", "delete"},
    ("events.k8s.io", "events"): {"create"},
    ("", "nodes"): {"list"},
    ("networking.k8s.io", "networkpolicies"): {"get", "list", "watch", "create", "patch", "delete"},
    ("gateway.networking.k8s.io", "httproutes"): {"get", "list", "create", "patch", "delete"},
    ("apiextensions.k8s.io", "customresourcedefinitions"): {"get"},
    ("kopf.dev", "clusterkopfpeerings"): {"get", "list", "watch", "patch"},
    ("kopf.dev", "kopfpeerings"): {"get", "list", "watch", "patch"},
    ("authorization.k8s.io", "subjectaccessreviews"): {"create"},
}


@cache
def helm() -> str:
    result = subprocess.run([str(ROOT / "tools/helm/build.sh")], capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"helm could not be built (needs Go >= 1.26.8): {result.stderr}"
    return result.stdout.strip()


def deploy_objects() -> list[dict[str, Any]]:
    return deploy_manifests.load_deploy_objects()


def grants(objects: list[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    table: dict[tuple[str, str], set[str]] = {}
    for role in (o for o in objects if o["kind"] in ("ClusterRole", "Role")):
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    table.setdefault((group, resource), set()).update(rule["verbs"])
    return table


def test_chart_passes_helm_lint_in_both_rbac_flavours() -> None:
    for extra in (list(deploy_manifests.DEPLOY_VALUES), ["--set", "rbac.scope=cluster"]):
        result = subprocess.run(
            [helm(), "lint", "--strict", str(ROOT / "chart"), *deploy_manifests.EXAMPLE_IMAGE, *extra],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr


def test_chart_renders_exactly_the_objects_in_deploy() -> None:
    rendered = {
        deploy_manifests.object_key(o): o
        for o in deploy_manifests.render_chart(helm(), *deploy_manifests.DEPLOY_VALUES)
    }
    committed = {deploy_manifests.object_key(o): o for o in deploy_objects()}
    assert rendered.keys() == committed.keys()
    for key, obj in rendered.items():
        assert committed[key] == obj, f"{key} differs; run python -m release.deploy_manifests"


def test_rbac_grants_exactly_what_the_operator_needs_without_wildcards() -> None:
    objects = deploy_objects()
    for role in (o for o in objects if o["kind"] == "ClusterRole"):
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], f"{role['metadata']['name']}: wildcard in {field}"
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])
    assert grants(objects) == REQUIRED


def test_namespaced_flavour_binds_workload_rights_per_namespace_only() -> None:
    objects = deploy_manifests.render_chart(
        helm(), "--set", "rbac.scope=namespaced", "--set", "watchNamespaces={vms,lab}"
    )
    bindings = [o for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    cluster_wide = {b["roleRef"]["name"] for b in bindings if b["kind"] == "ClusterRoleBinding"}
    assert cluster_wide == {"uds-vm-operator-cluster"}
    assert sorted(b["metadata"]["namespace"] for b in bindings if b["kind"] == "RoleBinding") == [
        "lab",
        "vms",
    ]
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["args"] == [
        "run",
        "--namespace=vms",
        "--namespace=lab",
        "--bind-address=0.0.0.0",
    ]


def test_namespaced_flavour_without_namespaces_is_refused_with_a_hint() -> None:
    result = subprocess.run(
        [helm(), "template", "x", str(ROOT / "chart")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0 and "watchNamespaces" in result.stderr


def template_error(*values: str) -> str:
    """stderr of a `helm template` the chart must refuse (asserts it is refused)."""
    result = subprocess.run(
        [helm(), "template", "x", str(ROOT / "chart"), "--set", "watchNamespaces={vms}", *values],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0, result.stdout[:400]
    return result.stderr


DIGEST = "sha256:" + "0123456789abcdef" * 4


def test_the_image_is_pinned_by_digest_unless_explicitly_unpinned() -> None:
    assert "image.digest is required" in template_error()
    assert "64 hex digits" in template_error("--set", "image.digest=sha256:abc")
    assert "64 hex digits" in template_error("--set", "image.digest=" + DIGEST.upper())
    pinned = deploy_manifests.render_chart(
        helm(), *deploy_manifests.DEPLOY_VALUES, "--set", f"image.digest={DIGEST}"
    )
    deployment = next(o for o in pinned if o["kind"] == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    reference = f"ghcr.io/uds-vm-operator/uds-vm-operator:0.1.0@{DIGEST}"
    assert container["image"] == reference
    # The verifier pods (SI-7) run the same pinned bytes.
    assert {"name": "UDS_VM_OPERATOR_IMAGE", "value": reference} in container["env"]


def test_deployment_meets_the_restricted_pod_security_profile() -> None:
    deployment = next(o for o in deploy_objects() if o["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8080, "health": 8081}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert {"requests", "limits"} <= container["resources"].keys()
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env["UDS_VM_OPERATOR_IMAGE"] == container["image"], "verifier pods run the operator's own image"


def test_the_verifier_resources_value_reaches_the_operator_as_the_json_it_reads() -> None:
    def operator_env(*extra: str) -> dict[str, str | None]:
        objects = deploy_manifests.render_chart(helm(), *deploy_manifests.DEPLOY_VALUES, *extra)
        (container,) = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"][
            "containers"
        ]
        return {item["name"]: item.get("value") for item in container["env"]}

    assert VERIFIER_RESOURCES_ENV not in operator_env(), "unset: the operator's defaults, no variable"
    env = operator_env(
        "--set", "verifier.resources.requests.cpu=10m", "--set", "verifier.resources.limits.memory=512Mi"
    )
    resources = verifier_resources_from_env({VERIFIER_RESOURCES_ENV: str(env[VERIFIER_RESOURCES_ENV])})
    assert resources["requests"]["cpu"] == "10m" and resources["limits"]["memory"] == "512Mi"
    assert resources["requests"]["memory"] == "64Mi", "what the site did not name keeps its default"


def test_dashboard_configmap_carries_the_dashboard_for_sidecar_import() -> None:
    configmap = next(o for o in deploy_objects() if o["kind"] == "ConfigMap")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    source = json.loads((ROOT / "dashboards/uds-vm-overview.json").read_text())
    assert json.loads(configmap["data"]["uds-vm-overview.json"]) == source
    assert json.loads((ROOT / "chart/dashboards/uds-vm-overview.json").read_text()) == source


@pytest.mark.parametrize("path", sorted((ROOT / "deploy").glob("*.yaml")), ids=lambda p: p.name)
def test_every_deploy_file_is_valid_yaml_with_kind_and_name(path: Path) -> None:
    for doc in yaml.safe_load_all(path.read_text()):
        assert doc["kind"] and doc["metadata"]["name"]


def test_guest_servicemonitor_only_where_the_prometheus_operator_is_and_it_selects_metrics_services() -> None:
    from uds_vm_operator.api import parse_vm_spec  # noqa: PLC0415
    from uds_vm_operator.render import ClusterFacts, Owner, render_children  # noqa: PLC0415

    def monitors(*extra: str) -> list[dict[str, Any]]:
        objects = deploy_manifests.render_chart(helm(), *deploy_manifests.DEPLOY_VALUES, *extra)
        return [o for o in objects if o["kind"] == "ServiceMonitor"]

    assert monitors() == []  # no Prometheus Operator CRDs: nothing a plain cluster would refuse
    capability = ("--api-versions", "monitoring.coreos.com/v1/ServiceMonitor")
    (monitor,) = monitors(*capability)
    assert monitors(*capability, "--set", "guestMonitoring.serviceMonitor=false") == []
    assert monitor["metadata"]["namespace"] == "monitoring"
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    selector = monitor["spec"]["selector"]["matchLabels"]
    (endpoint,) = monitor["spec"]["endpoints"]
    # The Service a monitored VM gets is what the ServiceMonitor selects, on the port it names.
    spec = parse_vm_spec(
        {
            "source": {"http": {"url": "https://x.example/a.img"}},
            "disk": {"virtualSize": 1 << 30},
            "monitoring": {"enabled": True},
        }
    )
    children = render_children(Owner("web", "apps", "uid"), spec, ClusterFacts())
    (service,) = [c for c in children if c["kind"] == "Service" and c["metadata"]["name"] == "web-metrics"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert [p["name"] for p in service["spec"]["ports"]] == [endpoint["port"]]
    assert service["spec"]["ports"][0]["port"] == 9100
    assert service["spec"]["clusterIP"] == "None", "headless: no Service address per monitored VM"
    unmonitored = render_children(
        Owner("web", "apps", "uid"),
        spec.model_copy(update={"monitoring": spec.monitoring.model_copy(update={"enabled": False})}),
        ClusterFacts(),
    )
    assert not [c for c in unmonitored if c["metadata"]["name"] == "web-metrics"]
