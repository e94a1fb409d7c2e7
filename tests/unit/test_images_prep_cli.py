"""``uds-vmctl prep`` end to end on synthetic images: exit codes, JSON, manifests."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from tests.unit import image_builders as build
from uds_vm_operator.api.models import UDSVirtualMachineSpec
from uds_vm_operator.cli.main import app
from uds_vm_operator.sizing import pvc_size


def run(*args: str) -> Any:
    return CliRunner().invoke(app, ["prep", *args])


@pytest.fixture
def raw_image(tmp_path: Path) -> Path:
    path = tmp_path / "Ubuntu_22.04.img"
    path.write_bytes(bytes(range(256)) * 40_000 + b"odd")  # not a whole number of sectors
    return path


def test_raw_json_report(raw_image: Path) -> None:
    result = run("--json", str(raw_image))
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    data = raw_image.read_bytes()
    virtual = -(-len(data) // 512) * 512
    assert report["format"] == "raw"
    assert report["virtual_size_bytes"] == virtual
    assert report["file_size_bytes"] == len(data)
    assert report["sha256"] == "sha256:" + hashlib.sha256(data).hexdigest()
    assert (
        report["content_sha256"] == "sha256:" + hashlib.sha256(data + bytes(virtual - len(data))).hexdigest()
    )
    assert report["pvc_size"] == pvc_size(virtual)
    assert report["airgap_verified"] is True
    assert report["backing_refs"] == []
    assert report["wrapper"] is None
    assert "actual_size_bytes" in report


def test_sha512_and_no_content_digest(raw_image: Path) -> None:
    report = json.loads(run("--json", "--sha512", "--no-content-digest", str(raw_image)).stdout)
    assert report["sha512"] == "sha512:" + hashlib.sha512(raw_image.read_bytes()).hexdigest()
    assert "content_sha256" not in report


def test_iso_label_in_json(tmp_path: Path) -> None:
    path = tmp_path / "win.iso"
    path.write_bytes(build.iso("CCCOMA_X64FRE", udf=True))
    report = json.loads(run("--json", str(path)).stdout)
    assert (report["format"], report["iso_volume_label"]) == ("iso", "CCCOMA_X64FRE")


def test_backing_file_is_exit_1_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "delta.qcow2"
    path.write_bytes(build.qcow2(backing=b"../base.qcow2"))
    result = run("--json", str(path))
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["airgap_verified"] is False
    assert report["backing_refs"] == [{"kind": "backing file", "reference": "../base.qcow2"}]
    assert "sha256" not in report
    error_lines = result.stderr.strip().splitlines()
    assert len(error_lines) == 1
    assert error_lines[0].startswith("error: air-gap violation") and "../base.qcow2" in error_lines[0]
    assert "Traceback" not in result.output


def test_corrupt_image_is_exit_1(tmp_path: Path) -> None:
    path = tmp_path / "bad.qcow2"
    path.write_bytes(build.qcow2()[:40])
    result = run(str(path))
    assert result.exit_code == 1
    assert result.stderr.startswith("error: bad.qcow2:") and "truncated" in result.stderr
    assert "Traceback" not in result.output


def test_empty_file_is_exit_1(tmp_path: Path) -> None:
    path = tmp_path / "copy.qcow2"
    path.touch()
    result = run(str(path))
    assert result.exit_code == 1
    assert "empty" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["/nonexistent/disk.qcow2"], "no such file"),
        (["--golden-image", "IMG"], "--data-source-name"),
        (["--data-source-name", "d", "IMG"], "only used with --golden-image"),
        (["--name", "Bad_Name", "IMG"], "not a valid name"),
        (["--namespace", "-x", "IMG"], "not a valid name"),
    ],
)
def test_usage_errors_are_exit_2(raw_image: Path, args: list[str], message: str) -> None:
    result = run(*[str(raw_image) if a == "IMG" else a for a in args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert "Traceback" not in result.output


def test_directory_and_unknown_flag_are_exit_2(tmp_path: Path) -> None:
    assert run(str(tmp_path)).exit_code == 2
    assert run("--frobnicate", str(tmp_path)).exit_code == 2


def test_output_dir_writes_udsvm_record_and_configmap(raw_image: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run("--json", "--namespace", "edge", "--output-dir", str(out), str(raw_image))
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    name = "ubuntu-22-04"
    udsvm = yaml.safe_load((out / f"{name}.udsvm.yaml").read_text())
    assert udsvm["apiVersion"] == "uds.dev/v1alpha1" and udsvm["kind"] == "UDSVirtualMachine"
    assert udsvm["metadata"] == {
        "name": name,
        "namespace": "edge",
        "annotations": {"uds.dev/image-record": f"{name}-image-record"},
    }
    assert udsvm["spec"]["source"]["upload"]["checksum"] == report["sha256"]
    assert udsvm["spec"]["disk"]["virtualSize"] == report["virtual_size_bytes"]
    UDSVirtualMachineSpec.model_validate(udsvm["spec"])  # the operator's own model accepts it
    record = json.loads((out / f"{name}.image-record.json").read_text())
    assert record["schema_version"] == 1
    assert record["sha256"] == report["sha256"] and record["content_sha256"] == report["content_sha256"]
    configmap = yaml.safe_load((out / f"{name}.image-record.configmap.yaml").read_text())
    assert configmap["metadata"]["name"] == f"{name}-image-record"
    assert configmap["metadata"]["labels"]["uds.dev/image-record"] == "true"
    assert json.loads(configmap["data"]["image-record.json"]) == record


def test_golden_image_and_zarf(raw_image: Path, tmp_path: Path) -> None:
    out = tmp_path / "pkg"
    args = ["--json", "--name", "web", "--golden-image", "--data-source-name", "ubuntu-2204", "--zarf"]
    result = run(*args, "--output-dir", str(out), str(raw_image))
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    dv, ds = yaml.safe_load_all((out / "ubuntu-2204.golden-image.yaml").read_text())
    assert dv["apiVersion"] == "cdi.kubevirt.io/v1beta1" and dv["kind"] == "DataVolume"
    assert dv["spec"] == {
        "source": {"upload": {}},
        "pvc": {  # spec.pvc: CDI would inflate a spec.storage request a second time (SPEC §4)
            "accessModes": ["ReadWriteOnce"],
            "volumeMode": "Filesystem",
            "resources": {"requests": {"storage": report["pvc_size"]}},
        },
    }
    assert ds["kind"] == "DataSource"
    assert ds["spec"]["source"]["pvc"] == {"name": "ubuntu-2204", "namespace": "default"}
    udsvm = yaml.safe_load((out / "web.udsvm.yaml").read_text())
    # The clone declares the raw-content digest, so the operator verifies the cloned disk before it boots.
    assert report["content_sha256"].startswith("sha256:")
    assert udsvm["spec"]["source"] == {
        "dataSource": {"name": "ubuntu-2204", "namespace": "default", "checksum": report["content_sha256"]}
    }
    assert UDSVirtualMachineSpec.model_validate(udsvm["spec"]).declared_checksum == report["content_sha256"]
    zarf = yaml.safe_load((out / "zarf-component.yaml").read_text())
    component = zarf["components"][0]
    assert component["files"][0]["shasum"] == report["sha256"].split(":")[1]
    assert (out / component["files"][0]["source"]).resolve() == raw_image.resolve()
    for manifest in component["manifests"][0]["files"]:
        assert (out / manifest).is_file()


def test_human_report_names_the_facts(raw_image: Path) -> None:
    result = run(str(raw_image))
    assert result.exit_code == 0
    for fact in ("format", "virtual size", "PVC size", "file sha256", "content sha256"):
        assert fact in result.stdout
