"""The API server, then etcd, go away mid-reconcile and come back: the operator recovers by itself.

These tests stop and start control-plane processes, so they run on a dedicated plane of their own (started
for this module, stopped after it), never on the session's shared one. The operator process must survive
the outage (no exit, no restart by the test) and converge every VM once the API returns — including a VM
created after the outage, which proves the watches were re-established rather than left dead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.operator_fixtures import status_of, udsvm, vm_path, wait_phase
from tests.integration.operator_harness import Api, OperatorProcess
from tests.kube_helpers import wait_for
from tools.envtest.controlplane import LAUNCH_ERRORS, ControlPlane, running_control_plane

VMS = 30
OUTAGE_S = 3.0


@pytest.fixture(scope="module")
def own_plane() -> Iterator[ControlPlane]:
    """A private control plane: these tests kill its processes."""
    try:
        with running_control_plane() as plane:
            yield plane
    except LAUNCH_ERRORS as error:
        pytest.fail(f"could not start a dedicated control plane: {error}", pytrace=False)


@pytest.fixture
def plane_api(own_plane: ControlPlane) -> Iterator[Api]:
    client = Api(Path(own_plane.kubeconfig))
    try:
        yield client
    finally:
        client.close()


def _namespace(api: Api, name: str) -> str:
    api.call("POST", "/api/v1/namespaces", {"metadata": {"name": name}}, expect=(201,))
    return name


def _reachable(api: Api) -> bool:
    try:
        return api.text("/readyz") == "ok"
    except Exception:  # connection refused / 5xx while a component restarts
        return False


def _outage_mid_reconcile(
    api: Api, plane: ControlPlane, tmp_path: Path, namespace: str, restart: Callable[[float], None]
) -> None:
    names = [f"vm{i:02d}" for i in range(VMS)]
    operator = OperatorProcess(Path(plane.kubeconfig), namespace, tmp_path / "logs")
    operator.start()
    try:
        for name in names:
            api.apply(udsvm(name, namespace), vm_path(namespace, name))
        wait_for(lambda: '"message":"applied"' in operator.logs(10**6), 30, 0.02, what="first child applied")
        restart(OUTAGE_S)
        wait_for(lambda: _reachable(api), 60, 0.2, what="the API server answering again")
        assert operator.process is not None and operator.process.poll() is None, "the operator exited"
        for name in names:
            wait_phase(api, operator, namespace, name, "Pending", timeout_s=90)
        api.apply(udsvm("after", namespace), vm_path(namespace, "after"))
        wait_phase(api, operator, namespace, "after", "Pending", timeout_s=90)
        assert operator.healthy(), "the operator's /healthz fails after the outage"
        assert operator.process is not None and operator.process.poll() is None, "the operator exited"
        assert all(status_of(api, namespace, n)["phase"] == "Pending" for n in names)
    finally:
        operator.stop()
        print(operator.logs())


def test_operator_recovers_when_the_apiserver_restarts_mid_reconcile(
    plane_api: Api, own_plane: ControlPlane, tmp_path: Path
) -> None:
    namespace = _namespace(plane_api, "fault-apiserver")
    _outage_mid_reconcile(plane_api, own_plane, tmp_path, namespace, own_plane.restart_apiserver)


def test_operator_recovers_when_etcd_restarts_mid_reconcile(
    plane_api: Api, own_plane: ControlPlane, tmp_path: Path
) -> None:
    namespace = _namespace(plane_api, "fault-etcd")
    _outage_mid_reconcile(plane_api, own_plane, tmp_path, namespace, own_plane.restart_etcd)
