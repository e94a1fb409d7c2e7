"""Play KubeVirt for pool members and watch the fleet's Ready count (pool integration tests and bench).

The operator runs with ``--controllers pool`` so it does not write member status itself: this module is
what makes members Ready, exactly as the UDSVirtualMachine controller would report them (``status.phase:
Ready`` plus a ``Ready`` condition, through the status subresource), and lets a deleting member go by
removing its release finalizer, as that controller does once the member's children are gone (there are none
here). A separate watch records the number
of Ready members at every change, which is what the rollout must never let drop below its floor.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from lightkube.config import client_adapter

from tests.background_loop import BackgroundLoop
from uds_vm_operator.controller.release import without_release
from uds_vm_operator.fleet import POOL_LABEL, REVISION_LABEL
from uds_vm_operator.runtime.kube import load_kubeconfig

MERGE = "application/merge-patch+json"
TEST_MANAGER = "uds-vm-operator-tests"


def pool_path(namespace: str, name: str | None = None) -> str:
    base = f"/apis/uds.dev/v1alpha1/namespaces/{namespace}/udsvirtualmachinepools"
    return f"{base}/{name}" if name else base


def members_path(namespace: str, name: str | None = None) -> str:
    base = f"/apis/uds.dev/v1alpha1/namespaces/{namespace}/udsvirtualmachines"
    return f"{base}/{name}" if name else base


def http_client(kubeconfig: Path, timeout_s: float = 30.0) -> Any:
    """An authenticated httpx client for the test's admin identity (one per thread)."""
    params = client_adapter.ConnectionParams(timeout=httpx2.Timeout(timeout_s), trust_env=False)
    return client_adapter.Client(load_kubeconfig(kubeconfig), params)


def is_ready(member: Mapping[str, Any]) -> bool:
    """Ready as the pool sees it: phase Ready, Ready condition True, not being deleted."""
    meta = member.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return False
    status = member.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    return status.get("phase") == "Ready" and conditions.get("Ready", "True") == "True"


def ready_status(now: str) -> dict[str, Any]:
    """The status the UDSVirtualMachine controller writes for a running, verified VM."""
    return {
        "phase": "Ready",
        "reconciledBy": "kopf-python",
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "Running", "message": "", "lastTransitionTime": now}
        ],
    }


def failed_status(now: str) -> dict[str, Any]:
    """The status the UDSVirtualMachine controller writes when the disk digest does not match."""
    return {
        "phase": "Failed",
        "reconciledBy": "kopf-python",
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "ChecksumMismatch",
                "message": "the imported disk does not match the declared digest",
                "lastTransitionTime": now,
            }
        ],
    }


@dataclass
class ReadinessPlayer:
    """Marks each new member Ready ``delay_s`` after it first appears, unless its revision never boots."""

    kubeconfig: Path
    namespace: str
    pool: str
    delay_s: float
    never_ready: set[str] = field(default_factory=set)
    fail: set[str] = field(default_factory=set)
    """Revisions whose members report ``phase: Failed`` (e.g. a digest mismatch) instead of Ready."""
    poll_s: float = 0.1
    marked: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    """Deleting members whose release finalizer the player removed, as the VM controller would."""
    _seen: dict[str, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    error: BaseException | None = None

    def start(self) -> ReadinessPlayer:
        self._thread = threading.Thread(target=self._run, name=f"play-kubevirt-{self.pool}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self.error is not None:
            raise AssertionError(f"readiness player failed: {self.error!r}")

    def _run(self) -> None:
        client = http_client(self.kubeconfig)
        try:
            while not self._stop.is_set():
                self._tick(client)
                time.sleep(self.poll_s)
        except BaseException as exc:  # reported by stop()
            self.error = exc
        finally:
            client.close()

    def _tick(self, client: Any) -> None:
        response = client.get(
            members_path(self.namespace), params={"labelSelector": f"{POOL_LABEL}={self.pool}"}
        )
        response.raise_for_status()
        now = time.monotonic()
        for member in response.json().get("items") or []:
            meta = member["metadata"]
            key = str(meta["uid"])
            first = self._seen.setdefault(key, now)
            revision = (meta.get("labels") or {}).get(REVISION_LABEL)
            if meta.get("deletionTimestamp"):
                self._release(client, member)
                continue
            if is_ready(member) or revision in self.never_ready:
                continue
            if now - first < self.delay_s or (member.get("status") or {}).get("phase") == "Failed":
                continue
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            status = failed_status(stamp) if revision in self.fail else ready_status(stamp)
            patched = client.patch(
                members_path(self.namespace, meta["name"]) + "/status",
                content=json.dumps({"status": status}).encode(),
                headers={"Content-Type": MERGE},
                params={"fieldManager": TEST_MANAGER, "fieldValidation": "Strict"},
            )
            if patched.status_code == 404:
                continue
            patched.raise_for_status()
            self.marked.append(meta["name"])

    def _release(self, client: Any, member: Mapping[str, Any]) -> None:
        """Played VM controller: a deleting member has no children here, so its release finalizer goes."""
        meta = member["metadata"]
        remaining = without_release(meta)
        if remaining is None:
            return
        patch = {"metadata": {"finalizers": remaining, "resourceVersion": meta["resourceVersion"]}}
        answer = client.patch(
            members_path(self.namespace, meta["name"]),
            content=json.dumps(patch).encode(),
            headers={"Content-Type": MERGE},
            params={"fieldManager": TEST_MANAGER},
        )
        if answer.status_code not in (404, 409):  # gone, or changed since listed: the next tick looks again
            answer.raise_for_status()
            self.released.append(meta["name"])


@dataclass
class ReadyWatcher:
    """Watches the pool's members and records the Ready count after every change (and the member count)."""

    kubeconfig: Path
    namespace: str
    pool: str
    ready_counts: list[int] = field(default_factory=list)
    member_counts: list[int] = field(default_factory=list)
    events: int = 0
    deletion_waits_s: list[float] = field(default_factory=list)
    """Per member deleted while watched: seconds from its deletion timestamp (first seen) to its removal,
    i.e. how long removing its children took (the operator's release, or the garbage collector for a member
    deleted with ``Foreground`` propagation)."""
    _deleting_since: dict[str, float] = field(default_factory=dict)
    _members: dict[str, dict[str, Any]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _started: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    error: BaseException | None = None

    def start(self) -> ReadyWatcher:
        self._thread = threading.Thread(target=self._run, name=f"watch-ready-{self.pool}", daemon=True)
        self._thread.start()
        if not self._started.wait(30):
            raise AssertionError("the Ready watch did not start within 30 s")
        if self.error is not None:
            raise AssertionError(f"the Ready watch failed: {self.error!r}")
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self.error is not None:
            raise AssertionError(f"the Ready watch failed: {self.error!r}")

    @property
    def min_ready(self) -> int:
        return min(self.ready_counts)

    @property
    def max_members(self) -> int:
        return max(self.member_counts)

    def _record(self) -> None:
        self.ready_counts.append(sum(1 for member in self._members.values() if is_ready(member)))
        self.member_counts.append(len(self._members))

    def _time_deletion(self, kind: str, meta: dict[str, Any]) -> None:
        uid = meta.get("uid", "")
        if kind == "DELETED":
            since = self._deleting_since.pop(uid, None)
            if since is not None:
                self.deletion_waits_s.append(time.monotonic() - since)
        elif meta.get("deletionTimestamp") and uid not in self._deleting_since:
            self._deleting_since[uid] = time.monotonic()

    def _run(self) -> None:
        client = http_client(self.kubeconfig, timeout_s=60)
        selector = f"{POOL_LABEL}={self.pool}"
        try:
            listed = client.get(members_path(self.namespace), params={"labelSelector": selector})
            listed.raise_for_status()
            body = listed.json()
            for member in body.get("items") or []:
                self._members[member["metadata"]["name"]] = member
            self._record()
            version = body["metadata"]["resourceVersion"]
            self._started.set()
            while not self._stop.is_set():
                params = {
                    "labelSelector": selector,
                    "watch": "1",
                    "resourceVersion": version,
                    "timeoutSeconds": "2",
                }
                with client.stream("GET", members_path(self.namespace), params=params) as stream:
                    stream.raise_for_status()
                    for line in stream.iter_lines():
                        if not line:
                            continue
                        event = json.loads(line)
                        if event.get("type") == "ERROR":
                            raise AssertionError(f"watch error: {event}")
                        obj = event["object"]
                        version = obj["metadata"]["resourceVersion"]
                        self._time_deletion(event["type"], obj["metadata"])
                        if event["type"] == "DELETED":
                            self._members.pop(obj["metadata"]["name"], None)
                        else:
                            self._members[obj["metadata"]["name"]] = obj
                        self.events += 1
                        self._record()
        except BaseException as exc:  # reported by stop()
            self.error = exc
            self._started.set()
        finally:
            client.close()


def wait_until(predicate: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.25) -> Any:
    """Poll until ``predicate`` returns something truthy; fail with ``what`` and the last value."""
    deadline = time.monotonic() + timeout_s
    last = predicate()
    while not last:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}; last: {last!r}")
        time.sleep(interval_s)
        last = predicate()
    return last


PVC_PROTECTION = "kubernetes.io/pvc-protection"


def release_pvc_protection(client: Any, namespace: str) -> None:
    """Play the pvc-protection controller (not run by the test control plane) so the namespace can go.

    PVCs get the ``kubernetes.io/pvc-protection`` finalizer on creation; without its controller a deleted
    namespace holding PVCs would stay Terminating forever and keep the garbage collector busy.
    """
    response = client.get(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims")
    response.raise_for_status()
    for pvc in response.json().get("items") or []:
        finalizers = pvc["metadata"].get("finalizers") or []
        if PVC_PROTECTION not in finalizers:
            continue
        remaining = [f for f in finalizers if f != PVC_PROTECTION]
        patched = client.patch(
            f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{pvc['metadata']['name']}",
            content=json.dumps({"metadata": {"finalizers": remaining or None}}).encode(),
            headers={"Content-Type": MERGE},
            params={"fieldManager": TEST_MANAGER},
        )
        if patched.status_code != 404:
            patched.raise_for_status()


class ClusterPlayer(BackgroundLoop):
    """Plays CDI and KubeVirt for every DataVolume and VirtualMachine the operator creates in a namespace, so
    the UDSVirtualMachine controller (running too) derives each member's readiness itself."""

    name = "play-cdi-kubevirt"

    def __init__(self, kubeconfig: Path, namespace: str, interval_s: float = 0.2) -> None:
        super().__init__()
        self.interval_s = interval_s
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self._client: Any = None

    def thread_started(self) -> None:
        self._client = http_client(self.kubeconfig)

    def thread_ended(self) -> None:
        if self._client is not None:
            self._client.close()

    def tick(self) -> None:
        self._play(
            self._client,
            "cdi.kubevirt.io/v1beta1",
            "datavolumes",
            _dv_done,
            {"phase": "Succeeded", "progress": "100.0%"},
        )
        self._play(
            self._client,
            "kubevirt.io/v1",
            "virtualmachines",
            _vm_done,
            {"printableStatus": "Running", "ready": True, "created": True},
        )

    def _play(self, client: Any, group_version: str, plural: str, done: Any, status: dict[str, Any]) -> None:
        base = f"/apis/{group_version}/namespaces/{self.namespace}/{plural}"
        response = client.get(base)
        response.raise_for_status()
        for item in response.json().get("items") or []:
            meta = item["metadata"]
            if done(item) or meta.get("deletionTimestamp"):
                continue
            patched = client.patch(
                f"{base}/{meta['name']}/status",
                content=json.dumps({"status": status}).encode(),
                headers={"Content-Type": MERGE},
                params={"fieldManager": TEST_MANAGER},
            )
            if patched.status_code not in (200, 404, 409):
                patched.raise_for_status()


def _dv_done(dv: dict[str, Any]) -> bool:
    return (dv.get("status") or {}).get("phase") == "Succeeded"


def _vm_done(vm: dict[str, Any]) -> bool:
    return bool((vm.get("status") or {}).get("ready"))
