"""verify-disk on real files: exactly the first virtual_size bytes decide the verdict."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from uds_vm_operator.verify import VerifyResult, hash_prefix, verify_disk
from uds_vm_operator.verify.errors import DiskTooSmallError

VIRTUAL_SIZE = 3 * 1024 * 1024 + 513  # not a multiple of any buffer size, so the last chunk is short
SMALL_BUFFER = 64 * 1024  # many chunks, so flips land on chunk boundaries too


def sha256_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def image_bytes() -> bytes:
    return os.urandom(VIRTUAL_SIZE)


def write(tmp_path: Path, data: bytes, name: str = "disk.img") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_raw_image_matches_its_own_digest(tmp_path: Path, image_bytes: bytes) -> None:
    disk = write(tmp_path, image_bytes)
    result = verify_disk(str(disk), VIRTUAL_SIZE, sha256_of(image_bytes), buffer_bytes=SMALL_BUFFER)
    assert result == VerifyResult("match", sha256_of(image_bytes), sha256_of(image_bytes), VIRTUAL_SIZE)
    assert result.exit_code == 0


@pytest.mark.parametrize(
    "position",
    [0, 1, SMALL_BUFFER - 1, SMALL_BUFFER, VIRTUAL_SIZE // 2, VIRTUAL_SIZE - 2, VIRTUAL_SIZE - 1],
    ids=lambda p: f"byte{p}",
)
def test_one_flipped_byte_anywhere_is_a_mismatch(tmp_path: Path, image_bytes: bytes, position: int) -> None:
    tampered = bytearray(image_bytes)
    tampered[position] ^= 0x01
    disk = write(tmp_path, bytes(tampered))
    result = verify_disk(str(disk), VIRTUAL_SIZE, sha256_of(image_bytes), buffer_bytes=SMALL_BUFFER)
    assert result.result == "mismatch"
    assert result.exit_code == 1
    assert result.expected == sha256_of(image_bytes)
    assert result.actual == sha256_of(bytes(tampered))
    assert result.bytes == VIRTUAL_SIZE


def test_flip_in_the_last_byte_with_the_default_buffer(tmp_path: Path, image_bytes: bytes) -> None:
    tampered = bytearray(image_bytes)
    tampered[-1] ^= 0x80
    disk = write(tmp_path, bytes(tampered))
    assert verify_disk(str(disk), VIRTUAL_SIZE, sha256_of(image_bytes)).result == "mismatch"


def test_bytes_beyond_the_virtual_size_are_ignored(tmp_path: Path, image_bytes: bytes) -> None:
    # CDI grows disk.img to fill the PVC; whatever lies after the image must not change the verdict.
    padding = os.urandom(100_000)
    disk = write(tmp_path, image_bytes + padding)
    result = verify_disk(str(disk), VIRTUAL_SIZE, sha256_of(image_bytes), buffer_bytes=SMALL_BUFFER)
    assert result.result == "match"
    assert result.bytes == VIRTUAL_SIZE


def test_block_device_sized_sparse_disk_hashes_only_the_image(tmp_path: Path, image_bytes: bytes) -> None:
    disk = write(tmp_path, image_bytes)
    with disk.open("r+b") as handle:
        handle.truncate(8 << 30)  # 8 GiB, sparse: like a block PVC much larger than the image
    hashed: list[int] = []
    result = verify_disk(str(disk), VIRTUAL_SIZE, sha256_of(image_bytes), on_progress=hashed.append)
    assert result.result == "match"
    assert sum(hashed) == VIRTUAL_SIZE


def test_a_mismatch_hidden_after_padding_is_still_found(tmp_path: Path, image_bytes: bytes) -> None:
    tampered = bytearray(image_bytes)
    tampered[-1] ^= 0xFF
    disk = write(tmp_path, bytes(tampered) + bytes(4096))
    result = verify_disk(str(disk), VIRTUAL_SIZE, sha256_of(image_bytes), buffer_bytes=SMALL_BUFFER)
    assert result.result == "mismatch"


def test_disk_shorter_than_the_virtual_size_is_an_error_not_a_mismatch(
    tmp_path: Path, image_bytes: bytes
) -> None:
    disk = write(tmp_path, image_bytes[:-1])
    result = verify_disk(str(disk), VIRTUAL_SIZE, sha256_of(image_bytes))
    assert result.result == "error"
    assert result.exit_code == 2
    assert result.actual is None
    assert result.message is not None
    assert f"holds {VIRTUAL_SIZE - 1} bytes" in result.message
    assert "virtual size" in result.message


def test_disk_that_shrinks_while_being_read_is_an_error(tmp_path: Path, image_bytes: bytes) -> None:
    disk = write(tmp_path, image_bytes)

    def shrink_after_first_chunk(_count: int) -> None:
        os.truncate(disk, SMALL_BUFFER * 2)

    with pytest.raises(DiskTooSmallError, match="ended after"):
        hash_prefix(
            str(disk), VIRTUAL_SIZE, "sha256", buffer_bytes=SMALL_BUFFER, on_progress=shrink_after_first_chunk
        )


def test_sha512_digests_are_supported(tmp_path: Path, image_bytes: bytes) -> None:
    disk = write(tmp_path, image_bytes)
    expected = "sha512:" + hashlib.sha512(image_bytes).hexdigest()
    result = verify_disk(str(disk), VIRTUAL_SIZE, expected)
    assert result.result == "match"
    assert result.actual == expected


def test_digest_is_normalised_before_comparing(tmp_path: Path, image_bytes: bytes) -> None:
    disk = write(tmp_path, image_bytes)
    shouting = "SHA256:" + hashlib.sha256(image_bytes).hexdigest().upper() + "  "
    result = verify_disk(str(disk), VIRTUAL_SIZE, shouting)
    assert result.result == "match"
    assert result.expected == sha256_of(image_bytes)


@pytest.mark.parametrize(
    ("expected", "fragment"),
    [
        ("sha256:abc", "exactly 64 hex digits"),
        ("md5:" + "0" * 32, "sha256:<64 hex digits>"),
        ("0" * 64, "sha256:<64 hex digits>"),
        ("sha256:" + "g" * 64, "exactly 64 hex digits"),
    ],
)
def test_malformed_expected_digest_is_an_error(
    tmp_path: Path, image_bytes: bytes, expected: str, fragment: str
) -> None:
    disk = write(tmp_path, image_bytes)
    result = verify_disk(str(disk), VIRTUAL_SIZE, expected)
    assert result.result == "error"
    assert result.message is not None and fragment in result.message


def test_missing_disk_is_an_error_naming_the_path(tmp_path: Path) -> None:
    result = verify_disk(str(tmp_path / "absent.img"), 10, "sha256:" + "0" * 64)
    assert result.result == "error"
    assert result.message is not None
    assert "absent.img" in result.message and "mounted" in result.message


def test_a_directory_is_not_a_disk(tmp_path: Path) -> None:
    result = verify_disk(str(tmp_path), 10, "sha256:" + "0" * 64)
    assert result.result == "error"
    assert result.message is not None and "neither a regular file nor a block device" in result.message


def test_non_positive_virtual_size_is_an_error(tmp_path: Path, image_bytes: bytes) -> None:
    disk = write(tmp_path, image_bytes)
    result = verify_disk(str(disk), 0, sha256_of(image_bytes))
    assert result.result == "error"
