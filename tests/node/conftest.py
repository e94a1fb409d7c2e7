"""Real-node tier: one real node (kubelet, containerd, CNI, kube-proxy, CoreDNS, kube-router, a loopback
registry) joined to a control plane that listens on the node's bridge, for the whole session.

Set UDS_NODE_STATE_DIR=.envtest (after `make node-up`) to reuse a running node between runs; otherwise the
session starts its own in a temporary state dir and removes it, and everything it made, at the end.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.node.node_cluster import NodeHandle, load_handle, push_operator_image
from tools.node import node as node_launcher

REUSE_ENV = "UDS_NODE_STATE_DIR"
_NODE_DIR = Path(__file__).resolve().parent
TIMELINE = _NODE_DIR.parents[1] / ".envtest" / "node-timeline.tsv"
"""Per node test and phase: when it started, its seconds, the load average after it. The tier's wall time is
the sum of these, so this says which waits were on the CPU and which were not. Rewritten by each run."""
_timeline_started: list[bool] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _NODE_DIR not in Path(report.fspath).resolve().parents:
        return
    if not _timeline_started:
        _timeline_started.append(True)
        TIMELINE.parent.mkdir(parents=True, exist_ok=True)
        TIMELINE.write_text("test\tphase\tstarted_epoch_s\tseconds\tload1_after\n", encoding="utf-8")
    load = os.getloadavg()[0]
    with TIMELINE.open("a", encoding="utf-8") as timeline:
        timeline.write(
            f"{report.nodeid}\t{report.when}\t{report.start:.0f}\t{report.duration:.1f}\t{load:.1f}\n"
        )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/node carries the `node` marker (select with -m node)."""
    for item in items:
        if _NODE_DIR in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.node)


@pytest.fixture(scope="session")
def node() -> Iterator[NodeHandle]:
    reuse = os.environ.get(REUSE_ENV)
    if reuse:
        state = Path(reuse).resolve()
        if not node_launcher.status(state, quiet=True):
            pytest.fail(
                f"{REUSE_ENV}={reuse}: no healthy node there; run `make node-up` or unset it", pytrace=False
            )
        handle = load_handle(state)
        yield handle
        handle.api.close()
        return
    try:
        node_launcher.node_bin_dir()
    except node_launcher.NodeError as error:
        pytest.fail(str(error), pytrace=False)
    state = Path(tempfile.mkdtemp(prefix="udsn-", dir="/tmp"))
    try:
        node_launcher.up(state, tie_to_parent=True)
    except (node_launcher.NodeError, *node_launcher.controlplane.LAUNCH_ERRORS) as error:
        shutil.rmtree(state, ignore_errors=True)
        pytest.fail(f"could not start the real node: {error}", pytrace=False)
    handle = load_handle(state)
    try:
        yield handle
    finally:
        handle.api.close()
        if node_launcher.paths_for(state).pids.is_file():  # the lifecycle test may have stopped it already
            node_launcher.down(state, stop_plane=True)
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture
def ns(node: NodeHandle, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test, deleted afterwards."""
    slug = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    name = node.namespace(slug)
    try:
        yield name
    finally:
        node.delete_namespace(name)


OPERATOR_TAG = "node-test"


@pytest.fixture(scope="session")
def operator_image(node: NodeHandle) -> str:
    """The operator's image, built in this run and pushed into the node's registry."""
    return push_operator_image(node.state_dir, OPERATOR_TAG)
