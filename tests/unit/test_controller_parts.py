"""Smaller controller pieces: CDI capability detection, events, the store, the inventory row, probes."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import httpx2

from uds_vm_operator.cli.inventory import human_age, inventory_row
from uds_vm_operator.controller.facts import FactsCache, cdi_supports_http_checksum
from uds_vm_operator.runtime.events import build_event, transition_event
from uds_vm_operator.runtime.health import probe_status
from uds_vm_operator.runtime.kube import DATA_VOLUME, SECRET, UDS_VM, KubeApi
from uds_vm_operator.runtime.logsetup import redact
from uds_vm_operator.runtime.store import ObjectStore


def dv_crd(http_properties: dict[str, Any], version: str = "v1beta1") -> dict[str, Any]:
    schema = {
        "properties": {
            "spec": {"properties": {"source": {"properties": {"http": {"properties": http_properties}}}}}
        }
    }
    return {"spec": {"versions": [{"name": version, "schema": {"openAPIV3Schema": schema}}]}}


def test_cdi_checksum_support_is_read_from_the_installed_schema() -> None:
    assert cdi_supports_http_checksum(dv_crd({"url": {}, "checksum": {"type": "string"}}))
    assert not cdi_supports_http_checksum(dv_crd({"url": {}}))
    assert not cdi_supports_http_checksum(dv_crd({"url": {}, "checksum": {}}, version="v1alpha1"))
    assert not cdi_supports_http_checksum(None)


def test_facts_are_cached_for_the_ttl() -> None:
    calls: list[int] = []
    clock = [0.0]

    async def fetch() -> dict[str, Any]:
        calls.append(1)
        return dv_crd({"checksum": {"type": "string"}})

    async def scenario() -> None:
        cache = FactsCache(fetch, ttl_s=10, clock=lambda: clock[0])
        facts = await asyncio.gather(*(cache.get() for _ in range(5)))
        assert all(f.cdi_http_checksum for f in facts)
        clock[0] = 5
        await cache.get()
        assert len(calls) == 1
        clock[0] = 11
        await cache.get()
        assert len(calls) == 2

    asyncio.run(scenario())


def test_event_manifest_and_transitions() -> None:
    owner = {
        "apiVersion": "uds.dev/v1alpha1",
        "kind": "UDSVirtualMachine",
        "metadata": {"name": "vm1", "namespace": "ns", "uid": "u1"},
    }
    event = build_event(
        owner,
        event_type="Normal",
        reason="Ready",
        note="x" * 2000,
        event_time="2026-01-01T00:00:00.000000Z",
        instance="op-1",
    )
    assert event["regarding"] == {
        "apiVersion": "uds.dev/v1alpha1",
        "kind": "UDSVirtualMachine",
        "name": "vm1",
        "namespace": "ns",
        "uid": "u1",
    }
    assert len(event["note"]) == 1024
    assert event["metadata"]["namespace"] == "ns"
    assert event["metadata"]["name"].startswith("vm1.")

    ready = {
        "phase": "Ready",
        "message": "running",
        "conditions": [{"type": "Ready", "reason": "VirtualMachineRunning"}],
    }
    failed = {"phase": "Failed", "message": "bad", "conditions": [{"type": "Ready", "reason": "InvalidSpec"}]}
    assert transition_event(None, ready) == ("Normal", "Ready", "running")
    assert transition_event(ready, ready) is None
    assert transition_event(ready, failed) == ("Warning", "InvalidSpec", "bad")
    other = {**failed, "conditions": [{"type": "Ready", "reason": "LiveMigrationNeedsRWX"}]}
    assert transition_event(failed, other) == ("Warning", "LiveMigrationNeedsRWX", "bad")


def obj(name: str, uid: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": rv}}


def test_store_never_goes_back_in_time_and_keeps_new_incarnations() -> None:
    store = ObjectStore({(DATA_VOLUME.api_version, DATA_VOLUME.kind)})
    assert store.is_watched(DATA_VOLUME) and not store.is_watched(SECRET)
    store.put(DATA_VOLUME, obj("a", "u1", "10"))
    store.put(DATA_VOLUME, obj("a", "u1", "9"))
    assert store.get(DATA_VOLUME, "ns", "a")["metadata"]["resourceVersion"] == "10"
    store.put(DATA_VOLUME, obj("a", "u2", "5"))  # re-created: a new UID wins regardless of version
    assert store.get(DATA_VOLUME, "ns", "a")["metadata"]["uid"] == "u2"
    store.discard(DATA_VOLUME, obj("a", "u1", "11"))  # late DELETED of the old incarnation
    assert store.get(DATA_VOLUME, "ns", "a") is not None
    store.discard(DATA_VOLUME, obj("a", "u2", "6"))
    assert store.get(DATA_VOLUME, "ns", "a") is None
    assert store.get(UDS_VM, "ns", "a") is None


def test_inventory_row_flattens_spec_and_status() -> None:
    now = datetime(2026, 1, 1, 1, 0, 0, tzinfo=UTC)
    vm = {
        "metadata": {"name": "vm1", "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"os": "windows", "source": {"upload": {}}},
        "status": {
            "phase": "Ready",
            "pvcSize": "11Mi",
            "checksumVerified": True,
            "zeroTrust": True,
            "reconciledBy": "kopf-python",
        },
    }
    row = inventory_row(vm, now)
    assert row == {
        "namespace": "ns",
        "name": "vm1",
        "pool": None,
        "phase": "Ready",
        "source": "upload",
        "os": "windows",
        "pvcSize": "11Mi",
        "checksumVerified": True,
        "zeroTrust": True,
        "guest": None,
        "guestDrift": [],
        "reconciledBy": "kopf-python",
        "age": "1h",
        "createdAt": "2026-01-01T00:00:00Z",
    }
    bare = inventory_row({"metadata": {"name": "x"}, "spec": {"source": {"http": {}}}}, now)
    assert (bare["phase"], bare["source"], bare["os"], bare["age"]) == (
        "Pending",
        "http",
        "linux",
        "<unknown>",
    )
    assert human_age("2025-12-29T01:00:00Z", now) == "3d"
    assert human_age("2026-01-01T00:59:15Z", now) == "45s"


def test_probe_paths() -> None:
    assert probe_status("/healthz", lambda: False) == 200
    assert probe_status("/readyz", lambda: False) == 503
    assert probe_status("/readyz", lambda: True) == 200
    assert probe_status("/other", lambda: True) == 404


def test_logs_redact_credentials() -> None:
    assert "hunter2" not in redact('password="hunter2" user=bob')
    assert "abc.def" not in redact("Authorization: abc.def")
    assert redact("phase Ready") == "phase Ready"


def test_every_write_carries_our_field_manager_and_strict_validation() -> None:
    seen: list[httpx2.Request] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        if request.method == "GET":
            return httpx2.Response(404, json={"reason": "NotFound", "message": "absent"})
        return httpx2.Response(200, json={"metadata": {"name": "x"}})

    async def scenario() -> None:
        api = KubeApi(httpx2.AsyncClient(base_url="https://api.test", transport=httpx2.MockTransport(answer)))
        manifest = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "ns"}}
        await api.apply(manifest)
        await api.merge_patch(UDS_VM, "ns", "vm1", {"status": {}}, subresource="status")
        await api.create({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"namespace": "ns"}})
        assert await api.get(DATA_VOLUME, "ns", "missing") is None
        await api.close()

    asyncio.run(scenario())
    apply, status, event, get = seen
    assert apply.method == "PATCH" and apply.url.path == "/api/v1/namespaces/ns/secrets/s"
    assert apply.headers["content-type"] == "application/apply-patch+yaml"
    assert dict(apply.url.params) == {
        "fieldManager": "uds-vm-operator",
        "force": "true",
        "fieldValidation": "Strict",
    }
    assert status.url.path == "/apis/uds.dev/v1alpha1/namespaces/ns/udsvirtualmachines/vm1/status"
    assert status.headers["content-type"] == "application/merge-patch+json"
    for write in (status, event):
        assert write.url.params["fieldValidation"] == "Strict"
        assert write.url.params["fieldManager"] == "uds-vm-operator"
    assert event.url.path == "/apis/events.k8s.io/v1/namespaces/ns/events"
    assert get.method == "GET"
