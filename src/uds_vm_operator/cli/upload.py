"""``uds-vmctl upload IMAGE --name N``: send a verified image to CDI's upload proxy.

CDI checks no digest on uploads (its issue #4104), so the first check happens here, before a byte leaves
the machine: the local file must have the digest the UDSVirtualMachine declares in
``spec.source.upload.checksum``. Then we ask CDI for an upload token (``UploadTokenRequest``), wait until
the DataVolume ``<name>-dv`` is ``UploadReady``, and stream the file to the proxy with a progress bar.
The operator still verifies the bytes that landed in the PVC before the VM may run; this check only
saves a wasted transfer.

Exit codes: 0 uploaded, 1 a check or the upload failed (nothing half-done is left behind: re-running is
always safe), 2 usage error. Failures are raised (:class:`UploadError`, :class:`UsageError`) and printed
by :mod:`._errors`.
"""

from __future__ import annotations

import json
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from uds_vm_operator.child_names import root_dv_name
from uds_vm_operator.cli._errors import EXIT_OK, UsageError
from uds_vm_operator.cli._kube import KubeClient
from uds_vm_operator.cli._output import byte_progress
from uds_vm_operator.cli.upload_proxy import (
    LocalDigestMismatchError,
    ProxyTarget,
    UploadApiUnavailableError,
    UploadError,
    UploadNotReadyError,
    stream_upload,
)
from uds_vm_operator.runtime import kube
from uds_vm_operator.verify.digest import parse_digest
from uds_vm_operator.verify.errors import VerifyError
from uds_vm_operator.verify.reader import hash_prefix

TOKEN_REFRESH_AFTER_S = 120.0
"""CDI tokens are valid for 5 minutes; after a long wait for UploadReady we ask for a fresh one."""

WAITING_PHASES = {"", "Pending", "PVCBound", "WaitForFirstConsumer", "PendingPopulation", "UploadScheduled"}


@dataclass(frozen=True)
class UploadOptions:
    """The parsed command line of ``uds-vmctl upload``."""

    image: Path
    name: str
    namespace: str | None = None
    kubeconfig: Path | None = None
    uploadproxy_url: str | None = None
    insecure: bool = False
    ca_file: Path | None = None
    tls_server_name: str | None = None
    wait_s: float = 300.0
    poll_interval_s: float = 2.0
    json_output: bool = False


def run_upload(options: UploadOptions, console: Console) -> int:
    """Run the whole upload and return 0; progress goes to ``console`` (stderr), failures are raised."""
    _check_usage(options)
    with KubeClient(options.kubeconfig, timeout_s=15.0, trust_env=False) as cluster:
        return _upload(options, cluster, console)


def _check_usage(options: UploadOptions) -> None:
    image = options.image
    try:
        info = image.stat()
    except FileNotFoundError:
        raise UsageError(f"image {image} does not exist") from None
    except OSError as exc:
        raise UsageError(
            f"image {image} cannot be read: {exc.strerror or exc}; give the image file"
        ) from None
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(
            f"image {image} is not a regular file (a directory or a device); give the image file"
        )
    if info.st_size == 0:
        raise UsageError(f"image {image} is empty")
    if options.insecure and options.ca_file is not None:
        raise UsageError("--insecure and --ca-file contradict each other; pass only one")
    if options.ca_file is not None and not options.ca_file.is_file():
        raise UsageError(f"CA file {options.ca_file} does not exist")
    if options.uploadproxy_url is not None and not options.uploadproxy_url.startswith(
        ("https://", "http://")
    ):
        raise UsageError(f"--uploadproxy-url {options.uploadproxy_url!r} must start with https://")


def _upload(options: UploadOptions, cluster: KubeClient, console: Console) -> int:
    began = time.monotonic()
    namespace = options.namespace or cluster.default_namespace
    dv_name = root_dv_name(options.name)
    vm = cluster.request(
        "GET", kube.UDS_VM.path(namespace, options.name), what=f"read UDSVirtualMachine {options.name}"
    )
    if vm is None:
        raise UploadError(
            f"UDSVirtualMachine {namespace}/{options.name} not found; apply it first "
            f"(uds-vmctl prep writes {options.name}.udsvm.yaml)"
        )
    declared = _declared_upload_checksum(vm, namespace, options.name)
    if declared is None:
        console.print(
            "[yellow]warning:[/] spec.source.upload.checksum is not set: nothing will be verified and the VM "
            "may run from unverified bytes; run uds-vmctl prep and declare the digest",
            highlight=False,
        )
    else:
        _check_local_digest(options.image, declared, console)
    digest_checked = time.monotonic()

    target = ProxyTarget(
        _proxy_url(options, cluster),
        str(options.ca_file) if options.ca_file else None,
        options.insecure,
        options.tls_server_name,
    )
    token = _token_once_ready(options, cluster, namespace, dv_name, console)
    size = options.image.stat().st_size
    streaming = time.monotonic()
    with byte_progress(console) as progress:
        task = progress.add_task(f"upload {options.image.name}", total=size)
        sent = stream_upload(target, token, options.image, on_progress=lambda n: progress.advance(task, n))
    done = time.monotonic()
    if options.json_output:
        report = {
            "udsVirtualMachine": options.name,
            "namespace": namespace,
            "dataVolume": dv_name,
            "bytesSent": sent,
            "declaredDigest": declared,
            "digestCheckSeconds": round(digest_checked - began, 3) if declared else None,
            "streamSeconds": round(done - streaming, 3),
            "totalSeconds": round(done - began, 3),
        }
        sys.stdout.write(json.dumps(report) + "\n")
    console.print(
        f"uploaded {sent} bytes to {namespace}/{dv_name}; the operator now verifies the disk before the VM "
        f"may run (check with: uds-vmctl verify {options.name} -n {namespace})",
        highlight=False,
    )
    return EXIT_OK


def _token_once_ready(
    options: UploadOptions, cluster: KubeClient, namespace: str, dv_name: str, console: Console
) -> str:
    """An upload token that is still fresh once the DataVolume is UploadReady (asked again after a long
    wait: CDI's tokens last five minutes)."""
    token = request_upload_token(cluster, namespace, dv_name)
    started = time.monotonic()
    wait_until_upload_ready(
        cluster,
        namespace,
        dv_name,
        wait_s=options.wait_s,
        poll_interval_s=options.poll_interval_s,
        console=console,
    )
    if time.monotonic() - started > TOKEN_REFRESH_AFTER_S:
        token = request_upload_token(cluster, namespace, dv_name)
    return token


def _declared_upload_checksum(vm: dict[str, Any], namespace: str, name: str) -> str | None:
    source = (vm.get("spec") or {}).get("source") or {}
    if "upload" not in source:
        kinds = ", ".join(sorted(source)) or "none"
        raise UploadError(
            f"UDSVirtualMachine {namespace}/{name} does not take an upload (spec.source is {kinds}); "
            "set spec.source.upload to upload an image"
        )
    checksum = (source.get("upload") or {}).get("checksum")
    return checksum if isinstance(checksum, str) and checksum else None


def _check_local_digest(image: Path, declared: str, console: Console) -> None:
    try:
        want = parse_digest(declared)
    except VerifyError as exc:
        raise UploadError(f"spec.source.upload.checksum: {exc}") from exc
    size = image.stat().st_size
    with byte_progress(console) as progress:
        task = progress.add_task(f"{want.algorithm} {image.name}", total=size)
        try:
            got = hash_prefix(
                str(image), size, want.algorithm, on_progress=lambda n: progress.advance(task, n)
            )
        except VerifyError as exc:
            raise UsageError(str(exc)) from exc
    if got.digest != want:
        raise LocalDigestMismatchError(
            f"{image} has digest {got.digest} but the UDSVirtualMachine declares {want}; nothing was sent. "
            "Use the image that uds-vmctl prep recorded, or correct spec.source.upload.checksum"
        )
    console.print(f"local digest matches the declared {want}", highlight=False)


def request_upload_token(cluster: KubeClient, namespace: str, pvc_name: str) -> str:
    """Ask CDI for an upload token for ``pvc_name`` (``UploadTokenRequest``, valid 5 minutes)."""
    token_request = kube.UPLOAD_TOKEN_REQUEST
    body = {
        "apiVersion": token_request.api_version,
        "kind": token_request.kind,
        "metadata": {"name": f"{pvc_name}-upload", "namespace": namespace},
        "spec": {"pvcName": pvc_name},
    }
    answer = cluster.exchange(
        "POST", token_request.path(namespace), body=body, what="request an upload token"
    )
    status = answer.status
    if status in (404, 503):
        raise UploadApiUnavailableError(
            f"CDI upload API not available (HTTP {status} for {token_request.api_version} "
            f"{token_request.kind}): install CDI, or check that the cdi-apiserver pod is running"
        )
    if status in (401, 403):
        raise UploadError(
            f"not allowed to request an upload token in namespace {namespace} (HTTP {status}); ask for RBAC "
            "'create' on uploadtokenrequests.upload.cdi.kubevirt.io"
        )
    if status >= 400:
        raise UploadError(f"the upload token request failed: HTTP {status} {answer.message}".rstrip())
    token = (answer.object.get("status") or {}).get("token")
    if not isinstance(token, str) or not token:
        raise UploadApiUnavailableError(
            "CDI returned no upload token; check the cdi-apiserver logs, then re-run"
        )
    return token


def wait_until_upload_ready(
    cluster: KubeClient,
    namespace: str,
    dv_name: str,
    *,
    wait_s: float,
    poll_interval_s: float,
    console: Console,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Poll the DataVolume until it is ``UploadReady``; raise :class:`UploadNotReadyError` otherwise."""
    deadline = clock() + wait_s
    phase: str | None = None
    announced = False
    while True:
        dv = cluster.request(
            "GET", kube.DATA_VOLUME.path(namespace, dv_name), what=f"read DataVolume {dv_name}"
        )
        if dv is not None:
            if "upload" not in ((dv.get("spec") or {}).get("source") or {}):
                raise UploadNotReadyError(f"DataVolume {namespace}/{dv_name} is not an upload target")
            phase = str((dv.get("status") or {}).get("phase") or "")
            if phase == "UploadReady":
                return
            if phase == "Succeeded":
                raise UploadNotReadyError(
                    f"DataVolume {namespace}/{dv_name} already holds an uploaded image (phase Succeeded); to "
                    "replace it, delete the DataVolume (the operator re-creates it) and upload again"
                )
            if phase == "Failed" or phase not in WAITING_PHASES:
                raise UploadNotReadyError(
                    f"DataVolume {namespace}/{dv_name} is not ready for upload (phase {phase}); see "
                    f"kubectl describe datavolume {dv_name} -n {namespace}"
                )
        if clock() >= deadline:
            state = f"phase {phase or 'unset'}" if dv is not None else "it does not exist yet"
            raise UploadNotReadyError(
                f"DataVolume {namespace}/{dv_name} is not ready for upload after {wait_s:.0f} s ({state}); "
                "check that the operator and CDI are running, or raise --wait-secs"
            )
        if not announced:
            console.print(
                f"waiting for DataVolume {namespace}/{dv_name} to be UploadReady ...", highlight=False
            )
            announced = True
        sleep(poll_interval_s)


def _proxy_url(options: UploadOptions, cluster: KubeClient) -> str:
    if options.uploadproxy_url:
        return options.uploadproxy_url
    config = cluster.request("GET", kube.CDI_CONFIG.path(name="config"), what="read CDIConfig config")
    url = ((config or {}).get("status") or {}).get("uploadProxyURL")
    if isinstance(url, str) and url:
        return url if url.startswith(("https://", "http://")) else f"https://{url}"
    raise UsageError(
        "the cluster does not publish an upload proxy URL (CDIConfig status.uploadProxyURL); pass "
        "--uploadproxy-url, e.g. after kubectl port-forward -n cdi service/cdi-uploadproxy 18443:443"
    )


def register(app: typer.Typer) -> None:
    """Attach the ``upload`` command to the CLI app."""

    @app.command("upload")
    def upload_command(
        image: Annotated[Path, typer.Argument(help="The disk image file to upload (as prepared by prep).")],
        *,
        name: Annotated[str, typer.Option("--name", help="The UDSVirtualMachine that receives the image.")],
        namespace: Annotated[
            str | None, typer.Option("-n", "--namespace", help="Its namespace (default: the kubeconfig's).")
        ] = None,
        kubeconfig: Annotated[
            Path | None, typer.Option("--kubeconfig", help="Kubeconfig file to use.")
        ] = None,
        uploadproxy_url: Annotated[
            str | None,
            typer.Option("--uploadproxy-url", help="Base URL of cdi-uploadproxy (default: CDIConfig's)."),
        ] = None,
        insecure: Annotated[
            bool,
            typer.Option("--insecure", help="Do not verify the proxy's TLS certificate (not recommended)."),
        ] = False,
        ca_file: Annotated[
            Path | None, typer.Option("--ca-file", help="PEM CA bundle to verify the upload proxy with.")
        ] = None,
        tls_server_name: Annotated[
            str | None,
            typer.Option(
                "--tls-server-name",
                help="Check the proxy's certificate for this name (e.g. cdi-uploadproxy.cdi.svc) when "
                "connecting by IP or through a port-forward.",
            ),
        ] = None,
        wait_secs: Annotated[
            int,
            typer.Option("--wait-secs", min=0, help="How long to wait for the DataVolume to be UploadReady."),
        ] = 300,
        json_output: Annotated[
            bool,
            typer.Option(
                "--json",
                help="Also print one JSON object on stdout when done: the bytes sent and the seconds spent "
                "on the digest check and on streaming (progress stays on stderr).",
            ),
        ] = False,
    ) -> None:
        """Check IMAGE against the declared digest, then stream it to CDI's upload proxy."""
        options = UploadOptions(
            image=image,
            name=name,
            namespace=namespace,
            kubeconfig=kubeconfig,
            uploadproxy_url=uploadproxy_url,
            insecure=insecure,
            ca_file=ca_file,
            tls_server_name=tls_server_name,
            wait_s=float(wait_secs),
            json_output=json_output,
        )
        raise typer.Exit(run_upload(options, Console(stderr=True, soft_wrap=True)))
