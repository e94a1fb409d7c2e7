"""``uds-vmctl prep IMAGE``: inspect a disk image before it crosses the air gap, and write its manifests.

Detects the format, reads the virtual size from the headers, refuses images that depend on other files,
streams the SHA-256 of the file (and of the virtual disk's content, which is what the operator verifies in
the PVC), computes the deterministic PVC size, prints a report and optionally writes the manifests.
Exit codes: 0 ok, 1 check failed (air-gap violation, corrupt or unsupported image), 2 usage error. A
failure is raised, and :mod:`._errors` prints its one line: an unreadable path is an ``OSError`` naming
it, a bad image an ``ImageError`` (whose message names the file), a bad flag a :class:`UsageError`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import typer

from uds_vm_operator import __version__
from uds_vm_operator.cli import prep_manifests as pm
from uds_vm_operator.cli._errors import CheckFailed, UsageError
from uds_vm_operator.cli._output import TerminalProgress, stderr_is_terminal, write_files
from uds_vm_operator.images import ImageError, ImageSurvey, survey_image
from uds_vm_operator.names import is_dns_label
from uds_vm_operator.sizing import DEFAULT_OVERHEAD_PERCENT, pvc_size


@dataclass(frozen=True)
class PrepOptions:
    """The command line, validated."""

    image: str
    name: str | None = None
    namespace: str = "default"
    output_dir: str | None = None
    golden_image: bool = False
    data_source_name: str | None = None
    zarf: bool = False
    sha512: bool = False
    as_json: bool = False
    content_digest: bool = True


def register(app: typer.Typer) -> None:
    """Attach the ``prep`` command to the CLI app."""

    @app.command("prep")
    def prep_command(  # noqa: PLR0917 (typer maps parameters to options)
        image: str = typer.Argument(
            ..., help="Disk image: raw, qcow2, vmdk, vhd(x), iso; .gz/.xz/.zst/.tar/.ova."
        ),
        name: str | None = typer.Option(None, "--name", help="VM name (default: from the file name)."),
        namespace: str = typer.Option("default", "--namespace", "-n", help="Namespace for the manifests."),
        output_dir: str | None = typer.Option(
            None, "--output-dir", "-o", help="Write the UDSVirtualMachine and the image record here."
        ),
        golden_image: bool = typer.Option(
            False,
            "--golden-image",
            help="Also write a CDI DataVolume + DataSource (needs --data-source-name).",
        ),
        data_source_name: str | None = typer.Option(
            None, "--data-source-name", help="Name of the golden-image DataSource and its DataVolume."
        ),
        zarf: bool = typer.Option(
            False, "--zarf", help="Also write zarf-component.yaml carrying image + manifests."
        ),
        sha512: bool = typer.Option(False, "--sha512", help="Also compute the SHA-512 of the file."),
        as_json: bool = typer.Option(
            False, "--json", help="Print one JSON object on stdout instead of the report."
        ),
        no_content_digest: bool = typer.Option(
            False, "--no-content-digest", help="Skip the SHA-256 of the virtual disk content."
        ),
    ) -> None:
        """Inspect IMAGE (format, virtual size, air-gap references, digests) and write its manifests."""
        options = PrepOptions(
            image=image,
            name=name,
            namespace=namespace,
            output_dir=output_dir,
            golden_image=golden_image,
            data_source_name=data_source_name,
            zarf=zarf,
            sha512=sha512,
            as_json=as_json,
            content_digest=not no_content_digest,
        )
        run_prep(options)


def run_prep(options: PrepOptions) -> None:
    """Survey the image, print the report and write the manifests; raise on any failure (see above)."""
    target = _validate(options)
    try:
        if stderr_is_terminal():
            with TerminalProgress() as progress:
                survey = survey_image(
                    options.image,
                    sha512=options.sha512,
                    content_digest=options.content_digest,
                    progress=progress,
                )
        else:
            survey = survey_image(options.image, sha512=options.sha512, content_digest=options.content_digest)
    except ImageError as exc:
        _emit_error_json(options, str(exc))
        raise

    report = build_report(survey)
    if not survey.info.airgap_verified:
        violation = _violation_message(survey)
        report["error"] = violation
        _print_report(options, report)
        raise CheckFailed(violation)
    report["written_files"] = write_manifests(report, target, options) if target is not None else []
    _print_report(options, report)


def _validate(options: PrepOptions) -> pm.ManifestTarget | None:
    if options.golden_image and not options.data_source_name:
        raise UsageError("--golden-image needs --data-source-name NAME")
    if options.data_source_name and not options.golden_image:
        raise UsageError("--data-source-name is only used with --golden-image")
    name = options.name if options.name is not None else pm.default_name(os.path.basename(options.image))
    for label, value in (("--name", name), ("--namespace", options.namespace)):
        if not is_dns_label(value):
            raise UsageError(
                f"{label} {value!r} is not a valid name (lower-case letters, digits, '-', max 63)"
            )
    if options.data_source_name and not is_dns_label(options.data_source_name):
        raise UsageError(f"--data-source-name {options.data_source_name!r} is not a valid name")
    if options.output_dir is None and not (options.zarf or options.golden_image):
        return None
    return pm.ManifestTarget(
        name=name, namespace=options.namespace, data_source_name=options.data_source_name
    )


def build_report(survey: ImageSurvey, overhead_percent: int = DEFAULT_OVERHEAD_PERCENT) -> dict[str, Any]:
    """The facts of one image as a flat JSON-able dict (the ``--json`` output and the image record)."""
    info = survey.info
    report: dict[str, Any] = {
        "file": os.path.basename(survey.path),
        "format": info.format,
        "wrapper": "+".join(info.wrappers) if info.wrappers else None,
        "wrappers": list(info.wrappers),
        "member": info.member_name,
        "virtual_size_bytes": info.virtual_size,
        "file_size_bytes": survey.file_size,
        "actual_size_bytes": survey.allocated_size,
        "pvc_size": pvc_size(info.virtual_size, overhead_percent),
        "overhead_percent": overhead_percent,
        "airgap_verified": info.airgap_verified,
        "backing_refs": [{"kind": ref.kind, "reference": ref.reference} for ref in info.backing_refs],
        "details": dict(info.details),
        "tool": f"uds-vmctl prep {__version__}",
    }
    if info.iso_volume_label is not None or info.format == "iso":
        report["iso_volume_label"] = info.iso_volume_label
    if "sha256" in survey.digests:
        report["sha256"] = f"sha256:{survey.digests['sha256']}"
    if "sha512" in survey.digests:
        report["sha512"] = f"sha512:{survey.digests['sha512']}"
    if survey.content_sha256 is not None:
        report["content_sha256"] = f"sha256:{survey.content_sha256}"
    if survey.content_note is not None:
        report["content_digest_note"] = survey.content_note
    return report


def _violation_message(survey: ImageSurvey) -> str:
    refs = "; ".join(ref.describe() for ref in survey.info.backing_refs)
    return (
        f"air-gap violation: {os.path.basename(survey.path)} depends on {refs}; "
        "flatten it into one self-contained file (e.g. qemu-img convert -O qcow2 IN OUT) and run prep again"
    )


def write_manifests(report: dict[str, Any], target: pm.ManifestTarget, options: PrepOptions) -> list[str]:
    """Write the manifests into the output directory (created if needed), all or none; return their paths."""
    import yaml  # noqa: PLC0415 (only needed here; keeps `prep --json` start-up short)

    out_dir = options.output_dir or "."
    record = pm.image_record(report, target)
    documents: dict[str, str] = {
        f"{target.name}.udsvm.yaml": yaml.safe_dump(pm.udsvm_manifest(report, target), sort_keys=False),
        f"{target.name}.image-record.json": json.dumps(record, indent=2, sort_keys=True) + "\n",
        f"{target.name}.image-record.configmap.yaml": yaml.safe_dump(
            pm.image_record_configmap(record, target), sort_keys=False
        ),
    }
    if target.data_source_name:
        golden = [pm.golden_datavolume(report, target), pm.golden_datasource(target)]
        documents[f"{target.data_source_name}.golden-image.yaml"] = yaml.safe_dump_all(
            golden, sort_keys=False
        )
    if options.zarf:
        manifests = [n for n in documents if n.endswith(".yaml")]
        image_path = os.path.relpath(os.path.abspath(options.image), os.path.abspath(out_dir))
        documents["zarf-component.yaml"] = yaml.safe_dump(
            pm.zarf_package(report, target, image_path, manifests), sort_keys=False
        )
    write_files(out_dir, documents, option="--output-dir")
    return [os.path.join(out_dir, file_name) for file_name in documents]


def _emit_error_json(options: PrepOptions, message: str) -> None:
    if options.as_json:
        typer.echo(
            json.dumps({"file": os.path.basename(options.image), "error": message, "airgap_verified": False})
        )


def _print_report(options: PrepOptions, report: dict[str, Any]) -> None:
    if options.as_json:
        typer.echo(json.dumps(report, sort_keys=True))
        return
    from rich.console import Console  # noqa: PLC0415 (lazy: `--json` never needs rich)
    from rich.table import Table  # noqa: PLC0415

    table = Table(title=f"uds-vmctl prep: {report['file']}", show_header=False, title_justify="left")
    table.add_column("fact", style="bold")
    table.add_column("value", overflow="fold")
    fmt = report["format"] + (f" (in {report['wrapper']})" if report["wrapper"] else "")
    if report.get("member"):
        fmt += f", member {report['member']}"
    rows: list[tuple[str, str]] = [
        ("format", fmt),
        ("virtual size", f"{report['virtual_size_bytes']:,} bytes"),
        ("file size", f"{report['file_size_bytes']:,} bytes ({report['actual_size_bytes']:,} allocated)"),
        ("PVC size", f"{report['pvc_size']} (overhead {report['overhead_percent']}%)"),
        ("air gap", "verified: no external files" if report["airgap_verified"] else "VIOLATION"),
    ]
    rows.extend(("backing ref", f"{ref['kind']}: {ref['reference']}") for ref in report["backing_refs"])
    if "iso_volume_label" in report:
        rows.append(("ISO volume label", str(report["iso_volume_label"])))
    for key, label in (
        ("sha256", "file sha256"),
        ("sha512", "file sha512"),
        ("content_sha256", "content sha256"),
    ):
        if key in report:
            rows.append((label, report[key]))
    if "content_digest_note" in report:
        rows.append(("content sha256", f"not computed: {report['content_digest_note']}"))
    rows.extend(("wrote", path) for path in report.get("written_files", []))
    for fact, value in rows:
        table.add_row(fact, value)
    Console(highlight=False).print(table)
