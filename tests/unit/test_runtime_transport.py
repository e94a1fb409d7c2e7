"""The operator's aiohttp transport reads kubeconfigs the way kopf does, refuses broken ones clearly, and
hands exec-plugin kubeconfigs to lightkube's client (ADR 0004)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from uds_vm_operator.runtime.errors import KubeConfigError
from uds_vm_operator.runtime.transport import AiohttpClient, connection_info, needs_exec_plugin


def kubeconfig(tmp_path: Path, user: dict[str, object]) -> Path:
    path = tmp_path / "config"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "ctx",
                "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u", "namespace": "ops"}}],
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {"server": "https://10.0.0.1:6443", "certificate-authority": "ca.crt"},
                    }
                ],
                "users": [{"name": "u", "user": user}],
            }
        )
    )
    return path


def test_token_and_relative_files_are_read_like_kopf(tmp_path: Path) -> None:
    info = connection_info(kubeconfig(tmp_path, {"token": "abc"}))
    assert info.server == "https://10.0.0.1:6443"
    assert info.ca_path == str(tmp_path / "ca.crt")  # relative to the kubeconfig, as kubectl does
    assert info.as_http_headers() == {"Authorization": "Bearer abc"}
    assert info.default_namespace == "ops"
    assert not needs_exec_plugin(tmp_path / "config")


def test_exec_plugin_users_are_left_to_lightkube(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path, {"exec": {"command": "aws", "apiVersion": "client.authentication.k8s.io/v1"}})
    assert needs_exec_plugin(path)


@pytest.mark.parametrize("text", ["", "current-context: nowhere\n", "::: not yaml", "[1, 2]"])
def test_broken_kubeconfigs_raise_a_clear_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "config"
    path.write_text(text)
    with pytest.raises(KubeConfigError, match="current-context"):
        connection_info(path)


def test_transport_errors_include_connection_failures() -> None:
    assert any(issubclass(ConnectionRefusedError, error) for error in AiohttpClient.transport_errors)
