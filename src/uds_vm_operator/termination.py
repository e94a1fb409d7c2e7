"""The termination message: how the operator's short-lived pods (``verify-disk``, ``backup-disks``) report.

Each pod command writes one JSON document to its container's termination-message file; the kubelet copies it
into the pod's status, where the operator reads it without any access to pod logs. Both ends live here so
they cannot drift. Standard library only: the pod commands import it on every start.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

TERMINATION_LOG_PATH = "/dev/termination-log"


def add_termination_log_argument(parser: argparse.ArgumentParser) -> None:
    """``--termination-log``: where a pod command writes its JSON result ('' outside a pod)."""
    parser.add_argument(
        "--termination-log",
        default=TERMINATION_LOG_PATH,
        help=f"where to write the JSON result (default {TERMINATION_LOG_PATH}; '' to skip)",
    )


def write_termination_log(command: str, path: str, document: str) -> None:
    """Write the result where the kubelet picks it up; a failure only warns (the result was printed)."""
    if not path:
        return
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(document)
    except OSError as exc:
        print(
            f"{command}: warning: could not write the result to {path}: "
            f"{exc.strerror}; pass --termination-log '' when running outside a pod",
            file=sys.stderr,
        )


def terminated_state(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The first terminated container state of a pod (its exit code, reason and message), if any."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if isinstance(terminated, Mapping):
            return terminated
    return None
