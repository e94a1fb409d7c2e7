"""Generate the CRDs from the pydantic models: ``python -m uds_vm_operator.api.crdgen DIR [--check]``.

The models are the source of truth; the YAML under ``deploy/crds`` is derived and CI fails on drift
(``--check`` exits 1 and prints a unified diff). The JSON schema pydantic emits is turned into a Kubernetes
*structural* schema: ``$ref`` inlined, ``anyOf [X, null]`` collapsed to ``X``, ``int | str`` quantities as
``x-kubernetes-int-or-string`` with a CEL rule for the string form, titles and ``additionalProperties: false``
dropped (the API server prunes unknown fields and ``fieldValidation=Strict`` rejects them), and object/list
defaults dropped (only scalar defaults are applied server-side).

Adding a CRD (e.g. UDSVirtualMachinePool) = one more :class:`CrdDefinition` in :data:`CRDS`.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from uds_vm_operator.api.backup import (
    BACKUP_KIND,
    BACKUP_NAME_VALIDATIONS,
    BACKUP_PLURAL,
    BACKUP_PRINTER_COLUMNS,
    BACKUP_SHORT_NAMES,
    BACKUP_SINGULAR,
    UDSVirtualMachineBackupSpec,
    UDSVirtualMachineBackupStatus,
)
from uds_vm_operator.api.models import (
    API_GROUP,
    API_VERSION,
    VM_KIND,
    VM_NAME_VALIDATIONS,
    VM_PLURAL,
    VM_SHORT_NAMES,
    VM_SINGULAR,
    UDSVirtualMachineSpec,
    UDSVirtualMachineStatus,
)
from uds_vm_operator.api.pool import (
    POOL_KIND,
    POOL_NAME_VALIDATIONS,
    POOL_PLURAL,
    POOL_PRINTER_COLUMNS,
    POOL_SCALE_SUBRESOURCE,
    POOL_SHORT_NAMES,
    POOL_SINGULAR,
    UDSVirtualMachinePoolSpec,
    UDSVirtualMachinePoolStatus,
)
from uds_vm_operator.api.quantity import QUANTITY_PATTERN

INT_OR_STRING_RULE = (
    "type(self) == int ? self > 0 : string(self).matches('" + QUANTITY_PATTERN.replace("\\", "\\\\") + "')"
)
_DROPPED_KEYS = frozenset({"title", "additionalProperties", "$defs", "discriminator"})


@dataclass(frozen=True)
class PrinterColumn:
    """One ``additionalPrinterColumns`` entry (``kubectl get`` column)."""

    name: str
    type: str
    json_path: str
    description: str
    priority: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The CRD JSON form."""
        column: dict[str, Any] = {
            "name": self.name,
            "type": self.type,
            "jsonPath": self.json_path,
            "description": self.description,
        }
        if self.priority:
            column["priority"] = self.priority
        return column


@dataclass(frozen=True)
class CrdDefinition:
    """Everything needed to emit one namespaced CRD with a status subresource."""

    kind: str
    plural: str
    singular: str
    short_names: tuple[str, ...]
    spec_model: type[BaseModel]
    status_model: type[BaseModel]
    printer_columns: tuple[PrinterColumn, ...]
    description: str
    root_validations: tuple[dict[str, str], ...] = ()
    categories: tuple[str, ...] = ("uds",)
    extra_subresources: dict[str, Any] = field(default_factory=dict)

    @property
    def filename(self) -> str:
        """``<group>_<plural>.yaml``, the kubebuilder naming convention."""
        return f"{API_GROUP}_{self.plural}.yaml"


class SchemaError(RuntimeError):
    """The pydantic schema contains a construct that has no structural Kubernetes equivalent."""


def _resolve(node: Any, defs: dict[str, Any]) -> Any:
    """Turn one pydantic JSON-schema node into a structural OpenAPI v3 node."""
    if isinstance(node, list):
        return [_resolve(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    if "$ref" in node:
        target = defs[node.pop("$ref").split("/")[-1]]
        merged = {**target, **node}  # sibling keys (description, default) override the definition's
        return _resolve(merged, defs)
    if node.get("x-kubernetes-int-or-string"):
        return _int_or_string(node)
    unwrapped = _without_union(node, defs)
    if unwrapped is not None:
        return _resolve(unwrapped, defs)
    return _structural_node(node, defs)


def _without_union(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any] | None:
    """``Optional[X]`` (anyOf X | null) and a lone ``allOf`` as the one schema they stand for, else None."""
    if "anyOf" in node:
        options = [option for option in node.pop("anyOf") if option.get("type") != "null"]
        if len(options) != 1:
            raise SchemaError(f"union without a structural form: {options}")
        return {**_resolve(options[0], defs), **{k: v for k, v in node.items() if k != "default"}}
    if "allOf" in node and len(node["allOf"]) == 1:
        return {**node.pop("allOf")[0], **node}
    return None


def _structural_node(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """A node without references or unions: keep what Kubernetes understands, resolve what it nests."""
    if "const" in node:
        node["enum"] = [node.pop("const")]
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED_KEYS and not (key == "additionalProperties" and isinstance(value, dict)):
            continue
        if key == "default" and (value is None or isinstance(value, (dict, list))):
            continue
        if key == "properties":
            out[key] = {name: _resolve(prop, defs) for name, prop in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = _resolve(value, defs)
        else:
            out[key] = value
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    if out.get("type") == "object" and "properties" not in out and "additionalProperties" not in out:
        out["properties"] = {}
    return out


def _int_or_string(node: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"x-kubernetes-int-or-string": True}
    if "description" in node:
        out["description"] = node["description"]
    out["x-kubernetes-validations"] = node.get("x-kubernetes-validations") or [
        {"rule": INT_OR_STRING_RULE, "message": "must be a positive byte count or a quantity such as 10Gi"}
    ]
    return out


def structural_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of ``model`` (camelCase names, validations included)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.get("$defs", {})
    schema = _resolve({k: v for k, v in raw.items() if k != "$defs"}, defs)
    _check_structural(schema, "")
    return schema  # type: ignore[no-any-return]


def _check_structural(node: Any, path: str) -> None:
    if not isinstance(node, dict):
        return
    for forbidden in ("$ref", "anyOf", "oneOf", "allOf", "const"):
        if forbidden in node:
            raise SchemaError(f"{path or '<root>'}: {forbidden} left in a structural schema")
    if "type" not in node and not node.get("x-kubernetes-int-or-string"):
        raise SchemaError(f"{path or '<root>'}: every node of a structural schema needs a type")
    for name, prop in node.get("properties", {}).items():
        _check_structural(prop, f"{path}.{name}")
    if "items" in node:
        _check_structural(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        _check_structural(node["additionalProperties"], f"{path}{{}}")


def render_crd(definition: CrdDefinition) -> dict[str, Any]:
    """The full ``apiextensions.k8s.io/v1`` CRD for ``definition``."""
    root: dict[str, Any] = {
        "type": "object",
        "description": definition.description,
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": structural_schema(definition.spec_model),
            "status": structural_schema(definition.status_model),
        },
        "required": ["spec"],
    }
    if definition.root_validations:
        root["x-kubernetes-validations"] = [dict(rule) for rule in definition.root_validations]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{definition.plural}.{API_GROUP}",
            "labels": {
                "app.kubernetes.io/managed-by": "uds-vm-operator",
                "app.kubernetes.io/part-of": "uds-vm-operator",
            },
        },
        "spec": {
            "group": API_GROUP,
            "names": {
                "kind": definition.kind,
                "listKind": f"{definition.kind}List",
                "plural": definition.plural,
                "singular": definition.singular,
                "shortNames": list(definition.short_names),
                "categories": list(definition.categories),
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": API_VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}, **definition.extra_subresources},
                    "additionalPrinterColumns": [column.to_dict() for column in definition.printer_columns],
                    "schema": {"openAPIV3Schema": root},
                }
            ],
        },
    }


VM_CRD = CrdDefinition(
    kind=VM_KIND,
    plural=VM_PLURAL,
    singular=VM_SINGULAR,
    short_names=VM_SHORT_NAMES,
    spec_model=UDSVirtualMachineSpec,
    status_model=UDSVirtualMachineStatus,
    description=(
        "A hardened, digest-verified virtual machine on KubeVirt + CDI: the operator creates its DataVolume, "
        "VirtualMachine, NetworkPolicy, cloud-init or sysprep Secret and data disks."
    ),
    printer_columns=(
        PrinterColumn("PHASE", "string", ".status.phase", "Lifecycle phase"),
        PrinterColumn("SOURCE", "string", ".status.source", "Kind of image source"),
        PrinterColumn("PVC-SIZE", "string", ".status.pvcSize", "Deterministic size of the root PVC"),
        PrinterColumn(
            "CHECKSUM-VERIFIED", "boolean", ".status.checksumVerified", "Image digest verified (SI-7)"
        ),
        PrinterColumn("ZERO-TRUST", "boolean", ".status.zeroTrust", "Default-deny network isolation (SC-7)"),
        PrinterColumn(
            "GUEST",
            "string",
            ".status.guest.compliant",
            "Last drift check of the running guest (spec.monitoring)",
        ),
        PrinterColumn("RECONCILER", "string", ".status.reconciledBy", "Which reconciler wrote the status"),
        PrinterColumn("AGE", "date", ".metadata.creationTimestamp", "Time since creation"),
        PrinterColumn("OS", "string", ".spec.os", "Guest operating system", priority=1),
    ),
    root_validations=VM_NAME_VALIDATIONS,
)

POOL_CRD = CrdDefinition(
    kind=POOL_KIND,
    plural=POOL_PLURAL,
    singular=POOL_SINGULAR,
    short_names=POOL_SHORT_NAMES,
    spec_model=UDSVirtualMachinePoolSpec,
    status_model=UDSVirtualMachinePoolStatus,
    description=(
        "A fleet of identical UDSVirtualMachines (members <pool>-<ordinal>) with surge-first, "
        "readiness-gated rolling updates that halt on a stalled member and can roll back."
    ),
    printer_columns=tuple(
        PrinterColumn(column["name"], column["type"], column["json_path"], column["description"])
        for column in POOL_PRINTER_COLUMNS
    ),
    root_validations=POOL_NAME_VALIDATIONS,
    extra_subresources={"scale": dict(POOL_SCALE_SUBRESOURCE)},
)

BACKUP_CRD = CrdDefinition(
    kind=BACKUP_KIND,
    plural=BACKUP_PLURAL,
    singular=BACKUP_SINGULAR,
    short_names=BACKUP_SHORT_NAMES,
    spec_model=UDSVirtualMachineBackupSpec,
    status_model=UDSVirtualMachineBackupStatus,
    description=(
        "One backup of a UDSVirtualMachine's disks to its S3 target, with each disk's sha256 recorded; "
        "a restore from it is held until the restored bytes match the record."
    ),
    printer_columns=tuple(
        PrinterColumn(column["name"], column["type"], column["json_path"], column["description"])
        for column in BACKUP_PRINTER_COLUMNS
    ),
    root_validations=BACKUP_NAME_VALIDATIONS,
)

CRDS: tuple[CrdDefinition, ...] = (VM_CRD, POOL_CRD, BACKUP_CRD)
"""Every CRD this package generates; a new kind is one more entry here."""


def crd_yaml(definition: CrdDefinition) -> str:
    """The CRD as YAML text, stable byte for byte across runs."""
    source = definition.spec_model.__module__.removeprefix("uds_vm_operator.").replace(".", "/") + ".py"
    header = f"# Generated by `python -m uds_vm_operator.api.crdgen` from {source}. Do not edit.\n"
    return header + yaml.safe_dump(
        render_crd(definition), sort_keys=False, default_flow_style=False, width=100
    )


def _write(directory: Path, out: Callable[[str], None]) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    for definition in CRDS:
        (directory / definition.filename).write_text(crd_yaml(definition), encoding="utf-8")
        out(f"wrote {directory / definition.filename}")
    return 0


def _check(directory: Path, out: Callable[[str], None]) -> int:
    drift = False
    for definition in CRDS:
        path = directory / definition.filename
        expected = crd_yaml(definition)
        actual = path.read_text(encoding="utf-8") if path.exists() else ""
        if actual != expected:
            drift = True
            out(
                "".join(
                    difflib.unified_diff(
                        actual.splitlines(keepends=True),
                        expected.splitlines(keepends=True),
                        fromfile=f"{path} (committed)",
                        tofile=f"{path} (generated)",
                    )
                )
            )
    if drift:
        out("CRDs are out of date with api/models.py; run `make crds` and commit the result.")
        return 1
    out(f"CRDs in {directory} match the models.")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Write (or with ``--check`` compare) the generated CRDs in DIR; exit 1 on drift, 2 on usage errors."""
    parser = argparse.ArgumentParser(
        prog="python -m uds_vm_operator.api.crdgen", description=__doc__.splitlines()[0]
    )
    parser.add_argument("directory", type=Path, help="output directory, e.g. deploy/crds")
    parser.add_argument(
        "--check", action="store_true", help="compare instead of writing; exit 1 with a diff on drift"
    )
    args = parser.parse_args(argv)
    if args.directory.exists() and not args.directory.is_dir():
        print(f"error: {args.directory} is not a directory", file=sys.stderr)
        return 2
    if args.check:
        return _check(args.directory, print)
    return _write(args.directory, print)


if __name__ == "__main__":
    sys.exit(main())
