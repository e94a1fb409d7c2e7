"""Issue 32 acceptance: kubeconform and checkov pass on the rendered chart, and each can fail.

The scanners are the pinned builds (tools/scan/*-build.sh, `make scan-bins`); kubeconform's schemas come from
the real kube-apiserver of tools/envtest (tools/scan/k8s_schemas.py). Every finding that remains is skipped by
the table in docs/chart-scanning.md, which must list only checks that still fire. A missing tool is built, or
the test fails saying how to get it; it never skips.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.test_deploy_helm import helm_path
from tools.scan import chart_scan, k8s_schemas


@pytest.fixture(scope="module")
def kubeconform() -> str:
    return _built(chart_scan.kubeconform_binary)


@pytest.fixture(scope="module")
def checkov() -> str:
    return _built(chart_scan.checkov_binary)


@pytest.fixture(scope="module")
def schemas() -> Path:
    try:
        return k8s_schemas.ensure_schemas()
    except (k8s_schemas.SchemaError, RuntimeError) as error:
        pytest.fail(f"kubeconform schemas could not be written: {error} (make envtest-bins scan-bins)")


def _built(build: Any) -> str:
    try:
        path: str = build()
    except chart_scan.ScanError as error:
        pytest.fail(str(error), pytrace=False)
    return path


def _documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def test_every_flavour_passes_both_scanners(
    tmp_path: Path, kubeconform: str, checkov: str, schemas: Path
) -> None:
    rendered = chart_scan.render_flavours(helm_path(), tmp_path)
    objects = sum(len(_documents(path)) for path in rendered)
    crds = sum(len(_documents(path)) for path in chart_scan.PROJECT_CRDS.glob("*.yaml"))
    kinds = {doc["kind"] for path in rendered for doc in _documents(path)}
    assert {"Deployment", "KopfPeering", "ClusterKopfPeering", "ValidatingAdmissionPolicy"} <= kinds

    strict = chart_scan.run_kubeconform(kubeconform, schemas, [*rendered, chart_scan.PROJECT_CRDS])
    assert strict.problems == []
    assert strict.returncode == 0
    assert strict.summary == {"valid": objects + crds, "invalid": 0, "errors": 0, "skipped": 0}

    skips = chart_scan.read_skips()
    assert skips, "docs/chart-scanning.md lists no skipped check: drop the stale-skip assertion below too"
    report = chart_scan.run_checkov(checkov, tmp_path, skip=sorted(skips))
    assert report.failed == []
    assert report.returncode == 0
    assert report.passed > 100

    still_firing = {
        check for check, _, _ in chart_scan.run_checkov(checkov, tmp_path, only=sorted(skips)).failed
    }
    assert still_firing == set(skips), "a skipped check no longer fires: remove its row from the doc"


def test_kubeconform_refuses_a_misspelt_field_a_wrong_type_and_a_bad_crd(
    tmp_path: Path, kubeconform: str, schemas: Path
) -> None:
    chart = tmp_path / "chart.yaml"
    values = ("--set", "resources.limts.cpu=1", "--set-string", "replicas=two")
    chart.write_text(chart_scan.helm_template(helm_path(), *chart_scan.FLAVOURS["namespaced"], *values))
    crd_source = sorted(chart_scan.PROJECT_CRDS.glob("*.yaml"))[0]
    crd = _documents(crd_source)[0]
    crd["spec"]["scopee"] = crd["spec"].pop("scope")
    (tmp_path / "crd.yaml").write_text(yaml.safe_dump(crd))

    report = chart_scan.run_kubeconform(kubeconform, schemas, [chart, tmp_path / "crd.yaml"])

    assert report.returncode != 0
    text = "\n".join(report.problems)
    assert "additional properties 'limts' not allowed" in text
    assert "/spec/replicas" in text
    assert "additional properties 'scopee' not allowed" in text
    assert "missing property 'scope'" in text


def test_checkov_refuses_a_privileged_tag_only_container(tmp_path: Path, checkov: str) -> None:
    documents = _documents(_render_one(tmp_path / "clean"))
    deployment = next(doc for doc in documents if doc["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["securityContext"].update(privileged=True, allowPrivilegeEscalation=True)
    container["image"] = container["image"].split("@", 1)[0]
    tampered = tmp_path / "tampered"
    tampered.mkdir()
    (tampered / "chart.yaml").write_text(yaml.safe_dump_all(documents))

    report = chart_scan.run_checkov(checkov, tampered, skip=sorted(chart_scan.read_skips()))

    assert report.returncode != 0
    failed = {check for check, _, _ in report.failed}
    assert {"CKV_K8S_16", "CKV_K8S_20", "CKV_K8S_43"} <= failed


def _render_one(folder: Path) -> Path:
    folder.mkdir()
    path = folder / "chart.yaml"
    path.write_text(chart_scan.helm_template(helm_path(), *chart_scan.FLAVOURS["namespaced"]))
    return path


def test_chart_scan_entry_point_passes(tmp_path: Path) -> None:
    """What `make chart-scan` runs (both scanners, the skip table, the stale-skip check) finds no problem."""
    problems = chart_scan.scan(tmp_path, helm_path())
    assert problems == []
    assert {path.name for path in tmp_path.iterdir()} == {f"{name}.yaml" for name in chart_scan.FLAVOURS}
