"""Talk to CDI's upload proxy: stream one image to ``/v1beta1/upload`` with a bearer upload token.

The protocol (CDI ``pkg/uploadproxy``, ``doc/upload.md``): ``POST <proxy>/v1beta1/upload`` with header
``Authorization: Bearer <token>`` and the raw image as the body. The proxy answers 400 for a missing or
malformed token, 401 for an invalid or expired one, 503 (with a reason in the body) while the upload server
behind it is not ready, and otherwise relays the upload server's status: 200 once the data is written
(the sync endpoint waits until CDI has processed the image), 503 without a body while the upload server is
still reading an earlier upload.

Every failure becomes an :class:`UploadError` whose message says what to do next. An interrupted upload is
harmless: CDI discards partial data and accepts the whole image again, so the advice is to re-run.
"""

from __future__ import annotations

import errno
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from uds_vm_operator.cli._errors import CheckFailed

UPLOAD_PATH = "/v1beta1/upload"
CHUNK_BYTES = 4 << 20


class UploadError(CheckFailed):
    """Base of every upload failure (exit 1); ``str()`` is the one line shown to the user."""


class LocalDigestMismatchError(UploadError):
    """The local file is not the image the UDSVirtualMachine declares; nothing was sent."""


class UploadApiUnavailableError(UploadError):
    """The cluster does not serve CDI's UploadTokenRequest API (CDI missing or too old)."""


class UploadNotReadyError(UploadError):
    """The DataVolume is not (or no longer) waiting for an upload."""


class ProxyUnreachableError(UploadError):
    """No TCP connection to the upload proxy."""


class ProxyTlsError(UploadError):
    """The TLS handshake with the upload proxy failed (usually an untrusted certificate)."""


class UploadAuthError(UploadError):
    """The upload proxy refused the token."""


class UploadInterruptedError(UploadError):
    """The connection broke while the image was being sent."""


class UploadRejectedError(UploadError):
    """The upload proxy or upload server answered with an error status."""


@dataclass(frozen=True)
class ProxyTarget:
    """Where and how to connect: the proxy base URL and how to check its certificate."""

    base_url: str
    ca_file: str | None = None
    insecure: bool = False
    server_name: str | None = None
    """The name the proxy's certificate is checked against (and sent as SNI) instead of the URL's host:
    for a port-forward or a Service IP, whose address is not among the certificate's names."""

    @property
    def upload_url(self) -> str:
        """The synchronous upload endpoint under ``base_url``."""
        return self.base_url.rstrip("/") + UPLOAD_PATH

    def ssl_context(self) -> ssl.SSLContext:
        """Verify against ``ca_file`` (or the system trust store); skip checks only with ``insecure``."""
        if self.insecure:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            return context
        try:
            return ssl.create_default_context(cafile=self.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise ProxyTlsError(f"cannot load the CA file {self.ca_file}: {exc}; pass a PEM file") from exc


def _file_chunks(path: Path, sent: list[int], on_progress: Callable[[int], None] | None) -> Iterator[bytes]:
    with path.open("rb", buffering=0) as handle:
        while chunk := handle.read(CHUNK_BYTES):
            yield chunk
            sent[0] += len(chunk)
            if on_progress is not None:
                on_progress(len(chunk))


def stream_upload(
    target: ProxyTarget,
    token: str,
    image: Path,
    *,
    on_progress: Callable[[int], None] | None = None,
    connect_timeout_s: float = 15.0,
) -> int:
    """POST ``image`` to the proxy's sync endpoint; return the bytes sent or raise :class:`UploadError`."""
    import httpx2  # noqa: PLC0415 (lazy: keeps uds-vmctl start fast)

    size = image.stat().st_size
    sent = [0]
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/octet-stream",
        "Content-Length": str(size),
    }
    # No read timeout: the sync endpoint answers only after CDI has written (and converted) the whole image.
    timeout = httpx2.Timeout(connect=connect_timeout_s, read=None, write=120.0, pool=connect_timeout_s)
    try:
        with httpx2.Client(verify=target.ssl_context(), timeout=timeout, trust_env=False) as client:
            response = client.post(
                target.upload_url,
                content=_file_chunks(image, sent, on_progress),
                headers=headers,
                extensions={"sni_hostname": target.server_name} if target.server_name else None,
            )
    except httpx2.ConnectError as exc:
        raise _connect_failure(target, exc) from exc
    except (httpx2.WriteError, httpx2.ReadError, httpx2.RemoteProtocolError, httpx2.WriteTimeout) as exc:
        raise UploadInterruptedError(
            f"the upload was interrupted before CDI confirmed it ({sent[0]} of {size} bytes sent; "
            f"{_reason(exc)}); re-run the same command: CDI discards the partial data and accepts the whole "
            "image again"
        ) from exc
    except httpx2.TransportError as exc:
        raise UploadInterruptedError(
            f"the upload was interrupted before CDI confirmed it ({sent[0]} of {size} bytes sent; "
            f"{_reason(exc)}); re-run the same command"
        ) from exc
    return _check_response(response.status_code, response.text, sent[0], size)


def _check_response(status: int, body: str, sent: int, size: int) -> int:
    detail = " ".join(body.split())[:300]
    if 200 <= status < 300:
        if sent != size:
            raise UploadInterruptedError(f"only {sent} of {size} bytes were sent; re-run the same command")
        return sent
    if status == 401:
        raise UploadAuthError(
            "the upload proxy rejected the upload token (HTTP 401): it may have expired (tokens last 5 "
            "minutes) or the proxy belongs to another cluster; re-run the command to get a fresh token"
        )
    if status == 400:
        raise UploadAuthError(
            f"the upload proxy refused the request (HTTP 400{': ' + detail if detail else ''}); the token "
            "was missing or malformed, or does not name a PVC; re-run the command"
        )
    if status == 503 and not detail:
        # The proxy's own 503s always carry a reason; a bare one is relayed from the upload server, which
        # refuses a second POST while an earlier one is still being read (pkg/uploadserver in CDI v1.65).
        raise UploadNotReadyError(
            "the upload server is still busy with an earlier upload to this DataVolume (HTTP 503 without "
            "a reason); an interrupted upload is released as soon as CDI notices the broken stream: if no "
            "other upload is running, re-run the same command in a few seconds"
        )
    if status == 503:
        raise UploadNotReadyError(
            f"the upload server is not ready (HTTP 503{': ' + detail if detail else ''}); wait until the "
            "DataVolume reports UploadReady, then re-run"
        )
    raise UploadRejectedError(
        f"the upload proxy answered HTTP {status}{': ' + detail if detail else ''} after {sent} of {size} "
        "bytes; check the CDI upload server logs, then re-run"
    )


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())[:200]


def _connect_failure(target: ProxyTarget, exc: Exception) -> UploadError:
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ssl.SSLCertVerificationError | ssl.SSLError):
            return ProxyTlsError(
                f"TLS handshake with the upload proxy {target.base_url} failed ({_reason(cause)}); pass "
                "--ca-file with the proxy's CA certificate, or --insecure to skip verification "
                "(not recommended)"
            )
        if isinstance(cause, ConnectionRefusedError) or getattr(cause, "errno", None) == errno.ECONNREFUSED:
            break
        cause = cause.__cause__ or cause.__context__
    text = _reason(exc)
    if "CERTIFICATE_VERIFY_FAILED" in text or "SSL" in text:
        return ProxyTlsError(
            f"TLS handshake with the upload proxy {target.base_url} failed ({text}); pass --ca-file with the "
            "proxy's CA certificate, or --insecure to skip verification (not recommended)"
        )
    return ProxyUnreachableError(
        f"cannot connect to the upload proxy at {target.base_url} ({text}); check --uploadproxy-url and that "
        "the cdi-uploadproxy service is reachable, e.g. kubectl port-forward -n cdi service/cdi-uploadproxy "
        "18443:443 and --uploadproxy-url https://127.0.0.1:18443"
    )
