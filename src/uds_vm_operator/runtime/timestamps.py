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


def parse_rfc3339(text: object) -> datetime | None:
    """A Kubernetes timestamp (``...Z`` or an offset) as an aware datetime; None when absent or unreadable."""
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


__all__ = ["micro_time", "parse_rfc3339", "rfc3339", "utc_now"]
