"""What the SI-7 integration tests share: playing kubelet for the verifier pod, and watching an object.

The tests play CDI and kubelet the way their controllers would (status subresource writes); the verdict
itself is computed by the real ``uds-vm-operator verify-disk`` on a real file, with the pod's own arguments.
:class:`Recorder` follows one object through a real watch from before it exists, so "the VM was never set
to run" is checked on every version the API server stored, not on the last one polled.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
from lightkube.config import client_adapter

from tests.integration.operator_fixtures import (
    core_path,
    dv_path,
    kv_path,
    play_cdi,
    status_of,
    udsvm,
    vm_path,
)
from tests.integration.operator_harness import Api
from tests.kube_helpers import wait_for
from uds_vm_operator.runtime.kube import load_kubeconfig

VIRTUAL_SIZE = 10 * 1024 * 1024
OPERATOR_IMAGE = "registry.local/uds-vm-operator:test"


def play_kubelet(api: Api, namespace: str, pod: dict[str, Any], disk: Path, tmp_path: Path) -> dict[str, Any]:
    """Run the pod's verify-disk command on ``disk`` and report its end as kubelet would."""
    container = pod["spec"]["containers"][0]
    command = list(container["command"])
    command[command.index("--path") + 1] = str(disk)
    log = tmp_path / "termination-log"
    command[command.index("--termination-log") + 1] = str(log)
    exe = Path(sys.executable).with_name(command[0])
    assert exe.is_file(), f"{exe} is missing: run `make install` (pip install -e '.[dev]') first"
    proc = subprocess.run([str(exe), *command[1:]], capture_output=True, text=True, check=False)
    message = log.read_text()
    now = "2026-01-01T00:00:00Z"
    api.merge(
        core_path(namespace, "pods", pod["metadata"]["name"]) + "/status",
        {
            "status": {
                "phase": "Succeeded" if proc.returncode == 0 else "Failed",
                "containerStatuses": [
                    {
                        "name": container["name"],
                        "image": container["image"],
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "state": {
                            "terminated": {
                                "exitCode": proc.returncode,
                                "reason": "Completed" if proc.returncode == 0 else "Error",
                                "message": message,
                                "startedAt": now,
                                "finishedAt": now,
                            }
                        },
                    }
                ],
            }
        },
    )
    return dict(json.loads(message))


def apply_vm(api: Api, namespace: str, source: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """Apply VM ``web`` and play CDI: its DataVolume appears, then the import (or upload) succeeds."""
    manifest = udsvm("web", namespace, source=source, disk={"virtualSize": VIRTUAL_SIZE}, **spec)
    applied = api.apply(manifest, vm_path(namespace, "web"))
    wait_for(lambda: api.get(dv_path(namespace, "web-dv")), 60, 0.2, what="DataVolume web-dv")
    play_cdi(api, namespace, "web-dv", "Succeeded", "100.0%")
    return applied


def verifier_pod(api: Api, namespace: str) -> dict[str, Any]:
    """The verifier pod once the operator created it; on timeout, say what the VM reported instead."""
    try:
        return wait_for(
            lambda: api.get(core_path(namespace, "pods", "web-verify")),
            60,
            0.2,
            what="verifier pod web-verify",
        )
    except AssertionError as error:
        events = [e.get("note") for e in api.items(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")]
        raise AssertionError(
            f"{error}\nstatus: {status_of(api, namespace, 'web')}\nevents: {events}"
        ) from None


def run_strategy(api: Api, namespace: str) -> str | None:
    vm = api.get(kv_path(namespace, "web")) or {}
    return (vm.get("spec") or {}).get("runStrategy")


def si7_metric(metrics: str, vm: str) -> list[str]:
    """The operator's ``uds_vm_compliance_verified{control="SI-7"}`` samples of one VM."""
    return [
        line
        for line in metrics.splitlines()
        if line.startswith("uds_vm_compliance_verified{")
        and 'control="SI-7"' in line
        and f'vm="{vm}"' in line
    ]


class Recorder:
    """Every version of one named object, as seen by a watch started before the object exists."""

    def __init__(
        self, kubeconfig: Path, collection: str, name: str, project: Callable[[dict[str, Any]], Any]
    ):
        config = load_kubeconfig(kubeconfig)
        params = client_adapter.ConnectionParams(timeout=httpx2.Timeout(30.0), trust_env=False)
        self._http = client_adapter.Client(config, params)
        self._collection = collection
        self._name = name
        self._project = project
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._seen: list[Any] = []
        self.error: BaseException | None = None
        listing = self._http.get(collection, params={"fieldSelector": f"metadata.name={name}"})
        listing.raise_for_status()
        self._version = str(listing.json()["metadata"]["resourceVersion"])
        for item in listing.json().get("items") or []:
            self._seen.append(project(item))
        self._thread = threading.Thread(target=self._run, name=f"watch-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                params = {
                    "watch": "true",
                    "fieldSelector": f"metadata.name={self._name}",
                    "resourceVersion": self._version,
                    "timeoutSeconds": "2",
                    "allowWatchBookmarks": "false",
                }
                with self._http.stream("GET", self._collection, params=params) as response:
                    response.raise_for_status()
                    for line in response.iter_lines():
                        if line.strip():
                            self._take(json.loads(line))
        except BaseException as exc:  # surfaced by seen(): a broken watch must fail the test, not hide
            self.error = exc

    def _take(self, event: dict[str, Any]) -> None:
        obj = event.get("object") or {}
        if event.get("type") == "ERROR":
            raise AssertionError(f"watch of {self._name} failed: {obj}")
        self._version = str(obj["metadata"]["resourceVersion"])
        if event.get("type") in ("ADDED", "MODIFIED"):
            with self._lock:
                self._seen.append(self._project(obj))

    def seen(self) -> list[Any]:
        """What was projected from every version so far (raises if the watch broke)."""
        if self.error is not None:
            raise AssertionError(f"the watch of {self._name} broke: {self.error!r}")
        with self._lock:
            return list(self._seen)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._http.close()


@contextmanager
def recording(
    kubeconfig: Path, collection: str, name: str, project: Callable[[dict[str, Any]], Any]
) -> Iterator[Recorder]:
    recorder = Recorder(kubeconfig, collection, name, project)
    try:
        yield recorder
    finally:
        recorder.close()


def vm_run_strategy(obj: dict[str, Any]) -> Any:
    return (obj.get("spec") or {}).get("runStrategy")


def kv_collection(namespace: str) -> str:
    return f"/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachines"


def udsvm_collection(namespace: str) -> str:
    return f"/apis/uds.dev/v1alpha1/namespaces/{namespace}/udsvirtualmachines"
