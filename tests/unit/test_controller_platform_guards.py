"""The pure platform guards: KVM availability, CDI's private-address protection, live migration."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from uds_vm_operator.api import parse_vm_spec
from uds_vm_operator.controller import kvm_guard, ssrf
from uds_vm_operator.controller.platform import Platform
from uds_vm_operator.controller.platform_assess import (
    PlatformAssessment,
    assess,
    live_migration_condition,
    transition_warnings,
)
from uds_vm_operator.controller.platform_facts import (
    DEFAULT_TTL_S,
    TTL_ENV,
    PlatformFacts,
    facts_ttl_from_env,
    vm_state_storage_class,
)
from uds_vm_operator.render import Owner
from uds_vm_operator.runtime.workqueue import KeyedWorkQueue

SHA = "sha256:" + "a" * 64


def node(
    name: str, kvm: str | None = None, *, cordoned: bool = False, where: str = "allocatable"
) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if kvm is not None:
        status[where] = {kvm_guard.KVM_RESOURCE: kvm}
    return {"metadata": {"name": name}, "spec": {"unschedulable": cordoned}, "status": status}


def kubevirt(emulation: bool) -> dict[str, Any]:
    return {
        "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
        "spec": {"configuration": {"developerConfiguration": {"useEmulation": emulation}}},
    }


def spec_of(**overrides: Any) -> Any:
    raw: dict[str, Any] = {
        "source": {"http": {"url": "https://images.example.com/a.img"}},
        "disk": {"virtualSize": "1Gi"},
    }
    raw.update(overrides)
    return parse_vm_spec(raw)


# ------------------------------------------------------------------------------------------------ KVM guard


def test_zero_schedulable_nodes_is_unknown_not_no_kvm() -> None:
    for nodes in ([], [node("cordoned", "0", cordoned=True)]):
        verdict = kvm_guard.kvm_verdict(nodes, [])
        assert not verdict.known and not verdict.no_kvm
        assert kvm_guard.kvm_condition(verdict) is None


def test_nodes_without_kvm_and_without_emulation_mean_no_kvm() -> None:
    verdict = kvm_guard.kvm_verdict(
        [node("a", "0"), node("b"), node("c", "5", cordoned=True)], [kubevirt(False)]
    )
    assert verdict.no_kvm and verdict.schedulable_nodes == 2
    cond = kvm_guard.kvm_condition(verdict)
    assert cond is not None and cond[:2] == ("False", "NoKVM") and "never enables" in cond[2]


@pytest.mark.parametrize("where", ["allocatable", "capacity"])
def test_one_kvm_node_is_enough(where: str) -> None:
    verdict = kvm_guard.kvm_verdict([node("a"), node("b", "1k", where=where)], [])
    assert not verdict.no_kvm
    assert kvm_guard.kvm_condition(verdict) == (
        "True",
        "KVMNodesAvailable",
        "1 of 2 schedulable nodes advertise devices.kubevirt.io/kvm.",
    )


def test_emulation_enabled_by_an_admin_is_recorded_but_not_no_kvm() -> None:
    verdict = kvm_guard.kvm_verdict([node("a")], [kubevirt(False), kubevirt(True)])
    assert not verdict.no_kvm and verdict.emulation_by == "kubevirt/kubevirt"
    cond = kvm_guard.kvm_condition(verdict)
    assert cond is not None and cond[:2] == ("False", "SoftwareEmulation")


def test_emulation_is_reported_even_on_kvm_nodes_because_kubevirt_then_emulates_every_guest() -> None:
    verdict = kvm_guard.kvm_verdict([node("a", kvm="1k")], [kubevirt(True)])
    cond = kvm_guard.kvm_condition(verdict)
    assert cond is not None and cond[:2] == ("False", "SoftwareEmulation")
    assert "developerConfiguration.useEmulation: true" in cond.message
    assert "1 of 1 schedulable nodes advertise" in cond.message


def test_emulation_is_reported_before_any_node_is_known() -> None:
    cond = kvm_guard.kvm_condition(kvm_guard.kvm_verdict([], [kubevirt(True)]))
    assert cond is not None and cond.reason == "SoftwareEmulation"
    assert kvm_guard.kvm_condition(kvm_guard.kvm_verdict([], [kubevirt(False)])) is None


# ------------------------------------------------------------------------------------------------ SSRF


@pytest.mark.parametrize(
    ("url", "entry"),
    [
        ("http://10.1.2.3/disk.img", "10.1.2.3"),
        ("https://192.168.1.100:8443/x.qcow2", "192.168.1.100"),
        ("http://127.0.0.1/x", "127.0.0.1"),
        ("http://169.254.169.254/latest", "169.254.169.254"),
        ("http://[fe80::1]/x", "fe80::1"),
        ("http://[::1]:80/x", "::1"),
        ("http://localhost:8080/x", "localhost"),
        ("http://minio.storage.svc:9000/bucket/disk.img", "minio.storage.svc"),
        ("http://minio.storage.svc.cluster.local/bucket/disk.img", "minio.storage.svc.cluster.local"),
    ],
)
def test_internal_hosts_name_the_allowlist_entry(url: str, entry: str) -> None:
    host = ssrf.internal_host(url)
    assert host is not None and host.entry == entry


@pytest.mark.parametrize(
    "url",
    [
        "https://images.example.com/a.img",
        "http://8.8.8.8/x",
        "https://images.site.internal/a",
        "not a url",
        "",
    ],
)
def test_public_or_unknowable_hosts_are_not_flagged(url: str) -> None:
    assert ssrf.internal_host(url) is None


def test_allowlist_matches_cidr_ip_and_hostname_suffix() -> None:
    ip = ssrf.internal_host("http://10.96.1.5/x")
    name = ssrf.internal_host("http://api.minio.default.svc/x")
    assert ip is not None and name is not None
    assert ssrf.allowlist_covers(["10.96.0.0/12"], ip)
    assert ssrf.allowlist_covers(["10.96.1.5"], ip)
    assert not ssrf.allowlist_covers(["10.97.0.0/16", "garbage", ""], ip)
    assert ssrf.allowlist_covers(["MINIO.default.svc"], name)
    assert not ssrf.allowlist_covers(["default.svc.example"], name)


def crd(with_field: bool) -> dict[str, Any]:
    props = {"insecureRegistries": {"type": "array"}}
    if with_field:
        props[ssrf.ALLOWLIST_FIELD] = {"type": "array"}
    schema = {"openAPIV3Schema": {"properties": {"spec": {"properties": props}}}}
    return {"spec": {"versions": [{"name": "v1beta1", "schema": schema}]}}


def test_allowlist_field_is_read_from_the_installed_crd() -> None:
    assert ssrf.cdi_has_allowlist(crd(True))
    assert not ssrf.cdi_has_allowlist(crd(False))
    assert not ssrf.cdi_has_allowlist(None)


def test_ssrf_condition_blocked_allowed_and_pinned_cdi_without_the_field() -> None:
    url = "http://192.168.7.20/images/disk.img"
    blocked = ssrf.ssrf_condition("http", url, crd_has_allowlist=True, allowlist=["10.0.0.0/8"])
    assert blocked is not None and blocked[:2] == ("False", ssrf.BLOCKED_REASON)
    assert "'192.168.7.20' to CDIConfig.spec.allowedSourceURLs" in blocked[2]
    allowed = ssrf.ssrf_condition("http", url, crd_has_allowlist=True, allowlist=["192.168.7.0/24"])
    assert allowed is not None and allowed[:2] == ("True", "AllowedByCDIConfig")
    pinned = ssrf.ssrf_condition("http", url, crd_has_allowlist=False, allowlist=[])
    assert pinned is not None and pinned[:2] == ("True", "CDIHasNoPrivateAddressBlock")
    assert "no spec.allowedSourceURLs" in pinned[2]
    assert ssrf.ssrf_condition("http", "https://example.com/x", crd_has_allowlist=True, allowlist=[]) is None


# ------------------------------------------------------------------------------------------- live migration


def test_live_migration_condition_follows_the_disks() -> None:
    assert live_migration_condition(spec_of()) is None
    rwx = spec_of(liveMigration=True, disk={"virtualSize": "1Gi", "accessModes": ["ReadWriteMany"]})
    assert live_migration_condition(rwx) == (
        "True",
        "LiveMigrate",
        "Every disk is ReadWriteMany: evictionStrategy LiveMigrate.",
    )
    maybe = spec_of(liveMigration=True, allowLiveMigrateIfPossible=True)
    cond = live_migration_condition(maybe)
    assert cond is not None and cond[:2] == ("False", "LiveMigrateIfPossible") and "spec.disk" in cond[2]


# ------------------------------------------------------------------------------------------- assessment


def body(spec: dict[str, Any], conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "vm"}, "spec": spec, "status": {"conditions": conditions or []}}


def test_assess_blocks_ready_on_no_kvm_and_warns_once() -> None:
    raw = {"source": {"http": {"url": "https://images.example.com/a.img"}}, "disk": {"virtualSize": "1Gi"}}
    facts = PlatformFacts(kvm=kvm_guard.kvm_verdict([node("a")], []))
    first = assess(body(raw), parse_vm_spec(raw), facts, ttl_s=5)
    assert first.ready_blocker is not None and first.ready_blocker[0] == "NoKVM"
    assert [e[:2] for e in first.events] == [("Warning", "NoKVM")]
    assert first.requeue_after_s == 5 and not first.hold_root_datavolume
    stored = [{"type": "KVMAvailable", "status": "False", "reason": "NoKVM"}]
    again = assess(body(raw, stored), parse_vm_spec(raw), facts, ttl_s=5)
    assert again.events == ()  # no second Event for the same state


def test_assess_halted_vm_records_no_kvm_without_blocking_ready() -> None:
    raw = {"source": {"blank": {}}, "disk": {"virtualSize": "1Gi"}, "runStrategy": "Halted"}
    facts = PlatformFacts(kvm=kvm_guard.kvm_verdict([node("a")], []))
    result = assess(body(raw), parse_vm_spec(raw), facts, ttl_s=5)
    assert result.ready_blocker is None
    assert dict(result.conditions)["KVMAvailable"][1] == "NoKVM"


def test_assess_holds_the_datavolume_of_a_blocked_source() -> None:
    raw = {"source": {"s3": {"url": "http://10.0.0.9:9000/bucket/disk.img"}}, "disk": {"virtualSize": "1Gi"}}
    facts = PlatformFacts(cdi_allowlist_field=True, cdi_allowlist=("192.168.0.0/16",))
    result = assess(body(raw), parse_vm_spec(raw), facts, ttl_s=7)
    assert result.hold_root_datavolume and result.requeue_after_s == 7
    assert result.ready_blocker is not None and result.ready_blocker[0] == ssrf.BLOCKED_REASON
    assert "spec.source.s3.url" in result.ready_blocker[1]


def test_unknown_facts_add_nothing() -> None:
    raw = {"source": {"http": {"url": "https://images.example.com/a.img"}}, "disk": {"virtualSize": "1Gi"}}
    result = assess(body(raw), parse_vm_spec(raw), PlatformFacts(), ttl_s=5)
    assert result == type(result)()


def test_transition_warnings_only_for_new_false_states() -> None:
    conds = [("A", ("False", "X", "m")), ("B", ("True", "Y", "m")), ("C", ("False", "Z", "m"))]
    previous = {"C": {"status": "False", "reason": "Z"}, "A": {"status": "False", "reason": "Other"}}
    assert transition_warnings(previous, conds) == (("Warning", "X", "m"),)


# ------------------------------------------------------------------------------------------- plumbing


def test_blocked_source_withholds_only_a_root_datavolume_that_does_not_exist_yet() -> None:

    owner = Owner(name="vm", namespace="ns", uid="u")
    children = [
        {"kind": "Secret", "metadata": {"name": "vm-cloudinit"}},
        {"kind": "DataVolume", "metadata": {"name": "vm-dv"}},
        {"kind": "VirtualMachine", "metadata": {"name": "vm"}},
    ]
    held = PlatformAssessment(hold_root_datavolume=True)
    kinds = [c["kind"] for c in Platform.filter_children(owner, held, children, root_dv_exists=False)]
    assert kinds == ["Secret", "VirtualMachine"]
    assert Platform.filter_children(owner, held, children, root_dv_exists=True) == children
    assert Platform.filter_children(owner, PlatformAssessment(), children, root_dv_exists=False) == children


def test_a_blocked_vm_has_at_most_one_pending_recheck() -> None:
    """The platform's re-check goes through the controller's one requeue mechanism (the work queue)."""
    fired: list[tuple[str, str]] = []

    async def scenario() -> None:
        async def process(key: tuple[str, str]) -> None:
            fired.append(key)

        queue: KeyedWorkQueue[tuple[str, str]] = KeyedWorkQueue(process, workers=1, name="test")
        runner = asyncio.create_task(queue.run())
        for _ in range(5):
            queue.enqueue_after(("ns", "vm"), 0.01)
        assert queue.pending_wakeups() == 1
        await asyncio.sleep(0.1)
        queue.enqueue_after(("ns", "vm"), 0.01)
        await asyncio.sleep(0.1)
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)

    asyncio.run(scenario())
    assert fired == [("ns", "vm"), ("ns", "vm")]


def test_facts_interval_comes_from_the_environment_and_survives_garbage(
    monkeypatch: pytest.MonkeyPatch,
) -> None:

    monkeypatch.setenv(TTL_ENV, "2.5")
    assert facts_ttl_from_env() == 2.5
    for bad in ("soon", "-1", "0"):
        monkeypatch.setenv(TTL_ENV, bad)
        assert facts_ttl_from_env() == DEFAULT_TTL_S


def test_vm_state_persistence_comes_only_from_a_configured_kubevirt_storage_class() -> None:
    assert vm_state_storage_class([]) is None
    assert vm_state_storage_class([{"spec": {"configuration": {}}}]) is None
    configured = {"spec": {"configuration": {"vmStateStorageClass": "vm-state"}}}
    assert vm_state_storage_class([{"spec": {}}, configured]) == "vm-state"
