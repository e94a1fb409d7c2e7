"""The operator's image, built from the repo's Dockerfile, behaves as the chart and verifier pod expect."""

from __future__ import annotations

import hashlib
import json
import re
import urllib.request
from pathlib import Path

from tests.build.conftest import ROOT, BuiltImage, buildah

MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"
)


def registry_digest(tag_ref: str) -> str:
    """The digest the registry serves for ``REGISTRY/NAME:TAG`` (what a node pulling the tag would get)."""
    registry, _, rest = tag_ref.partition("/")
    name, _, tag = rest.rpartition(":")
    request = urllib.request.Request(
        f"http://{registry}/v2/{name}/manifests/{tag}", method="HEAD", headers={"Accept": MANIFEST_TYPES}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return str(response.headers["Docker-Content-Digest"])


def test_reference_is_pinned_by_the_digest_the_registry_serves(
    built_image: BuiltImage, registry: str
) -> None:
    assert re.fullmatch(rf"{re.escape(registry)}/uds-vm-operator@sha256:[0-9a-f]{{64}}", built_image.ref)
    assert registry_digest(built_image.tag_ref) == built_image.ref.split("@")[1]


def test_config_runs_the_operator_as_65532(built_image: BuiltImage) -> None:
    config = json.loads(buildah("inspect", "--type", "container", built_image.container).stdout)
    oci = config["OCIv1"]["config"]
    assert oci["User"] == "65532:65532"
    assert oci["Entrypoint"] == ["uds-vm-operator"]
    assert config["OCIv1"]["config"]["Labels"]["org.opencontainers.image.title"] == "uds-vm-operator"
    ids = built_image.run("python3", "-c", "import os; print(os.getuid(), os.getgid())")
    assert ids.returncode == 0, ids.stderr
    assert ids.stdout.split() == ["65532", "65532"]


def test_console_scripts_run(built_image: BuiltImage) -> None:
    operator = built_image.run("uds-vm-operator", "--help")
    assert operator.returncode == 0, operator.stderr
    assert "verify-disk" in operator.stdout and "run" in operator.stdout
    vmctl = built_image.run("uds-vmctl", "--help")
    assert vmctl.returncode == 0, vmctl.stderr
    assert "Usage" in vmctl.stdout


def test_verifier_command_reads_a_disk_as_the_verifier_pod_runs_it(
    built_image: BuiltImage, tmp_path: Path
) -> None:
    """The exact command render/verifier.py puts in the pod, on a read-only mounted disk."""
    disk = tmp_path / "disk.img"
    disk.write_bytes(bytes(range(256)) * 4096)
    disk.chmod(0o644)
    tmp_path.chmod(0o755)
    digest = "sha256:" + hashlib.sha256(disk.read_bytes()).hexdigest()
    size = str(disk.stat().st_size)
    argv = ("uds-vm-operator", "verify-disk", "--path", "/disk/disk.img", "--virtual-size", size)
    good = built_image.run(
        *argv, "--expected", digest, "--termination-log", "", mounts=(f"{tmp_path}:/disk:ro",)
    )
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout.splitlines()[0])["result"] == "match"
    bad = built_image.run(
        *argv, "--expected", "sha256:" + "0" * 64, "--termination-log", "", mounts=(f"{tmp_path}:/disk:ro",)
    )
    assert bad.returncode == 1
    assert json.loads(bad.stdout.splitlines()[0])["result"] == "mismatch"


def test_no_pip_or_setuptools_anywhere(built_image: BuiltImage) -> None:
    for python in ("python3", "/opt/venv/bin/python"):
        for module in ("pip", "setuptools", "wheel"):
            probe = built_image.run(python, "-c", f"import {module}")
            assert probe.returncode != 0 and "ModuleNotFoundError" in probe.stderr, (python, module)
    found = built_image.run(
        "python3", "-c",
        "import pathlib; print('\\n'.join(str(p) for p in pathlib.Path('/').glob('usr/**/*.whl')))",
    )  # fmt: skip
    assert found.returncode == 0 and found.stdout.strip() == ""
    assert built_image.run("python3", "-c", "import shutil; assert not shutil.which('pip')").returncode == 0


def test_stdlib_and_venv_have_unchecked_bytecode(built_image: BuiltImage) -> None:
    """Every start imports from bytecode compiled at build time (flags 0b01: hash-based, unchecked)."""
    script = (
        "import importlib.util, sys\n"
        "import asyncio, json, ssl, email.parser, uds_vm_operator, kopf, pydantic\n"
        "for mod in (asyncio, json, ssl, email.parser, uds_vm_operator, kopf, pydantic):\n"
        "    pyc = importlib.util.cache_from_source(mod.__file__)\n"
        "    flags = int.from_bytes(open(pyc, 'rb').read()[4:8], 'little')\n"
        "    print(mod.__name__, flags)\n"
    )
    out = built_image.run("python3", "-c", script)
    assert out.returncode == 0, out.stderr
    flags = dict(line.split() for line in out.stdout.splitlines())
    assert flags == dict.fromkeys(
        ["asyncio", "json", "ssl", "email.parser", "uds_vm_operator", "kopf", "pydantic"], "1"
    )


def test_a_base_image_not_pinned_by_digest_stops_the_build(built_image: BuiltImage, tmp_path: Path) -> None:
    # The very base the image was built FROM, under a tag only: same bytes, unpinned reference.
    base_ref = (ROOT / ".envtest/python-base-image").read_text().strip()
    unpinned = f"localhost/uds-test/unpinned-base:{tmp_path.name.lower()}"
    buildah("pull", "--quiet", "--tls-verify=false", base_ref)
    buildah("tag", base_ref, unpinned)
    (tmp_path / "Dockerfile").write_text((ROOT / "Dockerfile").read_text())
    try:
        refused = buildah(
            "bud", "--isolation", "chroot", "--pull-never", "--layers=false",
            "--build-arg", f"PYTHON_IMAGE={unpinned}", "-f", str(tmp_path / "Dockerfile"), str(tmp_path),
            check=False, timeout=300,
        )  # fmt: skip
    finally:
        buildah("rmi", unpinned, check=False)
    assert refused.returncode != 0
    assert f"the base image {unpinned} is not pinned by digest" in refused.stderr + refused.stdout
