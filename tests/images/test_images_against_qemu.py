"""Our inspection and digests against the real qemu-img on images it made (ENGINEERING §3, image tier)."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.images.qemu_reference import Case, qemu_info
from uds_vm_operator.cli.main import app
from uds_vm_operator.images import content_sha256, inspect_image, survey_image

pytestmark = pytest.mark.images

CASE_NAMES = [
    "raw-10MiB",
    "raw-3MiB+7",
    "raw-1GiB+512",
    "qcow2-v2",
    "qcow2-v3",
    "qcow2-3MiB+7",
    "qcow2-zlib",
    "qcow2-zstd",
    "qcow2-extended-l2",
    "qcow2-1GiB+512",
    "qcow2-backing-file",
    "qcow2-data-file",
    "vmdk-monolithicSparse",
    "vmdk-streamOptimized",
    "vmdk-monolithicFlat",
    "vmdk-twoGbMaxExtentSparse",
    "vmdk-backing",
    "vhdx-dynamic",
    "vhdx-fixed",
    "vpc-dynamic",
    "vpc-fixed",
    "vpc-force-size",
    "iso",
    "gzip-raw",
    "xz-raw-3MiB+7",
    "zstd-raw",
    "gzip-qcow2",
    "xz-qcow2-backing",
    "tar-raw",
    "ova-qcow2",
    "ova-gzip-vmdk",
]
CONTENT_CASES = [
    "raw-10MiB",
    "raw-3MiB+7",
    "raw-1GiB+512",
    "qcow2-v2",
    "qcow2-v3",
    "qcow2-3MiB+7",
    "qcow2-zlib",
    "qcow2-zstd",
    "qcow2-extended-l2",
    "qcow2-1GiB+512",
    "vpc-fixed",
    "iso",
    "gzip-raw",
    "xz-raw-3MiB+7",
    "zstd-raw",
    "tar-raw",
    "ova-qcow2",
]


def test_case_list_matches_the_fixture(reference_images: dict[str, Case]) -> None:
    assert sorted(reference_images) == sorted(CASE_NAMES)
    assert sorted(n for n, c in reference_images.items() if c.content) == sorted(CONTENT_CASES)


@pytest.mark.parametrize("name", CASE_NAMES)
def test_virtual_size_equals_qemu_img_info(reference_images: dict[str, Case], name: str) -> None:
    case = reference_images[name]
    assert inspect_image(str(case.path)).virtual_size == qemu_info(case)["virtual-size"]


@pytest.mark.parametrize("name", CASE_NAMES)
def test_backing_detection(reference_images: dict[str, Case], name: str) -> None:
    case = reference_images[name]
    info = inspect_image(str(case.path))
    references = [ref.reference for ref in info.backing_refs]
    assert bool(references) == case.violation, references
    qemu_backing = qemu_info(case).get("backing-filename")
    if qemu_backing:  # whatever qemu follows, we must name
        assert qemu_backing in references
    if "ref" in case.extra:
        assert case.extra["ref"] in references


@pytest.mark.parametrize("name", CONTENT_CASES)
def test_content_digest_equals_qemu_img_convert(
    reference_images: dict[str, Case], name: str, tmp_path: Path
) -> None:
    case = reference_images[name]
    virtual_size = qemu_info(case)["virtual-size"]
    out = tmp_path / "converted.raw"
    fmt = ["-f", case.qemu_format] if case.qemu_format else []
    subprocess.run(["qemu-img", "convert", *fmt, "-O", "raw", str(case.qemu_path), str(out)], check=True)
    expected = hashlib.sha256()
    with out.open("rb") as handle:
        remaining = virtual_size
        while remaining:
            chunk = handle.read(min(remaining, 8 << 20))
            if not chunk:
                break
            expected.update(chunk)
            remaining -= len(chunk)
        expected.update(bytes(remaining))  # pad to the virtual size if qemu wrote less
    survey = survey_image(str(case.path))
    assert survey.content_sha256 == expected.hexdigest()
    assert content_sha256(str(case.path)) == expected.hexdigest()  # the content-only entry point agrees


@pytest.mark.parametrize("name", CASE_NAMES)
def test_prep_cli_exit_code_and_json(reference_images: dict[str, Case], name: str) -> None:
    case = reference_images[name]
    result = CliRunner().invoke(app, ["prep", "--json", "--no-content-digest", str(case.path)])
    assert result.exit_code == (1 if case.violation else 0), result.output
    report = json.loads(result.stdout)
    assert report["airgap_verified"] is (not case.violation)
    assert report["virtual_size_bytes"] == qemu_info(case)["virtual-size"]
    assert "Traceback" not in result.output
    if case.violation:
        assert result.stderr.startswith("error: air-gap violation") and len(result.stderr.splitlines()) == 1
    else:
        assert report["sha256"] == "sha256:" + hashlib.sha256(case.path.read_bytes()).hexdigest()
    if "label" in case.extra:
        assert report["iso_volume_label"] == case.extra["label"]
