"""``uds-vmctl verify NAME``: evidence shown, and exit 0 only when claim and evidence agree.

Unit tier: a tiny local HTTP server returns the objects as the API server would (the integration tier reads
the same objects from the real API server).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from uds_vm_operator.cli.main import app

DECLARED = "sha256:" + "a" * 64
CONTENT = "sha256:" + "c" * 64
VM_PATH = "/apis/uds.dev/v1alpha1/namespaces/apps/udsvirtualmachines/web"
DV_PATH = "/apis/cdi.kubevirt.io/v1beta1/namespaces/apps/datavolumes/web-dv"
CM_PATH = "/api/v1/namespaces/apps/configmaps/web-image-record"


@pytest.fixture
def objects(tmp_path: Path) -> Iterator[tuple[dict[str, Any], Path]]:
    store: dict[str, Any] = {}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            body = store.get(self.path.split("?")[0])
            status = 200 if body is not None else 404
            data = json.dumps(body if body is not None else {"kind": "Status", "code": 404}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"}}
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "apps"}}],
                "current-context": "c",
            }
        )
    )
    try:
        yield store, kubeconfig
    finally:
        server.shutdown()
        server.server_close()


def vm(
    *, verified: bool, verified_by: str | None, verified_digest: str | None, record: bool = False
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "web", "namespace": "apps"}
    if record:
        metadata["annotations"] = {"uds.dev/image-record": "web-image-record"}
    return {
        "metadata": metadata,
        "spec": {"source": {"upload": {"checksum": DECLARED}}},
        "status": {
            "phase": "Ready" if verified else "Failed",
            "checksumVerified": verified,
            "verifiedBy": verified_by,
            "verifiedDigest": verified_digest,
            "conditions": [
                {
                    "type": "ChecksumVerified",
                    "status": "True" if verified else "False",
                    "reason": "InClusterVerifier" if verified else "ChecksumMismatch",
                    "message": "m",
                    "lastTransitionTime": "2025-01-01T00:00:00Z",
                }
            ],
        },
    }


def dv(result: str, expected: str = DECLARED) -> dict[str, Any]:
    actual = expected if result == "match" else "sha256:" + "b" * 64
    verdict = json.dumps({"result": result, "expected": expected, "actual": actual, "bytes": 1048576})
    return {"metadata": {"name": "web-dv", "annotations": {"uds.dev/verification": verdict}}}


def run(kubeconfig: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["verify", "web", "--kubeconfig", str(kubeconfig), *args])
    assert "Traceback" not in result.output
    return result.exit_code, result.output


def test_verified_by_the_in_cluster_verifier(objects: tuple[dict[str, Any], Path]) -> None:
    store, kubeconfig = objects
    store[VM_PATH] = vm(verified=True, verified_by="in-cluster-verifier", verified_digest=DECLARED)
    store[DV_PATH] = dv("match")
    code, out = run(kubeconfig)
    assert code == 0, out
    assert "VERIFIED" in out and "NOT VERIFIED" not in out
    assert DECLARED in out and "in-cluster-verifier" in out and "match: expected" in out


def test_json_output_carries_the_evidence(objects: tuple[dict[str, Any], Path]) -> None:
    store, kubeconfig = objects
    store[VM_PATH] = vm(
        verified=True, verified_by="in-cluster-verifier", verified_digest=DECLARED, record=True
    )
    store[DV_PATH] = dv("match", expected=CONTENT)
    store[CM_PATH] = {
        "metadata": {"name": "web-image-record"},
        "data": {
            "image-record.json": json.dumps(
                {
                    "format": "qcow2",
                    "sha256": DECLARED,
                    "content_sha256": CONTENT,
                    "virtual_size_bytes": 1048576,
                }
            )
        },
    }
    code, out = run(kubeconfig, "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["verified"] is True and doc["problems"] == []
    assert doc["declaredDigest"] == DECLARED and doc["verifiedBy"] == "in-cluster-verifier"
    assert doc["diskVerdict"] == {"result": "match", "expected": CONTENT, "actual": CONTENT, "bytes": 1048576}
    assert doc["imageRecord"]["matchesDeclared"] is True and doc["imageRecord"]["contentSha256"] == CONTENT
    assert doc["condition"]["reason"] == "InClusterVerifier"


def test_mismatch_is_not_verified(objects: tuple[dict[str, Any], Path]) -> None:
    store, kubeconfig = objects
    store[VM_PATH] = vm(verified=False, verified_by=None, verified_digest=None)
    store[DV_PATH] = dv("mismatch")
    code, out = run(kubeconfig)
    assert code == 1
    assert "NOT VERIFIED" in out and "mismatch: expected" in out and "ChecksumMismatch" in out


@pytest.mark.parametrize(
    ("verified_by", "verified_digest", "verdict", "fragment"),
    [
        ("in-cluster-verifier", "sha256:" + "f" * 64, "match", "not the declared"),
        ("in-cluster-verifier", DECLARED, None, "carries no match verdict"),
        ("someone-said-so", DECLARED, "match", "not a known verification mechanism"),
    ],
)
def test_a_status_claim_without_matching_evidence_is_not_verified(
    objects: tuple[dict[str, Any], Path],
    verified_by: str,
    verified_digest: str,
    verdict: str | None,
    fragment: str,
) -> None:
    store, kubeconfig = objects
    store[VM_PATH] = vm(verified=True, verified_by=verified_by, verified_digest=verified_digest)
    if verdict:
        store[DV_PATH] = dv(verdict)
    code, out = run(kubeconfig)
    assert code == 1
    assert fragment in out and "NOT VERIFIED" in out


def test_image_record_sealing_another_digest_is_a_problem(objects: tuple[dict[str, Any], Path]) -> None:
    store, kubeconfig = objects
    store[VM_PATH] = vm(verified=True, verified_by="cdi-http-checksum", verified_digest=DECLARED, record=True)
    store[CM_PATH] = {
        "metadata": {"name": "web-image-record"},
        "data": {"image-record.json": json.dumps({"sha256": "sha256:" + "9" * 64})},
    }
    code, out = run(kubeconfig)
    assert code == 1 and "DIFFERS from the declared digest" in out and "seals" in out


def test_missing_vm_and_bad_kubeconfig(objects: tuple[dict[str, Any], Path], tmp_path: Path) -> None:
    _store, kubeconfig = objects
    code, out = run(kubeconfig)
    assert code == 1 and "not found" in out
    code, out = run(tmp_path / "missing-kubeconfig")
    assert code == 2 and "kubeconfig" in out
