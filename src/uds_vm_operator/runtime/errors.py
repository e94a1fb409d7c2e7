"""Exceptions of the controller layer; each message says what went wrong and what to do next.

The reconcile contract's error split (kopf's Temporary/PermanentError, controller-runtime's TerminalError):
an error is *transient* (it may heal by itself: retry with exponential backoff) or *terminal* (retrying
soon cannot fix it: wait the controller's long delay, in case the world changes without an event). Every
:class:`ControllerError` says which through :attr:`ControllerError.transient`; anything else is transient.
"""

from __future__ import annotations


class ControllerError(Exception):
    """Base of every error the controller raises on purpose."""

    transient: bool = True
    """May heal by itself (conflict, throttling, an unreachable server): retried with backoff."""


class TerminalError(ControllerError):
    """Retrying soon cannot fix this (a name taken, a record gone): the long delay, not the backoff."""

    transient = False


def is_transient(exc: BaseException) -> bool:
    """The one rule the work queue applies: only a terminal controller error skips the backoff."""
    return exc.transient if isinstance(exc, ControllerError) else True


class KubeApiError(ControllerError):
    """The API server answered a request with an error status."""

    def __init__(self, code: int, reason: str, message: str, *, what: str) -> None:
        self.code = code
        self.reason = reason
        self.api_message = message
        super().__init__(f"{what}: HTTP {code} {reason}: {message}")

    @property
    def transient(self) -> bool:  # type: ignore[override]  # the base's class attribute, computed here
        """Conflicts, throttling and server errors heal by themselves; 4xx validation errors do not."""
        return self.code in (409, 429) or self.code >= 500


class KubeUnreachableError(ControllerError):
    """The API server could not be reached at all (network, TLS, DNS): transient."""


class KubeConfigError(ControllerError):
    """No usable kubeconfig: tell the user which file was tried and how to point at another."""
