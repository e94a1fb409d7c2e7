"""The one place where a failure of any ``uds-vmctl`` command becomes one line on stderr and an exit code.

Field engineers run the CLI in the worst conditions; a traceback there reads as "broken tool". So commands
raise, and never print their own error lines or pick exit codes: a :class:`CliError` (the message is
written for the user and says how to fix it), or an error of a library package (images, compliance,
verify, the controller's kubeconfig reader), or an :class:`OSError` naming a path. :func:`describe` maps
each to its message and exit code; anything else is a bug in uds-vmctl and still ends in one line, with
the traceback behind ``--debug`` or ``UDS_VMCTL_DEBUG=1`` for the bug report.

This module imports nothing beyond the standard library: it runs on every start, and ``prep`` on a large
image should not pay for the Kubernetes client to learn how to report an error.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import traceback

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
"""A check failed: air-gap violation, digest mismatch, not verified, the cluster refused or is unreachable."""
EXIT_USAGE = 2
"""The command line or its inputs are wrong: bad flags, unreadable files, an unusable kubeconfig."""
EXIT_INTERRUPTED = 130
"""Ctrl-C, as shells report a SIGINT."""
DEBUG_ENV = "UDS_VMCTL_DEBUG"
MAX_MESSAGE_CHARS = 2000
"""A server's error body can be long; one line stays readable."""


class CliError(Exception):
    """An expected failure with a message written for the user; ``exit_code`` follows the CLI contract."""

    exit_code = EXIT_CHECK_FAILED

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(CliError):
    """The command line or an input file is wrong (exit 2); the message says how to fix it."""

    exit_code = EXIT_USAGE


class CheckFailed(CliError):  # noqa: N818 (reads as the outcome it is: "raise CheckFailed(...)")
    """A check the command exists for did not pass (exit 1)."""

    exit_code = EXIT_CHECK_FAILED


LIBRARY_FAILURES: tuple[tuple[str, str, int], ...] = (
    ("uds_vm_operator.images.survey", "NotAFileError", EXIT_USAGE),
    ("uds_vm_operator.images.errors", "ImageError", EXIT_CHECK_FAILED),
    ("uds_vm_operator.verify.errors", "VerifyError", EXIT_CHECK_FAILED),
    ("uds_vm_operator.compliance.errors", "ComplianceError", EXIT_USAGE),
    ("uds_vm_operator.runtime.errors", "KubeConfigError", EXIT_USAGE),
)
"""Errors of library packages whose message is already written for the user: (module, class, exit code).

Named, not imported: an exception whose module was never imported cannot have been raised, so the lookup
only consults ``sys.modules`` and the start-up of a command stays what that command needs. First match
wins (``NotAFileError`` is an ``OSError`` that means "give a file", a usage error).
"""


def describe(exc: BaseException) -> tuple[str, int]:
    """The one-line message and the exit code for ``exc``; an unknown exception is reported as a bug."""
    if isinstance(exc, CliError):
        return one_line(str(exc)), exc.exit_code
    for module_name, class_name, code in LIBRARY_FAILURES:
        cls = getattr(sys.modules.get(module_name), class_name, None)
        if isinstance(cls, type) and isinstance(exc, cls):
            return one_line(str(exc)), code
    if isinstance(exc, OSError):
        return one_line(os_error_message(exc)), EXIT_USAGE
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", EXIT_INTERRUPTED
    detail = one_line(f"{type(exc).__name__}: {exc}")
    return (
        f"unexpected {detail}; this is a bug in uds-vmctl: run it again with --debug (or {DEBUG_ENV}=1) "
        "and report the traceback",
        EXIT_CHECK_FAILED,
    )


def os_error_message(exc: OSError) -> str:
    """``PATH: what the system said`` plus what to check, for a file that cannot be read or written."""
    path = exc.filename if exc.filename is not None else None
    reason = exc.strerror or str(exc) or type(exc).__name__
    reason = reason[:1].lower() + reason[1:]
    hint = {
        errno.ENOENT: "check the path",
        errno.EACCES: "check the file's permissions",
        errno.EPERM: "check the file's permissions",
        errno.ELOOP: "a symbolic link points back at itself; give the real file",
        errno.EISDIR: "give a file, not a directory",
        errno.ENOTDIR: "a part of the path is not a directory",
        errno.ENOSPC: "free some space and run again",
        errno.EROFS: "choose a writable location",
    }.get(exc.errno or 0, "check the path")
    return f"{path}: {reason}; {hint}" if path is not None else f"{reason}; {hint}"


def one_line(message: str) -> str:
    """Collapse whitespace (a message may quote a multi-line server answer) and bound the length."""
    line = " ".join(message.split()) or "unknown error"
    return line if len(line) <= MAX_MESSAGE_CHARS else line[: MAX_MESSAGE_CHARS - 3] + "..."


def debug_from_env() -> bool:
    """True when ``UDS_VMCTL_DEBUG`` asks for tracebacks (any value but empty, 0, false, no, off)."""
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


def report(exc: BaseException, *, debug: bool) -> int:
    """Print ``error: <one line>`` on stderr (the traceback first when ``debug``); return the exit code."""
    message, code = describe(exc)
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    with contextlib.suppress(OSError, ValueError):  # stderr closed or gone: the exit code still tells
        print(f"error: {message}", file=sys.stderr, flush=True)
    return code
