"""Read the pinned versions (versions.env) and derive the cache folders they key.

versions.env is the single source of truth for every pinned upstream version; the shell build script sources
it and this module parses it, so a version bump changes every cache key at once and stale artefacts are never
reused.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
VERSIONS_FILE = REPO_ROOT / "versions.env"
_LINE = re.compile(r"^\s*([A-Z][A-Z0-9_]*)=([^\s#]+)\s*(?:#.*)?$")


class VersionsError(RuntimeError):
    """versions.env is missing or incomplete; the message names the key to add."""


@dataclass(frozen=True)
class PinnedVersions:
    """The upstream versions the test control plane and its CRDs are built from."""

    k8s: str
    etcd: str
    cdi: str
    kubevirt: str
    gateway_api: str


def read_versions_env(path: Path = VERSIONS_FILE) -> dict[str, str]:
    """Parse KEY=value lines (comments and blanks ignored), the subset of shell that build.sh also sources."""
    if not path.is_file():
        raise VersionsError(f"{path} not found; it pins every upstream version (see the repository root)")
    values: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = _LINE.match(line)
        if match:
            values[match.group(1)] = match.group(2)
    return values


def pinned_versions(path: Path = VERSIONS_FILE) -> PinnedVersions:
    """Return the pins; fail with the missing key's name so the fix is obvious."""
    values = read_versions_env(path)
    keys = ("K8S_VERSION", "ETCD_VERSION", "CDI_VERSION", "KUBEVIRT_VERSION", "GATEWAY_API_VERSION")
    missing = [key for key in keys if key not in values]
    if missing:
        raise VersionsError(f"{path} lacks {', '.join(missing)}; add a pinned version for each")
    return PinnedVersions(*(values[key] for key in keys))


def kubevirt_schema_versions(path: Path = VERSIONS_FILE) -> tuple[str, ...]:
    """The KubeVirt tags whose CRD schemas every rendered object must fit (KUBEVIRT_SCHEMA_VERSIONS).

    The installed line (KUBEVIRT_VERSION) runs for real; newer tags whose binaries cannot be built here are
    still checked schema-wise, so nothing we render is refused by the release a site upgrades to next.
    """
    values = read_versions_env(path)
    listed = [item for item in values.get("KUBEVIRT_SCHEMA_VERSIONS", "").split(",") if item]
    pinned = pinned_versions(path).kubevirt
    if pinned not in listed:
        listed.insert(0, pinned)
    return tuple(listed)


def cache_root() -> Path:
    """The per-user cache outside the clone, so fresh CI clones on the same machine reuse built artefacts."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "uds-vm-operator"


def bin_dir(versions: PinnedVersions | None = None) -> Path:
    """Where tools/envtest/build.sh puts etcd, kube-apiserver and kube-controller-manager."""
    pins = versions or pinned_versions()
    return cache_root() / f"k8s-{pins.k8s}-etcd-{pins.etcd}" / "bin"


def crd_dir(versions: PinnedVersions | None = None) -> Path:
    """Where fetch_crds.py writes the upstream CRD YAML files, keyed by the three upstream versions."""
    pins = versions or pinned_versions()
    return cache_root() / f"crds-cdi-{pins.cdi}-kubevirt-{pins.kubevirt}-gwapi-{pins.gateway_api}"


def kubevirt_crd_dir(version: str) -> Path:
    """Where fetch_crds.py writes only the KubeVirt CRDs of one tag (the schema-only versions)."""
    return cache_root() / f"crds-kubevirt-{version}"
