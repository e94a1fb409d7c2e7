"""The real-CDI tests share one CDI install: `make cdi-up` before the first, `make cdi-down` after the last.

CDI must not outlive this package. The tests after it *play* CDI (they write a DataVolume's status
themselves), and a real cdi-controller would reconcile those DataVolumes too. The teardown also proves that
CDI uninstalls cleanly: nothing of it may be left once its operator has removed it.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.node import lanes
from tests.node.cdi_support import ROOT, ensure_cdi
from tests.node.node_cluster import NodeHandle
from tools.cdi.install import is_cdi_hook


def _left_behind(node: NodeHandle) -> list[str]:
    """CDI's webhooks, aggregated APIs and namespace still present (they would break every later test)."""
    left = []
    admission = "/apis/admissionregistration.k8s.io/v1"
    for kind, path in (
        ("ValidatingWebhookConfiguration", f"{admission}/validatingwebhookconfigurations"),
        ("MutatingWebhookConfiguration", f"{admission}/mutatingwebhookconfigurations"),
        ("APIService", "/apis/apiregistration.k8s.io/v1/apiservices"),
    ):
        items = node.api.items(path)
        left += [f"{kind}/{item['metadata']['name']}" for item in items if is_cdi_hook(kind, item)]
    if node.api.get("/api/v1/namespaces/cdi") is not None:
        left.append("namespace/cdi")
    if node.api.items("/api/v1/namespaces/cdi/pods"):
        left.append("pods in namespace cdi")
    return left


@pytest.fixture(scope="package")
def cdi(node: NodeHandle) -> Iterator[NodeHandle]:
    """The node with the real CDI on it, for this package's tests only.

    Under `make test`'s two lanes (tests/node/lanes.py) the first lane installed CDI with the node; the
    second lane says when it is done with it, and the first removes it once both are."""
    which = lanes.lane()
    if which is None:
        ensure_cdi(node)
    yield node
    if which == lanes.SECOND:
        lanes.mark(lanes.CDI_RELEASED)
        return
    try:
        subprocess.run(
            [sys.executable, "-m", "tools.cdi.install", "--state-dir", str(node.state_dir), "--down"],
            cwd=ROOT,
            check=True,
        )
        assert _left_behind(node) == [], "cdi-down removed everything CDI had installed"
        crd = node.api.get(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/datavolumes.cdi.kubevirt.io"
        )
        assert crd is not None, "the plane's DataVolume CRD is back for the tests that play CDI"
    finally:
        lanes.mark(lanes.CDI_DOWN)


@pytest.fixture
def cdi_ns(cdi: NodeHandle, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test, named after the module's NAMESPACE and labelled with its LABELS."""
    name = cdi.namespace(request.module.NAMESPACE, getattr(request.module, "LABELS", None))
    try:
        yield name
    finally:
        cdi.delete_namespace(name)
