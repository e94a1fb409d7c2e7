"""The backup copier's S3 client: SigV4 against AWS's published examples, CDI's region rule, and a real store.

The signing tests hold ``authorization`` to the four worked examples of AWS's "Signature Calculations for
the Authorization Header" page for S3 (GET Object with a Range, PUT Object with ``$`` in the key, GET
Bucket Lifecycle, GET Bucket with query parameters). The rest runs against the Versity S3 gateway
(tests/unit/s3_server.py), which checks each request's signature, region and payload sha256.
"""

from __future__ import annotations

import hashlib
import io
import os
import socket

import pytest

from tests.unit import s3_server
from tests.unit.s3_server import bucket_fixture, gateway_fixture  # noqa: F401 (shared fixtures)
from uds_vm_operator.backup.s3 import (
    EMPTY_SHA256,
    MIN_PART_BYTES,
    S3Client,
    S3Error,
    authorization,
    canonical_query,
    canonical_request,
    region_of,
    uri_encode,
)

AWS_ACCESS_KEY = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
AWS_DATE = "20130524T000000Z"
AWS_HOST = "examplebucket.s3.amazonaws.com"
AWS_SCOPE = f"Credential={AWS_ACCESS_KEY}/20130524/us-east-1/s3/aws4_request"
MIB = 1 << 20


def aws_example(method: str, path: str, query: str, headers: dict[str, str], payload_sha256: str) -> str:
    return authorization(
        method=method,
        path=path,
        query=query,
        headers={"Host": AWS_HOST, "x-amz-date": AWS_DATE, "x-amz-content-sha256": payload_sha256, **headers},
        payload_sha256=payload_sha256,
        access_key=AWS_ACCESS_KEY,
        secret_key=AWS_SECRET_KEY,
        region="us-east-1",
        amz_date=AWS_DATE,
    )


def test_get_object_example_canonical_request_and_signature() -> None:
    headers = {
        "Host": AWS_HOST,
        "Range": "bytes=0-9",
        "x-amz-content-sha256": EMPTY_SHA256,
        "x-amz-date": AWS_DATE,
    }
    request, signed = canonical_request("GET", "/test.txt", "", headers, EMPTY_SHA256)
    assert request == (
        "GET\n/test.txt\n\n"
        f"host:{AWS_HOST}\nrange:bytes=0-9\nx-amz-content-sha256:{EMPTY_SHA256}\nx-amz-date:{AWS_DATE}\n\n"
        f"host;range;x-amz-content-sha256;x-amz-date\n{EMPTY_SHA256}"
    )
    assert signed == "host;range;x-amz-content-sha256;x-amz-date"
    # The page's hash of this canonical request (line 4 of its StringToSign).
    assert (
        hashlib.sha256(request.encode()).hexdigest()
        == "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972"
    )
    assert aws_example("GET", "/test.txt", "", {"Range": "bytes=0-9"}, EMPTY_SHA256) == (
        f"AWS4-HMAC-SHA256 {AWS_SCOPE},SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
    )


def test_put_object_example_encodes_the_key_and_signs_the_payload() -> None:
    payload = hashlib.sha256(b"Welcome to Amazon S3.").hexdigest()
    path = "/" + uri_encode("test$file.text", keep_slash=True)
    assert path == "/test%24file.text"
    headers = {"Date": "Fri, 24 May 2013 00:00:00 GMT", "x-amz-storage-class": "REDUCED_REDUNDANCY"}
    assert aws_example("PUT", path, "", headers, payload).endswith(
        "SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class,"
        "Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"
    )


def test_query_examples_sort_and_encode_parameters() -> None:
    lifecycle = canonical_query([("lifecycle", "")])
    assert lifecycle == "lifecycle="
    assert aws_example("GET", "/", lifecycle, {}, EMPTY_SHA256).endswith(
        "Signature=fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"
    )
    listing = canonical_query([("prefix", "J"), ("max-keys", "2")])
    assert listing == "max-keys=2&prefix=J"
    assert aws_example("GET", "/", listing, {}, EMPTY_SHA256).endswith(
        "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"
    )


@pytest.mark.parametrize(
    ("text", "keep_slash", "encoded"),
    [
        ("vm/ns/2026-01-02T03:04:05Z/root.img", True, "vm/ns/2026-01-02T03%3A04%3A05Z/root.img"),
        ("a b+c", True, "a%20b%2Bc"),
        ("x~y_z.w-v", False, "x~y_z.w-v"),
        ("a/b=c&d", False, "a%2Fb%3Dc%26d"),
        ("é*", True, "%C3%A9%2A"),
    ],
)
def test_uri_encode_keeps_only_unreserved_characters(text: str, keep_slash: bool, encoded: str) -> None:
    assert uri_encode(text, keep_slash=keep_slash) == encoded


@pytest.mark.parametrize(
    ("host", "region"),
    [
        ("s3.us-west-2.amazonaws.com", "us-west-2"),
        ("s3.eu-central-1.amazonaws.com:443", "eu-central-1"),
        ("bucket.s3.ap-south-1.amazonaws.com", "ap-south-1"),
        ("s3.amazonaws.com", "s3"),  # the pattern needs a label between "s3." and ".amazonaws.com"
        ("10.244.0.1:7070", "10"),
        ("127.0.0.1:7070", "127"),
        ("store.backup.svc:7070", "store"),
        ("store.backup.svc.cluster.local", "store"),
        ("minio:9000", "minio:9000"),  # no dot: CDI v1.65 keeps the port
        ("minio", "minio"),
    ],
)
def test_region_of_follows_cdi_v1_65(host: str, region: str) -> None:
    assert region_of(host) == region


@pytest.mark.parametrize(
    "endpoint",
    ["ftp://store:21", "http://", "store:9000", "http://store:9000/prefix", "http://u:p@store:9000"],
)
def test_client_refuses_an_endpoint_that_is_not_scheme_host_port(endpoint: str) -> None:
    with pytest.raises(ValueError, match="S3 endpoint"):
        S3Client(endpoint, "us-east-1", "ak", "sk")


# ---- against the real gateway ----


def test_multipart_upload_round_trips_with_the_stream_sha256(gateway: s3_server.Gateway, bucket: str) -> None:
    data = os.urandom(20 * MIB + 12_345)
    parts: list[int] = []
    key = "vm/default/2026/root disk.img"
    with gateway.client() as client:
        digest = client.upload_stream(
            bucket, key, io.BytesIO(data), len(data), part_bytes=MIN_PART_BYTES, on_part=parts.append
        )
        assert digest == hashlib.sha256(data).hexdigest()
        assert parts == [5 * MIB] * 4 + [12_345]
        assert client.head_object(bucket, key) == len(data)
        assert client.get_object(bucket, key) == data
    assert gateway.object_file(bucket, key).read_bytes() == data


def test_a_stream_shorter_than_its_size_aborts_the_upload(gateway: s3_server.Gateway, bucket: str) -> None:
    data = os.urandom(7 * MIB)
    with gateway.client() as client, pytest.raises(EOFError, match="ended after 7340032 bytes"):
        client.upload_stream(bucket, "short.img", io.BytesIO(data), 11 * MIB, part_bytes=MIN_PART_BYTES)
    # The first part had reached the store; the abort removed it with the upload.
    assert [p for p in (gateway.root / bucket).rglob("*") if p.is_file()] == []


def test_an_empty_stream_is_one_empty_object(gateway: s3_server.Gateway, bucket: str) -> None:
    with gateway.client() as client:
        assert client.upload_stream(bucket, "empty.img", io.BytesIO(), 0, part_bytes=MIN_PART_BYTES) == (
            EMPTY_SHA256
        )
        assert client.head_object(bucket, "empty.img") == 0
    assert gateway.object_file(bucket, "empty.img").read_bytes() == b""


def test_keys_with_reserved_characters_are_signed_as_sent(gateway: s3_server.Gateway, bucket: str) -> None:
    key = "dir a/é+x~y*z=1&2.bin"
    with gateway.client() as client:
        client.put_object(bucket, key, b"hello")
        assert client.get_object(bucket, key) == b"hello"
    assert gateway.object_file(bucket, key).read_bytes() == b"hello"


def test_delete_then_head_is_404_and_deleting_again_is_fine(gateway: s3_server.Gateway, bucket: str) -> None:
    with gateway.client() as client:
        client.put_object(bucket, "old.img", b"x" * 10)
        client.delete_object(bucket, "old.img")
        client.delete_object(bucket, "old.img")
        with pytest.raises(S3Error) as refused:
            client.head_object(bucket, "old.img")
    assert refused.value.status == 404
    assert str(refused.value).startswith(f"HEAD {bucket}/old.img: 404")


def test_a_wrong_secret_is_refused_with_the_stores_code(gateway: s3_server.Gateway, bucket: str) -> None:
    data = os.urandom(6 * MIB)
    with gateway.client(secret_key="not-the-secret") as client, pytest.raises(S3Error) as refused:
        client.upload_stream(bucket, "denied.img", io.BytesIO(data), len(data), part_bytes=MIN_PART_BYTES)
    assert refused.value.status == 403
    assert refused.value.code == "SignatureDoesNotMatch"
    assert str(refused.value).startswith(f"POST {bucket}/denied.img (create): 403 SignatureDoesNotMatch: ")
    assert not gateway.object_file(bucket, "denied.img").exists()


def test_the_store_checks_the_payload_hash_that_was_signed(gateway: s3_server.Gateway, bucket: str) -> None:
    """The judge can fail: a body whose sha256 differs from the signed one is refused."""
    with gateway.client() as client, pytest.raises(S3Error) as refused:
        client._request("PUT", bucket, "tampered", body=b"abc", payload_sha256="0" * 64)
    assert refused.value.code == "XAmzContentSHA256Mismatch"


def test_another_signing_region_is_refused(gateway: s3_server.Gateway, bucket: str) -> None:
    client = S3Client(gateway.endpoint, "us-east-1", s3_server.ACCESS_KEY, s3_server.SECRET_KEY)
    with client, pytest.raises(S3Error) as refused:
        client.get_object(bucket, "anything")
    assert refused.value.status == 400
    assert "region" in str(refused.value)


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_unreachable_store_names_the_endpoint() -> None:
    port = closed_port()
    client = S3Client(f"http://127.0.0.1:{port}", "127", "a", "s", attempts=1)
    with client, pytest.raises(S3Error, match=rf"PUT b/k: cannot reach http://127.0.0.1:{port}: ") as refused:
        client.put_object("b", "k", b"x")
    assert refused.value.status is None
