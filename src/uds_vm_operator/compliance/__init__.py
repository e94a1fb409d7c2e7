"""Compliance evidence from live objects: the OSCAL component definition, Lula validations, the evaluator.

``component`` builds/reads the component definition, ``validation`` parses the Lula validations linked from
it, ``rego`` runs their policies, ``evaluate`` judges each VM from a snapshot of objects (pure), ``collect``
reads that snapshot from the API server, and ``assessment`` writes OSCAL assessment results.
"""

from uds_vm_operator.compliance.errors import (
    CollectionError,
    ComplianceError,
    ComponentDefinitionError,
    RegoError,
)

__all__ = ["CollectionError", "ComplianceError", "ComponentDefinitionError", "RegoError"]
