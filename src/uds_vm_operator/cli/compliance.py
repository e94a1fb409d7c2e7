"""``uds-vmctl compliance validate``: OSCAL assessment results for every VM, from live objects.

Runs the Lula validations linked from the component definition (the packaged one, or ``--component``)
against the cluster and writes assessment results an assessor can read next to ``lula validate`` output.
Exit codes: 0 every control satisfied for every VM, 1 something not satisfied (or no VM found),
2 usage error (bad flags, unreadable component definition or kubeconfig, unreachable cluster).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import typer
import yaml
from rich.console import Console
from rich.table import Table

from uds_vm_operator.cli._errors import EXIT_CHECK_FAILED, EXIT_OK, UsageError
from uds_vm_operator.cli._inputs import regular_file
from uds_vm_operator.cli._output import write_file
from uds_vm_operator.compliance.assessment import (
    SATISFIED,
    build_assessment_results,
    summary,
)
from uds_vm_operator.compliance.component import LinkedControl, load_component_definition
from uds_vm_operator.compliance.evaluate import Finding, assess, required_api_keys

PACKAGED_COMPONENT_HREF = "uds-vm-operator:compliance/oscal-component.yaml"


def register(app: typer.Typer) -> None:
    """Attach the ``compliance`` command group to the CLI app."""
    group = typer.Typer(
        help="Compliance evidence (NIST SP 800-53 Rev 5) from live objects, as OSCAL.", no_args_is_help=True
    )
    group.command("validate")(validate_command)
    app.add_typer(group, name="compliance")


def validate_command(  # noqa: PLR0917 (typer maps each parameter to an option)
    kubeconfig: str | None = typer.Option(
        None, "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG)"
    ),
    namespace: list[str] | None = typer.Option(  # noqa: B008 (typer option)
        None,
        "--namespace",
        "-n",
        help="Assess VMs in this namespace (repeatable). Default: all namespaces.",
    ),
    all_namespaces: bool = typer.Option(
        False, "--all-namespaces", "-A", help="Assess VMs in every namespace."
    ),
    component_path: str | None = typer.Option(
        None,
        "--component",
        "-f",
        help="OSCAL component definition (default: the one shipped with uds-vmctl).",
    ),
    output_path: str | None = typer.Option(
        None,
        "--output",
        "-o",
        help="Write OSCAL assessment results (YAML, or JSON for a .json name) here.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON summary instead of a table."),
) -> None:
    """Evaluate every control for every UDSVirtualMachine and report satisfied / not-satisfied."""
    console = Console(stderr=as_json)
    component = regular_file(Path(component_path), option="--component") if component_path else None
    output = Path(output_path) if output_path else None
    if namespace and all_namespaces:
        raise UsageError("give either --namespace or --all-namespaces, not both")
    started = datetime.now(UTC)
    controls, findings = _evaluate(kubeconfig, component, namespace or None)
    finished = datetime.now(UTC)
    control_ids = [c.control_id for c in controls]
    if output is not None:
        _write_results(output, findings, control_ids, component, started=started, finished=finished)
    ok = bool(findings) and all(f.satisfied for f in findings)
    _report(console, findings, control_ids, ok=ok, as_json=as_json, output=output)
    raise typer.Exit(EXIT_OK if ok else EXIT_CHECK_FAILED)


def _evaluate(
    kubeconfig: str | None, component: Path | None, namespaces: list[str] | None
) -> tuple[list[LinkedControl], list[Finding]]:
    """Load the controls, read what their validations need from the cluster, and evaluate them per VM."""
    # Imported here: lightkube is only needed once a cluster is actually contacted.
    from uds_vm_operator.cli._kube import load_cluster_config  # noqa: PLC0415 (lazy: fast --help)
    from uds_vm_operator.compliance.collect import collect, make_client  # noqa: PLC0415 (lazy: fast --help)

    # ComplianceError (bad component definition, unreachable cluster) is a usage error: see _errors.
    controls = load_component_definition(component)
    client = load_cluster_config(kubeconfig).build(make_client)
    snapshot = collect(client, required_api_keys(controls), namespaces)
    return controls, assess(controls, snapshot)


def _write_results(
    output: Path,
    findings: list[Finding],
    control_ids: list[str],
    component: Path | None,
    *,
    started: datetime,
    finished: datetime,
) -> None:
    """Write the assessment results as JSON for a ``.json`` name, else as YAML (as ``lula validate`` does)."""
    document = build_assessment_results(
        findings,
        control_ids=control_ids,
        component_href=str(component) if component else PACKAGED_COMPONENT_HREF,
        started=started,
        finished=finished,
    )
    text = (
        json.dumps(document, indent=2)
        if output.suffix == ".json"
        else yaml.safe_dump(document, sort_keys=False, width=120)
    )
    write_file(output, text, option="--output", make_parents=True)


def _report(
    console: Console,
    findings: list[Finding],
    control_ids: list[str],
    *,
    ok: bool,
    as_json: bool,
    output: Path | None,
) -> None:
    """Print the per-VM summary (a table, or JSON on stdout for scripts), then what was or was not done."""
    rows = summary(findings)
    if as_json:
        typer.echo(json.dumps({"satisfied": ok, "controls": control_ids, "vms": rows}, indent=2))
    else:
        _print_table(console, control_ids, rows)
    if not findings:
        console.print("no UDSVirtualMachine found: nothing was assessed")
    elif output is not None:
        console.print(f"assessment results written to {output}")


def _print_table(console: Console, control_ids: list[str], rows: list[dict[str, object]]) -> None:
    table = Table(title="Compliance per VM (NIST SP 800-53 Rev 5)")
    table.add_column("VM")
    for control_id in control_ids:
        table.add_column(control_id.upper(), justify="center")
    for row in rows:
        states = row["controls"]
        assert isinstance(states, dict)
        cells = ["[green]✔[/green]" if states.get(c) == SATISFIED else "[red]✘[/red]" for c in control_ids]
        table.add_row(f"{row['namespace']}/{row['name']}", *cells)
    console.print(table)
    for row in rows:
        messages = row["messages"]
        assert isinstance(messages, dict)
        for control_id, lines in sorted(messages.items()):
            for line in lines:
                console.print(f"[red]{control_id}[/red] {line}")
