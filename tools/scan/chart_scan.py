"""Scan the rendered Helm chart with kubeconform and checkov, as a platform team would (issue 32).

Each flavour of the chart is rendered with ``helm template`` (the default namespaced one exactly as
release/deploy_manifests.py renders deploy/, the peered one, the cluster-scope one), then:

- kubeconform ``-strict`` validates every object, and the project's CRDs (deploy/crds) as
  CustomResourceDefinition objects, against schemas written from the real kube-apiserver
  (tools/scan/k8s_schemas.py); a kind without a schema is an error, never a skip;
- checkov ``--framework kubernetes`` runs offline (``--skip-download``, no platform API key) with the checks
  that docs/chart-scanning.md justifies skipped. That table is the one skip list: a skip whose check no longer
  fires is reported as stale, so the doc cannot outlive the finding.

The image is rendered pinned by a well-formed fake digest (``sha256:000…``): a static scan has no built image,
and the chart pins by digest by default. Exit 0 only if both scanners pass with no unexpected finding.

Usage: python -m tools.scan.chart_scan [--keep DIR]   (``make chart-scan``)
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from release import deploy_manifests
from tools.scan import k8s_schemas

ROOT = Path(__file__).resolve().parents[2]

SKIPS_DOC = ROOT / "docs" / "chart-scanning.md"
PROJECT_CRDS = ROOT / "deploy" / "crds"
"""Validated as CustomResourceDefinition objects (against apiextensions.k8s.io/v1) beside the renders."""
SKIPS_BEGIN = "<!-- checkov-skips:begin -->"
SKIPS_END = "<!-- checkov-skips:end -->"
FAKE_DIGEST = "sha256:" + "0" * 64
"""Well-formed and matching no image: the scan is static, and the chart refuses an image without a digest."""
PEERED = ("--set", "peering.name=uds-vm-operator", "--set", "replicas=2")
FLAVOURS: dict[str, tuple[str, ...]] = {
    "namespaced": deploy_manifests.DEPLOY_VALUES,
    "namespaced-peered": (*deploy_manifests.DEPLOY_VALUES, *PEERED),
    "cluster-peered": ("--set", "rbac.scope=cluster", *PEERED),
}
"""Values of each rendered flavour: deploy/'s own, the same with two peered replicas (KopfPeering objects),
and the opt-in cluster scope (ClusterKopfPeering, ClusterRoleBindings)."""
_CHECK_ID = re.compile(r"^CKV2?_K8S_\d+$")


class ScanError(RuntimeError):
    """A scanner could not run (not a finding): the message says which and how to get it."""


@dataclass
class KubeconformReport:
    returncode: int
    problems: list[str]
    summary: dict[str, int]


@dataclass
class CheckovReport:
    returncode: int
    failed: list[tuple[str, str, str]]
    """(check id, resource, file) of every failed check."""
    passed: int = 0


def read_skips(doc: Path = SKIPS_DOC) -> dict[str, str]:
    """The checkov skip table of docs/chart-scanning.md: {check id: justification}; every row needs both."""
    text = doc.read_text(encoding="utf-8")
    if SKIPS_BEGIN not in text or SKIPS_END not in text:
        raise ScanError(f"{doc} lacks the {SKIPS_BEGIN} ... {SKIPS_END} table of skipped checkov checks")
    block = text.split(SKIPS_BEGIN, 1)[1].split(SKIPS_END, 1)[0]
    skips: dict[str, str] = {}
    for line in block.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].strip("`").startswith("CKV"):
            continue  # header, separator, blank
        check_id, why = cells[0].strip("`"), cells[-1]
        if not _CHECK_ID.match(check_id) or not why:
            raise ScanError(f"{doc}: skip row {line.strip()!r} needs a checkov check ID and a justification")
        skips[check_id] = why
    return skips


def _tool(script: str) -> str:
    result = subprocess.run([str(ROOT / script)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ScanError(f"{script} failed: {result.stderr.strip()[-2000:]} (run `make scan-bins`)")
    return result.stdout.strip()


def kubeconform_binary() -> str:
    """The pinned kubeconform (built from its Go module if needed)."""
    return _tool("tools/scan/kubeconform-build.sh")


def checkov_binary() -> str:
    """The pinned checkov in its own venv (installed from PyPI if needed)."""
    return _tool("tools/scan/checkov-build.sh")


def helm_template(helm: str, *values: str) -> str:
    """``helm template`` the chart as deploy/ is rendered, pinned by the fake digest, plus values."""
    result = subprocess.run(
        [
            helm,
            "template",
            deploy_manifests.RELEASE,
            str(deploy_manifests.CHART),
            "--namespace",
            deploy_manifests.NAMESPACE,
            "--set",
            f"image.digest={FAKE_DIGEST}",
            *values,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise ScanError(f"helm template {' '.join(values)} failed: {result.stderr.strip()}")
    return result.stdout


def render_flavours(helm: str, out_dir: Path) -> list[Path]:
    """Every flavour of the chart into out_dir/<flavour>.yaml."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, values in FLAVOURS.items():
        path = out_dir / f"{name}.yaml"
        path.write_text(helm_template(helm, *values), encoding="utf-8")
        paths.append(path)
    return paths


def run_kubeconform(binary: str, schemas: Path, paths: Sequence[Path]) -> KubeconformReport:
    """kubeconform -strict over paths with the apiserver's schemas only; a missing schema is an error."""
    location = f"{schemas}/{k8s_schemas.SCHEMA_LOCATION_TEMPLATE}"
    argv = [binary, "-strict", "-summary", "-output", "json", "-schema-location", location, *map(str, paths)]
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    try:
        report = json.loads(result.stdout)
    except json.JSONDecodeError as error:
        raise ScanError(f"kubeconform printed no JSON ({error}): {result.stderr.strip()}") from error
    problems = [
        f"{item.get('filename')}: {item.get('kind')} {item.get('name')}: {item.get('msg')}"
        for item in report.get("resources") or []
        if item.get("status") not in ("statusValid", "statusSkipped")
    ]
    return KubeconformReport(result.returncode, problems, dict(report.get("summary", {})))


def run_checkov(
    binary: str, directory: Path, skip: Sequence[str] = (), only: Sequence[str] = ()
) -> CheckovReport:
    """checkov --framework kubernetes over directory, offline; skip (--skip-check) or only (--check) IDs."""
    argv = [
        binary,
        "--directory",
        str(directory),
        "--framework",
        "kubernetes",
        "--skip-download",
        "--output",
        "json",
    ]
    if skip:
        argv += ["--skip-check", ",".join(skip)]
    if only:
        argv += ["--check", ",".join(only)]
    result = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=directory)
    try:
        parsed: Any = json.loads(result.stdout)
    except json.JSONDecodeError as error:
        raise ScanError(f"checkov printed no JSON ({error}): {result.stderr.strip()[-2000:]}") from error
    report = CheckovReport(result.returncode, [])
    for item in parsed if isinstance(parsed, list) else [parsed]:
        if item.get("summary", {}).get("resource_count", 0) == 0:
            raise ScanError(f"checkov found no Kubernetes resource in {directory}: {result.stderr.strip()}")
        results = item.get("results", {})
        report.passed += len(results.get("passed_checks", []))
        for check in results.get("failed_checks", []):
            report.failed.append((check["check_id"], check["resource"], check["file_path"]))
    return report


def scan(out_dir: Path, helm: str | None = None) -> list[str]:
    """Render, run both scanners; returns the problems (empty: the chart passes)."""
    helm = helm or deploy_manifests.helm_binary(None)
    rendered = render_flavours(helm, out_dir)
    skips = read_skips()
    problems: list[str] = []
    kubeconform = run_kubeconform(
        kubeconform_binary(), k8s_schemas.ensure_schemas(), [*rendered, PROJECT_CRDS]
    )
    print(f"kubeconform -strict: {kubeconform.summary}")
    problems += [f"kubeconform: {problem}" for problem in kubeconform.problems]
    if kubeconform.returncode != 0 and not kubeconform.problems:
        problems.append(f"kubeconform exited {kubeconform.returncode}")
    checkov_bin = checkov_binary()
    checkov = run_checkov(checkov_bin, out_dir, skip=sorted(skips))
    print(
        f"checkov: {checkov.passed} passed, {len(checkov.failed)} failed, skipped {', '.join(sorted(skips))}"
    )
    problems += [
        f"checkov: {check} failed for {resource} ({path})" for check, resource, path in checkov.failed
    ]
    if checkov.returncode != 0 and not checkov.failed:
        problems.append(f"checkov exited {checkov.returncode}")
    if skips:  # the skipped checks alone: each must still fire, or its justification is stale
        firing = {check for check, _, _ in run_checkov(checkov_bin, out_dir, only=sorted(skips)).failed}
        problems += [
            f"checkov: {check} is skipped in {SKIPS_DOC.name} but no longer fires: remove its row"
            for check in sorted(set(skips) - firing)
        ]
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="render into this folder and keep it (default: a temp dir)")
    args = parser.parse_args()
    try:
        if args.keep:
            problems = scan(args.keep)
        else:
            with tempfile.TemporaryDirectory(prefix="uds-chart-scan-") as tmp:
                problems = scan(Path(tmp))
    except (ScanError, k8s_schemas.SchemaError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"chart scan failed: fix the chart, or justify the check in {SKIPS_DOC}", file=sys.stderr)
        return 1
    print(f"chart scan passed ({', '.join(FLAVOURS)}; skips justified in docs/{SKIPS_DOC.name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
