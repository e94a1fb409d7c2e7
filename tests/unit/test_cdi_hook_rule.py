"""Which admission webhooks and APIServices `make cdi-down` removes, and the node tier's teardown check
counts as left behind (both ask `install.is_cdi_hook`).

A wrong answer either way hurts: sparing CDI's upload APIService leaves discovery pointing at a deleted
Service (every later namespace deletion stalls), while removing the API server's local APIService for
`cdi.kubevirt.io` breaks the DataVolume CRD the played tier needs.
"""

from __future__ import annotations

from typing import Any

import pytest

from tools.cdi.install import is_cdi_hook


def _api_service(name: str, service: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"groupPriorityMinimum": 1000, "versionPriority": 15}
    if service is not None:
        spec["service"] = service
    return {"metadata": {"name": name}, "spec": spec}


CDI_API = {"name": "cdi-api", "namespace": "cdi"}
VIRT_API = {"name": "virt-api", "namespace": "kubevirt"}


@pytest.mark.parametrize(
    ("kind", "item", "is_cdis"),
    [
        ("APIService", _api_service("v1beta1.upload.cdi.kubevirt.io", CDI_API), True),
        ("APIService", _api_service("v1beta1.cdi.kubevirt.io", None), False),
        ("APIService", _api_service("v1beta1.upload.cdi.kubevirt.io", None), False),
        ("APIService", _api_service("v1.subresources.kubevirt.io", VIRT_API), False),
        ("ValidatingWebhookConfiguration", {"metadata": {"name": "cdi-api-datavolume-validate"}}, True),
        ("MutatingWebhookConfiguration", {"metadata": {"name": "cdi-api-datavolume-mutate"}}, True),
        ("ValidatingWebhookConfiguration", {"metadata": {"name": "virt-api-validator"}}, False),
    ],
)
def test_only_cdis_own_hooks_are_removed(kind: str, item: dict[str, Any], is_cdis: bool) -> None:
    assert is_cdi_hook(kind, item) is is_cdis
