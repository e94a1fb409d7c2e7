"""The verifier's termination-message document: small, strict, round-trippable."""

from __future__ import annotations

import json

import pytest

from uds_vm_operator.verify import VerifyResult, parse_digest, parse_result
from uds_vm_operator.verify.errors import DigestFormatError
from uds_vm_operator.verify.result import TERMINATION_MESSAGE_LIMIT

A = "sha256:" + "a" * 64
B = "sha256:" + "b" * 64


@pytest.mark.parametrize(
    "result",
    [
        VerifyResult("match", A, A, 10),
        VerifyResult("mismatch", A, B, 10),
        VerifyResult("error", A, None, 0, "cannot open /disk/disk.img"),
    ],
)
def test_round_trip(result: VerifyResult) -> None:
    assert parse_result(result.to_json()) == result


def test_document_has_the_contract_keys() -> None:
    doc = json.loads(VerifyResult("mismatch", A, B, 7).to_json())
    assert doc == {"result": "mismatch", "expected": A, "actual": B, "bytes": 7}


def test_long_error_message_is_cut_to_fit_a_termination_message() -> None:
    result = VerifyResult("error", A, None, 0, "x" * 10_000)
    text = result.to_json()
    assert len(text.encode()) <= TERMINATION_MESSAGE_LIMIT
    parsed = parse_result(text)
    assert parsed.message is not None and parsed.message.endswith("...")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        "[]",
        json.dumps({"result": "ok", "expected": A, "actual": A, "bytes": 1}),
        json.dumps({"result": "match", "expected": A, "actual": B, "bytes": 1}),
        json.dumps({"result": "match", "expected": A, "actual": A, "bytes": -1}),
        json.dumps({"result": "match", "expected": A, "actual": A, "bytes": True}),
        json.dumps({"result": "mismatch", "actual": B, "bytes": 1}),
    ],
)
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_result(text)


def test_parse_digest_canonical_form() -> None:
    assert str(parse_digest(" SHA512:" + "C" * 128)) == "sha512:" + "c" * 128


def test_digest_format_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse_digest("sha1:" + "0" * 40)
    with pytest.raises(DigestFormatError):
        parse_digest("sha256")
