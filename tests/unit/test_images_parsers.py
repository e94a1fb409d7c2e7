"""Format parsers on synthetic bytes: sizes, air-gap references, content digests and error classes."""

from __future__ import annotations

import hashlib
import struct

import pytest

from tests.unit import image_builders as build
from uds_vm_operator.images import (
    AirGapViolation,
    CorruptImageError,
    ImageError,
    TruncatedImageError,
    UnsupportedImageError,
)
from uds_vm_operator.images._segments import Literal, ZeroRun, segments_length
from uds_vm_operator.images._source import BytesSource
from uds_vm_operator.images.detect import inspect_source
from uds_vm_operator.images.digest import hash_segments
from uds_vm_operator.images.survey import content_segments

CLUSTER = 1 << 16


def inspect(data: bytes):  # type: ignore[no-untyped-def]
    return inspect_source(BytesSource(data, "test.img"))


def content_digest(data: bytes) -> str:
    source = BytesSource(data, "test.img")
    info = inspect_source(source)
    segments = content_segments(source, info)
    assert segments is not None
    return hash_segments(segments, source)["sha256"].hexdigest()


# ----------------------------------------------------------------------------------------------- qcow2


@pytest.mark.parametrize("version", [2, 3])
def test_qcow2_virtual_size_and_details(version: int) -> None:
    info = inspect(build.qcow2(size=(3 << 20) + 7, version=version))
    assert info.format == "qcow2"
    assert info.virtual_size == (3 << 20)  # qemu reports whole sectors
    assert info.details["qcow2_version"] == version
    assert info.airgap_verified


def test_qcow2_backing_file_is_named() -> None:
    info = inspect(build.qcow2(backing=b"/srv/images/base.qcow2"))
    assert [r.reference for r in info.backing_refs] == ["/srv/images/base.qcow2"]
    with pytest.raises(AirGapViolation, match=r"backing file '/srv/images/base.qcow2'") as caught:
        info.ensure_airgap_safe()
    assert caught.value.references == ["/srv/images/base.qcow2"]
    assert "\n" not in str(caught.value)


def test_qcow2_external_data_file_is_named() -> None:
    info = inspect(build.qcow2(data_file=b"disk.data", data_file_bit=True))
    assert [(r.kind, r.reference) for r in info.backing_refs] == [("external data file", "disk.data")]


def test_qcow2_data_file_bit_without_name_is_still_a_violation() -> None:
    info = inspect(build.qcow2(data_file_bit=True))
    assert info.backing_refs[0].kind == "external data file"


def test_qcow2_content_covers_every_cluster_kind() -> None:
    text = b"uds-vm-operator " * 4096
    clusters: dict[int, tuple[str, bytes | int]] = {
        0: ("data", b"\x01" * CLUSTER),
        2: ("zero", 0),
        3: ("zlib", text),
        5: ("data", b"tail"),
    }
    image = build.qcow2(size=6 * CLUSTER + 512, clusters=clusters)
    expected = b"\x01" * CLUSTER + bytes(CLUSTER) * 2 + text + bytes(CLUSTER) + b"tail".ljust(CLUSTER, b"\0")
    expected += bytes(512)
    assert content_digest(image) == hashlib.sha256(expected).hexdigest()


def test_qcow2_zstd_compressed_cluster() -> None:
    text = bytes(range(256)) * 256
    image = build.qcow2(size=2 * CLUSTER, compression_type=1, clusters={1: ("zstd", text)})
    assert inspect(image).details["compression_type"] == "zstd"
    assert content_digest(image) == hashlib.sha256(bytes(CLUSTER) + text).hexdigest()


def test_qcow2_extended_l2_subclusters() -> None:
    sub = CLUSTER // 32
    bitmap = 0b1011 | (0b0100 << 32)  # subclusters 0,1,3 allocated; 2 reads as zero
    image = build.qcow2(size=CLUSTER, extended_l2=True, clusters={0: ("sub", bitmap)})
    expected = b"\xab" * (2 * sub) + bytes(sub) + b"\xab" * sub + bytes(CLUSTER - 4 * sub)
    assert inspect(image).details["extended_l2"] is True
    assert content_digest(image) == hashlib.sha256(expected).hexdigest()


def test_qcow2_unallocated_image_is_one_zero_run() -> None:
    source = BytesSource(build.qcow2(size=1 << 20), "empty.qcow2")
    segments = list(content_segments(source, inspect_source(source)) or [])
    assert segments == [ZeroRun(1 << 20)]


def test_qcow2_compressed_cluster_corrupt_data_is_an_image_error() -> None:
    image = bytearray(build.qcow2(size=CLUSTER, clusters={0: ("zlib", b"x" * CLUSTER)}))
    image[3 * CLUSTER : 3 * CLUSTER + 16] = b"\xff" * 16
    with pytest.raises(CorruptImageError, match="compressed qcow2 cluster"):
        content_digest(bytes(image))


@pytest.mark.parametrize(
    ("offset", "fmt", "value", "error", "match"),
    [
        (4, ">I", 7, UnsupportedImageError, "version 7"),
        (20, ">I", 30, CorruptImageError, "cluster_bits"),
        (24, ">Q", 1 << 62, CorruptImageError, "absurd"),
        (36, ">I", 1 << 30, CorruptImageError, "L1 table"),
        (40, ">Q", 1 << 40, CorruptImageError, "L1 table"),
        (72, ">Q", 1 << 40, UnsupportedImageError, "unknown incompatible"),
        (72, ">Q", 2, CorruptImageError, "marked corrupt"),
        (100, ">I", 4, CorruptImageError, "header length"),
    ],
)
def test_qcow2_hostile_header_fields(offset: int, fmt: str, value: int, error: type, match: str) -> None:
    image = bytearray(build.qcow2())
    struct.pack_into(fmt, image, offset, value)
    with pytest.raises(error, match=match):
        inspect(bytes(image))


def test_qcow2_truncated_header() -> None:
    with pytest.raises(TruncatedImageError, match="truncated"):
        inspect(build.qcow2()[:50])


def test_qcow2_l2_pointing_past_the_end_is_reported() -> None:
    image = bytearray(build.qcow2(size=CLUSTER, clusters={0: ("data", b"x")}))
    struct.pack_into(">Q", image, 2 * CLUSTER, (1 << 40) | (1 << 63))
    with pytest.raises(ImageError, match=r"beyond the end|truncated"):
        content_digest(bytes(image))


# ------------------------------------------------------------------------------------------------- vpc


def test_vpc_qemu_creator_uses_chs_geometry() -> None:
    info = inspect(build.vpc_dynamic(size=10 << 20, creator=b"qemu", chs=(20, 16, 63)))
    assert info.format == "vpc"
    assert info.virtual_size == 20 * 16 * 63 * 512
    assert info.details["subformat"] == "dynamic"


@pytest.mark.parametrize("creator", [b"win ", b"qem2", b"d2v ", b"CTXS", b"tap\x00"])
def test_vpc_current_size_creators(creator: bytes) -> None:
    info = inspect(build.vpc_dynamic(size=10 << 20, creator=creator, chs=(20, 16, 63)))
    assert info.virtual_size == 10 << 20


def test_vpc_max_geometry_means_current_size() -> None:
    info = inspect(build.vpc_dynamic(size=10 << 20, creator=b"vpc ", chs=(65535, 16, 255)))
    assert info.virtual_size == 10 << 20


def test_vpc_fixed_has_footer_only_at_the_end() -> None:
    data = b"\x5a" * (1 << 20) + build.vpc_footer(size=1 << 20, creator=b"win ", disk_type=2, chs=(1, 1, 1))
    info = inspect(data)
    assert (info.format, info.virtual_size, info.details["subformat"]) == ("vpc", 1 << 20, "fixed")
    assert content_digest(data) == hashlib.sha256(b"\x5a" * (1 << 20)).hexdigest()


def test_vpc_differencing_names_parent_and_locator() -> None:
    data = build.vpc_dynamic(parent_name="base.vhd", locator=".\\base.vhd", disk_type=4)
    info = inspect(data)
    refs = [r.reference for r in info.backing_refs]
    assert refs == ["base.vhd", ".\\base.vhd"]
    assert info.details["subformat"] == "differencing"


def test_vpc_bad_block_size() -> None:
    data = bytearray(build.vpc_dynamic())
    struct.pack_into(">I", data, 512 + 32, 3000)
    with pytest.raises(CorruptImageError, match="block size"):
        inspect(bytes(data))


# ------------------------------------------------------------------------------------------------ vhdx


def test_vhdx_virtual_size() -> None:
    info = inspect(build.vhdx(size=(64 << 20) + 512))
    assert (info.format, info.virtual_size, info.details["subformat"]) == (
        "vhdx",
        (64 << 20) + 512,
        "dynamic",
    )
    assert inspect(build.vhdx(fixed=True)).details["subformat"] == "fixed"


def test_vhdx_differencing_lists_every_parent_path() -> None:
    info = inspect(
        build.vhdx(
            parent_paths={
                "parent_linkage": "{83ea4c31-0000-0000-0000-000000000000}",
                "relative_path": "..\\base.vhdx",
                "absolute_win32_path": "C:\\vms\\base.vhdx",
            }
        )
    )
    assert [r.reference for r in info.backing_refs] == ["..\\base.vhdx", "C:\\vms\\base.vhdx"]
    with pytest.raises(AirGapViolation, match=r"base\.vhdx"):
        info.ensure_airgap_safe()


def test_vhdx_without_region_table() -> None:
    data = bytearray(build.vhdx())
    data[192 * 1024 : 192 * 1024 + 4] = b"xxxx"
    data[256 * 1024 : 256 * 1024 + 4] = b"xxxx"
    with pytest.raises(CorruptImageError, match="region table"):
        inspect(bytes(data))


# ------------------------------------------------------------------------------------------------ vmdk


def test_vmdk_monolithic_sparse() -> None:
    info = inspect(build.vmdk_sparse(capacity_sectors=20480))
    assert (info.format, info.virtual_size, info.details["create_type"]) == (
        "vmdk",
        20480 * 512,
        "monolithicSparse",
    )
    assert info.airgap_verified


def test_vmdk_parent_hint_is_a_violation() -> None:
    desc = build.vmdk_descriptor('parentFileNameHint="base.vmdk"', parent_cid="abcdef01")
    info = inspect(build.vmdk_sparse(descriptor=desc))
    assert [r.reference for r in info.backing_refs] == ["base.vmdk"]


def test_vmdk_parent_cid_without_hint_is_a_violation() -> None:
    info = inspect(build.vmdk_sparse(descriptor=build.vmdk_descriptor(parent_cid="abcdef01")))
    assert "CID abcdef01" in info.backing_refs[0].reference


def test_vmdk_descriptor_file_with_extents_elsewhere() -> None:
    text = build.vmdk_descriptor(
        create_type="twoGbMaxExtentSparse",
        extents='RW 4192256 SPARSE "d-s001.vmdk"\nRW 100 SPARSE "d-s002.vmdk"\nRW 8 ZERO',
    )
    info = inspect(text.encode())
    assert info.virtual_size == (4192256 + 100 + 8) * 512
    assert [r.reference for r in info.backing_refs] == ["d-s001.vmdk", "d-s002.vmdk"]


def test_vmdk_bad_grain() -> None:
    data = bytearray(build.vmdk_sparse())
    struct.pack_into("<Q", data, 20, 3)
    with pytest.raises(CorruptImageError, match="grain"):
        inspect(bytes(data))


def test_vmdk_cowd_is_unsupported() -> None:
    with pytest.raises(UnsupportedImageError, match="COWD"):
        inspect(b"COWD" + bytes(2044))


# ------------------------------------------------------------------------------------------- iso, raw


def test_iso_label_and_udf_bridge() -> None:
    info = inspect(build.iso("CCCOMA_X64FRE_EN-US_DV9", udf=True))
    assert (info.format, info.iso_volume_label, info.details["udf"]) == (
        "iso",
        "CCCOMA_X64FRE_EN-US_DV9",
        True,
    )
    assert info.virtual_size == 20 * 2048


def test_raw_is_the_fallback_and_rounds_up_to_sectors() -> None:
    info = inspect(b"\x07" * 1000)
    assert (info.format, info.virtual_size) == ("raw", 1024)
    assert content_digest(b"\x07" * 1000) == hashlib.sha256(b"\x07" * 1000 + bytes(24)).hexdigest()


@pytest.mark.parametrize("magic_at", [(0, b"QED\x00"), (64, b"\x7f\x10\xda\xbe"), (0, b"LUKS\xba\xbe")])
def test_known_unsupported_formats_are_not_called_raw(magic_at: tuple[int, bytes]) -> None:
    offset, magic = magic_at
    data = bytearray(4096)
    data[offset : offset + len(magic)] = magic
    with pytest.raises(UnsupportedImageError, match="not supported"):
        inspect(bytes(data))


def test_literal_segments_are_counted() -> None:
    assert segments_length([Literal(b"abc"), ZeroRun(5)]) == 8
