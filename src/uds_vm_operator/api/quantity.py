"""Kubernetes resource quantities, parsed exactly.

Sizes in a UDSVirtualMachine are written the Kubernetes way (``10Gi``, ``500M``, or plain bytes). The
renderer needs the byte count to compute the deterministic PVC size, so parsing must be exact (Decimal, no
floats) and must reject what the API server would reject.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation

from uds_vm_operator.api.errors import SpecError

QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"
"""Byte quantities we accept: binary or decimal SI suffix, no exponent forms, no negative values."""

_SUFFIX_FACTOR = {
    "": 1,
    "Ki": 1 << 10,
    "Mi": 1 << 20,
    "Gi": 1 << 30,
    "Ti": 1 << 40,
    "Pi": 1 << 50,
    "Ei": 1 << 60,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}
_QUANTITY_RE = re.compile(QUANTITY_PATTERN)


def parse_bytes(value: int | str, *, field: str) -> int:
    """Return the byte count of ``value`` (an int or a quantity string), rounding fractions up.

    ``field`` is the JSON path used in the error message, e.g. ``spec.disk.virtualSize``.
    """
    if isinstance(value, bool):
        raise SpecError(f"{field}: expected a size such as 10Gi or a byte count, got {value!r}")
    if isinstance(value, int):
        if value <= 0:
            raise SpecError(f"{field}: size must be positive, got {value}; write e.g. 10Gi")
        return value
    match = _QUANTITY_RE.match(value.strip())
    if match is None:
        raise SpecError(
            f"{field}: {value!r} is not a size; write a quantity such as 10Gi, 512Mi or 2000000000"
        )
    number_text = value.strip()[: len(value.strip()) - len(match.group(2) or "")]
    try:
        number = Decimal(number_text)
    except InvalidOperation as exc:  # pragma: no cover - the regex already guarantees a decimal
        raise SpecError(f"{field}: {value!r} is not a size; write e.g. 10Gi") from exc
    total = (number * _SUFFIX_FACTOR[match.group(2) or ""]).to_integral_value(ROUND_CEILING)
    if total <= 0:
        raise SpecError(f"{field}: size must be positive, got {value!r}; write e.g. 10Gi")
    return int(total)


CPU_PATTERN = r"^[0-9]+(\.[0-9]+)?m?$"
"""CPU quantities we accept: whole or decimal cores (``1``, ``0.5``) or millicores (``100m``)."""
_CPU_RE = re.compile(CPU_PATTERN)


def parse_millicores(value: int | str, *, field: str) -> int:
    """Return ``value`` in millicores (fractions of a millicore rounded up, as the API server does).

    Settings the operator hands to Kubernetes unchanged (a pod's CPU request) are checked here first, so a
    typo is refused by the operator with the setting's name rather than by the API server on every pod.
    """
    if isinstance(value, bool):
        raise SpecError(f"{field}: expected a CPU quantity such as 100m or 1, got {value!r}")
    text = str(value).strip()
    if _CPU_RE.match(text) is None:
        raise SpecError(f"{field}: {value!r} is not a CPU quantity; write e.g. 100m, 0.5 or 2")
    milli = Decimal(text[:-1]) if text.endswith("m") else Decimal(text) * 1000
    total = milli.to_integral_value(ROUND_CEILING)
    if total <= 0:
        raise SpecError(f"{field}: a CPU quantity must be positive, got {value!r}; write e.g. 100m")
    return int(total)
