"""uds-package sync logic: merge without clobbering, conflict retry, orphan pruning, shell clean-up.

The API here is an in-memory stand-in so that one rule at a time can be pinned (e.g. a 409 on the first
write); the same flows run against the real API server in tests/integration/test_platform_udspackage.py.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from uds_vm_operator.api import parse_vm_spec
from uds_vm_operator.controller.platform import PackageOutcome, Platform
from uds_vm_operator.controller.udspackage_sync import (
    PackageSync,
    choose_package,
    package_condition,
    sections_of,
    tagged_vms,
)
from uds_vm_operator.render import Owner, vm_package_rules
from uds_vm_operator.runtime.errors import KubeApiError

NS = "apps"


class MemoryApi:
    """Packages and UDS VMs of one namespace, with resourceVersion checks like the API server's."""

    field_manager = "uds-vm-operator"

    def __init__(self) -> None:
        self.packages: dict[str, dict[str, Any]] = {}
        self.vms: dict[str, dict[str, Any]] = {}
        self.conflicts = 0
        self.writes: list[str] = []
        self.reads = 0
        self._rv = 10

    def _bump(self, obj: dict[str, Any]) -> None:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)

    async def list(
        self, kind: Any, namespace: str | None = None, label_selector: str | None = None
    ) -> list[Any]:
        self.reads += 1
        source = self.packages if kind.kind == "Package" else self.vms
        return [copy.deepcopy(o) for o in source.values()]

    async def get(self, kind: Any, namespace: str | None, name: str) -> dict[str, Any] | None:
        source = self.packages if kind.kind == "Package" else self.vms
        return copy.deepcopy(source.get(name))

    async def merge_patch(
        self, kind: Any, namespace: str | None, name: str, patch: dict[str, Any]
    ) -> dict[str, Any]:
        current = self.packages[name]
        if self.conflicts:
            self.conflicts -= 1
            self.other_writer_adds_a_rule(name)
        if patch["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]:
            raise KubeApiError(409, "Conflict", "the object has been modified", what="patch")
        current["spec"].setdefault("network", {}).update(patch["spec"]["network"])
        current["spec"]["monitor"] = patch["spec"]["monitor"]
        if "kubevirt" in patch["spec"]:
            current["spec"]["kubevirt"] = patch["spec"]["kubevirt"]
        self._bump(current)
        self.writes.append(f"patch {name}")
        return copy.deepcopy(current)

    async def create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        body = copy.deepcopy(manifest)
        body["metadata"]["uid"] = "uid-" + body["metadata"]["name"]
        self._bump(body)
        self.packages[body["metadata"]["name"]] = body
        self.writes.append(f"create {body['metadata']['name']}")
        return body

    async def delete(
        self, kind: Any, namespace: str | None, name: str, *, resource_version: str | None = None, **_: Any
    ) -> dict[str, Any]:
        assert resource_version == self.packages[name]["metadata"]["resourceVersion"]
        del self.packages[name]
        self.writes.append(f"delete {name}")
        return {}

    def other_writer_adds_a_rule(self, name: str) -> None:
        package = self.packages[name]
        package["spec"]["network"]["allow"].append({"direction": "Ingress", "description": "team: keep me"})
        self._bump(package)

    def add_vm(self, name: str, mode: str = "uds-package") -> None:
        self.vms[name] = {"metadata": {"name": name}, "spec": {"network": {"mode": mode}}}


def rules_for(name: str, **network: Any) -> dict[str, list[dict[str, Any]]]:
    spec = parse_vm_spec(
        {
            "source": {"blank": {}},
            "disk": {"virtualSize": "1Gi"},
            "network": {"mode": "uds-package", **network},
        }
    )
    return vm_package_rules(name, spec)


EXPOSE = [
    {"port": 9100, "name": "metrics"},
    {
        "port": 443,
        "http": {"hostname": "a.uds.dev", "gateway": {"name": "tenant", "namespace": "istio-tenant-gateway"}},
    },
]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_first_vm_creates_the_package_and_a_second_merges_into_it() -> None:
    api = MemoryApi()
    sync = PackageSync(api)  # type: ignore[arg-type]
    api.add_vm("a")
    api.add_vm("b")
    first = run(sync.sync(NS, "a", rules_for("a", egress="internet", expose=EXPOSE)))
    second = run(sync.sync(NS, "b", rules_for("b", egress="internet")))
    assert (first.package, first.writes, second.writes) == ("uds-vms", 1, 1)
    package = api.packages["uds-vms"]
    assert tagged_vms(package) == {"a", "b"}
    assert package["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "uds-vm-operator"
    assert [m["portName"] for m in package["spec"]["monitor"]] == ["metrics"]
    assert run(sync.sync(NS, "b", rules_for("b", egress="internet"))).writes == 0  # resync writes nothing
    assert package_condition(first, NS, 4)[:2] == ("True", "RulesMerged")


def test_existing_package_is_reused_and_foreign_rules_survive_a_conflict() -> None:
    api = MemoryApi()
    api.packages["app"] = {
        "metadata": {"name": "app", "resourceVersion": "1", "uid": "u"},
        "spec": {"network": {"allow": [{"direction": "Egress", "description": "team rule"}]}},
    }
    api.add_vm("a")
    api.conflicts = 1  # somebody writes between our read and our patch
    result = run(PackageSync(api).sync(NS, "a", rules_for("a", egress="internet")))  # type: ignore[arg-type]
    assert result.package == "app" and result.problem is None
    descriptions = [r["description"] for r in api.packages["app"]["spec"]["network"]["allow"]]
    assert descriptions == ["team rule", "team: keep me", "uds-vm:a:egress-internet"]


def test_removing_the_last_vm_deletes_only_a_package_we_created() -> None:
    api = MemoryApi()
    sync = PackageSync(api)  # type: ignore[arg-type]
    api.add_vm("a")
    api.add_vm("b")
    run(sync.sync(NS, "a", rules_for("a", egress="internet")))
    run(sync.sync(NS, "b", rules_for("b")))  # b has no rules of its own but relies on the Package
    del api.vms["a"]
    assert run(sync.sync(NS, "a", None)).writes == 1
    assert "uds-vms" in api.packages and tagged_vms(api.packages["uds-vms"]) == set()  # b still needs it
    del api.vms["b"]
    run(sync.sync(NS, "b", None))
    assert api.packages == {}
    assert api.writes[-1] == "delete uds-vms"


def test_rules_of_vms_deleted_while_the_operator_was_down_are_pruned() -> None:
    api = MemoryApi()
    sync = PackageSync(api, vm_known=lambda _ns, name: name in api.vms)  # type: ignore[arg-type]
    api.add_vm("a")
    api.add_vm("ghost")
    run(sync.sync(NS, "ghost", rules_for("ghost", egress="internet")))
    del api.vms["ghost"]  # deleted, and nobody told us
    run(sync.sync(NS, "a", rules_for("a", egress="internet")))
    assert tagged_vms(api.packages["uds-vms"]) == {"a"}


def test_several_packages_are_reported_not_guessed() -> None:
    api = MemoryApi()
    for name in ("one", "two"):
        api.packages[name] = {"metadata": {"name": name, "resourceVersion": "1"}, "spec": {}}
    result = run(PackageSync(api).sync(NS, "a", rules_for("a")))  # type: ignore[arg-type]
    assert result.problem is not None and result.problem[0] == "SeveralPackages"
    assert "one, two" in result.problem[1]
    assert choose_package([]) is None
    assert sections_of(None) == ([], [], [])


def test_rules_the_package_cannot_express_become_a_condition_not_a_crash() -> None:
    api = MemoryApi()
    platform = Platform(api=api, ttl_s=1)  # type: ignore[arg-type]
    selected = {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]}
    spec = parse_vm_spec(
        {
            "source": {"blank": {}},
            "disk": {"virtualSize": "1Gi"},
            "network": {
                "mode": "uds-package",
                "allow": [{"direction": "Ingress", "namespaceSelector": selected}],
            },
        }
    )
    owner = Owner(name="vm", namespace=NS, uid="u")
    outcome = run(platform.sync_package(owner, spec, {"metadata": {"name": "vm"}}))
    (cond_type, (status, reason, message)), *_ = outcome.conditions
    assert (cond_type, status, reason) == ("UDSPackageSynced", "False", "InvalidPackageRules")
    assert "kubernetes.io/metadata.name" in message
    assert outcome.events == (("Warning", "InvalidPackageRules", message),)
    assert not outcome.in_place and outcome.writes == 0 and api.writes == []


def test_a_vm_that_never_used_the_package_costs_no_request() -> None:
    api = MemoryApi()
    platform = Platform(api=api, ttl_s=1)  # type: ignore[arg-type]
    spec = parse_vm_spec({"source": {"blank": {}}, "disk": {"virtualSize": "1Gi"}})
    outcome = run(platform.sync_package(Owner(name="vm", namespace=NS, uid="u"), spec, {}))
    assert outcome == PackageOutcome() and api.reads == 0
    was_in_package = {"status": {"conditions": [{"type": "UDSPackageSynced", "status": "True"}]}}
    run(platform.sync_package(Owner(name="vm", namespace=NS, uid="u"), spec, was_in_package))
    assert api.reads == 1  # it left the mode: its rules are looked for once


class PocCrdApi(MemoryApi):
    """A site whose Package CRD has UDS's VM work (``spec.kubevirt.enabled``)."""

    crd_reads = 0

    async def get(self, kind: Any, namespace: str | None, name: str) -> dict[str, Any] | None:
        if kind.kind != "CustomResourceDefinition":
            return await super().get(kind, namespace, name)
        self.crd_reads += 1
        kubevirt = {"type": "object", "properties": {"enabled": {"type": "boolean"}}}
        schema = {"properties": {"spec": {"properties": {"kubevirt": kubevirt}}}}
        return {"spec": {"versions": [{"name": "v1alpha1", "schema": {"openAPIV3Schema": schema}}]}}


def test_kubevirt_enabled_is_written_only_where_the_crd_has_it_and_the_crd_is_read_once() -> None:
    plain = MemoryApi()
    plain.add_vm("a")
    run(PackageSync(plain).sync(NS, "a", rules_for("a", egress="internet")))  # type: ignore[arg-type]
    assert "kubevirt" not in plain.packages["uds-vms"]["spec"]  # uds-core v1.11.0: no such field

    poc = PocCrdApi()
    poc.packages["app"] = {
        "metadata": {"name": "app", "resourceVersion": "1", "uid": "u"},
        "spec": {"network": {"allow": [{"direction": "Egress", "description": "team rule"}]}},
    }
    poc.add_vm("a")
    poc.add_vm("b")
    sync = PackageSync(poc)  # type: ignore[arg-type]
    run(sync.sync(NS, "a", rules_for("a", egress="internet")))
    assert poc.packages["app"]["spec"]["kubevirt"] == {"enabled": True}
    assert run(sync.sync(NS, "a", rules_for("a", egress="internet"))).writes == 0  # resync: no write
    run(sync.sync(NS, "b", rules_for("b")))
    assert poc.crd_reads == 1, "the CRD is cached, not read per sync"
