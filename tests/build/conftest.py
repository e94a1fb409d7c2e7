"""The build tier: the operator's image built from the repo's Dockerfile (``make image``), seen from inside.

The session fixture runs ``tools/images/image.sh`` (cached: seconds when the inputs are unchanged) against the
local registry (``.envtest/registry``; started by ``tools/images/registry.sh up`` when nothing answers) and
opens one buildah working container of the built image; commands run in it with ``buildah run`` (chroot).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "tools/images"
ENVTEST = ROOT / ".envtest"


def buildah_env() -> dict[str, str]:
    """The environment tools/images/lib.sh gives buildah: vfs, the project's own container storage."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "uds-vm-operator"
    return {
        **os.environ,
        "STORAGE_DRIVER": "vfs",
        "CONTAINERS_STORAGE_CONF": str(cache / "buildah-storage/storage.conf"),
    }


def buildah(*args: str, check: bool = True, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run buildah in the project's storage; output captured as text."""
    return subprocess.run(
        ["buildah", *args], env=buildah_env(), text=True, capture_output=True, check=check, **kwargs
    )  # type: ignore[call-overload, no-any-return]


@dataclass(frozen=True)
class BuiltImage:
    """The operator image ``make image`` produced: its references and one working container of it."""

    ref: str  # REGISTRY/uds-vm-operator@sha256:...
    tag_ref: str  # REGISTRY/uds-vm-operator:TAG
    archive: Path  # the cached OCI archive
    container: str

    def run(
        self, *argv: str, user: str | None = None, mounts: tuple[str, ...] = ()
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside the image (as its configured user unless ``user``), like a pod would."""
        opts = ["--isolation", "chroot"]
        if user is not None:
            opts += ["--user", user]
        for mount in mounts:
            opts += ["-v", mount]
        return buildah("run", *opts, self.container, "--", *argv, check=False, timeout=300)


def _registry_answers() -> bool:
    """A registry recorded in .envtest/registry answers (then it is someone else's: reuse, never stop it)."""
    recorded = ENVTEST / "registry"
    if not recorded.is_file():
        return False
    address = recorded.read_text(encoding="utf-8").strip()
    probe = subprocess.run(
        ["curl", "-fsS", "--max-time", "3", f"http://{address}/v2/"], capture_output=True, check=False
    )
    return probe.returncode == 0


@pytest.fixture(scope="session")
def registry() -> Iterator[str]:
    """The loopback registry's address: reused when one answers, else started for the session and stopped."""
    started_here = not _registry_answers()
    out = subprocess.run([str(IMAGES / "registry.sh"), "up"], check=True, text=True, capture_output=True)
    try:
        yield out.stdout.strip()
    finally:
        if started_here:
            subprocess.run([str(IMAGES / "registry.sh"), "down"], check=False, capture_output=True)


@pytest.fixture(scope="session")
def built_image(registry: str) -> Iterator[BuiltImage]:
    """``make image``'s result, and a working container of it (removed at the end)."""
    subprocess.run([str(IMAGES / "image.sh")], check=True, capture_output=True, text=True, timeout=3000)
    ref = (ENVTEST / "operator-image").read_text().strip()
    tag_ref = (ENVTEST / "operator-image-tag").read_text().strip()
    archive = Path((ENVTEST / "operator-image-archive").read_text().strip())
    local = (ENVTEST / "operator-image-local").read_text().strip()
    container = buildah("from", "--pull-never", local).stdout.strip().splitlines()[-1]
    try:
        yield BuiltImage(ref=ref, tag_ref=tag_ref, archive=archive, container=container)
    finally:
        buildah("rm", container, check=False)
