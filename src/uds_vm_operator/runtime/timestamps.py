"""The one place timestamps are formatted the way Kubernetes writes them (and our logs, to match)."""

from __future__ import annotations

from datetime import UTC, datetime


def utc_now() -> datetime:
    """Current time; a seam so tests can pin it."""
    return datetime.now(UTC)


def rfc3339(moment: datetime) -> str:
    """Kubernetes ``metav1.Time``: UTC, second precision (conditions, annotations, status times)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(moment: datetime) -> str:
    """Kubernetes ``metav1.MicroTime`` (an Event's ``eventTime``; our JSON log lines): UTC, microseconds."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


__all__ = ["micro_time", "rfc3339", "utc_now"]
