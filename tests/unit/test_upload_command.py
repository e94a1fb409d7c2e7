"""``uds-vmctl upload`` against a local HTTPS server that speaks CDI's protocols.

The fake serves, on 127.0.0.1 with a certificate from its own CA: the few API-server paths the command
uses (UDSVirtualMachine, DataVolume, UploadTokenRequest, CDIConfig; unit tier only: the integration tier
uses the real API server) and the upload proxy as CDI documents it: ``POST /v1beta1/upload`` with
``Authorization: Bearer <token>``; 400 without a token, 401 for a wrong one, 503 while not ready,
200 after the body was received.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import ipaddress
import json
import os
import re
import socket
import ssl
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from rich.console import Console
from typer.testing import CliRunner

from uds_vm_operator.cli.main import app
from uds_vm_operator.cli.upload import UploadOptions, run_upload

KUBE_TOKEN = "kube-admin-token"
UPLOAD_TOKEN = "eyJhbGciOiJQUzUxMiJ9.upload.token"
IMAGE_BYTES = 9 * 1024 * 1024 + 17


# ------------------------------------------------------------------------------------------- certificates


@dataclass(frozen=True)
class Pki:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes


def make_pki() -> Pki:
    """A CA and a server certificate for 127.0.0.1, as a real cdi-uploadproxy would present."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake-cdi-ca")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cdi-uploadproxy")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("cdi-uploadproxy.cdi.svc")]
            ),
            False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return Pki(
        ca_pem=ca_cert.public_bytes(serialization.Encoding.PEM),
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )


# --------------------------------------------------------------------------------------------- the fake


@dataclass
class FakeCdi:
    """State and behaviour of the fake; tests change the knobs before running the command."""

    vms: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    dv_phases: list[str] = field(default_factory=lambda: ["UploadReady"])
    dv_exists: bool = True
    dv_is_upload: bool = True
    token_api: int = 201  # 201 serves tokens; 404/403/503 answer like a cluster without (access to) CDI
    upload_proxy_url_in_cdiconfig: str | None = None
    upload_mode: str = "ok"  # ok | close-mid-body | not-ready | busy
    expected_upload_token: str = UPLOAD_TOKEN
    token_requests: list[dict[str, Any]] = field(default_factory=list)
    upload_requests: list[dict[str, Any]] = field(default_factory=list)
    received_sha256: str | None = None
    received_bytes: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next_dv_phase(self) -> str:
        with self.lock:
            return self.dv_phases.pop(0) if len(self.dv_phases) > 1 else self.dv_phases[0]


VM_PATH = re.compile(r"^/apis/uds\.dev/v1alpha1/namespaces/([^/]+)/udsvirtualmachines/([^/]+)$")
DV_PATH = re.compile(r"^/apis/cdi\.kubevirt\.io/v1beta1/namespaces/([^/]+)/datavolumes/([^/]+)$")
TOKEN_PATH = re.compile(r"^/apis/upload\.cdi\.kubevirt\.io/v1beta1/namespaces/([^/]+)/uploadtokenrequests$")
BEARER = re.compile(r"(?i)^Bearer\s+([A-Za-z0-9\-\._~\+\/]+)$")  # the proxy's own header pattern


def make_handler(fake: FakeCdi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
            return

        def _json(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _not_found(self) -> None:
            self._json(
                404,
                {
                    "kind": "Status",
                    "status": "Failure",
                    "reason": "NotFound",
                    "code": 404,
                    "message": "the server could not find the requested resource",
                },
            )

        def _kube_authorised(self) -> bool:
            if self.headers.get("Authorization") != f"Bearer {KUBE_TOKEN}":
                self._json(401, {"kind": "Status", "code": 401, "message": "Unauthorized"})
                return False
            return True

        def do_GET(self) -> None:
            if not self._kube_authorised():
                return
            if match := VM_PATH.match(self.path):
                vm = fake.vms.get((match[1], match[2]))
                return self._json(200, vm) if vm else self._not_found()
            if match := DV_PATH.match(self.path):
                if not fake.dv_exists:
                    return self._not_found()
                source = {"upload": {}} if fake.dv_is_upload else {"http": {"url": "https://x"}}
                return self._json(
                    200,
                    {
                        "apiVersion": "cdi.kubevirt.io/v1beta1",
                        "kind": "DataVolume",
                        "metadata": {"name": match[2], "namespace": match[1]},
                        "spec": {"source": source},
                        "status": {"phase": fake.next_dv_phase()},
                    },
                )
            if self.path == "/apis/cdi.kubevirt.io/v1beta1/cdiconfigs/config":
                status = (
                    {"uploadProxyURL": fake.upload_proxy_url_in_cdiconfig}
                    if fake.upload_proxy_url_in_cdiconfig
                    else {}
                )
                return self._json(200, {"kind": "CDIConfig", "status": status})
            return self._not_found()

        def do_POST(self) -> None:
            if self.path == "/v1beta1/upload":
                return self._upload()
            if not self._kube_authorised():
                return
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if match := TOKEN_PATH.match(self.path):
                fake.token_requests.append({"namespace": match[1], "body": body})
                if fake.token_api != 201:
                    return self._json(
                        fake.token_api, {"kind": "Status", "code": fake.token_api, "message": "no"}
                    )
                answer = dict(body)
                answer["status"] = {"token": UPLOAD_TOKEN}
                return self._json(201, answer)
            return self._not_found()

        def _upload(self) -> None:
            header = self.headers.get("Authorization") or ""
            fake.upload_requests.append(
                {"authorization": header, "length": self.headers.get("Content-Length")}
            )
            length = int(self.headers.get("Content-Length") or 0)
            if not header or not (match := BEARER.match(header)):
                self.rfile.read(length)
                return self._json(400, {})
            if match[1] != fake.expected_upload_token:
                self.rfile.read(length)
                return self._json(401, {})
            if fake.upload_mode == "not-ready":
                self.rfile.read(length)
                data = b"rejecting Upload Request for PVC web-dv that is not ready"
                self.send_response(503)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            if fake.upload_mode == "busy":  # CDI's upload server while it still reads an earlier upload
                self.rfile.read(length)
                self.send_response(503)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            hasher = hashlib.sha256()
            remaining = length
            cut_at = length // 2 if fake.upload_mode == "close-mid-body" else None
            while remaining > 0:
                chunk = self.rfile.read(min(1 << 20, remaining))
                if not chunk:
                    break
                hasher.update(chunk)
                remaining -= len(chunk)
                fake.received_bytes += len(chunk)
                if cut_at is not None and fake.received_bytes >= cut_at:
                    # Reset the connection mid-body, like an upload server pod that dies.
                    raw = self.connection
                    raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    raw.close()
                    self.close_connection = True
                    return
            fake.received_sha256 = "sha256:" + hasher.hexdigest()
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    return Handler


@dataclass
class Served:
    fake: FakeCdi
    url: str
    kubeconfig: Path
    ca_file: Path


@pytest.fixture(scope="module")
def pki() -> Pki:
    return make_pki()


@pytest.fixture
def served(tmp_path: Path, pki: Pki) -> Iterator[Served]:
    fake = FakeCdi()
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(fake))
    server.daemon_threads = True
    cert_file, key_file, ca_file = tmp_path / "tls.crt", tmp_path / "tls.key", tmp_path / "ca.crt"
    cert_file.write_bytes(pki.cert_pem)
    key_file.write_bytes(pki.key_pem)
    ca_file.write_bytes(pki.ca_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    url = f"https://127.0.0.1:{server.server_address[1]}"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "fake",
                        "cluster": {
                            "server": url,
                            "certificate-authority-data": base64.b64encode(pki.ca_pem).decode(),
                        },
                    }
                ],
                "users": [{"name": "admin", "user": {"token": KUBE_TOKEN}}],
                "contexts": [
                    {"name": "fake", "context": {"cluster": "fake", "user": "admin", "namespace": "apps"}}
                ],
                "current-context": "fake",
            }
        )
    )
    try:
        yield Served(fake, url, kubeconfig, ca_file)
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def image(tmp_path: Path) -> Path:
    path = tmp_path / "web.qcow2"
    path.write_bytes(os.urandom(IMAGE_BYTES))
    return path


def sha256_file(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def add_vm(fake: FakeCdi, checksum: str | None, *, source: dict[str, Any] | None = None) -> None:
    upload = {"checksum": checksum} if checksum else {}
    fake.vms[("apps", "web")] = {
        "apiVersion": "uds.dev/v1alpha1",
        "kind": "UDSVirtualMachine",
        "metadata": {"name": "web", "namespace": "apps"},
        "spec": {"source": source or {"upload": upload}, "disk": {"virtualSize": IMAGE_BYTES}},
    }


def cli(served: Served, image: Path, *extra: str) -> tuple[int, str]:
    args = ["upload", str(image), "--name", "web", "--kubeconfig", str(served.kubeconfig), *extra]
    result = CliRunner().invoke(app, args)
    assert "Traceback" not in result.output
    return result.exit_code, " ".join(result.output.split())


# ------------------------------------------------------------------------------------------------ tests


def test_upload_streams_the_verified_image_with_the_token(served: Served, image: Path) -> None:
    add_vm(served.fake, sha256_file(image))
    code, out = cli(served, image, "--uploadproxy-url", served.url, "--ca-file", str(served.ca_file))
    assert code == 0, out
    assert served.fake.received_sha256 == sha256_file(image)
    assert served.fake.received_bytes == IMAGE_BYTES
    (token_request,) = served.fake.token_requests
    assert token_request["namespace"] == "apps"
    assert token_request["body"]["apiVersion"] == "upload.cdi.kubevirt.io/v1beta1"
    assert token_request["body"]["kind"] == "UploadTokenRequest"
    assert token_request["body"]["spec"] == {"pvcName": "web-dv"}
    (upload,) = served.fake.upload_requests
    assert upload["authorization"] == f"Bearer {UPLOAD_TOKEN}"
    assert upload["length"] == str(IMAGE_BYTES)
    assert "local digest matches" in out and "uploaded" in out


def test_the_certificate_is_checked_against_the_tls_server_name(served: Served, image: Path) -> None:
    """Connecting by IP (a Service address, a port-forward) while checking the Service's DNS name."""
    add_vm(served.fake, sha256_file(image))
    common = ("--uploadproxy-url", served.url, "--ca-file", str(served.ca_file))
    code, out = cli(served, image, *common, "--tls-server-name", "elsewhere.example")
    assert code == 1 and "TLS handshake" in out, out
    assert served.fake.received_bytes == 0
    code, out = cli(served, image, *common, "--tls-server-name", "cdi-uploadproxy.cdi.svc")
    assert code == 0, out
    assert served.fake.received_sha256 == sha256_file(image)


def test_local_digest_mismatch_sends_nothing(served: Served, image: Path) -> None:
    declared = "sha256:" + "0" * 64
    add_vm(served.fake, declared)
    code, out = cli(served, image, "--uploadproxy-url", served.url, "--ca-file", str(served.ca_file))
    assert code == 1
    assert declared in out and sha256_file(image) in out and "nothing was sent" in out
    assert served.fake.token_requests == []
    assert served.fake.upload_requests == []


def test_waits_for_upload_ready_and_proxy_url_comes_from_cdiconfig(served: Served, image: Path) -> None:
    add_vm(served.fake, sha256_file(image))
    served.fake.dv_phases = ["Pending", "UploadScheduled", "UploadReady"]
    served.fake.upload_proxy_url_in_cdiconfig = served.url
    console = Console(stderr=True, soft_wrap=True, record=True)
    options = UploadOptions(
        image=image, name="web", kubeconfig=served.kubeconfig, ca_file=served.ca_file, poll_interval_s=0.01
    )
    assert run_upload(options, console) == 0
    assert served.fake.dv_phases == ["UploadReady"], "every phase was observed"
    assert "waiting for DataVolume apps/web-dv" in console.export_text()
    assert served.fake.received_sha256 == sha256_file(image)


def test_wrong_token_is_an_auth_failure(served: Served, image: Path) -> None:
    add_vm(served.fake, sha256_file(image))
    served.fake.expected_upload_token = "another-token"
    code, out = cli(served, image, "--uploadproxy-url", served.url, "--ca-file", str(served.ca_file))
    assert code == 1
    assert "rejected the upload token (HTTP 401)" in out and "re-run" in out


def test_interrupted_connection_tells_the_user_to_rerun(served: Served, image: Path) -> None:
    add_vm(served.fake, sha256_file(image))
    served.fake.upload_mode = "close-mid-body"
    code, out = cli(served, image, "--uploadproxy-url", served.url, "--ca-file", str(served.ca_file))
    assert code == 1
    assert re.search(rf"interrupted before CDI confirmed it \(\d+ of {IMAGE_BYTES} bytes sent", out), out
    assert "re-run the same command" in out
    assert served.fake.received_sha256 is None


def test_upload_server_not_ready_is_explained(served: Served, image: Path) -> None:
    add_vm(served.fake, sha256_file(image))
    served.fake.upload_mode = "not-ready"
    code, out = cli(served, image, "--uploadproxy-url", served.url, "--ca-file", str(served.ca_file))
    assert code == 1
    assert "not ready (HTTP 503" in out and "rejecting Upload Request" in out


def test_upload_server_busy_with_an_earlier_upload_says_to_rerun_shortly(served: Served, image: Path) -> None:
    add_vm(served.fake, sha256_file(image))
    served.fake.upload_mode = "busy"
    code, out = cli(served, image, "--uploadproxy-url", served.url, "--ca-file", str(served.ca_file))
    assert code == 1
    assert "still busy with an earlier upload" in out and "re-run the same command in a few seconds" in out
    assert "wait until the DataVolume reports UploadReady" not in out, "it already is UploadReady"


def test_untrusted_certificate_suggests_ca_file_or_insecure(served: Served, image: Path) -> None:
    add_vm(served.fake, sha256_file(image))
    code, out = cli(served, image, "--uploadproxy-url", served.url)
    assert code == 1
    assert "TLS handshake" in out and "--ca-file" in out and "--insecure" in out
    assert served.fake.upload_requests == []


def test_insecure_only_when_asked(served: Served, image: Path) -> None:
    add_vm(served.fake, sha256_file(image))
    code, out = cli(served, image, "--uploadproxy-url", served.url, "--insecure")
    assert code == 0, out
    assert served.fake.received_sha256 == sha256_file(image)


def test_connection_refused_names_the_proxy(served: Served, image: Path) -> None:
    add_vm(served.fake, sha256_file(image))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    code, out = cli(served, image, "--uploadproxy-url", f"https://127.0.0.1:{closed_port}")
    assert code == 1
    assert f"cannot connect to the upload proxy at https://127.0.0.1:{closed_port}" in out
    assert "port-forward" in out


@pytest.mark.parametrize(
    ("status", "fragment"),
    [(404, "CDI upload API not available"), (503, "CDI upload API not available"), (403, "RBAC")],
)
def test_token_request_failures(served: Served, image: Path, status: int, fragment: str) -> None:
    add_vm(served.fake, sha256_file(image))
    served.fake.token_api = status
    code, out = cli(served, image, "--uploadproxy-url", served.url, "--ca-file", str(served.ca_file))
    assert code == 1
    assert fragment in out
    assert served.fake.upload_requests == []


def test_data_volume_already_uploaded(served: Served, image: Path) -> None:
    add_vm(served.fake, sha256_file(image))
    served.fake.dv_phases = ["Succeeded"]
    code, out = cli(served, image, "--uploadproxy-url", served.url, "--ca-file", str(served.ca_file))
    assert code == 1
    assert "already holds an uploaded image" in out
    assert served.fake.upload_requests == []


def test_data_volume_that_never_becomes_ready_times_out(served: Served, image: Path) -> None:
    add_vm(served.fake, sha256_file(image))
    served.fake.dv_exists = False
    code, out = cli(
        served, image, "--uploadproxy-url", served.url, "--ca-file", str(served.ca_file), "--wait-secs", "0"
    )
    assert code == 1
    assert "not ready for upload after 0 s (it does not exist yet)" in out


def test_data_volume_that_is_not_an_upload_target(served: Served, image: Path) -> None:
    add_vm(served.fake, sha256_file(image))
    served.fake.dv_is_upload = False
    code, out = cli(served, image, "--uploadproxy-url", served.url, "--ca-file", str(served.ca_file))
    assert code == 1
    assert "is not an upload target" in out


def test_missing_vm_and_non_upload_source(served: Served, image: Path) -> None:
    code, out = cli(served, image, "--uploadproxy-url", served.url)
    assert code == 1 and "UDSVirtualMachine apps/web not found" in out
    add_vm(served.fake, None, source={"http": {"url": "https://images.local/web.img"}})
    code, out = cli(served, image, "--uploadproxy-url", served.url)
    assert code == 1 and "does not take an upload (spec.source is http)" in out


def test_undeclared_checksum_warns_but_uploads(served: Served, image: Path) -> None:
    add_vm(served.fake, None)
    code, out = cli(served, image, "--uploadproxy-url", served.url, "--ca-file", str(served.ca_file))
    assert code == 0, out
    assert "warning" in out and "nothing will be verified" in out


def test_no_proxy_url_anywhere_is_a_usage_error(served: Served, image: Path) -> None:
    add_vm(served.fake, sha256_file(image))
    code, out = cli(served, image)
    assert code == 2
    assert "--uploadproxy-url" in out


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--insecure", "--ca-file", "CA"], "contradict"),
        (["--uploadproxy-url", "ftp://x"], "must start with https://"),
        (["--ca-file", "/nonexistent/ca.pem"], "does not exist"),
    ],
)
def test_usage_errors(served: Served, image: Path, args: list[str], fragment: str) -> None:
    args = [str(served.ca_file) if a == "CA" else a for a in args]
    code, out = cli(served, image, *args)
    assert code == 2 and fragment in out


def test_missing_image_and_bad_kubeconfig_are_usage_errors(
    served: Served, tmp_path: Path, image: Path
) -> None:
    code, out = cli(served, tmp_path / "absent.img")
    assert code == 2 and "does not exist" in out
    result = CliRunner().invoke(
        app, ["upload", str(image), "--name", "web", "--kubeconfig", str(tmp_path / "no-kubeconfig")]
    )
    assert result.exit_code == 2
    assert "kubeconfig" in result.output and "Traceback" not in result.output


def test_json_reports_what_was_sent_and_where_the_time_went(served: Served, image: Path) -> None:
    """`--json` is for scripts and benchmarks: one object on stdout, progress and messages on stderr."""
    common = ["--uploadproxy-url", served.url, "--ca-file", str(served.ca_file), "--json"]
    args = ["upload", str(image), "--name", "web", "--kubeconfig", str(served.kubeconfig), *common]
    add_vm(served.fake, sha256_file(image))
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["bytesSent"] == IMAGE_BYTES and report["dataVolume"] == "web-dv", report
    assert (report["udsVirtualMachine"], report["namespace"]) == ("web", "apps"), report
    assert report["declaredDigest"] == sha256_file(image), report
    assert 0 <= report["digestCheckSeconds"] <= report["totalSeconds"], report
    assert 0 <= report["streamSeconds"] <= report["totalSeconds"], report
    add_vm(served.fake, None)  # nothing declared: nothing checked, and the report says so
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["digestCheckSeconds"] is None
