"""Every VirtualMachine the operator can render, judged by the real virt-api v1.8.4's admission webhooks.

The variants are the renderer's whole option space (tests/kubevirt_variants.py: Linux and Windows, each
firmware with and without TPM, with and without KubeVirt's VM-state storage class, data disks, live
migration, sizing by CPU/memory or instancetype/preference, exposure, pool members). Each is submitted with
dryRun=All, which runs the CRD schema and every webhook and stores nothing. The reverse direction: each rule
KubeVirt's webhooks enforce is shown refusing a manifest that breaks it, and our own API (the model our CRD
is generated from) refusing the user input that would have produced it, so such a VM never reaches KubeVirt.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.kubevirt_variants import INSTANCETYPE, PREFERENCE, enumerate_variants
from tests.node.kubevirt_node import dry_run_create, kubevirt_fixture  # noqa: F401 (the session fixture)
from tests.node.node_cluster import NodeHandle, wait_until
from uds_vm_operator.api import parse_vm_spec
from uds_vm_operator.api.errors import SpecError

INSTANCETYPE_API = "/apis/instancetype.kubevirt.io/v1beta1"


@functools.cache
def _variants() -> dict[str, dict[str, Any]]:
    return enumerate_variants().vms


@pytest.fixture(scope="module")
def sizing(kubevirt: NodeHandle) -> Iterator[None]:
    """The cluster instancetype and preference the variants name: virt-api refuses a VM whose instancetype
    does not exist, so they are real objects, admitted by virt-api's own instancetype webhooks."""
    objects = [
        (
            "virtualmachineclusterinstancetypes",
            {
                "apiVersion": "instancetype.kubevirt.io/v1beta1",
                "kind": "VirtualMachineClusterInstancetype",
                "metadata": {"name": INSTANCETYPE},
                "spec": {"cpu": {"guest": 2}, "memory": {"guest": "2Gi"}},
            },
        ),
        (
            "virtualmachineclusterpreferences",
            {
                "apiVersion": "instancetype.kubevirt.io/v1beta1",
                "kind": "VirtualMachineClusterPreference",
                "metadata": {"name": PREFERENCE},
                "spec": {"devices": {"preferredDiskBus": "virtio"}},
            },
        ),
    ]
    for plural, obj in objects:
        path = f"{INSTANCETYPE_API}/{plural}/{obj['metadata']['name']}"
        # virt-api's webhooks answer only once its EndpointSlice lists it, which can trail its Deployment's
        # readiness on a loaded node ("no endpoints available for service virt-api"): a bounded retry.
        wait_until(f"virt-api admits {plural}", functools.partial(_applied, kubevirt, obj, path), 120, 2.0)
    yield
    for plural, obj in objects:
        kubevirt.api.delete(f"{INSTANCETYPE_API}/{plural}/{obj['metadata']['name']}")


def _applied(node: NodeHandle, obj: dict[str, Any], path: str) -> bool:
    try:
        node.api.apply(obj, path)
    except AssertionError as exc:
        if "no endpoints available" in str(exc) or "connection refused" in str(exc):
            return False
        raise
    return True


def _message(payload: Any) -> str:
    return str(payload.get("message") if isinstance(payload, dict) else payload)


def test_every_rendered_variant_is_admitted_by_the_real_virt_api(
    kubevirt: NodeHandle, sizing: None, ns: str
) -> None:
    variants = _variants()
    assert len(variants) >= 600
    rejected: dict[str, str] = {}
    for name, vm in variants.items():
        code, payload = dry_run_create(kubevirt, ns, vm)
        if code not in (200, 201):
            rejected[name] = f"HTTP {code}: {_message(payload)}"
    print(f"submitted {len(variants)} rendered VirtualMachine variants to virt-api; {len(rejected)} rejected")
    assert rejected == {}, f"{len(rejected)} of {len(variants)} refused, e.g. {next(iter(rejected.items()))}"


def _base_vm() -> dict[str, Any]:
    linux = next(vm for vm in _variants().values() if "cloudInitNoCloud" in str(vm))
    return copy.deepcopy(linux)


def _template(vm: dict[str, Any]) -> dict[str, Any]:
    template: dict[str, Any] = vm["spec"]["template"]["spec"]
    return template


def _secure_boot_without_smm(vm: dict[str, Any]) -> None:
    domain = _template(vm)["domain"]
    domain["firmware"] = {"bootloader": {"efi": {"secureBoot": True}}}
    domain.pop("features", None)


def _bad_run_strategy(vm: dict[str, Any]) -> None:
    vm["spec"]["runStrategy"] = "Sometimes"


def _instancetype_and_cpu(vm: dict[str, Any]) -> None:
    vm["spec"]["instancetype"] = {"name": INSTANCETYPE}
    _template(vm)["domain"]["cpu"] = {"cores": 2}


def _duplicate_disk(vm: dict[str, Any]) -> None:
    disks = _template(vm)["domain"]["devices"]["disks"]
    twin = copy.deepcopy(disks[0])
    twin.pop("bootOrder", None)  # else the refusal would be for the boot order, not the name
    disks.append(twin)


def _disk_without_volume(vm: dict[str, Any]) -> None:
    _template(vm)["domain"]["devices"]["disks"].append({"name": "orphan", "disk": {"bus": "virtio"}})


def _inline_user_data_over_2k(vm: dict[str, Any]) -> None:
    for volume in _template(vm)["volumes"]:
        if "cloudInitNoCloud" in volume:
            volume["cloudInitNoCloud"] = {"userData": "#cloud-config\n" + "#" * 4096}


# (KubeVirt rule, what virt-api's refusal says, how a manifest breaks it, the user input our API refuses
# instead or None when no input can produce it, and the check over every rendered variant that the renderer
# never emits it.)
Rule = tuple[
    str, str, Callable[[dict[str, Any]], None], dict[str, Any] | None, Callable[[dict[str, Any]], bool]
]
RULES: list[Rule] = [
    (
        "secure boot needs SMM",
        "SecureBoot requires SMM",
        _secure_boot_without_smm,
        None,
        lambda vm: (
            "'secureBoot': True" not in str(_template(vm)["domain"].get("firmware"))
            or bool(_template(vm)["domain"].get("features", {}).get("smm", {}).get("enabled"))
        ),
    ),
    (
        "runStrategy is one of KubeVirt's",
        "Invalid RunStrategy",
        _bad_run_strategy,
        {"source": {"blank": {}}, "disk": {"virtualSize": "1Gi"}, "runStrategy": "Sometimes"},
        lambda vm: vm["spec"]["runStrategy"] in ("Always", "Halted", "Manual", "RerunOnFailure", "Once"),
    ),
    (
        "instancetype excludes explicit CPU",
        "conflicts with selected instance type",
        _instancetype_and_cpu,
        {
            "source": {"blank": {}},
            "disk": {"virtualSize": "1Gi"},
            "resources": {"instancetype": INSTANCETYPE, "cpu": 2},
        },
        lambda vm: "instancetype" not in vm["spec"] or "cpu" not in _template(vm)["domain"],
    ),
    (
        "disk names are unique",
        "must not have the same Name",
        _duplicate_disk,
        {
            "source": {"blank": {}},
            "disk": {"virtualSize": "1Gi"},
            "dataDisks": [{"name": "a", "size": "1Gi"}, {"name": "a", "size": "1Gi"}],
        },
        lambda vm: (
            len({d["name"] for d in _template(vm)["domain"]["devices"]["disks"]})
            == len(_template(vm)["domain"]["devices"]["disks"])
        ),
    ),
    (
        "every disk has a volume",
        "'orphan' not found",
        _disk_without_volume,
        None,
        lambda vm: (
            {d["name"] for d in _template(vm)["domain"]["devices"]["disks"]}
            == {v["name"] for v in _template(vm)["volumes"]}
        ),
    ),
    (
        "inline cloud-init user data is at most 2 KiB",
        "exceeds 2048 byte limit",
        _inline_user_data_over_2k,
        None,
        lambda vm: all("userData" not in v.get("cloudInitNoCloud", {}) for v in _template(vm)["volumes"]),
    ),
]


@pytest.mark.parametrize("case", RULES, ids=[r[0] for r in RULES])
def test_what_kubevirt_refuses_never_comes_from_us(
    kubevirt: NodeHandle, sizing: None, ns: str, case: Rule
) -> None:
    rule, says, breaks, user_input, never_rendered = case
    base = _base_vm()
    code, payload = dry_run_create(kubevirt, ns, base)
    # The unbroken manifest passes, so the refusal below is the rule's.
    assert code in (200, 201), _message(payload)
    broken = copy.deepcopy(base)
    breaks(broken)
    code, payload = dry_run_create(kubevirt, ns, broken)
    assert code in (400, 422), f"virt-api admitted a VM breaking {rule!r}"
    assert "admission webhook" in _message(payload) and says in _message(payload), _message(payload)
    offenders = [name for name, vm in _variants().items() if not never_rendered(vm)]
    assert offenders == [], f"the renderer emits VMs breaking {rule!r}: {offenders[:5]}"
    if user_input is not None:
        with pytest.raises((SpecError, ValueError)):
            parse_vm_spec(user_input)
