"""Fetch the real upstream CRDs (CDI, KubeVirt, Gateway API) from the Go module proxy into the versioned
cache.

Why the Go proxy: it is the one channel our air-gap-minded machines reach that serves these projects' sources
at exact release tags, checksummed by sum.golang.org. Nothing here is hand-written: CDI's CRDs are the
generated YAML in `pkg/operator/resources/crds_generated.go`, KubeVirt's schemas come from
`validations_generated.go` (wrapped as its `crds.go` does), and the Gateway API CRDs are the release YAML
shipped inside its module.

Usage: python -m tools.envtest.fetch_crds [--force]   (prints the CRD folder on stdout)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from tools.envtest.go_raw_strings import GoSourceError, extract_string_map
from tools.envtest.kubevirt_crd_wrappers import KubevirtWrapperError, build_all, check_against_go_source
from tools.envtest.pinned_versions import (
    PinnedVersions,
    VersionsError,
    crd_dir,
    kubevirt_crd_dir,
    kubevirt_schema_versions,
    pinned_versions,
)

CDI_MODULE = "kubevirt.io/containerized-data-importer"
KUBEVIRT_MODULE = "kubevirt.io/kubevirt"
KUBEVIRT_API_MODULE = "kubevirt.io/api"  # staging module with the same tags; crds.go reads versions from it
GATEWAY_API_MODULE = "sigs.k8s.io/gateway-api"

CDI_FILE = "pkg/operator/resources/crds_generated.go"
KUBEVIRT_VALIDATIONS_FILE = "pkg/virt-operator/resource/generate/components/validations_generated.go"
KUBEVIRT_CRDS_GO = "pkg/virt-operator/resource/generate/components/crds.go"
KUBEVIRT_REGISTER_GO = "core/v1/register.go"

# The CDI kinds our operator reads or writes (keys of CDICRDs).
CDI_KINDS = ("datavolume", "datasource", "dataimportcron", "cdi", "cdiconfig", "storageprofile")
GATEWAY_FILES = tuple(
    f"config/crd/standard/gateway.networking.k8s.io_{plural}.yaml"
    for plural in ("gatewayclasses", "gateways", "httproutes", "referencegrants")
)
COMPLETE_MARKER = "sources.json"
_YAML_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class FetchError(RuntimeError):
    """A CRD source could not be obtained; the message says which and what to do."""


def _go_env(gomodcache: Path | None) -> dict[str, str]:
    env = dict(
        os.environ, GOFLAGS="-mod=mod -modcacherw", GOTOOLCHAIN="local", GO111MODULE="on", GOWORK="off"
    )
    if gomodcache is not None:
        env["GOMODCACHE"] = str(gomodcache)
    return env


def _shared_module_dir(module: str, version: str) -> Path | None:
    """The module's folder in the user's Go module cache if already extracted there (offline reuse)."""
    result = subprocess.run(
        ["go", "env", "GOMODCACHE"], env=_go_env(None), capture_output=True, text=True, check=False
    )
    root = result.stdout.strip()
    escaped = "".join(f"!{char.lower()}" if char.isupper() else char for char in module)
    folder = Path(root) / f"{escaped}@{version}" if root else None
    return folder if folder is not None and folder.is_dir() else None


def go_mod_download(module: str, version: str, gomodcache: Path | None = None) -> Path:
    """Download one module version via the Go proxy (outside any module); return its extracted folder.

    The go command verifies the zip against sum.golang.org, so the CRDs are the tagged upstream bytes.
    gomodcache: a private module cache (fetch_into uses a temporary one, see there).
    """
    if shutil.which("go") is None:
        raise FetchError(
            "Go is required to fetch the upstream CRDs from the module proxy; install Go >= 1.24"
        )
    env = _go_env(gomodcache)
    with tempfile.TemporaryDirectory(prefix="uds-crd-fetch-") as scratch:
        result = subprocess.run(
            ["go", "mod", "download", "-json", f"{module}@{version}"],
            cwd=scratch,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
    try:
        info: dict[str, Any] = json.loads(result.stdout) if result.stdout.strip() else {}
    except json.JSONDecodeError:
        info = {}
    if result.returncode != 0 or "Dir" not in info:
        detail = info.get("Error") or result.stderr.strip() or f"exit status {result.returncode}"
        raise FetchError(
            f"could not download {module}@{version} from the Go module proxy: {detail}. "
            "Check that the version exists (`go list -m -versions`) and fix versions.env."
        )
    return Path(info["Dir"])


def _read(root: Path, relative: str) -> str:
    path = root / relative
    if not path.is_file():
        raise FetchError(
            f"{relative} is missing from {root}; the pinned tag moved the file, update fetch_crds.py"
        )
    return path.read_text(encoding="utf-8")


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def cdi_crds(module_dir: Path) -> tuple[list[dict[str, Any]], str]:
    """Return CDI's generated CRDs for CDI_KINDS, and the sha256 of the Go file they came from."""
    source = _read(module_dir, CDI_FILE)
    entries = extract_string_map(source, "CDICRDs")
    missing = [kind for kind in CDI_KINDS if kind not in entries]
    if missing:
        raise FetchError(f"{CDI_FILE} lacks CRDs {missing}; the pinned CDI tag is too old or renamed them")
    return [yaml.safe_load(entries[kind]) for kind in CDI_KINDS], _sha256(source)


def kubevirt_crds(module_dir: Path, api_dir: Path) -> tuple[list[dict[str, Any]], str]:
    """Return KubeVirt's VM, VMI, VMPool and KubeVirt CRDs rebuilt from the pinned tag's generated schemas."""
    source = _read(module_dir, KUBEVIRT_VALIDATIONS_FILE)
    check_against_go_source(_read(module_dir, KUBEVIRT_CRDS_GO), _read(api_dir, KUBEVIRT_REGISTER_GO))
    return build_all(extract_string_map(source, "CRDsValidation")), _sha256(source)


def gateway_crds(module_dir: Path) -> tuple[list[dict[str, Any]], str]:
    """Return the standard-channel Gateway API CRDs our operator may create objects of."""
    texts = [_read(module_dir, relative) for relative in GATEWAY_FILES]
    return [yaml.safe_load(text) for text in texts], _sha256("".join(texts))


def _validate(crd: Any, origin: str) -> str:
    if not isinstance(crd, dict) or crd.get("kind") != "CustomResourceDefinition":
        raise FetchError(f"{origin} produced something that is not a CustomResourceDefinition")
    name = crd.get("metadata", {}).get("name")
    if not isinstance(name, str) or not name:
        raise FetchError(f"{origin} produced a CRD without metadata.name")
    return name


def fetch_into(target: Path, versions: PinnedVersions) -> None:
    """Download all sources and write one YAML file per CRD plus sources.json (provenance) into target.

    Modules already extracted in the user's Go module cache are read in place. Others are downloaded into a
    temporary module cache that is deleted afterwards: the CDI module zip alone is ~255 MB (vendor tree, test
    images), ~600 MB once extracted, and we need one 500 kB file from it.
    """
    with tempfile.TemporaryDirectory(prefix="uds-crd-gomodcache-", dir=target.parent) as private_cache:

        def module_dir(module: str, version: str) -> Path:
            shared = _shared_module_dir(module, version)
            return shared or go_mod_download(module, version, Path(private_cache))

        cdi_dir = module_dir(CDI_MODULE, versions.cdi)
        kv_dir = module_dir(KUBEVIRT_MODULE, versions.kubevirt)
        kv_api_dir = module_dir(KUBEVIRT_API_MODULE, versions.kubevirt)
        gw_dir = module_dir(GATEWAY_API_MODULE, versions.gateway_api)
        _write_crds(target, versions, cdi_dir, (kv_dir, kv_api_dir), gw_dir)


def _write_crds(
    target: Path, versions: PinnedVersions, cdi_dir: Path, kubevirt_dirs: tuple[Path, Path], gw_dir: Path
) -> None:
    kv_dir, kv_api_dir = kubevirt_dirs
    groups = {
        f"{CDI_MODULE}@{versions.cdi}": (CDI_FILE, *cdi_crds(cdi_dir)),
        f"{KUBEVIRT_MODULE}@{versions.kubevirt}": (
            KUBEVIRT_VALIDATIONS_FILE,
            *kubevirt_crds(kv_dir, kv_api_dir),
        ),
        f"{GATEWAY_API_MODULE}@{versions.gateway_api}": (",".join(GATEWAY_FILES), *gateway_crds(gw_dir)),
    }
    provenance: dict[str, Any] = {}
    for origin, (files, crds, digest) in groups.items():
        names = []
        for crd in crds:
            name = _validate(crd, origin)
            (target / f"{name}.yaml").write_text(
                yaml.dump(crd, Dumper=_YAML_DUMPER, sort_keys=False), encoding="utf-8"
            )
            names.append(name)
        provenance[origin] = {"files": files, "sha256": digest, "crds": names}
    # Written last: its presence marks a complete folder.
    (target / COMPLETE_MARKER).write_text(json.dumps(provenance, indent=2) + "\n", encoding="utf-8")


def _assemble(final: Path, fill: Callable[[Path], None], force: bool) -> Path:
    """Fill a sibling temp dir and rename it into place, so a concurrent caller or an interrupted run never
    sees a half-written cache."""
    if (final / COMPLETE_MARKER).is_file() and not force:
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    staging.chmod(0o755)  # public upstream schemas; mkdtemp's 0700 would surprise other tools
    try:
        fill(staging)
        if final.exists():
            shutil.rmtree(final)
        staging.rename(final)
    except OSError:
        if not (final / COMPLETE_MARKER).is_file():  # lost a race with another fetch: theirs is as good
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def ensure_crds(versions: PinnedVersions | None = None, force: bool = False) -> Path:
    """Return the cached CRD folder for the pinned versions, fetching it first when absent (or forced)."""
    pins = versions or pinned_versions()
    return _assemble(crd_dir(pins), lambda staging: fetch_into(staging, pins), force)


def fetch_kubevirt_into(target: Path, version: str) -> None:
    """Write only the KubeVirt CRDs of one tag (plus sources.json) into target."""
    with tempfile.TemporaryDirectory(prefix="uds-crd-gomodcache-", dir=target.parent) as private_cache:
        dirs = [
            _shared_module_dir(module, version) or go_mod_download(module, version, Path(private_cache))
            for module in (KUBEVIRT_MODULE, KUBEVIRT_API_MODULE)
        ]
        crds, digest = kubevirt_crds(dirs[0], dirs[1])
        names = []
        for crd in crds:
            name = _validate(crd, f"{KUBEVIRT_MODULE}@{version}")
            (target / f"{name}.yaml").write_text(
                yaml.dump(crd, Dumper=_YAML_DUMPER, sort_keys=False), encoding="utf-8"
            )
            names.append(name)
    provenance = {
        f"{KUBEVIRT_MODULE}@{version}": {"files": KUBEVIRT_VALIDATIONS_FILE, "sha256": digest, "crds": names}
    }
    (target / COMPLETE_MARKER).write_text(json.dumps(provenance, indent=2) + "\n", encoding="utf-8")


def ensure_kubevirt_crds(version: str, force: bool = False) -> Path:
    """The KubeVirt CRDs of one tag: the installed pin's come from the full folder, other tags from their own.

    Why: the schema tests judge every rendered VM against each tag in KUBEVIRT_SCHEMA_VERSIONS, including
    releases newer than the one the test plane installs.
    """
    if version == pinned_versions().kubevirt:
        return ensure_crds(force=force)
    return _assemble(kubevirt_crd_dir(version), lambda staging: fetch_kubevirt_into(staging, version), force)


def ensure_schema_crds(force: bool = False) -> dict[str, Path]:
    """Every KubeVirt schema tag (versions.env) mapped to its CRD folder, fetched when absent."""
    return {version: ensure_kubevirt_crds(version, force) for version in kubevirt_schema_versions()}


def crd_files(folder: Path) -> list[Path]:
    """The CRD YAML files of a cache folder, in a stable order."""
    return sorted(folder.glob("*.yaml"))


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: print the CRD folder (fetching if needed); exit 1 with a one-line reason on failure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--force", action="store_true", help="fetch again even when the cache is complete")
    args = parser.parse_args(argv)
    try:
        folder = ensure_crds(force=args.force)
        ensure_schema_crds(force=args.force)
    except (FetchError, VersionsError, GoSourceError, KubevirtWrapperError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
