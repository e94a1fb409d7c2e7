"""The one way to build the operator's controllers, shared by the process and the in-process tests.

Each controller is built with what it owns (the VM controller its object store and cluster-facts cache) and
registers its own watch handlers on a kopf registry (``register``), so a test that reconciles in-process runs
the very object the operator runs, wired the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from uds_vm_operator.controller.facts import DATAVOLUME_CRD, FactsCache, deployment_facts
from uds_vm_operator.controller.handlers import watched_kinds
from uds_vm_operator.controller.reconciler import Reconciler
from uds_vm_operator.metrics import OperatorMetrics
from uds_vm_operator.runtime import kube
from uds_vm_operator.runtime.store import ObjectStore

if TYPE_CHECKING:
    from uds_vm_operator.controller.backup import BackupController
    from uds_vm_operator.controller.backup_schedule import BackupScheduleController
    from uds_vm_operator.controller.pool import PoolController


def vm_controller(api: kube.KubeApi, metrics: OperatorMetrics, *, workers: int = 8) -> Reconciler:
    """The UDSVirtualMachine controller with its own store and its cached view of CDI's DataVolume CRD."""

    async def fetch_datavolume_crd() -> dict[str, Any] | None:
        return await api.get(kube.CRD, None, DATAVOLUME_CRD)

    store = ObjectStore(watched_kinds())
    return Reconciler(
        api, store, FactsCache(fetch_datavolume_crd, base=deployment_facts()), metrics, workers=workers
    )


def pool_controller(api: kube.KubeApi, metrics: OperatorMetrics) -> PoolController:
    """The UDSVirtualMachinePool controller (imported only when a process or test asks for it)."""
    from uds_vm_operator.controller.pool import PoolController  # noqa: PLC0415 (its modules load on demand)

    return PoolController(api, metrics)


def backup_controllers(
    api: kube.KubeApi, metrics: OperatorMetrics
) -> tuple[BackupController, BackupScheduleController]:
    """The UDSVirtualMachineBackup controller and the schedule that asks it for backups."""
    from uds_vm_operator.controller.backup import BackupController  # noqa: PLC0415 (loaded on demand)
    from uds_vm_operator.controller.backup_schedule import BackupScheduleController  # noqa: PLC0415

    return BackupController(api, metrics), BackupScheduleController(api, metrics, workers=1)
