"""Fixtures and manifests shared by the operator's integration tests (imported by test_operator_*.py)."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.integration.operator_harness import Api, OperatorProcess
from tests.kube_helpers import wait_for

if TYPE_CHECKING:
    from typer.testing import Result

SHA = "sha256:" + "5" * 64
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ0000000000000000000000000000000000000000000 ops@site"


def vm_path(namespace: str, name: str | None = None) -> str:
    base = f"/apis/uds.dev/v1alpha1/namespaces/{namespace}/udsvirtualmachines"
    return f"{base}/{name}" if name else base


def dv_path(namespace: str, name: str | None = None) -> str:
    base = f"/apis/cdi.kubevirt.io/v1beta1/namespaces/{namespace}/datavolumes"
    return f"{base}/{name}" if name else base


def kv_path(namespace: str, name: str | None = None) -> str:
    base = f"/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachines"
    return f"{base}/{name}" if name else base


def core_path(namespace: str, plural: str, name: str | None = None) -> str:
    base = f"/api/v1/namespaces/{namespace}/{plural}"
    return f"{base}/{name}" if name else base


def netpol_path(namespace: str, name: str | None = None) -> str:
    base = f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies"
    return f"{base}/{name}" if name else base


def udsvm(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    """A valid linux VM from an http source with a declared digest, plus overrides."""
    base: dict[str, Any] = {
        "source": {"http": {"url": "https://images.site.internal/ubuntu-24.04.qcow2", "checksum": SHA}},
        "disk": {"virtualSize": "10Mi"},
        "resources": {"cpu": 1, "memory": "1Gi"},
        "cloudInit": {"sshAuthorizedKeys": [SSH_KEY]},
    }
    base.update(copy.deepcopy(spec))
    return {
        "apiVersion": "uds.dev/v1alpha1",
        "kind": "UDSVirtualMachine",
        "metadata": {"name": name, "namespace": namespace},
        "spec": base,
    }


def compliance_validate(kubeconfig: str | Path, namespace: str, out: Path) -> Result:
    """``uds-vmctl compliance validate -n NAMESPACE --json --output OUT``, run in-process.

    Exit 0 (every control passes) and 1 (some control fails) are both verdicts; anything else is a broken
    command, so it fails the test here with the command's output. The CLI is imported here, not above: the
    benchmarks import this module for ``udsvm`` and should not load the CLI with it.
    """
    from typer.testing import CliRunner  # noqa: PLC0415

    from uds_vm_operator.cli.main import app  # noqa: PLC0415

    result = CliRunner().invoke(
        app,
        [
            "compliance",
            "validate",
            "--kubeconfig",
            str(kubeconfig),
            "-n",
            namespace,
            "--json",
            "--output",
            str(out),
        ],
    )
    assert result.exit_code in (0, 1), result.output
    return result


def status_of(api: Api, namespace: str, name: str) -> dict[str, Any]:
    return dict((api.get(vm_path(namespace, name)) or {}).get("status") or {})


def wait_phase(
    api: Api, operator: OperatorProcess, namespace: str, name: str, phase: str, *, timeout_s: float = 60
) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        status = status_of(api, namespace, name)
        return status if status.get("phase") == phase else None

    try:
        return wait_for(reached, timeout_s, 0.2, what=f"{namespace}/{name} phase {phase}")
    except AssertionError as error:
        raise AssertionError(
            f"{error}\nstatus: {status_of(api, namespace, name)}\n{operator.logs()}"
        ) from None


def await_event_reasons(api: Api, namespace: str, uid: str, reasons: set[str]) -> list[dict[str, Any]]:
    """The namespace's Events once those regarding `uid` carry every reason (bounded wait).

    A phase's Event is written after the status that shows the phase, so one read right after a
    `wait_phase` may come between the two.
    """

    def present() -> list[dict[str, Any]] | None:
        events = api.items(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
        seen = {e["reason"] for e in events if e["regarding"]["uid"] == uid}
        return events if reasons <= seen else None

    result: list[dict[str, Any]] = wait_for(present, 30, 0.2, what=f"the Events {sorted(reasons)}")
    return result


def condition(status: dict[str, Any], cond_type: str) -> dict[str, Any]:
    return next(c for c in status.get("conditions") or [] if c["type"] == cond_type)


def play_cdi(api: Api, namespace: str, dv_name: str, phase: str, progress: str | None = None) -> None:
    """Write the DataVolume status CDI's controller would write (status subresource)."""
    status: dict[str, Any] = {"phase": phase}
    if progress is not None:
        status["progress"] = progress
    api.merge(dv_path(namespace, dv_name) + "/status", {"status": status})


def play_kubevirt(api: Api, namespace: str, vm_name: str, printable: str, ready: bool) -> None:
    """Write the VirtualMachine status KubeVirt's controller would write (status subresource)."""
    api.merge(
        kv_path(namespace, vm_name) + "/status",
        {"status": {"printableStatus": printable, "ready": ready, "created": ready}},
    )


@pytest.fixture
def api(control_plane: Any) -> Iterator[Api]:
    client = Api(Path(control_plane.kubeconfig))
    try:
        yield client
    finally:
        client.close()


@contextlib.contextmanager
def running_operator(
    control_plane: Any, namespace: str, tmp_path: Path, extra_args: list[str] | None = None
) -> Iterator[OperatorProcess]:
    """The operator as a real subprocess for one test; its log is printed afterwards for diagnosis."""
    process = OperatorProcess(
        Path(control_plane.kubeconfig), namespace, tmp_path / "logs", extra_args=extra_args or []
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()
        print(f"--- operator log ({process.log_path}) ---\n{process.logs()}")


@pytest.fixture
def operator(control_plane: Any, namespace: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    with running_operator(control_plane, namespace, tmp_path) as process:
        yield process


PVC_PROTECTION = "kubernetes.io/pvc-protection"


def release_pvcs(api: Api, namespace: str) -> None:
    """Play the pvc-protection controller (absent from this control plane) so the namespace can be deleted.

    Call only after the operator stopped, or it would re-create the released Retain disks.
    """
    for pvc in api.items(core_path(namespace, "persistentvolumeclaims")):
        finalizers = pvc["metadata"].get("finalizers") or []
        if PVC_PROTECTION in finalizers:
            remaining = [f for f in finalizers if f != PVC_PROTECTION]
            api.merge(
                core_path(namespace, "persistentvolumeclaims", pvc["metadata"]["name"]),
                {"metadata": {"finalizers": remaining or None}},
            )
