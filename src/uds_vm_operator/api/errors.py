"""The exception hierarchy of the API layer.

Every message is one line a user can act on: it names the field and says what to write instead, so the
controller can copy it verbatim into a condition and an Event.
"""

from __future__ import annotations


class SpecError(ValueError):
    """A UDSVirtualMachine spec the operator cannot honour; the message names the field and the fix."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))

    @property
    def message(self) -> str:
        """The one-line, user-facing text (also ``str(error)``)."""
        return str(self)
