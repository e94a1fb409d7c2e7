"""Real-node tier: one real node (kubelet, containerd, CNI, kube-proxy, CoreDNS, kube-router, a loopback
registry) joined to a control plane that listens on the node's bridge, for the whole session.

Set UDS_NODE_STATE_DIR=.envtest (after `make node-up`) to reuse a running node between runs; otherwise the
session starts its own in a temporary state dir and removes it, and everything it made, at the end.

`make test` runs the tier as two lanes on one node (tests/node/lanes.py): the first starts the node, CDI and
KubeVirt, the second uses them; the hooks here hold the order the lanes' shared state needs.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.node import lanes
from tests.node.cdi_support import ensure_cdi
from tests.node.kubevirt_node import install_kubevirt
from tests.node.node_cluster import NodeHandle, load_handle, push_operator_image, pushed_operator_image
from tools.node import node as node_launcher

REUSE_ENV = "UDS_NODE_STATE_DIR"
_NODE_DIR = Path(__file__).resolve().parent
_CDI_DIR = _NODE_DIR / "cdi"
TIMELINE = (
    _NODE_DIR.parents[1] / ".envtest" / f"node-timeline{'-' + lanes.lane() if lanes.lane() else ''}.tsv"
)
"""Per node test and phase: when it started, its seconds, the load average after it. A lane's wall time is
the sum of these, so this says which waits were on the CPU and which were not. Rewritten by each run (one
file per lane under `make test`)."""
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


def _under(item: pytest.Item, folder: Path) -> bool:
    return folder in Path(str(item.path)).resolve().parents


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/node carries the `node` marker (select with -m node). In the second lane the
    real-CDI tests go first and the CDI-indifferent ones next, so the lane lets go of CDI before it waits for
    CDI to be removed (the other order would leave each lane waiting for the other)."""
    for item in items:
        if _under(item, _NODE_DIR):
            item.add_marker(pytest.mark.node)
    which = lanes.lane()
    if which == lanes.SECOND:
        items.sort(
            key=lambda i: 0 if _under(i, _CDI_DIR) else 1 if i.get_closest_marker("cdi_indifferent") else 2
        )
        if not any(_under(i, _CDI_DIR) for i in items):
            lanes.mark(lanes.CDI_RELEASED)
    elif which == lanes.FIRST:
        cdi_items = [i for i in items if _under(i, _CDI_DIR)]
        if cdi_items:
            _LAST_CDI_ITEM.append(cdi_items[-1].nodeid)


_LAST_CDI_ITEM: list[str] = []
"""The first lane's last real-CDI test: it starts once the second lane is done with CDI, whose removal in
its teardown must not pull CDI from under the other lane."""


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """The waits between the two lanes, before a test's own timeout starts (pytest-timeout's wrapper is
    inside this one): a lane may wait most of a tier's length for the other."""
    which = lanes.lane()
    try:
        if which == lanes.SECOND and not lanes.marked(lanes.READY):
            # The session's node fixture waits for it too, but inside the first test's timeout: here the wait
            # (the first lane's node, CDI and KubeVirt coming up, minutes) is not charged to that test.
            lanes.wait_for(lanes.READY, other=lanes.FIRST, why="the first lane's node, CDI and KubeVirt")
        if which == lanes.FIRST:
            if item.get_closest_marker("alone_on_the_node"):
                lanes.wait_for(
                    lanes.ended_marker(lanes.SECOND),
                    other=lanes.SECOND,
                    why=f"the second lane before {item.name}",
                )
            if item.nodeid in _LAST_CDI_ITEM:
                lanes.wait_for(
                    lanes.CDI_RELEASED,
                    other=lanes.SECOND,
                    why="the second lane's real-CDI tests",
                    ended_is_enough=True,
                )
        elif which == lanes.SECOND and _under(item, _NODE_DIR):
            if item.get_closest_marker("alone_on_the_node"):
                raise lanes.LaneError(f"{item.nodeid} changes the whole node: it belongs in the first lane")
            if not _under(item, _CDI_DIR) and not item.get_closest_marker("cdi_indifferent"):
                lanes.wait_for(lanes.CDI_DOWN, other=lanes.FIRST, why=f"CDI removed before {item.name}")
    except lanes.LaneError as error:
        _LANE_ERRORS[item.nodeid] = str(error)
    yield


_LANE_ERRORS: dict[str, str] = {}


@pytest.fixture(autouse=True)
def _lane_order_held(request: pytest.FixtureRequest) -> None:
    """A test whose wait for the other lane failed fails, with why, instead of running out of order."""
    problem = _LANE_ERRORS.pop(request.node.nodeid, None)
    if problem:
        pytest.fail(problem, pytrace=False)


@pytest.fixture(scope="session")
def node() -> Iterator[NodeHandle]:
    reuse = os.environ.get(REUSE_ENV)
    if lanes.lane() == lanes.SECOND:
        try:
            reuse = lanes.wait_for(
                lanes.READY, other=lanes.FIRST, why="the first lane's node, CDI and KubeVirt"
            )
        except lanes.LaneError as error:
            pytest.fail(str(error), pytrace=False)
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
        if lanes.lane() == lanes.FIRST:
            shared_installs(handle)
        yield handle
    finally:
        handle.api.close()
        if lanes.marked(lanes.READY):  # the second lane's tests run on this node until its process ends
            lanes.wait_for(
                lanes.ended_marker(lanes.SECOND),
                other=lanes.SECOND,
                why="the second lane",
                ended_is_enough=True,
            )
        if node_launcher.paths_for(state).pids.is_file():  # the lifecycle test may have stopped it already
            node_launcher.down(state, stop_plane=True)
        shutil.rmtree(state, ignore_errors=True)


def shared_installs(node: NodeHandle) -> None:
    """The first lane's, before the second lane starts: the operator's image pushed, CDI, then KubeVirt
    (virt-api restarts when CDI's API appears), then ``ready``."""
    push_operator_image(node.state_dir, OPERATOR_TAG)
    ensure_cdi(node)
    install_kubevirt(node)
    lanes.mark(lanes.READY, str(node.state_dir))


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
    """The operator's image, built in this run and pushed into the node's registry (by the first lane when
    the tier runs in two)."""
    if lanes.lane() is not None:
        return pushed_operator_image(node.state_dir)
    return push_operator_image(node.state_dir, OPERATOR_TAG)
