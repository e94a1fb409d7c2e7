"""With kopf's cluster scanning off, the operator itself notices a watched API appearing or vanishing.

Played on the real API server with a CRD of our own (the shared plane's KubeVirt/CDI CRDs stay put).
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

from tests.integration.operator_fixtures import api
from tests.integration.operator_harness import Api
from uds_vm_operator.runtime import kube
from uds_vm_operator.runtime.api_presence import served_kinds, wait_for_change

__all__ = ["api"]  # fixture used by name


def widget_crd(group: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object"}},
                }
            ],
        },
    }


def test_a_watched_kind_appearing_and_vanishing_is_noticed(api: Api, control_plane: Any) -> None:
    group = f"presence-{secrets.token_hex(3)}.test.uds.dev"
    widget = kube.Kind(f"{group}/v1", "Widget", "widgets")
    kinds = [kube.UDS_VM, kube.DATA_VOLUME, kube.SECRET, widget]

    async def scenario() -> tuple[frozenset[kube.Kind], str, str]:
        client = kube.KubeApi.from_kubeconfig(control_plane.kubeconfig)
        try:
            before = await served_kinds(client, kinds)
            api.call("POST", kube.CRD.path(), widget_crd(group), expect=(201,))
            appeared = await asyncio.wait_for(
                wait_for_change(client, kinds, before, interval_s=0.5, confirm_s=0.5), 60
            )
            with_widget = await served_kinds(client, kinds)
            api.call("DELETE", kube.CRD.path(None, f"widgets.{group}"), expect=(200,))
            vanished = await asyncio.wait_for(
                wait_for_change(client, kinds, with_widget, interval_s=0.5, confirm_s=0.5), 60
            )
            return before, appeared, vanished
        finally:
            await client.close()

    before, appeared, vanished = asyncio.run(scenario())
    assert before == {kube.UDS_VM, kube.DATA_VOLUME, kube.SECRET}  # the real CRDs and a core kind
    assert appeared == f"now served: widgets.{group}/v1"
    assert vanished == f"no longer served: widgets.{group}/v1"
