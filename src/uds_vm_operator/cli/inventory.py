"""``uds-vmctl inventory``: every UDSVirtualMachine and UDSVirtualMachinePool with the facts asked first.

Rows are built by pure functions (unit-tested); only :func:`register`'s command talks to the cluster.
The ``--json`` output is a contract with scripts: a JSON array of VM rows, as it was before pools existed
(each row now also carries ``pool``). Pools are a second array, printed with ``--pools --json``, so no
script that iterates the VM array breaks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import typer

from uds_vm_operator.apiversions import UDS_API_VERSION
from uds_vm_operator.cli._errors import UsageError
from uds_vm_operator.cli._kube import CliKubeError, KubeClient

POOL_LABEL = "uds.dev/pool"
"""The label the pool controller puts on its members (``render.common.POOL_LABEL``; copied, not imported,
because importing ``fleet`` pulls in pydantic and costs ~0.1 s of CLI start-up; a unit test pins them)."""
POOL_API_VERSION = UDS_API_VERSION
POOL_KIND = "UDSVirtualMachinePool"
POOL_PLURAL = "udsvirtualmachinepools"

HEADERS = (
    "NAMESPACE",
    "NAME",
    "POOL",
    "PHASE",
    "SOURCE",
    "OS",
    "PVC-SIZE",
    "CHECKSUM-VERIFIED",
    "ZERO-TRUST",
    "GUEST",
    "RECONCILER",
    "AGE",
)
COLUMNS = (
    "namespace",
    "name",
    "pool",
    "phase",
    "source",
    "os",
    "pvcSize",
    "checksumVerified",
    "zeroTrust",
    "guest",
    "reconciledBy",
    "age",
)
POOL_HEADERS = ("NAMESPACE", "NAME", "DESIRED", "READY", "UPDATED", "OUTDATED", "REVISION", "AGE")
POOL_COLUMNS = ("namespace", "name", "desired", "ready", "updated", "outdated", "revision", "age")


def inventory_row(vm: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """Flatten one UDSVirtualMachine into an inventory row (pure, so it is unit-tested).

    ``pool`` is the owning pool's name for a pool member and ``None`` for a stand-alone VM, so a script can
    tell fleet members (replaced on rollouts) from pets.
    """
    meta = vm.get("metadata") or {}
    spec = vm.get("spec") or {}
    status = vm.get("status") or {}
    labels = meta.get("labels") or {}
    return {
        "namespace": meta.get("namespace", ""),
        "name": meta.get("name", ""),
        "pool": labels.get(POOL_LABEL) or None,
        "phase": status.get("phase") or "Pending",
        "source": status.get("source") or _source_kind(spec),
        "os": spec.get("os") or "linux",
        "pvcSize": status.get("pvcSize"),
        "checksumVerified": bool(status.get("checksumVerified")),
        "zeroTrust": bool(status.get("zeroTrust")),
        "guest": _guest(status.get("guest")),
        "guestDrift": [str(d.get("setting")) for d in (status.get("guest") or {}).get("drift") or []],
        "reconciledBy": status.get("reconciledBy"),
        "age": human_age(meta.get("creationTimestamp"), now),
        "createdAt": meta.get("creationTimestamp"),
    }


def _guest(guest: Mapping[str, Any] | None) -> str | None:
    """The last guest drift check in one word: hardened, drifted, unknown; None for an unmonitored VM."""
    if not guest:
        return None
    return {"True": "hardened", "False": "drifted", "Unknown": "unknown"}.get(
        str(guest.get("compliant")), "unknown"
    )


def pool_row(pool: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """Flatten one UDSVirtualMachinePool into a row: the counts ``kubectl get udsvmpool`` shows, and both
    revisions, because "is a rollout in progress?" is ``currentRevision != updateRevision``.

    A pool the controller has not reconciled yet has no status: its counts are 0, not missing.
    """
    meta = pool.get("metadata") or {}
    spec = pool.get("spec") or {}
    status = pool.get("status") or {}
    current = status.get("currentRevision") or None
    update = status.get("updateRevision") or None
    return {
        "namespace": meta.get("namespace", ""),
        "name": meta.get("name", ""),
        "desired": _count(spec.get("replicas"), default=1),
        "replicas": _count(status.get("replicas")),
        "ready": _count(status.get("readyReplicas")),
        "updated": _count(status.get("updatedReplicas")),
        "outdated": _count(status.get("outdatedReplicas")),
        "currentRevision": current,
        "updateRevision": update,
        "revision": update or current,
        "age": human_age(meta.get("creationTimestamp"), now),
        "createdAt": meta.get("creationTimestamp"),
    }


def vm_cells(row: Mapping[str, Any]) -> tuple[str, ...]:
    """The VM table's cells for one row, in :data:`HEADERS` order (booleans as ``true``/``false``)."""
    return tuple(_cell(row.get(column)) for column in COLUMNS)


def pool_cells(row: Mapping[str, Any]) -> tuple[str, ...]:
    """The Pools table's cells for one row, in :data:`POOL_HEADERS` order."""
    return tuple(_cell(row.get(column)) for column in POOL_COLUMNS)


def sorted_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stable output order for humans and diffs: by namespace, then name."""
    return sorted(rows, key=lambda row: (row["namespace"], row["name"]))


def human_age(timestamp: str | None, now: datetime) -> str:
    """kubectl-style age: 45s, 12m, 5h, 3d."""
    if not timestamp:
        return "<unknown>"
    try:
        created = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return "<unknown>"
    seconds = max(0, int((now - created).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _count(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _source_kind(spec: Mapping[str, Any]) -> str:
    source = spec.get("source") or {}
    return next(iter(source), "") if isinstance(source, Mapping) else ""


INVENTORY_HELP = "\n\n".join(
    (
        "List UDSVirtualMachines and UDSVirtualMachinePools.",
        "The VM table shows phase, source, OS, PVC size, checksum, zero trust, reconciler, age, and POOL "
        "(the pool a member belongs to). A second table, Pools (desired, ready, updated, outdated, "
        "revision, age), follows when pools exist.",
        "JSON for scripts: --json prints a JSON array of VM rows (the shape scripts already rely on; each "
        "row has a 'pool' key, null for stand-alone VMs). --pools --json prints a JSON array of pool rows "
        "instead (namespace, name, desired, replicas, ready, updated, outdated, currentRevision, "
        "updateRevision, revision, age, createdAt). --pools alone prints only the Pools table.",
    )
)


def register(app: typer.Typer) -> None:
    """Attach ``inventory`` to the CLI app."""

    @app.command("inventory", help=INVENTORY_HELP)
    def inventory_command(
        namespace: str | None = typer.Option(None, "--namespace", "-n", help="Only this namespace."),
        all_namespaces: bool = typer.Option(
            False, "--all-namespaces", "-A", help="Every namespace (default)."
        ),
        as_json: bool = typer.Option(
            False, "--json", help="A JSON array of VM rows (pool rows with --pools) instead of tables."
        ),
        pools_only: bool = typer.Option(
            False, "--pools", help="Only UDSVirtualMachinePools (with --json: a JSON array of pool rows)."
        ),
        kubeconfig: str | None = typer.Option(
            None, "--kubeconfig", help="kubeconfig file (default $KUBECONFIG)."
        ),
    ) -> None:
        if namespace and all_namespaces:
            raise UsageError("use either --namespace or --all-namespaces, not both")
        now = datetime.now(UTC)
        with KubeClient(kubeconfig) as client:
            if pools_only:
                pools = _list_pools(client, namespace, now, required=True)
                vms: list[dict[str, Any]] = []
            else:
                vms = _list_vms(client, namespace, now)
                pools = [] if as_json else _list_pools(client, namespace, now, required=False)
        if as_json:
            typer.echo(json.dumps(pools if pools_only else vms, indent=2))
            return
        if not pools_only:
            _print_table(HEADERS, [vm_cells(row) for row in vms], "No UDSVirtualMachines found.")
        if pools or pools_only:
            if not pools_only:
                typer.echo("\nPools")
            _print_table(POOL_HEADERS, [pool_cells(row) for row in pools], "No UDSVirtualMachinePools found.")


def _list_vms(client: KubeClient, namespace: str | None, now: datetime) -> list[dict[str, Any]]:
    from uds_vm_operator.runtime.kube import UDS_VM  # noqa: PLC0415 (lazy: keeps start-up fast)

    listing = client.request("GET", UDS_VM.path(namespace), what="listing UDSVirtualMachines")
    if listing is None:
        raise CliKubeError(
            "the UDSVirtualMachine CRD is not installed on this cluster; apply deploy/crds first"
        )
    return sorted_rows([inventory_row(vm, now) for vm in listing.get("items") or []])


def _list_pools(
    client: KubeClient, namespace: str | None, now: datetime, *, required: bool
) -> list[dict[str, Any]]:
    """Pool rows; when pools are only the table's extra (``required=False``), a cluster without the pool
    CRD or a user without the right to list pools still gets the VM table, with a warning on stderr."""
    from uds_vm_operator.runtime.kube import Kind  # noqa: PLC0415 (lazy: keeps start-up fast)

    path = Kind(POOL_API_VERSION, POOL_KIND, POOL_PLURAL).path(namespace)
    try:
        listing = client.request("GET", path, what="listing UDSVirtualMachinePools")
    except CliKubeError as exc:
        if required:
            raise
        typer.echo(f"warning: {exc}; showing VMs without the Pools table", err=True)
        return []
    if listing is None:
        if required:
            raise CliKubeError(
                "the UDSVirtualMachinePool CRD is not installed on this cluster; apply deploy/crds first"
            )
        return []
    return sorted_rows([pool_row(pool, now) for pool in listing.get("items") or []])


def _print_table(headers: tuple[str, ...], rows: list[tuple[str, ...]], empty_message: str) -> None:
    from rich.console import Console  # noqa: PLC0415 (lazy: keeps start-up fast)
    from rich.table import Table  # noqa: PLC0415 (lazy: keeps start-up fast)

    if not rows:
        typer.echo(empty_message)
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    for header in headers:
        table.add_column(header)
    for cells in rows:
        table.add_row(*cells)
    Console(width=220).print(table)
