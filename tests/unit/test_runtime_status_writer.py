"""The one status writer: one "changed" rule, a patch that removes what is gone, no misfit status written."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from uds_vm_operator.api.models import UDSVirtualMachineStatus
from uds_vm_operator.api.pool import UDSVirtualMachinePoolStatus
from uds_vm_operator.controller.pool import POOL
from uds_vm_operator.runtime import kube
from uds_vm_operator.runtime.errors import is_transient
from uds_vm_operator.runtime.status_writer import (
    StatusInvalidError,
    StatusWriter,
    status_changed,
    status_patch,
)

CONDITION = {
    "type": "Ready",
    "status": "True",
    "reason": "Running",
    "message": "up",
    "lastTransitionTime": "2026-12-03T00:00:00Z",
}


class PatchRecorder:
    """Records status patches as the API server would receive them; answers with the patched object."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, str, str, dict[str, Any], str | None]] = []

    async def merge_patch(
        self, kind: kube.Kind, namespace: str, name: str, patch: dict[str, Any], *, subresource: str | None
    ) -> dict[str, Any]:
        self.patches.append((kind.kind, namespace, name, patch, subresource))
        return {"metadata": {"namespace": namespace, "name": name}, **patch}


def vm(status: dict[str, Any] | None) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": "web"}, "status": status}


def test_nulls_mean_absent_at_every_depth_so_a_resync_writes_nothing() -> None:
    stored = {"phase": "Running", "goldenImage": {"name": "g", "phase": "Published"}}
    derived = {
        "phase": "Running",
        "message": None,
        "goldenImage": {"name": "g", "phase": "Published", "x": None},
    }
    assert not status_changed(derived, stored)
    assert status_changed({**derived, "phase": "Stopped"}, stored)
    assert status_changed({"phase": "Running"}, stored)  # goldenImage gone is a change
    assert status_changed({"phase": "Running"}, None)


def test_the_patch_removes_the_keys_the_new_status_no_longer_has() -> None:
    assert status_patch({"phase": "Running"}, {"phase": "Pending", "importProgress": "40%"}) == {
        "phase": "Running",
        "importProgress": None,
    }


def test_an_unchanged_status_is_not_written_and_a_changed_one_once_through_the_subresource() -> None:
    api = PatchRecorder()
    writer = StatusWriter(api, kube.UDS_VM, UDSVirtualMachineStatus)  # type: ignore[arg-type]
    stored = {"phase": "Running", "conditions": [CONDITION]}
    assert asyncio.run(writer.publish(vm(stored), dict(stored))) is None
    updated = asyncio.run(writer.publish(vm(stored), {"phase": "Stopped", "conditions": [CONDITION]}))
    assert updated is not None and updated["status"]["phase"] == "Stopped"
    assert api.patches == [
        (
            "UDSVirtualMachine",
            "ns",
            "web",
            {"status": {"phase": "Stopped", "conditions": [CONDITION]}},
            "status",
        )
    ]


@pytest.mark.parametrize(
    ("kind", "model", "misfit", "where"),
    [
        (kube.UDS_VM, UDSVirtualMachineStatus, {"phase": "Exploded"}, "status.phase"),
        (
            kube.UDS_VM,
            UDSVirtualMachineStatus,
            {"conditions": [{**CONDITION, "status": "Maybe"}]},
            "status.conditions.0.status",
        ),
        (POOL, UDSVirtualMachinePoolStatus, {"readyReplicas": -1}, "status.readyReplicas"),
        (POOL, UDSVirtualMachinePoolStatus, {"replicas": 1, "surprise": True}, "status.surprise"),
    ],
)
def test_a_status_that_does_not_fit_the_crds_model_is_refused_and_nothing_is_written(
    kind: kube.Kind, model: Any, misfit: dict[str, Any], where: str
) -> None:
    api = PatchRecorder()
    writer = StatusWriter(api, kind, model)  # type: ignore[arg-type]
    with pytest.raises(StatusInvalidError, match=where.replace(".", r"\.")) as refused:
        asyncio.run(writer.publish(vm({}), misfit))
    assert api.patches == []
    assert not is_transient(refused.value)  # retrying the same derivation cannot fix it
