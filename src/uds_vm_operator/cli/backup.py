"""``uds-vmctl backup NAME`` and ``uds-vmctl restore BACKUP --as NEW``: on-demand backup and verified restore.

``backup`` asks the operator for one backup (a UDSVirtualMachineBackup) and, by default, waits for its
record: each disk's object and sha256. ``restore`` declares a new VM from a backup's record: the VM's spec
as it was backed up, its root disk imported by CDI from the backup's object with the recorded sha256 as
its checksum, so the operator holds the VM until its SI-7 verifier has hashed the restored bytes against
the record. A backup whose stored bytes were altered is refused there and never boots.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Mapping
from typing import Any

import typer

from uds_vm_operator.cli._kube import CliKubeError, KubeClient

POLL_S = 2.0
FIELD_PARAMS = {"fieldManager": "uds-vmctl", "fieldValidation": "Strict"}


def register(app: typer.Typer) -> None:
    """Attach ``backup`` and ``restore`` to the CLI app."""
    _register_backup(app)
    _register_restore(app)


def _register_backup(app: typer.Typer) -> None:
    @app.command("backup")
    def backup_command(  # noqa: PLR0917 (typer maps each parameter to an option)
        name: str = typer.Argument(..., help="UDSVirtualMachine to back up (it must declare spec.backup)."),
        namespace: str | None = typer.Option(
            None, "--namespace", "-n", help="Namespace (default: context's)."
        ),
        wait: bool = typer.Option(
            True, "--wait/--no-wait", help="Wait for the backup's record (default) or return once asked."
        ),
        timeout: int = typer.Option(3600, "--timeout", min=10, help="Seconds to wait for the record."),
        as_json: bool = typer.Option(False, "--json", help="Print the backup object as JSON."),
        kubeconfig: str | None = typer.Option(
            None, "--kubeconfig", help="kubeconfig file (default $KUBECONFIG)."
        ),
    ) -> None:
        """Back up a VM's disks now to its spec.backup target; each disk's sha256 is recorded.

        A running guest is frozen through its guest agent for the copy (the record says frozen), or copied
        crash-consistent when it cannot be; a stopped VM is copied as it is. Exit 1 if the backup failed.
        """
        with KubeClient(kubeconfig) as client:
            ns = namespace or client.default_namespace
            backup = request_backup(client, ns, name)
            backup_name = str(backup["metadata"]["name"])
            if not as_json:
                typer.echo(f"backup {ns}/{backup_name} of {name} requested", err=True)
            if wait:
                backup = wait_for_backup(client, ns, backup_name, timeout, quiet=as_json)
        if as_json:
            typer.echo(json.dumps(backup, indent=2))
        else:
            typer.echo(describe_backup(backup))
        if (backup.get("status") or {}).get("phase") == "Failed":
            raise typer.Exit(1)


def _register_restore(app: typer.Typer) -> None:
    @app.command("restore")
    def restore_command(  # noqa: PLR0917 (typer maps each parameter to an option)
        backup: str = typer.Argument(..., help="UDSVirtualMachineBackup to restore (phase Succeeded)."),
        new_name: str = typer.Option(..., "--as", help="Name of the new UDSVirtualMachine."),
        namespace: str | None = typer.Option(
            None, "--namespace", "-n", help="Namespace (default: context's)."
        ),
        halted: bool = typer.Option(False, "--halted", help="Declare it with runStrategy Halted."),
        dry_run: bool = typer.Option(
            False, "--dry-run", help="Print the VM as JSON (for Git) instead of creating it."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print the created VM as JSON."),
        kubeconfig: str | None = typer.Option(
            None, "--kubeconfig", help="kubeconfig file (default $KUBECONFIG)."
        ),
    ) -> None:
        """Declare a new VM from a backup; it boots only once its restored disk matches the backup's record.

        The root disk is imported by CDI from the backup's object; the operator's SI-7 verifier then hashes
        the restored bytes against the sha256 recorded at backup time. Altered bytes: the VM is refused
        (ChecksumVerified=False) and no VM instance is created.
        """
        with KubeClient(kubeconfig) as client:
            ns = namespace or client.default_namespace
            record = read_backup(client, ns, backup)
            vm = restored_vm(record, new_name)
            if halted:
                vm["spec"]["runStrategy"] = "Halted"
            if dry_run:
                typer.echo(json.dumps(vm, indent=2))
                return
            created = create_vm(client, ns, vm)
        if as_json:
            typer.echo(json.dumps(created, indent=2))
            return
        root = root_disk(record)
        typer.echo(
            f"UDSVirtualMachine {ns}/{new_name} declared from backup {backup}: its root disk is held until "
            f"it hashes to {root['sha256']}"
        )


def request_backup(client: KubeClient, namespace: str, vm_name: str) -> dict[str, Any]:
    """Create the UDSVirtualMachineBackup for ``vm_name`` after checking the VM can be backed up."""
    from uds_vm_operator.api.backup import new_backup  # noqa: PLC0415 (lazy: keeps start-up fast)
    from uds_vm_operator.runtime.kube import UDS_VM  # noqa: PLC0415
    from uds_vm_operator.runtime.kube import UDS_VM_BACKUP as BACKUP  # noqa: PLC0415
    from uds_vm_operator.runtime.timestamps import utc_now  # noqa: PLC0415

    vm = client.request("GET", UDS_VM.path(namespace, vm_name), what=f"reading UDSVirtualMachine {vm_name}")
    if vm is None:
        raise CliKubeError(
            f"UDSVirtualMachine {namespace}/{vm_name} not found; list them with `uds-vmctl inventory`"
        )
    if not (vm.get("spec") or {}).get("backup"):
        raise CliKubeError(
            f"UDSVirtualMachine {namespace}/{vm_name} declares no spec.backup; add a target, e.g. "
            "spec.backup: {target: {url: https://s3.example/bucket, secretRef: backup-s3}}",
            2,
        )
    manifest = new_backup(namespace, vm_name, utc_now(), requested_by="uds-vmctl")
    created = client.request(
        "POST",
        BACKUP.path(namespace),
        body=manifest,
        params=FIELD_PARAMS,
        what=f"creating UDSVirtualMachineBackup for {vm_name}",
    )
    return created or manifest


def wait_for_backup(
    client: KubeClient, namespace: str, name: str, timeout_s: int, *, quiet: bool
) -> dict[str, Any]:
    """Poll the backup until it is Succeeded or Failed, printing each phase change (unless ``quiet``)."""
    from uds_vm_operator.api.backup import FINISHED_PHASES  # noqa: PLC0415 (lazy: fast start)
    from uds_vm_operator.runtime.kube import UDS_VM_BACKUP as BACKUP  # noqa: PLC0415

    deadline = time.monotonic() + timeout_s
    seen: str | None = None
    while True:
        backup = client.request("GET", BACKUP.path(namespace, name), what=f"reading backup {name}")
        if backup is None:
            raise CliKubeError(f"UDSVirtualMachineBackup {namespace}/{name} disappeared while waiting")
        status = backup.get("status") or {}
        phase = status.get("phase") or "Pending"
        if phase != seen and not quiet:
            typer.echo(f"  {phase}{': ' + status['message'] if status.get('message') else ''}", err=True)
            seen = phase
        if phase in FINISHED_PHASES:
            return backup
        if time.monotonic() > deadline:
            raise CliKubeError(
                f"backup {namespace}/{name} is still {phase} after {timeout_s} s; it goes on in the cluster: "
                f"kubectl get udsvmbackup -n {namespace} {name}"
            )
        time.sleep(POLL_S)


def describe_backup(backup: Mapping[str, Any]) -> str:
    """One line per disk of a finished backup, or its failure."""
    meta, status = backup.get("metadata") or {}, backup.get("status") or {}
    phase = status.get("phase") or "Pending"
    if phase != "Succeeded":
        return (
            f"backup {meta.get('name')}: {phase}{': ' + status['message'] if status.get('message') else ''}"
        )
    took = status.get("durationSeconds")
    lines = [f"backup {meta.get('name')}: Succeeded ({status.get('consistency')}) in {took} s"]
    lines += [
        f"  {d['name']}: {d['bytes']} bytes {d['sha256']} -> {d['object']}" for d in status.get("disks") or []
    ]
    return "\n".join(lines)


def read_backup(client: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    """The backup, which must have succeeded and hold a root-disk record."""
    from uds_vm_operator.runtime.kube import UDS_VM_BACKUP as BACKUP  # noqa: PLC0415 (lazy: fast start)

    backup = client.request("GET", BACKUP.path(namespace, name), what=f"reading backup {name}")
    if backup is None:
        raise CliKubeError(
            f"UDSVirtualMachineBackup {namespace}/{name} not found; list them: kubectl get udsvmbackup"
        )
    phase = (backup.get("status") or {}).get("phase")
    if phase != "Succeeded":
        raise CliKubeError(
            f"backup {namespace}/{name} is {phase or 'Pending'}, not Succeeded; it cannot be restored"
        )
    return backup


def root_disk(backup: Mapping[str, Any]) -> dict[str, Any]:
    """The root disk's record (object, sha256, bytes)."""
    for disk in (backup.get("status") or {}).get("disks") or []:
        if disk.get("name") == "root":
            return dict(disk)
    raise CliKubeError(f"backup {(backup.get('metadata') or {}).get('name')} records no root disk")


def restored_vm(backup: Mapping[str, Any], new_name: str) -> dict[str, Any]:
    """The UDSVirtualMachine a restore declares: the backed-up spec, its root disk from the record (pure)."""
    from uds_vm_operator.api import SpecError  # noqa: PLC0415 (lazy: keeps start-up fast)
    from uds_vm_operator.api.backup import RESTORED_FROM_ANNOTATION  # noqa: PLC0415
    from uds_vm_operator.api.models import UDSVirtualMachineSpec, parse_spec_mapping  # noqa: PLC0415

    meta, status = backup.get("metadata") or {}, backup.get("status") or {}
    spec = copy.deepcopy(dict(status.get("vmSpec") or {}))
    target = status.get("target") or {}
    if not spec or not target.get("secretRef"):
        raise CliKubeError(f"backup {meta.get('name')} records no VM spec or target; it cannot be restored")
    root = root_disk(backup)
    spec["source"] = {
        "s3": {"url": root["object"], "secretRef": target["secretRef"], "checksum": root["sha256"]}
    }
    spec["disk"] = {**(spec.get("disk") or {}), "virtualSize": int(root["bytes"])}
    spec.pop("imageRecord", None)
    try:
        parse_spec_mapping(UDSVirtualMachineSpec, spec)
    except SpecError as exc:
        raise CliKubeError(f"the restored spec is not valid for this operator: {exc.message}") from exc
    return {
        "apiVersion": "uds.dev/v1alpha1",
        "kind": "UDSVirtualMachine",
        "metadata": {
            "name": new_name,
            "namespace": meta.get("namespace"),
            "annotations": {RESTORED_FROM_ANNOTATION: str(meta.get("name"))},
        },
        "spec": spec,
    }


def create_vm(client: KubeClient, namespace: str, vm: dict[str, Any]) -> dict[str, Any]:
    """Create the restored VM; an existing VM of that name is never overwritten."""
    from uds_vm_operator.runtime.kube import UDS_VM  # noqa: PLC0415 (lazy: keeps start-up fast)

    name = vm["metadata"]["name"]
    if (
        client.request("GET", UDS_VM.path(namespace, name), what=f"reading UDSVirtualMachine {name}")
        is not None
    ):
        raise CliKubeError(
            f"UDSVirtualMachine {namespace}/{name} already exists; restore --as another name", 2
        )
    created = client.request(
        "POST",
        UDS_VM.path(namespace),
        body=vm,
        params=FIELD_PARAMS,
        what=f"creating UDSVirtualMachine {name}",
    )
    return created or vm
