"""Hostile or mistaken specs: each is rejected by the API server (CRD schema / CEL) or reported by the
operator as a condition and an Event; the operator never crashes, never creates half a VM, and keeps
serving valid objects."""

from __future__ import annotations

import copy
from typing import Any

from tests.integration.operator_fixtures import (
    SHA,
    api,
    condition,
    dv_path,
    kv_path,
    operator,
    udsvm,
    vm_path,
    wait_phase,
)
from tests.integration.operator_harness import Api, OperatorProcess

__all__ = ["api", "operator"]  # fixtures used by name

WINDOWS = {"os": "windows", "cloudInit": None, "resources": {"cpu": 2, "memory": "4Gi"}}


INVALID: list[tuple[str, dict[str, Any]]] = [
    ("no-source", {"source": None}),
    ("two-sources", {"source": {"upload": {}, "blank": {}}}),
    ("md5-checksum", {"source": {"upload": {"checksum": "md5:" + "a" * 32}}}),
    ("short-sha256", {"source": {"upload": {"checksum": "sha256:abc"}}}),
    ("sha256-not-hex", {"source": {"upload": {"checksum": "sha256:" + "z" * 64}}}),
    ("size-words", {"disk": {"virtualSize": "ten gigs"}}),
    ("size-negative", {"disk": {"virtualSize": -5}}),
    ("run-strategy", {"runStrategy": "Sometimes"}),
    ("os", {"os": "beos"}),
    ("computer-name-long", {**WINDOWS, "windows": {"computerName": "THIS-NAME-IS-TOO-LONG"}}),
    ("computer-name-digits", {**WINDOWS, "windows": {"computerName": "12345"}}),
    ("cloudinit-on-windows", {"os": "windows", "resources": {"cpu": 2, "memory": "4Gi"}}),
    ("windows-on-linux", {"windows": {"computerName": "WEB01"}}),
    ("unknown-field", {"colour": "blue"}),
    ("duplicate-data-disks", {"dataDisks": [{"name": "a", "size": "1Gi"}, {"name": "a", "size": "2Gi"}]}),
    ("retention-policy", {"dataDisks": [{"name": "a", "size": "1Gi", "retentionPolicy": "Maybe"}]}),
    ("egress-class", {"network": {"egress": "everything"}}),
    ("vpn-without-gateway", {"network": {"egress": "vpn"}}),
    ("blank-without-size", {"source": {"blank": {}}, "disk": {}}),
    ("ftp-url", {"source": {"http": {"url": "ftp://images/disk.img", "checksum": SHA}}}),
    ("overhead-percent", {"disk": {"virtualSize": "10Mi", "overheadPercent": 500}}),
    ("firmware", {"firmware": {"type": "uefi-magic"}}),
    ("zero-cpu", {"resources": {"cpu": 0, "memory": "1Gi"}}),
    ("memory-words", {"resources": {"cpu": 1, "memory": "lots"}}),
    ("duplicate-expose-ports", {"network": {"expose": [{"port": 22}, {"port": 22}]}}),
    (
        "live-migration-on-rwo",
        {"liveMigration": True, "disk": {"virtualSize": "10Mi", "accessModes": ["ReadWriteOnce"]}},
    ),
    ("missing-admin-secret", {**WINDOWS, "windows": {"adminPasswordSecretRef": {"name": "does-not-exist"}}}),
]


def invalid_manifest(name: str, namespace: str, change: dict[str, Any]) -> dict[str, Any]:
    manifest = udsvm(name, namespace)
    for key, value in copy.deepcopy(change).items():
        if value is None:
            manifest["spec"].pop(key, None)
        else:
            manifest["spec"][key] = value
    return manifest


def test_invalid_specs_are_rejected_or_reported_and_the_operator_stays_healthy(
    api: Api, operator: OperatorProcess, namespace: str
) -> None:
    assert len(INVALID) >= 20
    rejected: dict[str, str] = {}
    accepted: list[str] = []
    for name, change in INVALID:
        code, body = api.create(invalid_manifest(name, namespace, change), vm_path(namespace))
        if code in (400, 422):
            rejected[name] = str(body.get("message"))
        else:
            assert code == 201, body
            accepted.append(name)

    for name in accepted:
        status = wait_phase(api, operator, namespace, name, "Failed")
        ready = condition(status, "Ready")
        assert ready["status"] == "False"
        assert ready["reason"] in ("InvalidSpec", "LiveMigrationNeedsRWX"), ready
        assert ready["message"] and "Traceback" not in ready["message"]
        assert api.get(dv_path(namespace, f"{name}-dv")) is None, f"{name}: half-created"
        assert api.get(kv_path(namespace, f"{name}-vm")) is None
        assert api.get(kv_path(namespace, name)) is None
    for name, message in rejected.items():
        assert message, f"{name}: the API server rejected it without a message"
    print(f"rejected by the API server: {sorted(rejected)}\nreported by the operator: {sorted(accepted)}")
    # Valid for the schema, impossible to honour here: reported as conditions, nothing created.
    assert {"live-migration-on-rwo", "missing-admin-secret"} <= set(accepted)

    events = api.items(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
    warned = {e["regarding"]["name"] for e in events if e["type"] == "Warning"}
    assert set(accepted) <= warned

    assert operator.healthy()
    api.apply(udsvm("valid", namespace), vm_path(namespace, "valid"))
    wait_phase(api, operator, namespace, "valid", "Pending")
    assert "Traceback" not in operator.logs(10**7)
