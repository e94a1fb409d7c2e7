"""What ``prep`` writes against the real upstream schemas: CDI's DataVolume/DataSource CRDs and Zarf's schema.

Reuses the offline structural checker of ``test_render_upstream_schemas`` (what a Strict API server
rejects) and the Zarf schema validator of ``test_zarf_package``, so there is one checker per schema.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tests.unit.test_render_upstream_schemas import _crd_folder, _schema, schema_violations
from tests.unit.test_zarf_package import validator as zarf_validator
from uds_vm_operator.cli.main import app


@pytest.fixture
def written(tmp_path: Path) -> Path:
    image = tmp_path / "rhel-9.4.raw"
    image.write_bytes(bytes(range(256)) * 8192)
    out = tmp_path / "out"
    args = ["prep", "--golden-image", "--data-source-name", "rhel-9", "--zarf", "--namespace", "images"]
    result = CliRunner().invoke(app, [*args, "--output-dir", str(out), str(image)])
    assert result.exit_code == 0, result.output
    return out


def test_golden_datavolume_and_datasource_fit_cdi_crds(written: Path) -> None:
    folder = _crd_folder()
    datavolume, datasource = yaml.safe_load_all((written / "rhel-9.golden-image.yaml").read_text())
    assert schema_violations(datavolume, _schema(folder, "datavolumes.cdi.kubevirt.io.yaml", "v1beta1")) == []
    assert schema_violations(datasource, _schema(folder, "datasources.cdi.kubevirt.io.yaml", "v1beta1")) == []


def test_checker_would_catch_a_wrong_datavolume(written: Path) -> None:
    folder = _crd_folder()
    datavolume, _ = yaml.safe_load_all((written / "rhel-9.golden-image.yaml").read_text())
    datavolume["spec"]["source"]["upload"]["checksum"] = "sha256:" + "0" * 64  # CDI has no upload checksum
    assert schema_violations(datavolume, _schema(folder, "datavolumes.cdi.kubevirt.io.yaml", "v1beta1"))


def test_zarf_component_fits_the_zarf_schema(written: Path) -> None:
    package = yaml.safe_load((written / "zarf-component.yaml").read_text())
    errors = [f"{e.json_path}: {e.message}" for e in zarf_validator().iter_errors(package)]
    assert errors == []
    package["components"][0]["files"][0]["sha"] = "typo"
    assert list(zarf_validator().iter_errors(package))
