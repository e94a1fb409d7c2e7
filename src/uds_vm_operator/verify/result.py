"""The verifier's verdict, as the small JSON document the operator reads from the pod's termination message.

Kubernetes keeps at most 4096 bytes of a termination message, so the document stays flat and short:
``{"result": "match"|"mismatch"|"error", "expected", "actual", "bytes"}`` plus ``message`` on errors.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

Verdict = Literal["match", "mismatch", "error"]
VERDICTS: tuple[Verdict, ...] = ("match", "mismatch", "error")
TERMINATION_MESSAGE_LIMIT = 4096
EXIT_CODES: dict[Verdict, int] = {"match": 0, "mismatch": 1, "error": 2}


@dataclass(frozen=True)
class VerifyResult:
    """What one verification run found; ``actual`` is ``None`` when the disk could not be hashed."""

    result: Verdict
    expected: str
    actual: str | None
    bytes: int
    message: str | None = None

    @property
    def exit_code(self) -> int:
        """0 match, 1 mismatch, 2 error: the pod's exit code mirrors the verdict for ``kubectl get pod``."""
        return EXIT_CODES[self.result]

    def to_json(self) -> str:
        """Serialise compactly; an over-long message is cut so the document fits a termination message."""
        doc: dict[str, Any] = {
            "result": self.result,
            "expected": self.expected,
            "actual": self.actual,
            "bytes": self.bytes,
        }
        if self.message is not None:
            doc["message"] = self.message
        text = json.dumps(doc, separators=(",", ":"), sort_keys=True)
        overflow = len(text.encode()) - TERMINATION_MESSAGE_LIMIT
        if overflow > 0 and self.message is not None:
            # json.dumps escapes non-ASCII, so one character of message is at least one byte of document
            doc["message"] = self.message[: max(0, len(self.message) - overflow - 3)] + "..."
            text = json.dumps(doc, separators=(",", ":"), sort_keys=True)
        return text


def parse_result(text: str) -> VerifyResult:
    """Parse a termination message back into a result; raise ``ValueError`` if it is not one of ours.

    The operator treats anything unparsable as an error verdict, never as a match.
    """
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"verifier message is not JSON: {exc.msg}") from exc
    if not isinstance(doc, dict):
        raise ValueError("verifier message is not a JSON object")
    verdict = doc.get("result")
    if verdict not in VERDICTS:
        raise ValueError(f"verifier message has an unknown result {verdict!r}")
    expected, actual = doc.get("expected"), doc.get("actual")
    count, message = doc.get("bytes"), doc.get("message")
    if not isinstance(expected, str) or not (actual is None or isinstance(actual, str)):
        raise ValueError("verifier message lacks the expected/actual digest strings")
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError("verifier message lacks a non-negative byte count")
    if message is not None and not isinstance(message, str):
        raise ValueError("verifier message has a non-string message field")
    if verdict == "match" and actual != expected:
        raise ValueError("verifier message claims a match but expected and actual differ")
    return VerifyResult(verdict, expected, actual, count, message)
