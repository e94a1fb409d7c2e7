"""The watch-fed store keeps compact encoded objects: what a caller gets is a private copy, what it keeps
is only what the reconciler reads (no managedFields), and no reference to the watch's own dicts."""

from __future__ import annotations

import gc
import json
import sys
from typing import Any

from uds_vm_operator.runtime.kube import DATA_VOLUME, NETWORK_POLICY
from uds_vm_operator.runtime.store import ObjectStore


def datavolume(version: str, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {
            "name": "vm-dv",
            "namespace": "ns",
            "uid": "u1",
            "resourceVersion": version,
            "managedFields": [{"manager": "x", "fieldsV1": {"f:spec": {}}}] * 20,
            "labels": {"uds.dev/vm": "vm"},
        },
        "spec": {"source": {"http": {"url": "https://images/disk.qcow2"}}, **extra},
        "status": {"phase": "ImportInProgress", "progress": "12.5%"},
    }


def test_get_returns_a_private_copy_without_managed_fields() -> None:
    store = ObjectStore({(DATA_VOLUME.api_version, DATA_VOLUME.kind)})
    store.put(DATA_VOLUME, datavolume("5", note="héllo 🚀"))
    first = store.get(DATA_VOLUME, "ns", "vm-dv")
    assert first is not None
    assert "managedFields" not in first["metadata"]
    assert first["spec"]["note"] == "héllo 🚀" and first["status"]["progress"] == "12.5%"
    first["spec"]["source"]["http"]["url"] = "mutated"
    second = store.get(DATA_VOLUME, "ns", "vm-dv")
    assert second is not None and second["spec"]["source"]["http"]["url"] == "https://images/disk.qcow2"
    assert store.contains(DATA_VOLUME, "ns", "vm-dv") and not store.contains(DATA_VOLUME, "ns", "other")


def test_the_store_does_not_keep_the_watch_event_alive() -> None:
    store = ObjectStore()
    event_object = datavolume("7")
    spec = event_object["spec"]
    before = sys.getrefcount(spec)
    store.put(DATA_VOLUME, event_object)
    del event_object
    gc.collect()
    assert sys.getrefcount(spec) == before - 1  # only our local name still refers to it
    assert store.size_bytes() < 400  # compact JSON, managedFields dropped


def test_put_reports_whether_the_state_was_new() -> None:
    """The watch echo of our own write (same resourceVersion) is not news: handlers skip the reconcile."""
    store = ObjectStore()
    assert store.put(DATA_VOLUME, datavolume("7"))
    assert not store.put(DATA_VOLUME, datavolume("7"))  # our apply response was stored first
    assert not store.put(DATA_VOLUME, datavolume("6"))  # late, older event
    assert store.put(DATA_VOLUME, datavolume("8"))  # someone else changed it


def test_objects_of_one_kind_are_held_deflated_and_come_back_exactly() -> None:
    """1,000 near-identical children (what a fleet looks like) cost a fraction of their JSON."""
    store = ObjectStore()
    originals = []
    for index in range(1000):
        obj = datavolume(str(index + 1), note=f"disk {index}")
        obj["metadata"] |= {"name": f"vm{index}-dv", "uid": f"uid-{index:08d}", "managedFields": []}
        originals.append(obj)
        store.put(DATA_VOLUME, obj)
    policy = {"metadata": {"name": "p", "namespace": "ns", "uid": "x", "resourceVersion": "3"}, "spec": {}}
    store.put(NETWORK_POLICY, policy)  # another kind gets its own dictionary
    json_bytes = sum(len(json.dumps(o, separators=(",", ":"))) for o in originals)
    assert store.size_bytes() < json_bytes / 4
    for obj in (originals[0], originals[1], originals[999]):
        got = store.get(DATA_VOLUME, "ns", obj["metadata"]["name"])
        assert got == {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k != "managedFields"}}
    assert store.get(NETWORK_POLICY, "ns", "p") == policy
