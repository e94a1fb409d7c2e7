"""``uds-vmctl power start|stop|restart NAME``: change a VM's power state the declarative way.

start/stop flip ``spec.runStrategy`` on the UDSVirtualMachine (the operator carries it to KubeVirt), so
Git and the cluster agree. restart uses KubeVirt's restart subresource; the VM is never deleted.
"""

from __future__ import annotations

from enum import StrEnum

import typer

from uds_vm_operator.cli._kube import CliKubeError, KubeClient

RUN_STRATEGY_FOR = {"start": "Always", "stop": "Halted"}


class PowerAction(StrEnum):
    """What ``power`` can do."""

    start = "start"
    stop = "stop"
    restart = "restart"


def register(app: typer.Typer) -> None:
    """Attach ``power`` to the CLI app."""

    @app.command("power")
    def power_command(
        action: PowerAction = typer.Argument(  # noqa: B008 (typer's documented style)
            ..., help="start (runStrategy Always), stop (Halted) or restart."
        ),
        name: str = typer.Argument(..., help="UDSVirtualMachine name."),
        namespace: str | None = typer.Option(
            None, "--namespace", "-n", help="Namespace (default: context's)."
        ),
        kubeconfig: str | None = typer.Option(
            None, "--kubeconfig", help="kubeconfig file (default $KUBECONFIG)."
        ),
    ) -> None:
        """Start, stop or restart a VM without deleting anything."""
        with KubeClient(kubeconfig) as client:
            message = _power(client, action, name, namespace or client.default_namespace)
        typer.echo(message)


def _power(client: KubeClient, action: PowerAction, name: str, namespace: str) -> str:
    from uds_vm_operator.runtime.kube import (  # noqa: PLC0415 (lazy: keeps start-up fast)
        ANY_RESPONSE,
        MERGE_CONTENT_TYPE,
        UDS_VM,
        VIRTUAL_MACHINE_ACTIONS,
    )

    path = UDS_VM.path(namespace, name)
    vm = client.request("GET", path, what=f"reading UDSVirtualMachine {namespace}/{name}")
    if vm is None:
        raise CliKubeError(
            f"UDSVirtualMachine {namespace}/{name} not found; list them with `uds-vmctl inventory`"
        )
    if action is PowerAction.restart:
        restart_path = VIRTUAL_MACHINE_ACTIONS.path(namespace, name, "restart")
        result = client.request(
            "PUT",
            restart_path,
            body={},
            accept=ANY_RESPONSE,  # virt-api's actions answer a bare application/json with 406
            what=f"restarting VM {namespace}/{name}",
        )
        if result is None:
            raise CliKubeError(
                "KubeVirt's restart API (subresources.kubevirt.io/v1) is not available on this cluster, or "
                f"the VirtualMachine {namespace}/{name} does not exist yet; is KubeVirt (virt-api) installed?"
            )
        return f"restart requested for {namespace}/{name}"
    strategy = RUN_STRATEGY_FOR[action.value]
    current = (vm.get("spec") or {}).get("runStrategy") or "Always"
    if current == strategy:
        return f"{namespace}/{name} already has runStrategy {strategy}; nothing to do"
    client.request(
        "PATCH",
        path,
        body={"spec": {"runStrategy": strategy}},
        content_type=MERGE_CONTENT_TYPE,
        params={"fieldManager": "uds-vmctl", "fieldValidation": "Strict"},
        what=f"setting runStrategy of {namespace}/{name}",
    )
    return f"{namespace}/{name}: runStrategy {current} -> {strategy}"
