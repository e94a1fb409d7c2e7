"""The air-gap promise end to end on the real node: the Zarf package built, inspected, and deployed by Zarf.

- `zarf package create` (tools/zarf/package.sh, what `make zarf-build` runs) with the zarf CLI built from its
  Go module and the operator image built from this checkout into the node's loopback registry;
- `zarf package inspect sbom` shows the SBOMs Zarf generated (one per image, SPDX/syft JSON);
- `zarf init` with that registry as an external registry, from the init package built out of the init
  definition in the Zarf module with the zarf agent image built here (tools/zarf/init-package.sh);
- `zarf package deploy` installs the CRDs and the operator chart; the zarf agent rewrites the operator's
  image to the registry, the operator becomes Available (the package's own wait action) and reconciles a VM
  (CDI and KubeVirt are their CRDs on the node's control plane: the VM's DataVolume and VirtualMachine are
  created and the VM reports its phase; nothing imports or boots here).

The agent's webhook mutates pods of every namespace created after `zarf init`, so the test removes it, and
the operator component, before it ends; the CRDs stay (the control plane installed them, Zarf adopted them).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from node_cluster import NodeHandle, wait_until

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


@pytest.fixture(scope="module")
def zarf_env(node: NodeHandle) -> dict[str, str]:
    return {**os.environ, "ENVTEST_DIR": str(node.state_dir), "KUBECONFIG": str(node.kubeconfig)}


@pytest.fixture(scope="module")
def zarf(zarf_env: dict[str, str]) -> Path:
    return Path(run([str(ROOT / "tools/zarf/build.sh")], env=zarf_env, what="building zarf").strip())


@pytest.fixture(scope="module")
def package(zarf: Path, zarf_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("zarf-out")
    path = run(
        [str(ROOT / "tools/zarf/package.sh")], env={**zarf_env, "ZARF_OUT": str(out)}, what="make zarf-build"
    )
    return Path(path.strip())


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
    run(
        [
            str(zarf),
            "package",
            "deploy",
            str(package),
            "--confirm",
            "--adopt-existing-resources",
            # ADR 0016: the namespaces the operator manages; its NetworkPolicy stays off on this node.
            "--set",
            f"VM_NAMESPACES={ns}",
            "--set",
            "OPERATOR_NETWORK_POLICY=false",
            *CONSOLE_FLAGS,
        ],
        env=zarf_env,
        what="zarf package deploy",
    )
    pods = node.api.items(
        f"/api/v1/namespaces/{OPERATOR_NS}/pods", label_selector="app.kubernetes.io/name=uds-vm-operator"
    )
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    assert len(live) == 1, [p["metadata"]["name"] for p in pods]
    pod = live[0]
    image = pod["spec"]["containers"][0]["image"]
    assert image.startswith(f"{node.registry}/uds-vm-operator/uds-vm-operator:0.1.0-zarf-"), image
    assert pod["metadata"]["labels"].get("zarf-agent") == "patched"
    assert all(s.get("ready") for s in pod["status"]["containerStatuses"])

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
