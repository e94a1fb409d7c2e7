"""`helm install` against the real API server refuses what a reviewer would refuse (issue 32).

Helm cannot label the namespace it installs into, so the chart looks the release namespace up and refuses one
that does not enforce the restricted Pod Security profile, naming the commands that fix it. `--dry-run=server`
runs the chart's lookups against the real API server and creates nothing, so each case also proves that a
refused install leaves no object behind.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.integration.test_deploy_helm import helm_path
from tests.kube_helpers import ControlPlaneHandle

ROOT = Path(__file__).resolve().parents[2]
DIGEST = "sha256:" + "5" * 64

pytestmark = pytest.mark.integration


def helm_install(plane: ControlPlaneHandle, namespace: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """A server-side dry-run install of the chart, pinned, managing ``namespace`` itself."""
    return subprocess.run(
        [
            helm_path(), "--kubeconfig", str(plane.kubeconfig), "install", "uds-vm-operator",
            str(ROOT / "chart"), "-n", namespace, "--dry-run=server",
            "--set", f"watchNamespaces={{{namespace}}}", "--set", f"image.digest={DIGEST}", *extra,
        ],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip


def test_an_install_into_a_namespace_without_restricted_pod_security_is_refused_with_the_fix(
    control_plane: ControlPlaneHandle, namespace: str
) -> None:
    refused = helm_install(control_plane, namespace)
    assert refused.returncode != 0
    assert f"namespace {namespace} does not enforce the restricted Pod Security profile" in refused.stderr
    fix = f"kubectl label namespace {namespace} pod-security.kubernetes.io/enforce=restricted"
    assert fix in refused.stderr


def test_create_namespace_cannot_sidestep_the_label(control_plane: ControlPlaneHandle) -> None:
    missing = "uds-vm-operator-never-created"
    refused = helm_install(control_plane, missing, "--create-namespace")
    assert refused.returncode != 0
    assert f"namespace {missing} does not enforce" in refused.stderr


def test_a_restricted_namespace_is_accepted_and_the_opt_out_is_explicit(
    control_plane: ControlPlaneHandle, restricted_namespace: str, namespace: str
) -> None:
    accepted = helm_install(control_plane, restricted_namespace)
    assert accepted.returncode == 0, accepted.stderr
    assert f'image: "ghcr.io/uds-vm-operator/uds-vm-operator:0.1.0@{DIGEST}"' in accepted.stdout
    skipped = helm_install(control_plane, namespace, "--set", "podSecurity.requireRestrictedNamespace=false")
    assert skipped.returncode == 0, skipped.stderr
