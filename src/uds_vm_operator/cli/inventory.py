"""``uds-vmctl inventory``: every UDSVirtualMachine with the facts an operator or assessor asks first."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import typer

from uds_vm_operator.cli._kube import CliKubeError, KubeClient

HEADERS = (
    "NAMESPACE",
    "NAME",
    "PHASE",
    "SOURCE",
    "OS",
    "PVC-SIZE",
    "CHECKSUM-VERIFIED",
    "ZERO-TRUST",
    "RECONCILER",
    "AGE",
)
COLUMNS = (
    "namespace",
    "name",
    "phase",
    "source",
    "os",
    "pvcSize",
    "checksumVerified",
    "zeroTrust",
    "reconciledBy",
    "age",
)


def inventory_row(vm: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """Flatten one UDSVirtualMachine into an inventory row (pure, so it is unit-tested)."""
    meta = vm.get("metadata") or {}
    spec = vm.get("spec") or {}
    status = vm.get("status") or {}
    return {
        "namespace": meta.get("namespace", ""),
        "name": meta.get("name", ""),
        "phase": status.get("phase") or "Pending",
        "source": status.get("source") or _source_kind(spec),
        "os": spec.get("os") or "linux",
        "pvcSize": status.get("pvcSize"),
        "checksumVerified": bool(status.get("checksumVerified")),
        "zeroTrust": bool(status.get("zeroTrust")),
        "reconciledBy": status.get("reconciledBy"),
        "age": human_age(meta.get("creationTimestamp"), now),
        "createdAt": meta.get("creationTimestamp"),
    }


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


def _source_kind(spec: Mapping[str, Any]) -> str:
    source = spec.get("source") or {}
    return next(iter(source), "") if isinstance(source, Mapping) else ""


def register(app: typer.Typer) -> None:
    """Attach ``inventory`` to the CLI app."""

    @app.command("inventory")
    def inventory_command(
        namespace: str | None = typer.Option(None, "--namespace", "-n", help="Only this namespace."),
        all_namespaces: bool = typer.Option(
            False, "--all-namespaces", "-A", help="Every namespace (default)."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print a JSON array instead of a table."),
        kubeconfig: str | None = typer.Option(
            None, "--kubeconfig", help="kubeconfig file (default $KUBECONFIG)."
        ),
    ) -> None:
        """List UDSVirtualMachines: phase, source, OS, PVC size, checksum, zero trust, reconciler, age."""
        from uds_vm_operator.controller.kube import UDS_VM  # noqa: PLC0415 (lazy: keeps start-up fast)

        if namespace and all_namespaces:
            typer.echo("error: use either --namespace or --all-namespaces, not both", err=True)
            raise typer.Exit(2)
        try:
            with KubeClient(kubeconfig) as client:
                listing = client.request("GET", UDS_VM.path(namespace), what="listing UDSVirtualMachines")
        except CliKubeError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(exc.exit_code) from None
        if listing is None:
            typer.echo(
                "error: the UDSVirtualMachine CRD is not installed on this cluster; apply deploy/crds first",
                err=True,
            )
            raise typer.Exit(1)
        now = datetime.now(UTC)
        rows = sorted(
            (inventory_row(vm, now) for vm in listing.get("items") or []),
            key=lambda row: (row["namespace"], row["name"]),
        )
        if as_json:
            typer.echo(json.dumps(rows, indent=2))
            return
        _print_table(rows)


def _print_table(rows: list[dict[str, Any]]) -> None:
    from rich.console import Console  # noqa: PLC0415 (lazy: keeps start-up fast)
    from rich.table import Table  # noqa: PLC0415 (lazy: keeps start-up fast)

    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in (
        "NAMESPACE",
        "NAME",
        "PHASE",
        "SOURCE",
        "OS",
        "PVC-SIZE",
        "CHECKSUM-VERIFIED",
        "ZERO-TRUST",
    ):
        table.add_column(column)
    table.add_column("RECONCILER")
    table.add_column("AGE")
    for row in rows:
        table.add_row(
            row["namespace"],
            row["name"],
            row["phase"],
            row["source"] or "",
            row["os"],
            row["pvcSize"] or "",
            str(row["checksumVerified"]).lower(),
            str(row["zeroTrust"]).lower(),
            row["reconciledBy"] or "",
            row["age"],
        )
    if not rows:
        typer.echo("No UDSVirtualMachines found.")
        return
    Console(width=200).print(table)
