"""``network.mode: uds-package`` on the real API server: the VMs of a namespace share one UDS ``Package``.

The Package CRD installed here is uds-core v1.11.0's schema (tests/integration/crds/uds-package-v1alpha1.yaml,
field names, enums and required sets from the reference), not an open stand-in: with Strict field validation
on every write, the operator's and the test's, a field UDS Core does not have is refused by the API server.
The CRD is removed afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.operator_fixtures import (
    api,
    condition,
    netpol_path,
    operator,
    udsvm,
    vm_path,
    wait_phase,
)
from tests.integration.operator_harness import Api, OperatorProcess
from tests.kube_helpers import wait_for

__all__ = ["api", "operator"]  # fixtures used by name

PACKAGE_CRD = Path(__file__).resolve().parent / "crds" / "uds-package-v1alpha1.yaml"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
GATEWAY = {"name": "tenant", "namespace": "istio-tenant-gateway"}


def packages_path(namespace: str, name: str | None = None) -> str:
    base = f"/apis/uds.dev/v1alpha1/namespaces/{namespace}/packages"
    return f"{base}/{name}" if name else base


@pytest.fixture(scope="module", autouse=True)
def package_crd(control_plane: Any) -> Iterator[None]:
    """Install the real-schema Package CRD for this module only, and remove it afterwards."""
    client = Api(Path(control_plane.kubeconfig))
    manifest = yaml.safe_load(PACKAGE_CRD.read_text())
    client.apply(manifest, f"{CRDS}/packages.uds.dev")

    def established() -> bool:
        crd = client.get(f"{CRDS}/packages.uds.dev") or {}
        conditions = (crd.get("status") or {}).get("conditions") or []
        served = any(c["type"] == "Established" and c["status"] == "True" for c in conditions)
        # A fresh resource answers 429 "storage is (re)initializing" until its watch cache is ready.
        listed = client.call("GET", "/apis/uds.dev/v1alpha1/packages", expect=(200, 404, 429))[0]
        return served and listed == 200

    wait_for(established, 30, 0.2, what="the Package CRD established")
    try:
        yield
    finally:
        client.delete(f"{CRDS}/packages.uds.dev")
        client.close()


def tags(package: dict[str, Any]) -> list[str]:
    """Descriptions of every rule in the sections the operator manages, in order."""
    spec = package.get("spec") or {}
    network = spec.get("network") or {}
    entries = [*(network.get("allow") or []), *(network.get("expose") or []), *(spec.get("monitor") or [])]
    return [str(e.get("description")) for e in entries]


def owners(package: dict[str, Any]) -> set[str]:
    return {t.split(":")[1] for t in tags(package) if t.startswith("uds-vm:")}


def only_package(api: Api, namespace: str) -> dict[str, Any]:
    items = api.items(packages_path(namespace))
    assert len(items) == 1, [i["metadata"]["name"] for i in items]
    return items[0]


def wait_owners(api: Api, operator: OperatorProcess, namespace: str, want: set[str]) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        items = api.items(packages_path(namespace))
        return items[0] if len(items) == 1 and owners(items[0]) == want else None

    try:
        return wait_for(reached, 60, 0.3, what=f"Package rules of {sorted(want)}")
    except AssertionError as error:
        raise AssertionError(f"{error}\n{api.items(packages_path(namespace))}\n{operator.logs()}") from None


def package_vm(name: str, namespace: str, **network: Any) -> dict[str, Any]:
    return udsvm(name, namespace, network={"mode": "uds-package", **network})


def test_two_vms_make_one_package_with_the_union_and_deleting_one_removes_only_its_rules(
    api: Api, operator: OperatorProcess, namespace: str
) -> None:
    web = package_vm(
        "web",
        namespace,
        egress="internet",
        expose=[
            {"port": 443, "http": {"hostname": "wiki.uds.dev", "gateway": GATEWAY}},
            {"port": 9100, "name": "metrics"},
        ],
    )
    db = package_vm(
        "db",
        namespace,
        allow=[
            {
                "direction": "Ingress",
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "reporting"}},
                "ports": [{"port": 5432}],
            }
        ],
    )
    api.apply(web, vm_path(namespace, "web"))
    api.apply(db, vm_path(namespace, "db"))
    package = wait_owners(api, operator, namespace, {"web", "db"})
    for name in ("web", "db"):
        status = wait_phase(api, operator, namespace, name, "Pending")
        synced = condition(status, "UDSPackageSynced")
        assert synced["status"] == "True" and f"{namespace}/uds-vms" in synced["message"]
        assert condition(status, "NetworkIsolated")["status"] == "True"
        assert api.get(netpol_path(namespace, f"{name}-netpol")) is None  # the Package replaces it

    assert package["metadata"]["name"] == "uds-vms"
    assert package["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "uds-vm-operator"
    assert not package["metadata"].get("ownerReferences")  # shared: no single VM owns it
    spec = package["spec"]
    allow = {a["description"]: a for a in spec["network"]["allow"]}
    assert allow["uds-vm:web:egress-internet"]["remoteGenerated"] == "Anywhere"
    assert allow["uds-vm:web:egress-internet"]["selector"] == {"uds.dev/vm": "web"}
    assert allow["uds-vm:db:allow-0-5432"]["remoteNamespace"] == "reporting"
    assert allow["uds-vm:db:allow-0-5432"]["port"] == 5432
    assert [e["description"] for e in spec["network"]["expose"]] == ["uds-vm:web:expose-443"]
    assert (
        spec["network"]["expose"][0]["host"] == "wiki" and spec["network"]["expose"][0]["gateway"] == "tenant"
    )
    monitor = spec["monitor"]
    assert [(m["portName"], m["targetPort"], m["selector"]) for m in monitor] == [
        ("metrics", 9100, {"uds.dev/vm": "web"})
    ]
    # UDS Core builds the ingress from the expose entry: a Service for the port, no HTTPRoute of ours.
    assert api.get(f"/api/v1/namespaces/{namespace}/services/web-443") is not None
    assert api.get(f"/apis/gateway.networking.k8s.io/v1/namespaces/{namespace}/httproutes/web-443") is None

    api.delete(vm_path(namespace, "web"))
    package = wait_owners(api, operator, namespace, {"db"})
    assert all(not t.startswith("uds-vm:web:") for t in tags(package))
    assert package["spec"]["monitor"] == []
    assert "uds-vm:db:allow-0-5432" in tags(package)

    api.delete(vm_path(namespace, "db"))  # the last VM: the Package we created goes too
    wait_for(lambda: api.items(packages_path(namespace)) == [], 60, 0.3, what="the empty Package deleted")


def test_an_existing_package_is_merged_into_without_clobbering_its_rules(
    api: Api, operator: OperatorProcess, namespace: str
) -> None:
    team_rule = {
        "direction": "Egress",
        "selector": {"app": "api"},
        "remoteGenerated": "KubeAPI",
        "description": "team: api to kube",
    }
    team = {
        "apiVersion": "uds.dev/v1alpha1",
        "kind": "Package",
        "metadata": {"name": "inventory", "namespace": namespace},
        "spec": {"network": {"allow": [team_rule]}, "sso": [{"name": "Inventory", "clientId": "inventory"}]},
    }
    code, payload = api.create(team, packages_path(namespace))
    assert code == 201, payload

    api.apply(package_vm("app", namespace, egress="internet"), vm_path(namespace, "app"))
    package = wait_owners(api, operator, namespace, {"app"})
    assert package["metadata"]["name"] == "inventory"  # one Package per namespace: the existing one
    assert package["spec"]["network"]["allow"][0] == team_rule  # untouched, still first
    assert package["spec"]["sso"] == [{"name": "Inventory", "clientId": "inventory"}]
    assert "uds-vm:app:egress-internet" in tags(package)

    # The team edits its Package; the operator's next merge keeps that edit.
    edited = [
        team_rule,
        {**team_rule, "description": "team: second"},
        *package["spec"]["network"]["allow"][1:],
    ]
    api.merge(packages_path(namespace, "inventory"), {"spec": {"network": {"allow": edited}}})
    api.apply(
        package_vm("app", namespace, egress="dns"), vm_path(namespace, "app")
    )  # app drops its egress rule
    wait_owners(api, operator, namespace, set())
    package = only_package(api, namespace)
    assert tags(package) == ["team: api to kube", "team: second"]

    api.delete(vm_path(namespace, "app"))
    wait_for(lambda: api.get(vm_path(namespace, "app")) is None, 30, 0.3, what="VM gone")
    operator.wait_quiet(1)
    package = only_package(api, namespace)  # not ours: never deleted, team rules intact
    assert tags(package) == ["team: api to kube", "team: second"]


TEAM_MANAGER = "app-team-gitops"


def test_rules_another_manager_applied_and_ours_merge_on_the_real_schema(
    api: Api, operator: OperatorProcess, namespace: str
) -> None:
    """An application team owns the Package by server-side apply (its own field manager): our merge adds the
    VM's rules next to theirs, keeps every field they set, and both managers appear in managedFields."""
    team_allow = [
        {
            "direction": "Egress",
            "selector": {"app": "api"},
            "remoteHost": "db.site.internal",
            "remoteProtocol": "TLS",
            "port": 443,
            "description": "team: api to db",
        },
        {
            "direction": "Ingress",
            "selector": {"app": "api"},
            "remoteNamespace": "monitoring",
            "remoteServiceAccount": "prometheus",
            "ports": [8080, 8443],
            "description": "team: scrape",
        },
    ]
    team_expose = [
        {"host": "api", "service": "api", "selector": {"app": "api"}, "port": 8080, "gateway": "tenant"}
    ]
    team = {
        "apiVersion": "uds.dev/v1alpha1",
        "kind": "Package",
        "metadata": {"name": "api", "namespace": namespace},
        "spec": {
            "network": {"serviceMesh": {"mode": "sidecar"}, "allow": team_allow, "expose": team_expose},
            "sso": [{"name": "API", "clientId": "uds-api", "redirectUris": ["https://api.uds.dev/*"]}],
        },
    }
    api.apply(team, packages_path(namespace, "api"), manager=TEAM_MANAGER)
    # The schema is the real one: a field UDS Core does not have is refused, not stored.
    _, payload = api.call(
        "POST",
        packages_path(namespace),
        body={
            **team,
            "metadata": {"name": "bad", "namespace": namespace},
            "spec": {"network": {"allow": [{"direction": "Egress", "protocol": "UDP"}]}},
        },
        params={"fieldValidation": "Strict"},
        expect=(400, 422),
    )
    assert "protocol" in str(payload), payload

    vm = package_vm(
        "web",
        namespace,
        egress="internet",
        allow=[{"direction": "Ingress", "cidr": "10.10.0.0/16", "ports": [{"port": 22}]}],
        expose=[
            {"port": 443, "http": {"hostname": "web.uds.dev", "gateway": GATEWAY}},
            {"port": 9100, "name": "metrics"},
        ],
    )
    api.apply(vm, vm_path(namespace, "web"))
    package = wait_owners(api, operator, namespace, {"web"})
    spec = package["spec"]
    assert package["metadata"]["name"] == "api"
    assert spec["network"]["allow"][:2] == team_allow  # theirs first and untouched
    assert spec["network"]["expose"][0] == {**team_expose[0]}
    assert spec["network"]["serviceMesh"] == {"mode": "sidecar"}
    assert spec["sso"] == team["spec"]["sso"]
    assert [a["description"] for a in spec["network"]["allow"][2:]] == [
        "uds-vm:web:egress-internet",
        "uds-vm:web:allow-0-22",
        "uds-vm:web:expose-9100",  # a plain port: in-namespace ingress
    ]
    assert [e["description"] for e in spec["network"]["expose"][1:]] == ["uds-vm:web:expose-443"]
    assert [m["description"] for m in spec["monitor"]] == ["uds-vm:web:metrics"]
    managers = {entry["manager"] for entry in package["metadata"].get("managedFields") or []}
    assert TEAM_MANAGER in managers and len(managers) >= 2, managers

    # The team's Package puts the namespace in sidecar mode: the launcher template and the DataVolume carry
    # the annotations UDS admits for VMs there (a VM in another mode gets none: unit tier).
    kubevirt_vm = api.get(f"/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachines/web") or {}
    launcher = kubevirt_vm["spec"]["template"]["metadata"].get("annotations") or {}
    assert launcher.get("status.sidecar.istio.io/port") == "0", launcher
    assert launcher.get("traffic.sidecar.istio.io/kubevirtInterfaces") == "k6t-eth0", launcher
    dv = api.get(f"/apis/cdi.kubevirt.io/v1beta1/namespaces/{namespace}/datavolumes/web-dv") or {}
    assert (dv["metadata"].get("annotations") or {}).get("sidecar.istio.io/inject") == "false", dv["metadata"]

    # The team re-applies the fields it still owns alone (the rule lists are atomic: our merge took them
    # over, their entries unchanged), renaming its SSO client: our rules and theirs stay.
    team["spec"]["sso"][0]["name"] = "API v2"
    api.call(
        "PATCH",
        packages_path(namespace, "api"),
        body={
            "apiVersion": "uds.dev/v1alpha1",
            "kind": "Package",
            "metadata": {"name": "api", "namespace": namespace},
            "spec": {"network": {"serviceMesh": {"mode": "sidecar"}}, "sso": team["spec"]["sso"]},
        },
        params={"fieldManager": TEAM_MANAGER, "fieldValidation": "Strict"},
        content_type="application/apply-patch+yaml",
        expect=(200,),
    )
    package = only_package(api, namespace)
    assert owners(package) == {"web"} and package["spec"]["sso"][0]["name"] == "API v2"
    assert package["spec"]["network"]["allow"][:2] == team_allow

    api.delete(vm_path(namespace, "web"))
    package = wait_owners(api, operator, namespace, set())
    assert package["spec"]["network"]["allow"] == team_allow  # ours gone, theirs intact
    assert package["spec"]["network"]["expose"] == team_expose
    assert package["spec"]["network"]["serviceMesh"] == {"mode": "sidecar"}
