"""Build and read the OSCAL component definition (``compliance/oscal-component.yaml``).

``python -m uds_vm_operator.compliance.component compliance/oscal-component.yaml`` writes it from the packaged
validations and ``controls.CONTROLS``; ``--check`` fails on drift (like ``make crds-check``). The embedded
back-matter follows Lula's convention: each implemented requirement links ``{href: "#<uuid>", rel: lula}``
to a resource whose ``description`` is the whole validation document.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from uds_vm_operator import __version__
from uds_vm_operator.compliance.controls import CATALOG_SOURCE, CONTROLS, ControlImplementation
from uds_vm_operator.compliance.errors import ComponentDefinitionError
from uds_vm_operator.compliance.validation import Validation, packaged_validations, parse_validation

OSCAL_VERSION = "1.1.2"
# Fixed, so regenerating without changes is byte-identical; bump when the controls or validations change.
LAST_MODIFIED = "2026-12-03T22:00:00+00:00"
_NAMESPACE = uuid.UUID("6f1c3a53-8e8e-4c0e-9b55-7b6a0e0c1a11")
LULA_NS = "https://docs.lula.dev/oscal/ns"


def stable_uuid(*parts: str) -> str:
    """A uuid5 from names, so ids stay put across regenerations (Lula accepts versions 1-5)."""
    return str(uuid.uuid5(_NAMESPACE, "/".join(parts)))


def build_component_definition(
    validations: Sequence[Validation] | None = None,
    controls: Sequence[ControlImplementation] = CONTROLS,
) -> dict[str, Any]:
    """The component definition as a dict with OSCAL's hyphenated keys, rooted at ``component-definition``."""
    by_name = {v.name: v for v in (validations if validations is not None else packaged_validations())}
    requirements = _implemented_requirements(controls, by_name)
    return {
        "component-definition": {
            "uuid": stable_uuid("component-definition"),
            "metadata": _metadata(),
            "components": [_component(requirements)],
            "back-matter": _back_matter(by_name.values()),
        }
    }


def _implemented_requirements(
    controls: Sequence[ControlImplementation], by_name: Mapping[str, Validation]
) -> list[dict[str, Any]]:
    """Each control, linked to its validation in the back-matter; naming an unknown validation is an error."""
    requirements = []
    for control in controls:
        validation = by_name.get(control.validation)
        if validation is None:
            raise ComponentDefinitionError(
                f"control {control.control_id} names unknown validation {control.validation}"
            )
        requirements.append(
            {
                "uuid": stable_uuid("requirement", control.control_id),
                "control-id": control.control_id,
                "description": control.description,
                "links": [{"href": f"#{validation.uuid}", "rel": "lula", "text": validation.name}],
            }
        )
    return requirements


def _back_matter(validations: Iterable[Validation]) -> dict[str, Any]:
    """Every validation embedded whole, as the resource a lula link points at (Lula's convention)."""
    return {
        "resources": [{"uuid": v.uuid, "title": v.name, "description": v.source_text} for v in validations]
    }


def _metadata() -> dict[str, Any]:
    return {
        "title": "uds-vm-operator",
        "last-modified": LAST_MODIFIED,
        "version": __version__,
        "oscal-version": OSCAL_VERSION,
        "parties": [
            {
                "uuid": stable_uuid("party"),
                "type": "organization",
                "name": "uds-vm-operator maintainers",
            }
        ],
    }


def _component(requirements: list[dict[str, Any]]) -> dict[str, Any]:
    """The operator as one software component, implementing its NIST SP 800-53 Rev 5 requirements."""
    return {
        "uuid": stable_uuid("component", "uds-vm-operator"),
        "type": "software",
        "title": "uds-vm-operator",
        "description": (
            "Kubernetes operator that runs hardened, digest-verified virtual machines on "
            "KubeVirt and CDI for air-gapped sites."
        ),
        "purpose": "Evidence, from live objects, of the controls each managed VM implements.",
        "control-implementations": [
            {
                "uuid": stable_uuid("control-implementation", "nist-800-53-rev5"),
                "source": CATALOG_SOURCE,
                "description": "NIST SP 800-53 Rev 5 controls implemented for every managed VM.",
                "props": [{"name": "framework", "ns": LULA_NS, "value": "nist-800-53-rev5"}],
                "implemented-requirements": requirements,
            }
        ],
    }


@dataclass(frozen=True)
class LinkedControl:
    """A control read back from a component definition, with the validations its lula links resolve to."""

    control_id: str
    validations: tuple[Validation, ...]


def read_component_definition(doc: dict[str, Any]) -> list[LinkedControl]:
    """Resolve every implemented requirement's lula links to back-matter validations.

    An unresolved link is an error here, where Lula would report the control not-satisfied: a broken
    component definition is a usage problem to fix, not a finding about the cluster.
    """
    try:
        root = doc["component-definition"]
        back_matter = {r["uuid"]: r for r in root.get("back-matter", {}).get("resources", [])}
        linked: list[LinkedControl] = []
        for component in root["components"]:
            for implementation in component.get("control-implementations", []):
                for requirement in implementation["implemented-requirements"]:
                    validations = []
                    for link in requirement.get("links", []):
                        if link.get("rel") != "lula":
                            continue
                        href = str(link["href"])
                        if not href.startswith("#") or href[1:] not in back_matter:
                            raise ComponentDefinitionError(
                                f"{requirement['control-id']}: lula link {href} names no back-matter resource"
                            )
                        resource = back_matter[href[1:]]
                        validations.append(
                            parse_validation(resource["description"], where=f"back-matter {resource['uuid']}")
                        )
                    if validations:
                        linked.append(LinkedControl(str(requirement["control-id"]), tuple(validations)))
    except (KeyError, TypeError) as exc:
        raise ComponentDefinitionError(
            f"not an OSCAL component definition (missing {exc}); pass compliance/oscal-component.yaml"
        ) from exc
    if not linked:
        raise ComponentDefinitionError("the component definition links no Lula validation to any control")
    return linked


def load_component_definition(path: Path | None) -> list[LinkedControl]:
    """Read a component definition file, or build the packaged one when ``path`` is None."""
    if path is None:
        return read_component_definition(build_component_definition())
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ComponentDefinitionError(f"cannot read {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ComponentDefinitionError(f"{path} is binary, not a YAML component definition") from exc
    except yaml.YAMLError as exc:
        raise ComponentDefinitionError(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(doc, dict):
        raise ComponentDefinitionError(f"{path} is not an OSCAL component definition")
    return read_component_definition(doc)


class _LiteralDumper(yaml.SafeDumper):
    """Write multi-line strings (the embedded validations) as readable ``|`` blocks."""


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_LiteralDumper.add_representer(str, _str_representer)


def render_yaml(doc: dict[str, Any]) -> str:
    """Serialise with block literals and without key sorting (a stable, reviewable file)."""
    header = "# Generated by `python -m uds_vm_operator.compliance.component`; do not edit by hand.\n"
    return header + yaml.dump(doc, Dumper=_LiteralDumper, sort_keys=False, width=120, allow_unicode=True)


def main(argv: list[str] | None = None) -> int:
    """Write (or ``--check``) the component definition file."""
    parser = argparse.ArgumentParser(description="Generate compliance/oscal-component.yaml")
    parser.add_argument("path", type=Path)
    parser.add_argument(
        "--check", action="store_true", help="fail if the file differs from what is generated"
    )
    args = parser.parse_args(argv)
    text = render_yaml(build_component_definition())
    if args.check:
        current = args.path.read_text() if args.path.exists() else ""
        if current != text:
            print(
                f"{args.path} is stale; run: python -m uds_vm_operator.compliance.component {args.path}",
                file=sys.stderr,
            )
            return 1
        return 0
    args.path.parent.mkdir(parents=True, exist_ok=True)
    args.path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
