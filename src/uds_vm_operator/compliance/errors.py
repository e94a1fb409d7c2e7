"""Errors of the compliance package; each message says what to do next."""

from __future__ import annotations


class ComplianceError(Exception):
    """Base of every compliance error (usage problems: bad component definition, unreachable cluster)."""


class ComponentDefinitionError(ComplianceError):
    """The OSCAL component definition or one of its Lula validations is malformed."""


class RegoError(ComplianceError):
    """A validation's rego could not be evaluated."""


class CollectionError(ComplianceError):
    """The live objects a validation needs could not be read from the cluster."""
