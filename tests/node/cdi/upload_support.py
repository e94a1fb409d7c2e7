"""What the real-upload tests share: the VM they upload for, `uds-vmctl prep` + `upload` run as a field
engineer runs them, and the real cdi-uploadproxy's address and CA.

Nothing here plays CDI: CDI's upload controller makes the upload server pod and its claims, the tests only
offer those claims real volumes (as a provisioner would) and wait for what CDI reports.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.node.cdi_support import datavolume, offer_volume, wait_or_diagnose
from tests.node.node_cluster import NodeHandle

VM = "up"
DV = f"{VM}-dv"
PROXY_NAME = "cdi-uploadproxy.cdi.svc"  # a name in the proxy's certificate (CDI's cert manager)
VMCTL_TIMEOUT_S = 600  # a hung command fails by its own name (TimeoutExpired), not the test's timeout


def vmctl(*args: str) -> subprocess.CompletedProcess[str]:
    """`uds-vmctl` as the field engineer runs it: a new process, judged by its exit code and stderr."""
    return subprocess.run(
        [sys.executable, "-m", "uds_vm_operator.cli.main", *args],
        capture_output=True, text=True, check=False, timeout=VMCTL_TIMEOUT_S,
    )  # fmt: skip


def vmctl_upload(
    node: NodeHandle, namespace: str, image: Path, url: str, ca: Path
) -> subprocess.CompletedProcess[str]:
    """`uds-vmctl upload` to the real proxy, its TLS checked against CDI's own CA under the proxy's name."""
    return vmctl(
        "upload", str(image), "--name", VM, "-n", namespace, "--kubeconfig", str(node.kubeconfig),
        "--uploadproxy-url", url, "--ca-file", str(ca), "--tls-server-name", PROXY_NAME,
    )  # fmt: skip


def proxy(node: NodeHandle, folder: Path) -> tuple[str, Path]:
    """The upload proxy's Service address (kube-proxy routes it from the host) and CDI's CA bundle for it."""
    service = node.api.get("/api/v1/namespaces/cdi/services/cdi-uploadproxy")
    bundle = node.api.get("/api/v1/namespaces/cdi/configmaps/cdi-uploadproxy-signer-bundle")
    assert service is not None and bundle is not None, "CDI's upload proxy is not installed"
    ca = folder / "uploadproxy-ca.pem"
    ca.write_text(bundle["data"]["ca-bundle.crt"], encoding="utf-8")
    return f"https://{service['spec']['clusterIP']}:443", ca


def prep_and_apply(node: NodeHandle, namespace: str, image: Path, out: Path) -> dict[str, Any]:
    """`uds-vmctl prep` the image, then apply what it wrote (on the node's local class)."""
    done = vmctl("prep", str(image), "--name", VM, "-n", namespace, "-o", str(out), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    record = yaml.safe_load((out / f"{VM}.image-record.configmap.yaml").read_text(encoding="utf-8"))
    node.api.apply(record, f"/api/v1/namespaces/{namespace}/configmaps/{record['metadata']['name']}")
    vm = yaml.safe_load((out / f"{VM}.udsvm.yaml").read_text(encoding="utf-8"))
    vm["spec"]["disk"].update({"storageClassName": "udsvm-local", "volumeMode": "Filesystem"})
    node.api.apply(vm, f"/apis/uds.dev/v1alpha1/namespaces/{namespace}/udsvirtualmachines/{VM}")
    return dict(report)


def upload_ready(node: NodeHandle, namespace: str, folder: Path) -> tuple[str, Path]:
    """Offer CDI's claims (target and scratch) real volumes, wait until the upload server listens, and
    return the proxy's URL and CA (see `proxy`)."""
    offer_volume(node, namespace, DV)
    scratch = [False]

    def ready() -> bool:
        if not scratch[0] and node.api.get(
            f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{DV}-scratch"
        ):
            offer_volume(node, namespace, f"{DV}-scratch")
            scratch[0] = True
        return ((datavolume(node, namespace, DV) or {}).get("status") or {}).get("phase") == "UploadReady"

    wait_or_diagnose(node, namespace, f"{DV} UploadReady", ready, 240)
    return proxy(node, folder)


def succeeded(node: NodeHandle, namespace: str) -> None:
    """Wait until CDI reports the upload DataVolume Succeeded (the whole image converted onto the target)."""

    def done() -> bool:
        return ((datavolume(node, namespace, DV) or {}).get("status") or {}).get("phase") == "Succeeded"

    wait_or_diagnose(node, namespace, f"{DV} Succeeded", done, 240)
