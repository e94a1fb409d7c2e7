"""Lula validations: the kubernetes-domain / OPA-provider documents linked from the component definition.

The same documents are embedded in ``compliance/oscal-component.yaml`` (back-matter) for ``lula validate``
and evaluated by ``uds-vmctl compliance validate``, so both tools judge the same rego. The packaged copies
under ``validations/`` are the source of truth; the component definition is generated from them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from uds_vm_operator.compliance.errors import ComponentDefinitionError

UUID_PATTERN = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[1-5][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
VM_RESOURCE = "udsvms"
"""The resource name every per-VM validation lists the UDSVirtualMachines under."""
CLOCK_INPUT = "now_ns"
"""The input key holding the evaluation's clock (see ``evaluate``); no resource may take this name."""


@dataclass(frozen=True)
class ResourceRule:
    """Which API objects a validation reads (Lula ``resource-rule``) and the input key they appear under."""

    name: str
    group: str
    version: str
    resource: str

    @property
    def api_key(self) -> tuple[str, str, str]:
        """Identity of the API resource, shared by validations that read the same objects."""
        return (self.group, self.version, self.resource)


@dataclass(frozen=True)
class Validation:
    """One Lula validation: its identity, what it reads and the rego that judges it."""

    name: str
    uuid: str
    resources: tuple[ResourceRule, ...]
    rego: str
    validation_query: str
    observation_queries: tuple[str, ...]
    source_text: str


def _require(mapping: Any, key: str, where: str) -> Any:
    if not isinstance(mapping, dict) or key not in mapping:
        raise ComponentDefinitionError(
            f"{where}: missing {key!r}; see Lula's validation format (domain, provider)"
        )
    return mapping[key]


def parse_validation(text: str, where: str = "validation") -> Validation:
    """Parse and check one validation document (the subset of Lula's schema this project uses).

    Rejecting early what Lula would reject later keeps our evaluator and ``lula validate`` in step.
    """
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ComponentDefinitionError(f"{where}: not valid YAML ({exc}); fix the validation text") from exc
    allowed = {"lula-version", "metadata", "domain", "provider"}
    if not isinstance(doc, dict) or set(doc) - allowed:
        raise ComponentDefinitionError(f"{where}: top-level keys must be among {sorted(allowed)}")
    metadata = _require(doc, "metadata", where)
    name = _require(metadata, "name", where)
    uuid = str(_require(metadata, "uuid", where))
    if not UUID_PATTERN.match(uuid):
        raise ComponentDefinitionError(f"{where}: metadata.uuid {uuid!r} is not a version 1-5 UUID")
    domain = _require(doc, "domain", where)
    if domain.get("type") != "kubernetes":
        raise ComponentDefinitionError(
            f"{where}: only domain.type kubernetes is supported, not {domain.get('type')!r}"
        )
    spec = _require(domain, "kubernetes-spec", where)
    rules = []
    for item in _require(spec, "resources", where):
        rule = _require(item, "resource-rule", f"{where} resource {item.get('name')!r}")
        if item.get("name") == CLOCK_INPUT:
            raise ComponentDefinitionError(
                f"{where}: resource name {CLOCK_INPUT!r} is reserved for the evaluation's clock; rename it"
            )
        rules.append(
            ResourceRule(
                name=str(_require(item, "name", where)),
                group=str(rule.get("group", "")),
                version=str(_require(rule, "version", where)),
                resource=str(_require(rule, "resource", where)),
            )
        )
    provider = _require(doc, "provider", where)
    if provider.get("type") != "opa":
        raise ComponentDefinitionError(
            f"{where}: only provider.type opa is supported, not {provider.get('type')!r}"
        )
    opa = _require(provider, "opa-spec", where)
    rego = str(_require(opa, "rego", where))
    # Lula's schema pattern ".*\S\s\n.*": a rego without a blank line is refused by `lula validate`.
    if not re.search(r".*\S\s\n.*", rego):
        raise ComponentDefinitionError(
            f"{where}: rego needs a blank line after `package validate` (Lula schema)"
        )
    output = opa.get("output", {})
    return Validation(
        name=str(name),
        uuid=uuid,
        resources=tuple(rules),
        rego=rego,
        validation_query=str(output.get("validation", "validate.validate")),
        observation_queries=tuple(output.get("observations", ["validate.msg"])),
        source_text=text,
    )


def packaged_validations() -> list[Validation]:
    """The validations shipped with the package, in file-name order (stable ids and output order)."""
    folder = resources.files("uds_vm_operator.compliance") / "validations"
    entries = sorted(
        (entry for entry in folder.iterdir() if entry.name.endswith(".yaml")), key=lambda e: e.name
    )
    return [parse_validation(entry.read_text(), where=f"validations/{entry.name}") for entry in entries]
