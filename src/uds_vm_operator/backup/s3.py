"""A minimal S3 client on the standard library: AWS Signature Version 4, path-style URLs, multipart uploads.

Why not boto3: the copier runs in the operator's own image, whose runtime dependencies are kept few and
pinned (ADR 0001), and it needs a handful of S3 calls, not an SDK. Why path-style URLs
(``{endpoint}/{bucket}/{key}``): CDI's S3 importer reads a backup back that way (``S3ForcePathStyle``), and
on-site stores (Ceph RGW, MinIO, Versity) often have no wildcard DNS for virtual-hosted buckets.

Every request is signed with a real payload sha256 (``x-amz-content-sha256``), never ``UNSIGNED-PAYLOAD``,
so the store refuses a body that changed on the way.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import re
import ssl
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from http import HTTPStatus
from types import TracebackType
from typing import BinaryIO
from urllib.parse import quote, urlsplit

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
MIN_PART_BYTES = 5 << 20
"""S3's smallest part, except the last one of an upload."""
MAX_PART_BYTES = 5 << 30
MAX_PARTS = 10_000

_ALGORITHM = "AWS4-HMAC-SHA256"
_SEND_CHUNK_BYTES = 1 << 20
_ERROR_BODY_LIMIT = 64 << 10
_RETRY_STATUSES = frozenset({500, 502, 503, 504})
_AWS_REGION_HOST = re.compile(r"s3\.(.+)\.amazonaws\.com")


class S3Error(Exception):
    """An S3 request failed: the store answered with an error, or could not be reached (``status`` None)."""

    def __init__(self, message: str, *, status: int | None = None, code: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def region_of(endpoint_host: str) -> str:
    """The signing region CDI v1.65's S3 importer derives from an endpoint's ``host[:port]``.

    Why copy its rule rather than ask for the region: a backup is read back by CDI (a DataVolume with an
    ``s3`` source), which offers no region setting, so the copier must sign with the region CDI will sign
    with or a store that checks the region accepts one side and refuses the other.

    CDI v1.65 (``pkg/importer/s3-datasource.go``, ``extractRegion(ep.Host)``, aws-sdk-go v1): when the
    host matches ``s3\\.(.+)\\.amazonaws\\.com`` (unanchored) the region is the first group; otherwise it is
    ``strings.Split(host, ".")[0]``, the text before the first dot of ``host[:port]``, so a port stays
    part of it when the host has no dot: ``"10.244.0.1:7070"`` -> ``"10"``, ``"store.backup.svc:7070"``
    -> ``"store"``, ``"minio:9000"`` -> ``"minio:9000"``. (CDI releases after v1.65 strip the port first;
    pass ``--region`` explicitly to match such a CDI.)
    """
    match = _AWS_REGION_HOST.search(endpoint_host)
    if match is not None:
        return match.group(1)
    return endpoint_host.split(".", 1)[0]


def uri_encode(text: str, *, keep_slash: bool = False) -> str:
    """Percent-encode ``text`` the way SigV4 requires: everything but ``A-Za-z0-9-_.~`` (and ``/`` if kept).

    Why not ``urllib.parse.quote``'s defaults: they keep ``/`` always, and S3 signs the key's path with
    ``/`` kept but every query name and value with ``/`` encoded; a mismatch is a SignatureDoesNotMatch.
    """
    return quote(text, safe="/" if keep_slash else "")


def canonical_query(params: Iterable[tuple[str, str]]) -> str:
    """The canonical query string (also sent as the URL's query, so both always agree): sorted, encoded."""
    encoded = sorted((uri_encode(name), uri_encode(value)) for name, value in params)
    return "&".join(f"{name}={value}" for name, value in encoded)


def canonical_request(
    method: str, path: str, query: str, headers: Mapping[str, str], payload_sha256: str
) -> tuple[str, str]:
    """Return (canonical request, signed header names) for an already encoded ``path`` and ``query``.

    Every header in ``headers`` is signed: names lower-cased and sorted, values trimmed with inner runs of
    spaces collapsed, as SigV4 defines.
    """
    canonical_headers = sorted(
        (name.strip().lower(), " ".join(value.strip().split())) for name, value in headers.items()
    )
    signed = ";".join(name for name, _ in canonical_headers)
    lines = "".join(f"{name}:{value}\n" for name, value in canonical_headers)
    return f"{method}\n{path}\n{query}\n{lines}\n{signed}\n{payload_sha256}", signed


def signing_key(secret_key: str, day: str, region: str, service: str = "s3") -> bytes:
    """Derive SigV4's signing key for one day (``YYYYMMDD``), region and service."""
    key = f"AWS4{secret_key}".encode()
    for part in (day, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def authorization(
    *,
    method: str,
    path: str,
    query: str,
    headers: Mapping[str, str],
    payload_sha256: str,
    access_key: str,
    secret_key: str,
    region: str,
    amz_date: str,
    service: str = "s3",
) -> str:
    """The ``Authorization`` header of a request: pure, so tests can hold it to AWS's published examples.

    ``headers`` must include ``host``, ``x-amz-date`` (equal to ``amz_date``) and ``x-amz-content-sha256``;
    all of them are signed.
    """
    request, signed = canonical_request(method, path, query, headers, payload_sha256)
    scope = f"{amz_date[:8]}/{region}/{service}/aws4_request"
    to_sign = f"{_ALGORITHM}\n{amz_date}\n{scope}\n{hashlib.sha256(request.encode()).hexdigest()}"
    key = signing_key(secret_key, amz_date[:8], region, service)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    return f"{_ALGORITHM} Credential={access_key}/{scope},SignedHeaders={signed},Signature={signature}"


@dataclass(frozen=True)
class _Upload:
    """One multipart upload in progress."""

    bucket: str
    key: str
    upload_id: str
    size: int
    part_bytes: int

    @property
    def count(self) -> int:
        return -(-self.size // self.part_bytes)

    def part_size(self, number: int) -> int:
        return min(self.part_bytes, self.size - (number - 1) * self.part_bytes)


@dataclass(frozen=True)
class _Response:
    status: int
    headers: http.client.HTTPMessage
    body: bytes


def _local_name(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _xml_text(body: bytes, name: str) -> str | None:
    """The text of the first element called ``name`` (any namespace) in an XML body, or None."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        return None
    for element in root.iter():
        if _local_name(element.tag) == name:
            return (element.text or "").strip()
    return None


def _error_from(label: str, response: _Response) -> S3Error:
    """The S3Error for an error answer: its status, and the XML body's ``Code`` and ``Message`` if any."""
    code = _xml_text(response.body, "Code") or ""
    message = _xml_text(response.body, "Message") or ""
    if not code:
        try:
            code = HTTPStatus(response.status).phrase.replace(" ", "")
        except ValueError:
            code = "Error"
        if response.body and not message:
            message = " ".join(response.body[:200].decode("utf-8", "replace").split())
    text = f"{label}: {response.status} {code}" + (f": {message}" if message else "")
    return S3Error(text, status=response.status, code=code)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


class S3Client:
    """Signed, path-style requests to one S3 endpoint, over one reused connection.

    ``endpoint`` is ``http://host[:port]`` or ``https://host[:port]``. With ``ca_file`` an https endpoint is
    trusted if it chains to that CA or to a system CA (CDI's importer trusts the same union). A request that
    cannot reach the store, or gets a 5xx, is tried ``attempts`` times in all; a 4xx is final.
    """

    def __init__(
        self,
        endpoint: str,
        region: str,
        access_key: str,
        secret_key: str,
        *,
        timeout_s: float = 60,
        ca_file: str | None = None,
        attempts: int = 3,
    ) -> None:
        parts = urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"S3 endpoint {endpoint!r} must be http://host[:port] or https://host[:port]")
        if parts.path not in ("", "/") or parts.query or parts.fragment or "@" in parts.netloc:
            raise ValueError(f"S3 endpoint {endpoint!r} must be only a scheme, host and port (no path)")
        try:
            port = parts.port
        except ValueError:
            raise ValueError(f"S3 endpoint {endpoint!r} has an invalid port") from None
        if not region:
            raise ValueError("the S3 signing region must not be empty")
        self.endpoint = f"{parts.scheme}://{parts.netloc}"
        self.region = region
        self._https = parts.scheme == "https"
        self._hostname = parts.hostname
        self._port = port
        self._host_header = parts.netloc
        self._access_key = access_key
        self._secret_key = secret_key
        self._timeout_s = timeout_s
        self._attempts = max(1, attempts)
        self._context: ssl.SSLContext | None = None
        if self._https:
            self._context = ssl.create_default_context()
            if ca_file:
                self._context.load_verify_locations(cafile=ca_file)
        self._connection: http.client.HTTPConnection | None = None

    def __enter__(self) -> S3Client:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (the next request opens a new one)."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def create_bucket(self, bucket: str) -> None:
        """Create ``bucket``; the tests' stores start empty (a site's bucket exists before any backup)."""
        body = b""
        if self.region != "us-east-1":
            root = ET.Element("CreateBucketConfiguration", xmlns="http://s3.amazonaws.com/doc/2006-03-01/")
            ET.SubElement(root, "LocationConstraint").text = self.region
            body = ET.tostring(root)
        self._request("PUT", bucket, "", body=body, label=f"PUT {bucket}")

    def put_object(self, bucket: str, key: str, data: bytes) -> None:
        """Store ``data`` as one object in one request (small objects; disks go through upload_stream)."""
        self._request("PUT", bucket, key, body=data)

    def get_object(self, bucket: str, key: str) -> bytes:
        """Read a whole object into memory: for tests and small objects only."""
        return self._request("GET", bucket, key).body

    def head_object(self, bucket: str, key: str) -> int:
        """Return the object's size in bytes; raises S3Error (404 NotFound) when it does not exist."""
        response = self._request("HEAD", bucket, key)
        length = response.headers.get("Content-Length")
        if length is None or not length.isdigit():
            raise S3Error(f"HEAD {bucket}/{key}: the answer has no Content-Length", status=response.status)
        return int(length)

    def delete_object(self, bucket: str, key: str) -> None:
        """Delete an object; S3 answers 204 whether or not it existed, and so does this."""
        self._request("DELETE", bucket, key, expect=(200, 204))

    def upload_stream(
        self,
        bucket: str,
        key: str,
        reader: BinaryIO,
        size: int,
        *,
        part_bytes: int,
        on_part: Callable[[int], None] | None = None,
    ) -> str:
        """Upload exactly ``size`` bytes of ``reader`` as one object; return the sha256 hex of those bytes.

        Why multipart: a disk is larger than any single PUT should be, a failed part is retried alone, and
        memory stays at two parts (one being sent while the next is read and hashed on a helper thread).
        Each part is signed with its own sha256, and the whole stream's sha256 is computed on the same read,
        so the digest recorded for a backup is of the bytes that were sent. ``part_bytes`` grows (to a whole
        MiB) when ``size`` would need more than 10,000 parts. ``on_part`` gets each part's size once the
        store has it. Any failure aborts the upload so the store keeps no orphaned parts; a zero-byte
        stream is one ``put_object``. Raises S3Error, OSError (reading) or EOFError (``reader`` ended early).
        """
        if size < 0:
            raise ValueError(f"size must not be negative, got {size}")
        if not MIN_PART_BYTES <= part_bytes <= MAX_PART_BYTES:
            raise ValueError(f"part_bytes must be within [{MIN_PART_BYTES}, {MAX_PART_BYTES}]: {part_bytes}")
        if size == 0:
            self.put_object(bucket, key, b"")
            return EMPTY_SHA256
        needed = -(-size // MAX_PARTS)
        part_bytes = max(part_bytes, -(-needed // (1 << 20)) << 20)
        label = f"POST {bucket}/{key} (create)"
        created = self._request("POST", bucket, key, query=[("uploads", "")], label=label)
        upload_id = _xml_text(created.body, "UploadId")
        if not upload_id:
            raise S3Error(f"{label}: the answer names no UploadId", status=created.status)
        upload = _Upload(bucket, key, upload_id, size, part_bytes)
        whole = hashlib.sha256()
        try:
            self._complete(upload, self._upload_parts(upload, reader, whole, on_part))
        except BaseException as failure:
            try:
                self._request(
                    "DELETE",
                    bucket,
                    key,
                    query=[("uploadId", upload_id)],
                    expect=(200, 204),
                    label=f"DELETE {bucket}/{key} (abort)",
                )
            except S3Error as abort_failure:
                failure.add_note(f"aborting the multipart upload also failed: {abort_failure}")
            raise
        return whole.hexdigest()

    def _upload_parts(
        self,
        upload: _Upload,
        reader: BinaryIO,
        whole: hashlib._Hash,
        on_part: Callable[[int], None] | None,
    ) -> list[str]:
        """Send parts 1..count in order while the helper thread reads and hashes the next one."""
        etags: list[str] = []
        count = upload.count
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="s3-part-reader") as pool:
            pending: Future[tuple[bytes, str]] = pool.submit(
                _read_part, reader, 0, upload.part_size(1), whole
            )
            try:
                for number in range(1, count + 1):
                    data, digest = pending.result()
                    if number < count:
                        offset = number * upload.part_bytes
                        pending = pool.submit(_read_part, reader, offset, upload.part_size(number + 1), whole)
                    label = f"PUT {upload.bucket}/{upload.key} (part {number} of {count})"
                    response = self._request(
                        "PUT",
                        upload.bucket,
                        upload.key,
                        query=[("partNumber", str(number)), ("uploadId", upload.upload_id)],
                        body=data,
                        payload_sha256=digest,
                        label=label,
                    )
                    etag = response.headers.get("ETag")
                    if not etag:
                        raise S3Error(f"{label}: the answer has no ETag", status=response.status)
                    etags.append(etag)
                    sent = len(data)
                    del data  # freed before the part after next is read: two parts in memory at most
                    if on_part is not None:
                        on_part(sent)
            finally:
                pending.cancel()
        return etags

    def _complete(self, upload: _Upload, etags: Sequence[str]) -> None:
        root = ET.Element("CompleteMultipartUpload", xmlns="http://s3.amazonaws.com/doc/2006-03-01/")
        for number, etag in enumerate(etags, start=1):
            part = ET.SubElement(root, "Part")
            ET.SubElement(part, "PartNumber").text = str(number)
            ET.SubElement(part, "ETag").text = etag
        label = f"POST {upload.bucket}/{upload.key} (complete)"
        response = self._request(
            "POST",
            upload.bucket,
            upload.key,
            query=[("uploadId", upload.upload_id)],
            body=ET.tostring(root),
            label=label,
        )
        # S3 may answer 200 and still report a failure in the body (its docs: "CompleteMultipartUpload").
        if _xml_text(response.body, "Code") is not None:
            raise _error_from(label, response)

    def _request(
        self,
        method: str,
        bucket: str,
        key: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: bytes = b"",
        payload_sha256: str | None = None,
        expect: Sequence[int] = (200,),
        label: str = "",
    ) -> _Response:
        """Sign and send one request, retrying unreachable stores and 5xx answers; raise S3Error otherwise."""
        label = label or f"{method} {bucket}/{key}"
        if not bucket or "/" in bucket:
            raise ValueError(f"{label}: invalid bucket name {bucket!r}")
        path = f"/{uri_encode(bucket)}" + (f"/{uri_encode(key, keep_slash=True)}" if key else "")
        query_text = canonical_query(query)
        digest = payload_sha256 or hashlib.sha256(body).hexdigest()
        failure = S3Error(f"{label}: not attempted")
        for attempt in range(1, self._attempts + 1):
            try:
                response = self._send(method, path, query_text, body, digest)
            except ssl.SSLCertVerificationError as exc:
                self.close()
                raise S3Error(
                    f"{label}: TLS verification of {self.endpoint} failed: {exc.verify_message}; "
                    "pass the store's CA with --ca-file"
                ) from exc
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                failure = S3Error(f"{label}: cannot reach {self.endpoint}: {_describe(exc)}")
                failure.__cause__ = exc
            else:
                if response.status in expect:
                    return response
                failure = _error_from(label, response)
                if response.status not in _RETRY_STATUSES:
                    raise failure
            if attempt < self._attempts:
                time.sleep(0.5 * 2 ** (attempt - 1))
        raise failure

    def _send(self, method: str, path: str, query: str, body: bytes, payload_sha256: str) -> _Response:
        """One signed exchange; the body goes in 1 MiB sends so the socket timeout bounds each, not a part."""
        amz_date = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        signed = {"host": self._host_header, "x-amz-content-sha256": payload_sha256, "x-amz-date": amz_date}
        header = authorization(
            method=method,
            path=path,
            query=query,
            headers=signed,
            payload_sha256=payload_sha256,
            access_key=self._access_key,
            secret_key=self._secret_key,
            region=self.region,
            amz_date=amz_date,
            service="s3",
        )
        connection = self._open()
        connection.putrequest(
            method, f"{path}?{query}" if query else path, skip_host=True, skip_accept_encoding=True
        )
        for name, value in signed.items():
            connection.putheader(name, value)
        connection.putheader("authorization", header)
        if body or method in ("PUT", "POST"):
            connection.putheader("content-length", str(len(body)))
        connection.endheaders()
        view = memoryview(body)
        try:
            for offset in range(0, len(view), _SEND_CHUNK_BYTES):
                connection.send(view[offset : offset + _SEND_CHUNK_BYTES])
        except (BrokenPipeError, ConnectionResetError):
            # A store may refuse a request (403, 400) before reading its body and close the connection; its
            # answer, when it sent one, says more than the broken pipe does.
            pass
        answer = connection.getresponse()
        data = answer.read()  # empty for HEAD: http.client knows it has no body
        if answer.status >= 300 and len(data) > _ERROR_BODY_LIMIT:
            data = data[:_ERROR_BODY_LIMIT]
        return _Response(answer.status, answer.headers, data)

    def _open(self) -> http.client.HTTPConnection:
        if self._connection is None:
            if self._https:
                self._connection = http.client.HTTPSConnection(
                    self._hostname, self._port, timeout=self._timeout_s, context=self._context
                )
            else:
                self._connection = http.client.HTTPConnection(
                    self._hostname, self._port, timeout=self._timeout_s
                )
        return self._connection


def _read_part(reader: BinaryIO, offset: int, count: int, whole: hashlib._Hash) -> tuple[bytes, str]:
    """Read exactly ``count`` bytes, add them to the stream's digest and return them with their own sha256.

    Runs on the upload's helper thread, one part at a time and in order, so ``whole`` sees the stream in
    order; sha256 releases the GIL on large buffers, so hashing overlaps the main thread's sending.
    """
    data = reader.read(count)
    if len(data) < count:
        chunks = [data]
        got = len(data)
        while got < count:
            more = reader.read(count - got)
            if not more:
                raise EOFError(
                    f"the stream ended after {offset + got} bytes, {count - got} short of a part's end"
                )
            chunks.append(more)
            got += len(more)
        data = b"".join(chunks)
    whole.update(data)
    return data, hashlib.sha256(data).hexdigest()
