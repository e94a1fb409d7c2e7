"""Provenance: the operator image signed with a key made here, verified against the registry, with an SBOM.

cosign and syft are built from their Go modules (tools/cosign, tools/syft); nothing is contacted but the
loopback registry (no transparency log, no Fulcio). A tampered image under the signed tag, a foreign key and
an image nobody signed must all fail verification.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.build.conftest import ROOT, BuiltImage, buildah

SIGN = ROOT / "tools/provenance/sign.sh"


def cosign() -> str:
    """The cosign binary (built once, cached)."""
    return subprocess.run(
        [str(ROOT / "tools/cosign/build.sh")], check=True, text=True, capture_output=True
    ).stdout.strip()


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """cosign's password, and a HOME/TUF_ROOT of the test's own (nothing lands in the user's ~/.sigstore)."""
    return {
        **os.environ,
        "COSIGN_PASSWORD": "test-only",
        "HOME": str(tmp_path),
        "TUF_ROOT": str(tmp_path / "tuf"),
    }


def keypair(directory: Path, env: dict[str, str]) -> tuple[Path, Path]:
    """A fresh cosign key pair in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run([cosign(), "generate-key-pair"], cwd=directory, env=env, check=True, capture_output=True)
    return directory / "cosign.key", directory / "cosign.pub"


def verify(pub: Path, ref: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Verify signature and SBOM attestation (the runbook's command)."""
    return subprocess.run(
        [str(SIGN), "verify", str(pub), ref],
        env=env,
        text=True,
        capture_output=True,
        timeout=300,
        check=False,
    )


def test_signed_image_and_sbom_verify_and_tampering_fails(
    built_image: BuiltImage, registry: str, tmp_path: Path, env: dict[str, str]
) -> None:
    key, pub = keypair(tmp_path / "site", env)
    # A copy of the operator image under its own tag: the test re-points that tag at another image later.
    tagged = f"{registry}/uds-test/signed-operator:{tmp_path.name}"
    local = (ROOT / ".envtest/operator-image-local").read_text().strip()
    buildah("push", "--quiet", "--tls-verify=false", local, f"docker://{tagged}")
    sbom = tmp_path / "sbom.spdx.json"
    signed = subprocess.run(
        [str(SIGN), "sign", str(key), tagged, str(sbom), str(built_image.archive)],
        env=env, text=True, capture_output=True, timeout=600, check=False,
    )  # fmt: skip
    assert signed.returncode == 0, signed.stderr

    document = json.loads(sbom.read_text())
    assert document["spdxVersion"] == "SPDX-2.3"
    names = {package["name"] for package in document["packages"]}
    assert {"uds-vm-operator", "kopf", "pydantic", "aiohttp", "python3.11"} <= names

    good = verify(pub, tagged, env)
    assert good.returncode == 0, good.stderr
    # The same image by digest verifies too (a site pins the digest from .envtest/operator-image).
    assert (
        verify(pub, built_image.ref.replace("uds-vm-operator@", "uds-test/signed-operator@"), env).returncode
        == 0
    )

    _, other_pub = keypair(tmp_path / "other", env)
    assert verify(other_pub, tagged, env).returncode != 0, "a signature must not verify under a foreign key"

    # Tampering: another image (different digest) pushed under the signed tag.
    busybox = "localhost/uds-test/busybox:latest"
    buildah("push", "--quiet", "--tls-verify=false", busybox, f"docker://{tagged}")
    tampered = verify(pub, tagged, env)
    assert tampered.returncode != 0
    assert "no signatures found" in tampered.stderr or "no matching signatures" in tampered.stderr
