"""Rebuild KubeVirt's CustomResourceDefinition objects around its generated validation schemas.

KubeVirt does not ship CRD YAML in its Go module: `validations_generated.go` holds only the `openAPIV3Schema`
blocks, and the wrappers (names, versions, printer columns, subresources) are built in Go by
`pkg/virt-operator/resource/generate/components/crds.go`. This module mirrors those constructors for the kinds
our operator touches, and `check_against_go_source` fails loudly when the pinned tag's crds.go no longer says
what we mirror, so a KubeVirt bump cannot silently drift.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

APP_LABEL = "kubevirt.io"  # virtv1.AppLabel
OPERATOR_LABEL = "operator.kubevirt.io"  # NewKubeVirtCrd uses its own label
V1ALPHA3_WARNING = "kubevirt.io/v1alpha3 is now deprecated and will be removed in a future release."


class KubevirtWrapperError(RuntimeError):
    """KubeVirt's crds.go or validations changed shape; update kubevirt_crd_wrappers.py for the new tag."""


@dataclass(frozen=True)
class Column:
    """One additionalPrinterColumns entry, as crds.go declares it."""

    name: str
    type: str
    json_path: str
    description: str = ""
    priority: int = 0

    def as_dict(self) -> dict[str, Any]:
        column: dict[str, Any] = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        if self.description:
            column["description"] = self.description
        if self.priority:
            column["priority"] = self.priority
        return column


@dataclass(frozen=True)
class WrapperSpec:
    """What a `New<Kind>Crd()` function in crds.go sets, minus the schema."""

    singular: str
    plural: str
    kind: str
    group: str
    short_names: tuple[str, ...]
    columns: tuple[Column, ...]
    status_subresource: bool
    scale_subresource: bool = False
    core_versions: bool = True
    """newCRDVersions(): v1 (storage) + v1alpha3 (deprecated); else the pool's v1alpha1 + v1beta1 (stored)."""
    label: str = APP_LABEL
    evidence: tuple[str, ...] = field(default=())

    @property
    def name(self) -> str:
        return f"{self.plural}.{self.group}"


_AGE = Column("Age", "date", ".metadata.creationTimestamp")
_PHASE = Column("Phase", "string", ".status.phase")

WRAPPERS: tuple[WrapperSpec, ...] = (
    WrapperSpec(
        singular="virtualmachine",
        plural="virtualmachines",
        kind="VirtualMachine",
        group="kubevirt.io",
        short_names=("vm", "vms"),
        columns=(
            _AGE,
            Column("Status", "string", ".status.printableStatus", description="Human Readable Status"),
            Column("Ready", "string", ".status.conditions[?(@.type=='Ready')].status"),
        ),
        status_subresource=True,
    ),
    WrapperSpec(
        singular="virtualmachineinstance",
        plural="virtualmachineinstances",
        kind="VirtualMachineInstance",
        group="kubevirt.io",
        short_names=("vmi", "vmis"),
        columns=(
            _AGE,
            _PHASE,
            Column("IP", "string", ".status.interfaces[0].ipAddress"),
            Column("NodeName", "string", ".status.nodeName"),
            Column("Ready", "string", ".status.conditions[?(@.type=='Ready')].status"),
            Column(
                "Live-Migratable",
                "string",
                ".status.conditions[?(@.type=='LiveMigratable')].status",
                priority=1,
            ),
            Column("Paused", "string", ".status.conditions[?(@.type=='Paused')].status", priority=1),
        ),
        status_subresource=False,  # upstream: the VMI CRD has no status subresource
    ),
    WrapperSpec(
        singular="virtualmachinepool",
        plural="virtualmachinepools",
        kind="VirtualMachinePool",
        group="pool.kubevirt.io",
        short_names=("vmpool", "vmpools"),
        columns=(
            Column("Desired", "integer", ".spec.replicas", description="Number of desired VirtualMachines"),
            Column(
                "Current",
                "integer",
                ".status.replicas",
                description="Number of managed and not final or deleted VirtualMachines",
            ),
            Column(
                "Ready",
                "integer",
                ".status.readyReplicas",
                description="Number of managed VirtualMachines which are ready to receive traffic",
            ),
            _AGE,
        ),
        status_subresource=True,
        scale_subresource=True,
        core_versions=False,
    ),
    WrapperSpec(
        singular="kubevirt",
        plural="kubevirts",
        kind="KubeVirt",
        group="kubevirt.io",
        short_names=("kv", "kvs"),
        columns=(_AGE, _PHASE),
        status_subresource=True,
        label=OPERATOR_LABEL,
    ),
)


# crds.go refers to these JSONPaths through named constants.
_GO_PATH_CONSTANTS = {
    ".metadata.creationTimestamp": "creationTimestampJSONPath",
    ".status.phase": "phaseJSONPath",
}


def _go_normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def _go_string_list(values: tuple[str, ...]) -> str:
    return "[]string{" + ", ".join(f'"{value}"' for value in values) + "}"


def check_against_go_source(crds_go: str, register_go: str) -> None:
    """Fail when the pinned crds.go / core/v1/register.go no longer declare what WRAPPERS mirrors.

    A cheap drift guard: every plural, short-name list, column name and JSONPath we emit must appear verbatim
    (up to whitespace) in the Go source of the pinned tag.
    """
    source = _go_normalise(crds_go)
    problems: list[str] = []
    for spec in WRAPPERS:
        snippets = [f'Plural: "{spec.plural}"', f"ShortNames: {_go_string_list(spec.short_names)}"]
        for column in spec.columns:
            snippets.append(f'Name: "{column.name}"')
            go_value = _GO_PATH_CONSTANTS.get(column.json_path, f'"{column.json_path}"')
            snippets.append(f"JSONPath: {go_value}")
        problems.extend(f"{spec.kind}: {snippet!r}" for snippet in snippets if snippet not in source)
    if "Name: poolv1beta1.SchemeGroupVersion.Version, Served: true, Storage: true" not in source:
        problems.append("VirtualMachinePool: v1beta1 as the storage version")
    for needle in ('Name: "v1alpha3"', "Deprecated: true", V1ALPHA3_WARNING):
        if needle not in _go_normalise(register_go):
            problems.append(f"core/v1/register.go: {needle!r}")
    if problems:
        raise KubevirtWrapperError(
            "KubeVirt's CRD constructors changed; update tools/envtest/kubevirt_crd_wrappers.py. Not found: "
            + "; ".join(problems)
        )


def _versions(spec: WrapperSpec, schema: dict[str, Any]) -> list[dict[str, Any]]:
    subresources: dict[str, Any] = {}
    if spec.status_subresource:
        subresources["status"] = {}
    if spec.scale_subresource:
        subresources["scale"] = {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.labelSelector",
        }
    if spec.core_versions:
        base: list[dict[str, Any]] = [
            {"name": "v1", "served": True, "storage": True},
            {
                "name": "v1alpha3",
                "served": True,
                "storage": False,
                "deprecated": True,
                "deprecationWarning": V1ALPHA3_WARNING,
            },
        ]
    else:  # NewVirtualMachinePoolCrd since KubeVirt v1.7: v1alpha1 still served, v1beta1 stored
        base = [
            {"name": "v1alpha1", "served": True, "storage": False},
            {"name": "v1beta1", "served": True, "storage": True},
        ]
    for version in base:
        version["additionalPrinterColumns"] = [column.as_dict() for column in spec.columns]
        if subresources:
            version["subresources"] = subresources
        version["schema"] = schema
    return base


def build_crd(spec: WrapperSpec, validation_yaml: str) -> dict[str, Any]:
    """Return the CRD object for one kind, with the upstream validation block as every version's schema."""
    schema = yaml.safe_load(validation_yaml)
    if not isinstance(schema, dict) or "openAPIV3Schema" not in schema:
        raise KubevirtWrapperError(f"validation for {spec.singular!r} does not start with openAPIV3Schema")
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": spec.name, "labels": {spec.label: ""}},
        "spec": {
            "group": spec.group,
            "names": {
                "plural": spec.plural,
                "singular": spec.singular,
                "kind": spec.kind,
                "listKind": f"{spec.kind}List",
                "shortNames": list(spec.short_names),
                "categories": ["all"],
            },
            "scope": "Namespaced",
            "versions": _versions(spec, schema),
        },
    }


def build_all(validations: dict[str, str]) -> list[dict[str, Any]]:
    """Build every wrapper in WRAPPERS from the CRDsValidation map of the pinned KubeVirt tag."""
    missing = [spec.singular for spec in WRAPPERS if spec.singular not in validations]
    if missing:
        raise KubevirtWrapperError(f"CRDsValidation lacks {missing}; the pinned KubeVirt tag renamed a kind")
    return [build_crd(spec, validations[spec.singular]) for spec in WRAPPERS]
