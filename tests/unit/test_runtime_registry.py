"""The runtime's open kind registry and its kopf version gate."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest

from uds_vm_operator.controller import platform_facts, pool, udspackage_sync
from uds_vm_operator.runtime import kube
from uds_vm_operator.runtime.kopf_integration import (
    TESTED_KOPF_SERIES,
    UnsupportedKopfError,
    check_kopf_version,
)


def test_a_registered_kind_addresses_its_manifests() -> None:
    widget = kube.register_kind(kube.Kind("example.test/v1", "Widget", "widgets"))
    manifest = {"apiVersion": "example.test/v1", "kind": "Widget", "metadata": {"name": "w"}}
    assert kube.kind_of(manifest) is widget
    assert widget.path("ns", "w") == "/apis/example.test/v1/namespaces/ns/widgets/w"
    assert kube.register_kind(kube.Kind("example.test/v1", "Widget", "widgets")) is widget


def test_one_kind_cannot_be_registered_at_two_urls() -> None:
    kube.register_kind(kube.Kind("example.test/v1", "Gadget", "gadgets"))
    with pytest.raises(ValueError, match="already registered"):
        kube.register_kind(kube.Kind("example.test/v1", "Gadget", "gadgetz"))


def test_an_unregistered_kind_is_refused_with_the_fix() -> None:
    with pytest.raises(KeyError, match="register it"):
        kube.kind_of({"apiVersion": "example.test/v1", "kind": "Nothing"})


@pytest.mark.parametrize(
    "kind",
    [
        pool.POOL,
        pool.CONTROLLER_REVISION,
        udspackage_sync.PACKAGE,
        platform_facts.KUBEVIRT,
        platform_facts.CDI_CONFIG,
    ],
)
def test_every_controller_kind_is_in_the_registry(kind: kube.Kind) -> None:
    assert kube.KINDS[(kind.api_version, kind.kind)] is kind


def test_the_core_group_lives_under_api_v1() -> None:
    assert kube.POD.path("ns", "p", "log") == "/api/v1/namespaces/ns/pods/p/log"
    assert kube.NODE.path("ns", "n") == "/api/v1/nodes/n"
    assert kube.discovery_path("v1") == "/api/v1"


def test_the_installed_kopf_is_a_tested_one() -> None:
    assert check_kopf_version() == importlib.metadata.version("kopf")


@pytest.mark.parametrize("version", [f"{TESTED_KOPF_SERIES[0]}.0", f"{TESTED_KOPF_SERIES[-1]}.9"])
def test_any_patch_release_of_a_tested_series_is_accepted(version: str) -> None:
    assert check_kopf_version(version) == version


@pytest.mark.parametrize("version", ["1.44.3", "1.46.0", "2.0.0"])
def test_an_untested_kopf_stops_the_start_with_what_to_install(version: str) -> None:
    with pytest.raises(UnsupportedKopfError, match=rf"kopf {version} is installed.*pip install"):
        check_kopf_version(version)


def test_no_api_path_is_written_outside_runtime() -> None:
    """Issue 36: the operator, the CLI and the demo take every URL from the kind registry, so an API group
    or version moves in one place. The runtime builds paths; nothing else spells one."""
    root = Path(__file__).resolve().parents[2]
    package = root / "src" / "uds_vm_operator"
    sources = [p for p in package.rglob("*.py") if "runtime" not in p.relative_to(package).parts]
    sources.append(root / "tools" / "demo.py")
    spelled = [
        f"{path.relative_to(root)}:{number}"
        for path in sources
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"[\"'/]apis?/", line) and "/v1" in line
    ]
    assert len(sources) > 100 and not spelled, spelled
