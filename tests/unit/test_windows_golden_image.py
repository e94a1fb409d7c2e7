"""The golden-image factory's decisions (pure): build → stop → clone → publish → prune, and what blocks it."""

from __future__ import annotations

import base64
import json
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from uds_vm_operator.api import SpecError, parse_vm_spec
from uds_vm_operator.controller.golden_image import (
    FACTORY_RUN_STRATEGY,
    GOLDEN_LABEL,
    GOLDEN_VERSION_LABEL,
    GoldenImagePlan,
    carried_status,
    plan_golden_image,
    published_version,
    render_clone_datavolume,
    render_data_source,
    versions_to_prune,
)
from uds_vm_operator.render import ClusterFacts, Owner, render_children
from uds_vm_operator.render.sysprep import render_sysprep_secret

OWNER = Owner("win-build", "images", "uid-7")
NS = {"u": "urn:schemas-microsoft-com:unattend"}
MANAGED = {"app.kubernetes.io/managed-by": "uds-vm-operator"}


def build_spec(version: int = 1, **golden: Any) -> dict[str, Any]:
    return {
        "os": "windows",
        "source": {"http": {"url": "https://images.site.internal/win2022.iso"}},
        "disk": {"virtualSize": "5Gi", "storageClassName": "fast"},
        "windows": {
            "sysprep": {"mode": "iso"},
            "systemDiskSize": "40Gi",
            "goldenImage": {"name": "win2022", "version": version, **golden},
        },
    }


def kv_vm(printable: str | None) -> dict[str, Any]:
    return {"status": {"printableStatus": printable}} if printable else {"status": {}}


def clone_dv(version: int, phase: str | None = None, *, managed: bool = True) -> dict[str, Any]:
    labels = {**MANAGED, GOLDEN_LABEL: "win2022", GOLDEN_VERSION_LABEL: str(version)} if managed else {}
    dv: dict[str, Any] = {"metadata": {"name": f"win2022-v{version}", "labels": labels, "uid": f"u{version}"}}
    if phase:
        dv["status"] = {"phase": phase}
    return dv


def data_source(version: int, *, managed: bool = True) -> dict[str, Any]:
    return {
        "metadata": {"name": "win2022", "labels": {**MANAGED, GOLDEN_LABEL: "win2022"} if managed else {}},
        "spec": {"source": {"pvc": {"name": f"win2022-v{version}", "namespace": "images"}}},
    }


def plan(
    raw: dict[str, Any],
    previous: dict[str, Any] | None = None,
    *,
    vm: dict[str, Any] | None = None,
    clone: dict[str, Any] | None = None,
    source: dict[str, Any] | None = None,
) -> GoldenImagePlan:
    result = plan_golden_image(
        OWNER, parse_vm_spec(raw), previous, virtual_machine=vm, clone=clone, data_source=source
    )
    assert result is not None
    assert None not in result.status.values(), "null values would make every resync write the status"
    return result


def test_ordinary_vms_have_no_factory() -> None:
    raw = build_spec()
    del raw["windows"]["goldenImage"]
    assert (
        plan_golden_image(OWNER, parse_vm_spec(raw), None, virtual_machine=None, clone=None, data_source=None)
        is None
    )


def test_a_vm_that_never_ran_is_building_not_stopped() -> None:
    result = plan(build_spec(), vm=kv_vm("Stopped"))
    assert result.status == {"name": "win2022", "phase": "Building"}
    assert result.run_strategy == FACTORY_RUN_STRATEGY == "RerunOnFailure"  # guest shutdown stays final
    assert result.create_clone is None and result.publish is None


@pytest.mark.parametrize("printable", ["Starting", "Running", "Stopping"])
def test_seeing_the_build_run_records_the_started_version(printable: str) -> None:
    result = plan(build_spec(), vm=kv_vm(printable))
    assert result.status == {"name": "win2022", "phase": "Building", "startedVersion": 1}
    assert result.create_clone is None


def test_a_stopped_build_is_cloned_into_the_versioned_datavolume() -> None:
    started = {"name": "win2022", "phase": "Building", "startedVersion": 1}
    result = plan(build_spec(), started, vm=kv_vm("Stopped"))
    assert result.status["phase"] == "Cloning" and result.status["cloneDataVolume"] == "win2022-v1"
    assert result.run_strategy == "Halted"  # the disk must not change while it is cloned
    clone = result.create_clone
    assert clone is not None
    assert clone["metadata"]["name"] == "win2022-v1"
    assert "ownerReferences" not in clone["metadata"], "the image must survive the build VM's deletion"
    assert clone["metadata"]["labels"][GOLDEN_LABEL] == "win2022"
    assert clone["metadata"]["labels"][GOLDEN_VERSION_LABEL] == "1"
    assert clone["metadata"]["labels"]["uds.dev/vm"] == "win-build"  # routes its events to the build VM
    assert clone["spec"]["source"] == {"pvc": {"name": "win-build-system", "namespace": "images"}}
    pvc = clone["spec"]["pvc"]
    assert (
        pvc["resources"]["requests"]["storage"] == "43418Mi"
    )  # pvc_size(40Gi, 6 %), same as the system disk
    assert pvc["storageClassName"] == "fast"
    system = next(c for c in render_build_children() if c["metadata"]["name"] == "win-build-system")
    assert system["spec"]["pvc"]["resources"] == pvc["resources"]


def render_build_children(version: int = 1) -> list[dict[str, Any]]:
    return render_children(
        OWNER, parse_vm_spec(build_spec(version)), ClusterFacts(), windows_admin_password="P@ss-w0rd"
    )


def test_a_previous_run_of_another_version_is_not_a_run_of_this_one() -> None:
    published = {"name": "win2022", "phase": "Published", "startedVersion": 1, "publishedVersion": 1}
    result = plan(build_spec(2), published, vm=kv_vm("Stopped"), source=data_source(1))
    assert result.status == {
        "name": "win2022",
        "phase": "Building",
        "startedVersion": 1,
        "publishedVersion": 1,
        "dataSource": "win2022",
    }
    assert result.run_strategy == FACTORY_RUN_STRATEGY and result.create_clone is None


def test_an_unfinished_clone_waits_and_a_finished_one_is_published() -> None:
    started = {"name": "win2022", "phase": "Cloning", "startedVersion": 1}
    waiting = plan(build_spec(), started, vm=kv_vm("Stopped"), clone=clone_dv(1, "CloneInProgress"))
    assert waiting.status["phase"] == "Cloning" and waiting.publish is None and waiting.create_clone is None

    done = plan(build_spec(), started, vm=kv_vm("Stopped"), clone=clone_dv(1, "Succeeded"))
    assert done.publish == render_data_source(OWNER, parse_vm_spec(build_spec()).windows.golden_image)  # type: ignore[union-attr]
    assert done.publish["spec"]["source"] == {"pvc": {"name": "win2022-v1", "namespace": "images"}}
    assert "ownerReferences" not in done.publish["metadata"]
    assert done.status["phase"] == "Published" and done.status["publishedVersion"] == 1
    assert done.prune and [e[1] for e in done.events] == ["GoldenImagePublished"]


def test_published_version_holds_the_build_vm_and_prunes() -> None:
    started = {"name": "win2022", "phase": "Published", "startedVersion": 1}
    result = plan(
        build_spec(), started, vm=kv_vm("Stopped"), clone=clone_dv(1, "Succeeded"), source=data_source(1)
    )
    assert result.status["phase"] == "Published" and result.run_strategy == "Halted"
    assert result.publish is None and result.create_clone is None and result.prune


def test_user_halted_build_is_not_started_by_the_factory() -> None:
    raw = build_spec()
    raw["runStrategy"] = "Halted"
    assert plan(raw, vm=kv_vm("Stopped")).run_strategy is None  # keep the user's Halted


def test_golden_image_needs_iso_mode() -> None:
    raw = build_spec()
    raw["windows"]["sysprep"]["mode"] = "clone"
    result = plan(raw)
    assert result.status["phase"] == "Blocked" and "sysprep mode iso" in result.status["message"]


def test_foreign_datasource_or_datavolume_blocks_instead_of_taking_over() -> None:
    foreign = plan(build_spec(), vm=kv_vm("Running"), source=data_source(1, managed=False))
    assert (
        foreign.status["phase"] == "Blocked" and "not managed by uds-vm-operator" in foreign.status["message"]
    )
    assert foreign.publish is None and foreign.run_strategy == "Halted"
    squatted = plan(build_spec(), vm=kv_vm("Stopped"), clone=clone_dv(1, "Succeeded", managed=False))
    assert squatted.status["phase"] == "Blocked" and squatted.publish is None


def test_published_version_is_read_from_the_datasource() -> None:
    assert published_version(data_source(7), "win2022", "images") == 7
    assert published_version(data_source(7), "win2022", "other") is None
    assert published_version(data_source(7), "win20", "images") is None
    assert published_version(None, "win2022", "images") is None


@pytest.mark.parametrize(
    ("versions", "keep", "published", "pruned"),
    [
        ([1, 2, 3], 3, 3, []),
        ([1, 2, 3, 4], 3, 4, [1]),
        ([1, 2, 3, 4, 5], 2, 5, [1, 2, 3]),
        ([1, 2, 3, 4], 2, 1, [2, 3]),  # rolled back to v1: it stays, with the newest one
        ([3, 1, 2], 1, 3, [1, 2]),
    ],
)
def test_versions_beyond_keep_are_pruned_never_the_published_one(
    versions: list[int], keep: int, published: int, pruned: list[int]
) -> None:
    result = versions_to_prune([clone_dv(v) for v in versions], keep, published)
    assert [c["metadata"]["name"] for c in result] == [f"win2022-v{v}" for v in pruned]


def test_keep_defaults_to_three_and_names_leave_room_for_the_version() -> None:
    spec = parse_vm_spec(build_spec())
    assert spec.windows is not None and spec.windows.golden_image is not None
    assert spec.windows.golden_image.keep == 3
    for bad in ({"keep": 0}, {"name": "x" * 56}):
        raw = build_spec()
        raw["windows"]["goldenImage"].update(bad)
        with pytest.raises(SpecError):
            parse_vm_spec(raw)


def test_the_build_answer_file_ends_by_generalizing_and_shutting_down() -> None:
    secret = render_sysprep_secret(OWNER, parse_vm_spec(build_spec()), "P@ss-w0rd", efi=True)
    root = ET.fromstring(base64.b64decode(secret["data"]["autounattend.xml"]))
    commands = root.findall(".//u:FirstLogonCommands/u:SynchronousCommand", NS)
    last = max(commands, key=lambda c: int(c.findtext("u:Order", "0", NS)))
    assert last.findtext("u:CommandLine", "", NS).endswith("sysprep.exe /generalize /oobe /shutdown /quiet")


def test_clone_datavolume_is_deterministic_and_password_free() -> None:
    spec = parse_vm_spec(build_spec())
    assert spec.windows is not None and spec.windows.golden_image is not None
    first = render_clone_datavolume(OWNER, spec, spec.windows.golden_image)
    assert first == render_clone_datavolume(OWNER, spec, spec.windows.golden_image)
    assert "P@ss" not in json.dumps(first)


def test_a_refused_reconcile_keeps_the_factory_memory() -> None:
    previous = {
        "phase": "Failed",
        "goldenImage": {"name": "win2022", "phase": "Building", "startedVersion": 2},
    }
    assert carried_status(previous) == {"goldenImage": previous["goldenImage"]}
    assert carried_status({"phase": "Ready"}) == {}
    # With the memory kept, the stopped build is still recognised as finished once the spec is valid again.
    again = plan(build_spec(2), previous["goldenImage"], vm=kv_vm("Stopped"))
    assert again.create_clone is not None and again.status["phase"] == "Cloning"
