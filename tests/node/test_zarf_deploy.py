"""The air-gap promise end to end on the real node: the Zarf package built, inspected, and deployed by Zarf.

- `zarf package create` (tools/zarf/package.sh, what `make zarf-build` runs) with the zarf CLI built from its
  Go module and the operator image built from this checkout into the node's loopback registry, pinned by
  digest and signed with cosign (a site key made here); the package is signed with the same key;
- the deploy path verifies the package (`--key --verify`): a tampered component, a package signed by another
  key and an unsigned one are each refused before anything reaches the cluster;
- `zarf package inspect sbom` shows the SBOMs Zarf generated (one per image, SPDX/syft JSON);
- `zarf init` with that registry as an external registry, from the init package built out of the init
  definition in the Zarf module with the zarf agent image built here (tools/zarf/init-package.sh);
- `zarf package deploy` creates the operator's namespace with the restricted Pod Security profile, installs
  the CRDs and the operator chart; the zarf agent rewrites the operator's image to the registry, by the
  package's digest, and the image's signature (carried in the package) verifies there with cosign; the
  operator becomes Available (the package's own wait action) and reconciles a VM
  (CDI and KubeVirt are their CRDs on the node's control plane: the VM's DataVolume and VirtualMachine are
  created and the VM reports its phase; nothing imports or boots here).

The agent's webhook mutates pods of every namespace created after `zarf init`, so the test removes it, and
the operator component, before it ends; the CRDs stay (the control plane installed them, Zarf adopted them).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.node.node_cluster import NodeHandle, wait_until

# Alone on the node (tests/node/lanes.py): `zarf init` labels every namespace and its agent mutates the
# pods of every namespace made after it.
pytestmark = pytest.mark.alone_on_the_node

# Zarf names a package after the architecture it is built for (Go's names).
ZARF_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}[platform.machine()]

ROOT = Path(__file__).resolve().parents[2]
OPERATOR_NS = "uds-vm-operator"
# zarf's own cache, beside the project's others (tools/zarf/package.sh uses the same)
ZARF_CACHE = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "uds-vm-operator/zarf-home/cache"
)
PACKAGE_IMAGE = "ghcr.io/uds-vm-operator/uds-vm-operator:0.1.0"
ZARF_VERSION = next(
    line.split("=", 1)[1].strip()
    for line in (ROOT / "versions.env").read_text().splitlines()
    if line.startswith("ZARF_VERSION=")
)
# What every zarf command that changes the cluster runs with: our cache, plain console lines for the log.
CONSOLE_FLAGS = ("--zarf-cache", str(ZARF_CACHE), "--log-format", "console", "--no-color")


def run(args: list[str], *, env: dict[str, str], cwd: Path | None = None, what: str) -> str:
    result = subprocess.run(args, capture_output=True, text=True, env=env, cwd=cwd, check=False)
    assert result.returncode == 0, f"{what} failed ({result.returncode}):\n{result.stderr[-6000:]}"
    return result.stdout


def zarf_scratch_dirs() -> set[Path]:
    """The package layouts zarf unpacks into the machine's temporary folder (``zarf-<digits>``)."""
    return set(Path(tempfile.gettempdir()).glob("zarf-*"))


@pytest.fixture(scope="module")
def zarf_env(node: NodeHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """zarf's environment: this node, and a TMPDIR of the module's own that is removed after it.

    zarf v0.70.0 leaves each package it loads for a verify or a deploy (about 100 MB, refused ones included)
    in ``$TMPDIR/zarf-*``: seven per run of this module, 9 GB in /tmp after a dozen runs, until the kubelet
    evicts pods for DiskPressure. Nothing of it may land in the machine's own temporary folder.
    """
    scratch = tmp_path_factory.mktemp("zarf-tmpdir")
    before = zarf_scratch_dirs()
    yield {
        **os.environ,
        "ENVTEST_DIR": str(node.state_dir),
        "KUBECONFIG": str(node.kubeconfig),
        "TMPDIR": str(scratch),
    }
    shutil.rmtree(scratch, ignore_errors=True)
    leaked = zarf_scratch_dirs() - before
    assert not leaked, f"zarf left package layouts in {tempfile.gettempdir()}: {sorted(map(str, leaked))}"


@pytest.fixture(scope="module")
def zarf(zarf_env: dict[str, str]) -> Path:
    return Path(run([str(ROOT / "tools/zarf/build.sh")], env=zarf_env, what="building zarf").strip())


SITE_KEY_PASSWORD = "site-test-only"


def cosign() -> str:
    return subprocess.run(
        [str(ROOT / "tools/cosign/build.sh")], check=True, text=True, capture_output=True
    ).stdout.strip()


def cosign_keypair(directory: Path) -> Path:
    """A cosign key pair in ``directory`` (password SITE_KEY_PASSWORD); returns the private key's path."""
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [cosign(), "generate-key-pair"],
        cwd=directory,
        env={**os.environ, "COSIGN_PASSWORD": SITE_KEY_PASSWORD},
        check=True,
        capture_output=True,
    )
    return directory / "cosign.key"


@pytest.fixture(scope="module")
def package(zarf: Path, zarf_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`make zarf-build` with a site's own signing key (ZARF_SIGNING_KEY, COSIGN_PASSWORD)."""
    out = tmp_path_factory.mktemp("zarf-out")
    key = cosign_keypair(tmp_path_factory.mktemp("site-key"))
    signing = {"ZARF_OUT": str(out), "ZARF_SIGNING_KEY": str(key), "COSIGN_PASSWORD": SITE_KEY_PASSWORD}
    path = run([str(ROOT / "tools/zarf/package.sh")], env={**zarf_env, **signing}, what="make zarf-build")
    assert (out / "uds-vm-operator-signing.pub").read_bytes() == key.with_suffix(".pub").read_bytes()
    return Path(path.strip())


def public_key(package: Path) -> Path:
    """The key `make zarf-build` put beside the package."""
    return package.parent / "uds-vm-operator-signing.pub"


def deploy_args(zarf: Path, package: Path, ns: str, key: Path) -> list[str]:
    """`zarf package deploy` as the runbook gives it: the signature verified first, against ``key``."""
    return [
        str(zarf), "package", "deploy", str(package), "--key", str(key), "--verify",
        "--confirm", "--adopt-existing-resources",
        # ADR 0016: the namespaces the operator manages; its NetworkPolicy stays off on this node.
        "--set", f"VM_NAMESPACES={ns}", "--set", "OPERATOR_NETWORK_POLICY=false", *CONSOLE_FLAGS,
    ]  # fmt: skip


def repacked(package: Path, work: Path, change: Callable[[Path], None]) -> Path:
    """A copy of ``package`` with ``change`` applied to its unpacked files (an attacker on the way)."""
    tree = work / "tree"
    tree.mkdir(parents=True)
    subprocess.run(["tar", "--zstd", "-xf", str(package), "-C", str(tree)], check=True)
    change(tree)
    out = work / package.name
    names = sorted(p.name for p in tree.iterdir())
    subprocess.run(["tar", "--zstd", "-cf", str(out), "-C", str(tree), *names], check=True)
    return out


def weaken_the_namespace(tree: Path) -> None:
    """Edit the operator namespace's manifest inside the CRDs component: Pod Security `privileged`."""
    component = tree / "components/uds-vm-operator-crds.tar"
    unpacked = tree / "crds-unpacked"
    unpacked.mkdir()
    subprocess.run(["tar", "-xf", str(component), "-C", str(unpacked)], check=True)
    edited = [
        path
        for path in unpacked.rglob("*.yaml")
        if "pod-security.kubernetes.io/enforce: restricted" in path.read_text()
    ]
    assert edited, "the package carries the restricted namespace"
    for path in edited:
        path.write_text(path.read_text().replace("enforce: restricted", "enforce: privileged"))
    subprocess.run(["tar", "-cf", str(component), "-C", str(unpacked), "."], check=True)
    shutil.rmtree(unpacked)


def resign_with(key: Path) -> Callable[[Path], None]:
    """Replace the package's signature with one by ``key`` (someone else's key)."""

    def change(tree: Path) -> None:
        (tree / "zarf.yaml.sig").unlink()
        subprocess.run(
            [cosign(), "sign-blob", "--yes", "--key", str(key), "--use-signing-config=false",
             "--tlog-upload=false", "--new-bundle-format=false", "--output-signature",
             str(tree / "zarf.yaml.sig"), str(tree / "zarf.yaml")],
            env={**os.environ, "COSIGN_PASSWORD": SITE_KEY_PASSWORD}, check=True, capture_output=True,
        )  # fmt: skip

    return change


def strip_signature(tree: Path) -> None:
    (tree / "zarf.yaml.sig").unlink()


@pytest.mark.timeout(900)
def test_a_tampered_foreign_or_unsigned_package_is_refused_before_it_reaches_the_cluster(
    *, node: NodeHandle, zarf: Path, zarf_env: dict[str, str], package: Path, ns: str, tmp_path: Path
) -> None:
    verified = subprocess.run(
        [str(zarf), "package", "verify", str(package), "--key", str(public_key(package)), "--no-color"],
        capture_output=True, text=True, env=zarf_env, check=False,
    )  # fmt: skip
    assert verified.returncode == 0, verified.stderr
    foreign = resign_with(cosign_keypair(tmp_path / "other-key"))
    attacks = {
        "a component edited": (weaken_the_namespace, "expected sha256 of"),
        "signed by another key": (foreign, "signature verification failed"),
        "unsigned": (strip_signature, "signature verification failed"),
    }
    for what, (change, message) in attacks.items():
        bad = repacked(package, tmp_path / what.replace(" ", "-"), change)
        refused = subprocess.run(
            deploy_args(zarf, bad, ns, public_key(package)),
            capture_output=True,
            text=True,
            env=zarf_env,
            check=False,
            timeout=300,
        )
        assert refused.returncode != 0, f"{what}: deployed"
        assert message in refused.stderr, f"{what}: {refused.stderr[-2000:]}"
        print(f"refused ({what}): {refused.stderr.strip().splitlines()[-1]}")
    # Nothing reached the cluster: no operator namespace, no Zarf state of the package.
    assert node.api.get(f"/api/v1/namespaces/{OPERATOR_NS}") is None


@pytest.fixture
def zarf_initialised(node: NodeHandle, zarf: Path, zarf_env: dict[str, str]) -> Iterator[None]:
    # `zarf init` labels every namespace; one still terminating from an earlier test vanishes under it and
    # the init fails ("namespaces ... not found"), so wait until none is terminating.
    wait_until(
        "no terminating namespace before zarf init",
        lambda: (
            not [
                n
                for n in node.api.items("/api/v1/namespaces")
                if (n.get("status") or {}).get("phase") == "Terminating"
            ]
        ),
        timeout_s=300,
    )
    init_pkg = Path(
        run([str(ROOT / "tools/zarf/init-package.sh")], env=zarf_env, what="init package").strip()
    )
    run(
        [
            str(zarf),
            "init",
            "--confirm",
            "--registry-url",
            node.registry,
            "--registry-push-username",
            "zarf-push",
            "--registry-push-password",
            "unused-by-the-loopback-registry",
            *CONSOLE_FLAGS,
        ],
        env=zarf_env,
        cwd=init_pkg.parent,  # zarf init finds zarf-init-<arch>-<version>.tar.zst in the working directory
        what="zarf init",
    )
    try:
        yield
    finally:
        # The agent must not outlive the test: its webhook would rewrite every later test's pods.
        subprocess.run(
            [
                str(zarf),
                "package",
                "remove",
                "uds-vm-operator",
                "--components",
                "uds-vm-operator",
                "--confirm",
            ],
            capture_output=True,
            env=zarf_env,
            check=False,
        )
        node.api.call(
            "DELETE",
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/zarf",
            expect=(200, 404),
        )
        node.delete_namespace("zarf")
        node.delete_namespace(OPERATOR_NS)


def sbom_names(zarf: Path, package: Path, env: dict[str, str], out: Path) -> list[str]:
    run(
        [
            str(zarf),
            "package",
            "inspect",
            "sbom",
            str(package),
            "--output",
            str(out),
            "--zarf-cache",
            str(ZARF_CACHE),
            "--no-color",
        ],
        env=env,
        what="zarf package inspect sbom",
    )
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())


def package_crd_names(definition: dict[str, Any]) -> list[str]:
    """The CRDs the package's manifests components install (the files zarf.yaml names)."""
    names = []
    for component in definition["components"]:
        for manifest in component.get("manifests") or []:
            for file in manifest.get("files") or []:
                for doc in yaml.safe_load_all((ROOT / file).read_text()):
                    if doc and doc.get("kind") == "CustomResourceDefinition":
                        names.append(doc["metadata"]["name"])
    assert names, "the package installs the operator's CRDs"
    return names


@pytest.mark.timeout(1500)  # builds the package and the init package, pushes three images, waits for pods
def test_the_zarf_package_is_built_inspected_initialised_and_deployed_and_its_operator_reconciles_a_vm(
    *,
    node: NodeHandle,
    zarf: Path,
    zarf_env: dict[str, str],
    package: Path,
    zarf_initialised: None,
    ns: str,
    tmp_path: Path,
) -> None:
    # Built: a zstd tarball with the definition, the three components and the image.
    assert package.name == f"zarf-package-uds-vm-operator-{ZARF_ARCH}-0.1.0.tar.zst"
    size = package.stat().st_size
    print(f"zarf package: {package.name} {size} bytes")
    assert size > 10 * 1024 * 1024, "the operator image is inside"
    with package.open("rb") as handle:
        assert handle.read(4) == b"\x28\xb5\x2f\xfd", "a zstd stream"
    definition = yaml.safe_load(
        run(
            [
                str(zarf),
                "package",
                "inspect",
                "definition",
                str(package),
                "--zarf-cache",
                str(ZARF_CACHE),
                "--no-color",
            ],
            env=zarf_env,
            what="zarf package inspect definition",
        )
    )
    assert [c["name"] for c in definition["components"]] == [
        "uds-vm-operator-crds",
        "uds-vm-operator",
        "golden-image",
    ]
    assert definition["metadata"]["name"] == "uds-vm-operator"
    assert definition["build"]["version"] == ZARF_VERSION  # made by the zarf built from its module here

    # Inspected: Zarf made an SBOM for the operator image (and its viewer pages).
    files = sbom_names(zarf, package, zarf_env, tmp_path / "sbom")
    image_sboms = [f for f in files if f.endswith(".json") and "uds-vm-operator" in f]
    assert image_sboms, files
    sbom = json.loads((tmp_path / "sbom" / image_sboms[0]).read_text())
    artifacts = {a["name"] for a in sbom.get("artifacts", [])}
    assert {"kopf", "pydantic"} <= artifacts, sorted(artifacts)[:40]

    # Deployed by Zarf onto the node that `zarf init` prepared. The control plane installed our CRDs without
    # Helm's ownership marks, and zarf v0.70.0's --adopt-existing-resources looks a cluster-scoped object up
    # under a namespace, so it never finds (never adopts) a CRD and Helm refuses the install: hand Zarf a
    # cluster without them, as on a site's first deploy.
    for crd in package_crd_names(yaml.safe_load((ROOT / "zarf.yaml").read_text())):
        crd_path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}"
        node.api.delete(crd_path)
        wait_until(f"CRD {crd} gone", lambda p=crd_path: node.api.get(p) is None, timeout_s=120)
    run(deploy_args(zarf, package, ns, public_key(package)), env=zarf_env, what="zarf package deploy")
    namespace_labels = node.api.get(f"/api/v1/namespaces/{OPERATOR_NS}")["metadata"]["labels"]
    assert namespace_labels["pod-security.kubernetes.io/enforce"] == "restricted", namespace_labels
    pods = node.api.items(
        f"/api/v1/namespaces/{OPERATOR_NS}/pods", label_selector="app.kubernetes.io/name=uds-vm-operator"
    )
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    assert len(live) == 1, [p["metadata"]["name"] for p in pods]
    pod = live[0]
    image = pod["spec"]["containers"][0]["image"]
    digest = next(i for i in definition["components"][1]["images"] if "@" in i).split("@", 1)[1]
    assert image == f"{node.registry}/uds-vm-operator/uds-vm-operator@{digest}", image
    assert pod["metadata"]["labels"].get("zarf-agent") == "patched"
    assert all(s.get("ready") for s in pod["status"]["containerStatuses"])
    assert pod["status"]["containerStatuses"][0]["imageID"].endswith(digest)
    # The image's signature came in the package and verifies in the site's registry with the site's key.
    verified_image = subprocess.run(
        [cosign(), "verify", "--key", str(public_key(package)), "--insecure-ignore-tlog=true",
         "--new-bundle-format=false", "--allow-insecure-registry", "--allow-http-registry", image],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert verified_image.returncode == 0, verified_image.stderr

    # The operator Zarf deployed reconciles a VM.
    vm: dict[str, Any] = {
        "apiVersion": "uds.dev/v1alpha1",
        "kind": "UDSVirtualMachine",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {"source": {"upload": {}}, "disk": {"virtualSize": "1Gi"}},
    }
    base = f"/apis/uds.dev/v1alpha1/namespaces/{ns}/udsvirtualmachines/web"
    node.api.apply(vm, base)
    phase = wait_until(
        "the VM reconciled by the operator Zarf deployed",
        lambda: ((node.api.get(base) or {}).get("status") or {}).get("phase"),
        180,
    )
    assert phase in ("Pending", "Importing", "Provisioning", "WaitingForUpload"), phase
    assert node.api.get(f"/apis/cdi.kubevirt.io/v1beta1/namespaces/{ns}/datavolumes/web-dv") is not None
    assert node.api.get(f"/apis/kubevirt.io/v1/namespaces/{ns}/virtualmachines/web") is not None
    node.api.delete(base)
