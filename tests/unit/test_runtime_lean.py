"""The memory measures of the operator process: trust store, kopf memories, scanning, TLS buffers."""

from __future__ import annotations

import asyncio
import os
from asyncio import sslproto
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml
from kopf._core.reactor.inventory import ResourceMemories

from uds_vm_operator.controller.handlers import configure_settings, needs_cluster_scanning
from uds_vm_operator.runtime import kube
from uds_vm_operator.runtime.api_presence import describe_change, wait_for_change
from uds_vm_operator.runtime.errors import KubeUnreachableError
from uds_vm_operator.runtime.kopf_integration import (
    EphemeralMemories,
    NoDiffBase,
    memories_for,
    use_no_diffbase_if_event_only,
)
from uds_vm_operator.runtime.kube import discovery_path
from uds_vm_operator.runtime.memory import shrink_tls_read_buffers
from uds_vm_operator.runtime.trust import restrict_default_trust


def kubeconfig(tmp_path: Path, cluster: dict[str, Any]) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "current-context": "c",
                "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
                "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:6443", **cluster}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
            }
        )
    )
    return str(path)


def test_an_inline_cluster_ca_leaves_the_default_store_empty(tmp_path: Path) -> None:
    environ: dict[str, str] = {}
    path = kubeconfig(tmp_path, {"certificate-authority-data": "LS0t"})
    assert restrict_default_trust(path, environ, tmp_path / "no-sa") == os.devnull
    assert environ == {"SSL_CERT_FILE": os.devnull, "SSL_CERT_DIR": os.devnull}


def test_a_ca_file_becomes_the_only_trusted_root(tmp_path: Path) -> None:
    environ: dict[str, str] = {}
    path = kubeconfig(tmp_path, {"certificate-authority": "ca.crt"})
    assert restrict_default_trust(path, environ, tmp_path / "no-sa") == str(tmp_path / "ca.crt")


def test_in_cluster_trusts_the_service_account_ca(tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text("pem")
    environ = {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}
    assert restrict_default_trust(None, environ, ca) == str(ca)
    assert environ["SSL_CERT_FILE"] == str(ca)


@pytest.mark.parametrize(
    ("environ", "cluster"),
    [
        ({"SSL_CERT_FILE": "/mine.pem"}, {"certificate-authority-data": "LS0t"}),  # the user's choice wins
        ({}, {}),  # no CA of its own: the system store is what verifies the server
        ({}, {"insecure-skip-tls-verify": True}),
    ],
)
def test_the_system_store_is_kept_when_it_may_be_needed(
    tmp_path: Path, environ: dict[str, str], cluster: dict[str, Any]
) -> None:
    before = dict(environ)
    assert restrict_default_trust(kubeconfig(tmp_path, cluster), environ, tmp_path / "no-sa") is None
    assert environ == before


def test_an_unreadable_kubeconfig_changes_nothing(tmp_path: Path) -> None:
    environ: dict[str, str] = {}
    (tmp_path / "broken").write_text("{not yaml")
    assert restrict_default_trust(str(tmp_path / "broken"), environ, tmp_path / "no-sa") is None
    assert restrict_default_trust(str(tmp_path / "missing"), environ, tmp_path / "no-sa") is None
    assert environ == {}


def test_event_only_registries_get_memories_that_keep_nothing() -> None:
    registry = kopf.OperatorRegistry()

    @kopf.on.event("uds.dev", "v1alpha1", "udsvirtualmachines", registry=registry)
    async def seen(**_: Any) -> None:
        return None

    memories = memories_for(registry)
    assert isinstance(memories, EphemeralMemories)
    body = {"metadata": {"uid": "u1", "name": "a", "namespace": "n"}}
    first = asyncio.run(memories.recall(body))
    second = asyncio.run(memories.recall(body))
    assert first is not second and list(memories.iter_all_memories()) == []


def test_a_registry_with_a_timer_keeps_kopfs_memories() -> None:
    registry = kopf.OperatorRegistry()

    @kopf.timer("uds.dev", "v1alpha1", "udsvirtualmachines", interval=60, registry=registry)
    async def tick(**_: Any) -> None:
        return None

    memories = memories_for(registry)
    assert type(memories) is ResourceMemories
    body = {"metadata": {"uid": "u1", "name": "a", "namespace": "n"}}
    assert asyncio.run(memories.recall(body)) is asyncio.run(memories.recall(body))


@pytest.mark.parametrize(
    ("namespaces", "scan"),
    [((), False), (("team-a", "team-b"), False), (("team-*",), True), (("!kube-system",), True)],
)
def test_cluster_scanning_only_for_namespace_globs(namespaces: tuple[str, ...], scan: bool) -> None:
    assert needs_cluster_scanning(namespaces) is scan
    settings = kopf.OperatorSettings()
    configure_settings(settings, max_workers=4, scan_cluster=scan)
    assert settings.scanning.disabled is (not scan)


def test_served_kind_changes_are_named() -> None:
    before = frozenset({kube.UDS_VM})
    after = frozenset({kube.UDS_VM, kube.DATA_VOLUME})
    assert describe_change(before, after) == "now served: datavolumes.cdi.kubevirt.io/v1beta1"
    assert describe_change(after, before) == "no longer served: datavolumes.cdi.kubevirt.io/v1beta1"
    assert discovery_path("v1") == "/api/v1"
    assert discovery_path("kubevirt.io/v1") == "/apis/kubevirt.io/v1"


def test_tls_read_buffers_are_shrunk_for_new_connections() -> None:
    original = sslproto.SSLProtocol.max_size
    try:
        shrink_tls_read_buffers(32 * 1024)
        assert sslproto.SSLProtocol.max_size == 32 * 1024
    finally:
        sslproto.SSLProtocol.max_size = original


class DiscoveryScript:
    """Answers discovery GETs from a script of served plural sets, one entry per check."""

    def __init__(self, script: list[set[str] | None]) -> None:
        self.script = script
        self.checks = 0

    async def discover(self, api_version: str) -> dict[str, Any]:
        served = self.script[min(self.checks, len(self.script) - 1)]
        self.checks += 1
        if served is None:
            raise KubeUnreachableError("down")
        return {"resources": [{"name": plural} for plural in served]}


def test_a_discovery_blip_during_an_api_server_restart_is_not_a_change() -> None:
    kinds = [kube.SECRET, kube.PVC]
    initial = frozenset(kinds)
    # down, then secrets briefly missing (not confirmed), then a real, lasting removal of PVCs
    api = DiscoveryScript(
        [None, {"secrets"}, {"secrets", "persistentvolumeclaims"}, {"secrets"}, {"secrets"}]
    )
    change = asyncio.run(wait_for_change(api, kinds, initial, interval_s=0, confirm_s=0))  # type: ignore[arg-type]
    assert change == "no longer served: persistentvolumeclaims.v1"
    assert api.checks == 5


def test_event_only_registries_skip_kopfs_diff_base() -> None:
    events_only = kopf.OperatorRegistry()

    @kopf.on.event("uds.dev", "v1alpha1", "udsvirtualmachines", registry=events_only)
    async def seen(**_: Any) -> None:
        return None

    settings = kopf.OperatorSettings()
    assert use_no_diffbase_if_event_only(settings, events_only)
    storage = settings.persistence.diffbase_storage
    assert isinstance(storage, NoDiffBase)
    body = kopf.Body({"metadata": {"name": "a"}, "spec": {"big": ["x"] * 100}})
    assert storage.build(body=body) == {} and storage.fetch(body=body) is None

    with_update_handler = kopf.OperatorRegistry()

    @kopf.on.update("uds.dev", "v1alpha1", "udsvirtualmachines", registry=with_update_handler)
    async def changed(**_: Any) -> None:
        return None

    settings = kopf.OperatorSettings()
    assert not use_no_diffbase_if_event_only(settings, with_update_handler)
    assert not isinstance(settings.persistence.diffbase_storage, NoDiffBase)
