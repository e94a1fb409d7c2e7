"""The API models: valid specs parse, invalid ones fail with a SpecError naming the field and the fix."""

from __future__ import annotations

from typing import Any

import pytest

from uds_vm_operator.api import SpecError, netbios_problem, parse_vm_spec, validate_vm_name
from uds_vm_operator.api.quantity import parse_bytes

SHA256 = "sha256:" + "a" * 64
SHA512 = "sha512:" + "b" * 128
BASE: dict[str, Any] = {"source": {"upload": {"checksum": SHA256}}, "disk": {"virtualSize": "10Gi"}}


def with_base(**extra: Any) -> dict[str, Any]:
    return {**BASE, **extra}


def test_minimal_spec_gets_the_documented_defaults() -> None:
    spec = parse_vm_spec(BASE)
    assert spec.os == "linux"
    assert spec.run_strategy == "Always"
    assert spec.network.mode == "networkpolicy"
    assert spec.network.egress == "dns"
    assert spec.disk.overhead_percent == 6
    assert spec.disk.volume_mode == "Filesystem"
    assert spec.live_migration is False


def test_json_round_trip_uses_the_camel_case_names_of_the_spec() -> None:
    raw = with_base(
        runStrategy="Halted",
        dataDisks=[{"name": "data", "size": "1Gi", "retentionPolicy": "Delete"}],
        cloudInit={"sshAuthorizedKeys": ["ssh-ed25519 AAAA me"]},
        allowLiveMigrateIfPossible=True,
    )
    dumped = parse_vm_spec(raw).to_json_dict()
    assert dumped["runStrategy"] == "Halted"
    assert dumped["disk"]["virtualSize"] == "10Gi"
    assert dumped["dataDisks"][0]["retentionPolicy"] == "Delete"
    assert dumped["cloudInit"]["sshAuthorizedKeys"] == ["ssh-ed25519 AAAA me"]
    assert dumped["allowLiveMigrateIfPossible"] is True
    assert parse_vm_spec(dumped) == parse_vm_spec(raw)


@pytest.mark.parametrize(
    ("source", "kind", "checksum"),
    [
        ({"upload": {"checksum": SHA256}}, "upload", SHA256),
        ({"upload": {}}, "upload", None),
        ({"http": {"url": "https://x/y.img", "checksum": SHA512}}, "http", SHA512),
        ({"s3": {"url": "s3://b/k", "checksum": SHA256}}, "s3", SHA256),
        ({"registry": {"url": "docker://r/i:1"}}, "registry", None),
        ({"dataSource": {"name": "golden"}}, "dataSource", None),
        ({"pvc": {"name": "base", "namespace": "imgs"}}, "pvc", None),
        ({"dataSource": {"name": "golden", "checksum": SHA256}}, "dataSource", SHA256),
        ({"pvc": {"name": "base", "checksum": SHA512}}, "pvc", SHA512),
        ({"blank": {}}, "blank", None),
    ],
)
def test_source_kind_and_declared_checksum(source: dict[str, Any], kind: str, checksum: str | None) -> None:
    spec = parse_vm_spec({"source": source, "disk": {"virtualSize": "1Gi"}})
    assert spec.source.kind == kind
    assert spec.declared_checksum == checksum


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ({"source": {}}, "exactly one of spec.source.{upload,http,s3,registry,dataSource,pvc,blank}"),
        ({"source": {"upload": {}, "blank": {}}}, "found upload, blank"),
        ({"source": {"upload": {"checksum": "sha256:abc"}}}, "spec.source.upload.checksum: write the digest"),
        (
            {"source": {"dataSource": {"name": "g", "checksum": "sha256:abc"}}},
            "spec.source.dataSource.checksum: write the digest",
        ),
        ({"source": {"upload": {"checksum": "md5:" + "a" * 32}}}, "sha256:<64 hex>"),
        ({"source": {"upload": {"checksum": "sha256:" + "A" * 64}}}, "lower case"),
        ({"source": {"http": {"url": "ftp://x"}}}, "spec.source.http.url"),
        ({"source": {"registry": {"url": "https://r/i"}}}, "spec.source.registry.url"),
        (with_base(disk={"virtualSize": "10Q"}), "spec.disk.virtualSize: '10Q' is not a size"),
        (with_base(disk={"virtualSize": 0}), "spec.disk.virtualSize: size must be positive"),
        (with_base(disk={"virtualSize": True}), "spec.disk.virtualSize"),
        (with_base(runStrategy="running"), "spec.runStrategy"),
        (with_base(os="plan9"), "spec.os"),
        (with_base(foo=1), "spec.foo: unknown field"),
        (with_base(windows={}), "windows needs os: windows"),
        (with_base(os="windows", cloudInit={}), "cloudInit is only for os: linux"),
        (with_base(os="windows", windows={"computerName": "123456"}), "must not be all digits"),
        (with_base(os="windows", windows={"computerName": "A" * 16}), "spec.windows.computerName"),
        (with_base(os="windows", windows={"computerName": "WEB_01"}), "letters, digits and hyphens"),
        (with_base(os="windows", windows={"computerName": "WEB-"}), "start or end with a hyphen"),
        (with_base(dataDisks=[{"name": "a", "size": "1Gi"}, {"name": "a", "size": "1Gi"}]), "must be unique"),
        (with_base(dataDisks=[{"name": "Data", "size": "1Gi"}]), "spec.dataDisks[0].name"),
        (with_base(dataDisks=[{"name": "a", "size": "lots"}]), "spec.dataDisks[0].size"),
        (with_base(dataDisks=[{"name": "a", "size": "1Gi", "backup": False}]), "needs backupExemptionReason"),
        (with_base(network={"egress": "vpn"}), "egress: vpn needs vpnGateway"),
        (with_base(network={"egress": "everything"}), "spec.network.egress"),
        (with_base(network={"mode": "istio"}), "spec.network.mode"),
        (with_base(network={"allow": [{"direction": "Up"}]}), "spec.network.allow[0].direction"),
        (
            with_base(network={"allow": [{"direction": "Egress", "cidr": "10.0.0.0/8", "podSelector": {}}]}),
            "either cidr or namespaceSelector/podSelector",
        ),
        (with_base(network={"allow": [{"direction": "Egress", "cidr": "10.0.0.0"}]}), "cidr"),
        (with_base(network={"expose": [{"port": 0}]}), "spec.network.expose[0].port"),
        (with_base(network={"expose": [{"port": 80}, {"port": 80}]}), "port values must be unique"),
        (
            with_base(
                network={
                    "expose": [
                        {
                            "port": 53,
                            "protocol": "UDP",
                            "http": {"hostname": "a.b.c", "gateway": {"name": "g", "namespace": "n"}},
                        }
                    ]
                }
            ),
            "http needs protocol TCP",
        ),
        (with_base(resources={"cpu": 2, "instancetype": "u1.small"}), "either cpu/memory or instancetype"),
        (with_base(resources={"memory": "4 GB"}), "spec.resources.memory"),
        (with_base(firmware={"type": "uefi"}), "spec.firmware.type"),
        ({"source": {"blank": {}}}, "source.blank needs disk.virtualSize"),
        (with_base(cloudInit={"users": [{"name": "root"}]}), "root logins are disabled"),
        (with_base(cloudInit={"sshAuthorizedKeys": ["not a key"]}), "spec.cloudInit.sshAuthorizedKeys[0]"),
        (with_base(cloudInit={"autoUpdate": {"rebootWindow": "25:00"}}), "rebootWindow"),
        (with_base(os="windows", windows={"driverMedia": {}}), "exactly one of pvc or dataSource"),
        (with_base(os="windows", windows={"goldenImage": {"name": "w", "version": 0}}), "version"),
    ],
)
def test_invalid_specs_raise_a_spec_error_naming_the_field(raw: dict[str, Any], fragment: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_vm_spec(raw)
    message = str(caught.value)
    assert fragment in message
    assert "\n" not in message, "condition messages must be one line"
    assert "pydantic" not in message.lower()


def test_a_non_mapping_spec_is_refused_cleanly() -> None:
    with pytest.raises(SpecError, match="expected a mapping"):
        parse_vm_spec(["not", "a", "mapping"])  # type: ignore[arg-type]


def test_several_problems_are_counted_in_one_line() -> None:
    with pytest.raises(SpecError, match=r"and \d+ more problem"):
        parse_vm_spec({"source": {"upload": {}}, "os": "plan9", "runStrategy": "sometimes"})


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("WEB-01", None),
        ("A", None),
        ("ABCDEFGHIJKLMNO", None),
        ("ABCDEFGHIJKLMNOP", "longer than 15"),
        ("", "must not be empty"),
        ("1234", "all digits"),
        ("-WEB", "hyphen"),
        ("WEB-", "hyphen"),
        ("WEB.01", "letters, digits and hyphens"),
        ("WÉB", "letters, digits and hyphens"),
    ],
)
def test_netbios_rules(name: str, problem: str | None) -> None:
    result = netbios_problem(name)
    if problem is None:
        assert result is None
    else:
        assert result is not None and problem in result


@pytest.mark.parametrize(
    ("name", "ok"),
    [("web", True), ("a" * 52, True), ("a" * 53, False), ("1web", False), ("Web", False), ("web-", False)],
)
def test_vm_names_must_leave_room_for_child_names(name: str, ok: bool) -> None:
    if ok:
        validate_vm_name(name)
    else:
        with pytest.raises(SpecError, match=r"metadata\.name"):
            validate_vm_name(name)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("10Mi", 10 << 20),
        ("1Gi", 1 << 30),
        ("1.5Gi", 3 << 29),
        ("2G", 2_000_000_000),
        ("500k", 500_000),
        ("0.5Ki", 512),
        ("1.0001Ki", 1025),
        ("123", 123),
        ("1.5", 2),
        (4096, 4096),
    ],
)
def test_quantities_parse_exactly(value: int | str, expected: int) -> None:
    assert parse_bytes(value, field="f") == expected


@pytest.mark.parametrize("value", ["", "Gi", "1 Gi", "-1Gi", "1e9", "0", 0, -3])
def test_bad_quantities_are_refused(value: int | str) -> None:
    with pytest.raises(SpecError, match="f:"):
        parse_bytes(value, field="f")
