"""Exceptions of the controller layer; each message says what went wrong and what to do next."""

from __future__ import annotations


class ControllerError(Exception):
    """Base of every error the controller raises on purpose."""


class KubeApiError(ControllerError):
    """The API server answered a request with an error status."""

    def __init__(self, code: int, reason: str, message: str, *, what: str) -> None:
        self.code = code
        self.reason = reason
        self.api_message = message
        super().__init__(f"{what}: HTTP {code} {reason}: {message}")

    @property
    def retryable(self) -> bool:
        """Conflicts, throttling and server errors heal by themselves; 4xx validation errors do not."""
        return self.code in (409, 429) or self.code >= 500


class KubeUnreachableError(ControllerError):
    """The API server could not be reached at all (network, TLS, DNS)."""

    retryable = True


class KubeConfigError(ControllerError):
    """No usable kubeconfig: tell the user which file was tried and how to point at another."""
