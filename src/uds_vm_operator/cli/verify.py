"""``uds-vmctl verify NAME``: the SI-7 evidence of one VM, and a verdict scripts can rely on.

Shows what was declared, what the operator claims (status), the verdict recorded on the disk itself (the
DataVolume annotation written from the verifier's result) and how all of it compares with the image record
``uds-vmctl prep`` sealed. The command does not take the status on faith: it exits 0 only when the status
says verified *and* the evidence agrees with the current declaration. Exit codes: 0 verified, 1 not
verified or inconsistent, 2 usage error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from uds_vm_operator.child_names import root_dv_name
from uds_vm_operator.cli._errors import EXIT_CHECK_FAILED, EXIT_OK, EXIT_USAGE
from uds_vm_operator.cli._kube import CliKubeError, KubeClient
from uds_vm_operator.controller.verification import (
    VERIFICATION_ANNOTATION,
    VERIFIED_BY_CDI,
    VERIFIED_BY_VERIFIER,
    ImageRecordError,
    image_record_name,
    parse_image_record,
)
from uds_vm_operator.runtime import kube
from uds_vm_operator.verify.digest import digest_or_none
from uds_vm_operator.verify.result import parse_result

EXIT_VERIFIED = EXIT_OK
EXIT_NOT_VERIFIED = EXIT_CHECK_FAILED


def gather_evidence(client: KubeClient, name: str, namespace: str) -> dict[str, Any]:
    """Read the VM, its DataVolume and image record; return the evidence document (see ``--json``)."""
    vm = client.request(
        "GET", kube.UDS_VM.path(namespace, name), what=f"reading UDSVirtualMachine {namespace}/{name}"
    )
    if vm is None:
        raise CliKubeError(
            f"UDSVirtualMachine {namespace}/{name} not found; list them with uds-vmctl inventory"
        )
    spec, status = vm.get("spec") or {}, vm.get("status") or {}
    source = spec.get("source") or {}
    kind = next(iter(source), None)
    declared_text = (source.get(kind) or {}).get("checksum") if kind else None
    declared = digest_or_none(declared_text)
    conditions = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, dict)}
    condition = conditions.get("ChecksumVerified")
    dv_name = root_dv_name(name)
    dv = client.request(
        "GET", kube.DATA_VOLUME.path(namespace, dv_name), what=f"reading DataVolume {namespace}/{dv_name}"
    )
    evidence: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "source": kind,
        "declaredDigest": str(declared) if declared else declared_text,
        "phase": status.get("phase"),
        "checksumVerified": status.get("checksumVerified") is True,
        "verifiedBy": status.get("verifiedBy"),
        "verifiedDigest": status.get("verifiedDigest"),
        "condition": (
            {k: condition.get(k) for k in ("status", "reason", "message", "lastTransitionTime")}
            if condition
            else None
        ),
        "diskVerdict": _disk_verdict(dv),
        "imageRecord": _image_record(client, vm, namespace, declared),
    }
    evidence["problems"] = _problems(evidence, declared)
    evidence["verified"] = evidence["checksumVerified"] and not evidence["problems"]
    return evidence


def _disk_verdict(dv: dict[str, Any] | None) -> dict[str, Any] | None:
    if dv is None:
        return None
    text = ((dv.get("metadata") or {}).get("annotations") or {}).get(VERIFICATION_ANNOTATION)
    if not isinstance(text, str):
        return None
    try:
        result = parse_result(text)
    except ValueError as exc:
        return {"result": "unreadable", "error": str(exc)}
    return {
        "result": result.result,
        "expected": result.expected,
        "actual": result.actual,
        "bytes": result.bytes,
    }


def _image_record(
    client: KubeClient, vm: dict[str, Any], namespace: str, declared: Any
) -> dict[str, Any] | None:
    record_name = image_record_name(vm)
    if record_name is None:
        return None
    configmap = client.request(
        "GET",
        kube.CONFIG_MAP.path(namespace, record_name),
        what=f"reading image record ConfigMap {namespace}/{record_name}",
    )
    if configmap is None:
        return {"name": record_name, "error": "ConfigMap not found"}
    try:
        record = parse_image_record(configmap)
    except ImageRecordError as exc:
        return {"name": record_name, "error": str(exc)}
    return {
        "name": record_name,
        "format": record.format,
        "sha256": str(record.sha256) if record.sha256 else None,
        "contentSha256": str(record.content_sha256) if record.content_sha256 else None,
        "virtualSizeBytes": record.virtual_size_bytes,
        "matchesDeclared": record.sha256 == declared if record.sha256 and declared else None,
    }


def _problems(evidence: dict[str, Any], declared: Any) -> list[str]:
    """Where the claim and the evidence disagree; any entry makes the verdict 'not verified'."""
    problems: list[str] = []
    if declared is None:
        problems.append("no digest is declared in spec.source, so there is nothing to verify")
        return problems
    if evidence["checksumVerified"]:
        if evidence["verifiedDigest"] != str(declared):
            problems.append(
                f"status.verifiedDigest {evidence['verifiedDigest']} is not the declared {declared} "
                "(the declaration changed; the operator has not re-verified yet)"
            )
        mechanism = evidence["verifiedBy"]
        verdict = evidence["diskVerdict"]
        if mechanism == VERIFIED_BY_VERIFIER and (verdict is None or verdict.get("result") != "match"):
            problems.append(
                "status claims the in-cluster verifier passed, but the disk carries no match verdict"
            )
        if mechanism not in (VERIFIED_BY_VERIFIER, VERIFIED_BY_CDI):
            problems.append(f"status.verifiedBy is {mechanism!r}, not a known verification mechanism")
    record = evidence["imageRecord"]
    if record is not None:
        if "error" in record:
            problems.append(f"image record {record['name']}: {record['error']}")
        elif record["matchesDeclared"] is False:
            problems.append(
                f"image record {record['name']} seals {record['sha256']}, not the declared {declared}"
            )
    return problems


def _print_human(evidence: dict[str, Any], console: Console) -> None:
    condition = evidence["condition"] or {}
    rows = [
        (
            "VM",
            f"{evidence['namespace']}/{evidence['name']} "
            f"(source {evidence['source']}, phase {evidence['phase']})",
        ),
        ("declared digest", evidence["declaredDigest"] or "-"),
        ("checksumVerified", str(evidence["checksumVerified"]).lower()),
        ("verified by", evidence["verifiedBy"] or "-"),
        ("verified digest", evidence["verifiedDigest"] or "-"),
        (
            "condition",
            f"ChecksumVerified={condition.get('status')} {condition.get('reason')}: "
            f"{condition.get('message')}"
            if condition
            else "-",
        ),
    ]
    verdict = evidence["diskVerdict"]
    if verdict is not None:
        rows.append(
            (
                "disk verdict",
                f"{verdict.get('result')}: expected {verdict.get('expected')}, "
                f"disk has {verdict.get('actual')} ({verdict.get('bytes')} bytes hashed)",
            )
        )
    record = evidence["imageRecord"]
    if record is not None:
        if "error" in record:
            rows.append(("image record", f"{record['name']}: {record['error']}"))
        else:
            agreement = {True: "matches the declared digest", False: "DIFFERS from the declared digest"}.get(
                record["matchesDeclared"], "no file digest to compare"
            )
            rows.append(
                (
                    "image record",
                    f"{record['name']} ({record['format']}): file {record['sha256']} {agreement}; "
                    f"raw content {record['contentSha256']}, {record['virtualSizeBytes']} bytes",
                )
            )
    # Plain lines, never folded: digests must stay copy-pasteable.
    for label, value in rows:
        console.print(f"[bold]{label:<17}[/] {value}", highlight=False)
    for problem in evidence["problems"]:
        console.print(f"[red]problem:[/] {problem}", highlight=False)
    console.print("[green]VERIFIED[/]" if evidence["verified"] else "[red]NOT VERIFIED[/]")


def register(app: typer.Typer) -> None:
    """Attach the ``verify`` command to the CLI app."""

    @app.command("verify")
    def verify_command(
        name: Annotated[str, typer.Argument(help="The UDSVirtualMachine to inspect.")],
        *,
        namespace: Annotated[
            str | None, typer.Option("-n", "--namespace", help="Its namespace (default: the kubeconfig's).")
        ] = None,
        as_json: Annotated[
            bool, typer.Option("--json", help="Print one JSON object instead of text.")
        ] = False,
        kubeconfig: Annotated[
            Path | None, typer.Option("--kubeconfig", help="Kubeconfig file to use.")
        ] = None,
    ) -> None:
        """Show the SI-7 verification state and evidence; exit 0 only when verified."""
        console = Console(soft_wrap=True)
        with KubeClient(kubeconfig) as client:
            evidence = gather_evidence(client, name, namespace or client.default_namespace)
        if as_json:
            typer.echo(json.dumps(evidence, indent=2, sort_keys=True))
        else:
            _print_human(evidence, console)
        raise typer.Exit(EXIT_VERIFIED if evidence["verified"] else EXIT_NOT_VERIFIED)


__all__ = ["EXIT_NOT_VERIFIED", "EXIT_USAGE", "EXIT_VERIFIED", "gather_evidence", "register"]
