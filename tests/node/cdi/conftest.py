"""The real-CDI tests share one CDI install: `make cdi-up` before the first, `make cdi-down` after the last.

CDI must not outlive this package. The tests after it *play* CDI (they write a DataVolume's status
themselves), and a real cdi-controller would reconcile those DataVolumes too. The teardown also proves that
CDI uninstalls cleanly: nothing of it may be left once its operator has removed it.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from cdi_support import ROOT, ensure_cdi
from node_cluster import NodeHandle


def _left_behind(node: NodeHandle) -> list[str]:
    """CDI's webhooks, aggregated APIs and namespace still present (they would break every later test)."""
    left = []
    webhook = "/apis/admissionregistration.k8s.io/v1/{}webhookconfigurations"

    def cdi_webhook(item: dict[str, Any]) -> bool:
        return str(item["metadata"]["name"]).startswith("cdi-")

    def cdi_api(item: dict[str, Any]) -> bool:
        # a local APIService (no spec.service) is the API server's own, for a CRD group version: it stays
        served = (item.get("spec") or {}).get("service") is not None
        return served and str(item["metadata"]["name"]).endswith(".cdi.kubevirt.io")

    for path, is_cdi in (
        (webhook.format("validating"), cdi_webhook),
        (webhook.format("mutating"), cdi_webhook),
        ("/apis/apiregistration.k8s.io/v1/apiservices", cdi_api),
    ):
        kind = path.rsplit("/", 1)[1]
        left += [f"{kind}/{item['metadata']['name']}" for item in node.api.items(path) if is_cdi(item)]
    if node.api.get("/api/v1/namespaces/cdi") is not None:
        left.append("namespace/cdi")
    if node.api.items("/api/v1/namespaces/cdi/pods"):
        left.append("pods in namespace cdi")
    return left


@pytest.fixture(scope="package")
def cdi(node: NodeHandle) -> Iterator[NodeHandle]:
    """The node with the real CDI on it, for this package's tests only."""
    ensure_cdi(node)
    yield node
    subprocess.run(
        [sys.executable, str(ROOT / "tools/cdi/install.py"), "--state-dir", str(node.state_dir), "--down"],
        check=True,
    )
    assert _left_behind(node) == [], "cdi-down removed everything CDI had installed"
    crd = node.api.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/datavolumes.cdi.kubevirt.io")
    assert crd is not None, "the plane's DataVolume CRD is back for the tests that play CDI"


@pytest.fixture
def cdi_ns(cdi: NodeHandle, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test, named after the module's NAMESPACE and labelled with its LABELS."""
    name = cdi.namespace(request.module.NAMESPACE, getattr(request.module, "LABELS", None))
    try:
        yield name
    finally:
        cdi.delete_namespace(name)
