"""Evaluate a validation's rego with regopy (Microsoft rego-cpp), the way Lula's OPA provider does.

See ADR 0001 for why regopy: it runs the very rego embedded in the component definition, so
``uds-vmctl compliance validate`` and ``lula validate`` cannot disagree about a policy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from regopy import Input, Interpreter

from uds_vm_operator.compliance.errors import RegoError
from uds_vm_operator.compliance.validation import Validation


@dataclass(frozen=True)
class Verdict:
    """The result of one validation on one input: passed, and the observation strings it produced."""

    passed: bool
    observations: tuple[str, ...]


def _query_path(output_name: str) -> str:
    """Lula names outputs relative to ``data`` (``validate.validate``); rego queries need ``data.`` first."""
    return output_name if output_name.startswith("data.") else f"data.{output_name}"


def evaluate(validation: Validation, document: dict[str, Any]) -> Verdict:
    """Run the validation's rego over ``document`` (keys = the validation's resource names)."""
    interpreter = Interpreter()
    interpreter.add_module(validation.name, validation.rego)
    # Round-trip through JSON so only JSON types reach the interpreter (kube objects may carry datetimes).
    interpreter.set_input(Input(json.loads(json.dumps(document, default=str))))
    outputs = [validation.validation_query, *validation.observation_queries]
    bindings = "; ".join(f"o{i} := {_query_path(name)}" for i, name in enumerate(outputs))
    try:
        output = interpreter.query(bindings)
    except ValueError as exc:  # regopy could not parse the interpreter's own JSON output
        raise RegoError(f"validation {validation.name}: unreadable rego output ({exc})") from exc
    if not output.ok():
        raise RegoError(f"validation {validation.name}: rego evaluation failed: {output}")
    results = output.results
    if not results:
        raise RegoError(
            f"validation {validation.name}: {', '.join(outputs)} is undefined; outputs must always be defined"
        )
    values = results[0].bindings
    passed = values["o0"]
    if not isinstance(passed, bool):
        raise RegoError(f"validation {validation.name}: {validation.validation_query} must be true or false")
    observations = tuple(str(values[f"o{i}"]) for i in range(1, len(outputs)))
    return Verdict(passed=passed, observations=observations)
