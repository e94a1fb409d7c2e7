"""One-line JSON logs for the operator process, with secrets kept out.

Each record becomes one JSON object (time, level, logger, message, plus the ``extra`` fields the code
passes such as ``vm`` and ``child``), which log pipelines parse without regexes. Anything that looks like a
credential is redacted before it is written, as a last line of defence: the code never logs Secret data.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import Any

from uds_vm_operator.runtime.timestamps import micro_time

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}
_KOPF_INTERNAL = {"settings", "k8s_skip", "k8s_ref"}
_SECRETISH = re.compile(
    r"(?i)(password|passwd|token|secret[_-]?key|private[_-]?key|authorization)([\"'=: ]+)\S+"
)


def redact(text: str) -> str:
    """Blank out values that follow credential-like keys."""
    return _SECRETISH.sub(r"\1\2<redacted>", text)


class JsonLineFormatter(logging.Formatter):
    """Format a record as a single JSON line."""

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "time": micro_time(datetime.fromtimestamp(record.created, UTC)),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        for key, value in vars(record).items():
            if key in _STANDARD or key in _KOPF_INTERNAL or key.startswith("_") or key in payload:
                continue
            plain = isinstance(value, int | float | bool | type(None))
            payload[key] = value if plain else redact(str(value))
        if record.exc_info:
            payload["exception"] = redact(self.formatException(record.exc_info)).replace("\n", " | ")
        return json.dumps(payload, separators=(",", ":"))


def configure_logging(level: str = "INFO") -> None:
    """Send every logger (ours and kopf's) through the JSON formatter on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLineFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # kopf.objects logs one line per handled watch event; our reconciler logs what matters instead.
    for noisy in ("httpx", "httpx2", "httpcore", "httpcore2", "asyncio", "aiohttp.access", "kopf.objects"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
