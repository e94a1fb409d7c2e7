"""``uds-vm-operator backup-disks``: the entry point of the backup pod (issue 33).

Kept on argparse and the standard library like ``verify-disk``: the parser is described on every operator
start, so this module imports nothing at module level, and the copier (``copier``, ``s3``) only when it runs.
Exit codes: 0 every disk uploaded and every prune key deleted, 1 the backup failed, 2 a usage error. Once the
arguments parse, every outcome is one JSON document, printed and written to the termination log, because
that is what the operator reads.
"""

from __future__ import annotations

import argparse
import os
import sys
from types import FrameType

from uds_vm_operator.termination import add_termination_log_argument, write_termination_log

ACCESS_KEY_ENV = "UDS_BACKUP_ACCESS_KEY_ID"
SECRET_KEY_ENV = "UDS_BACKUP_SECRET_ACCESS_KEY"
PART_MIB_RANGE = (5, 512)


class _TerminatedError(Exception):
    """SIGTERM arrived (the pod was deleted or its deadline passed): unwind so uploads are aborted."""


def add_backup_disks_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Describe ``backup-disks`` on the operator's sub-command parser."""
    low, high = PART_MIB_RANGE
    parser = sub.add_parser(
        "backup-disks",
        help="stream a VM's disks to S3 with their sha256, then delete replaced backups",
        description=(
            "Upload each --disk to an S3 bucket (multipart, SigV4-signed, path-style), recording the sha256 "
            "of the bytes sent, then delete the --prune keys. Credentials come from the environment: "
            f"{ACCESS_KEY_ENV} and {SECRET_KEY_ENV}. Prints one JSON object and writes it to the termination "
            "log. Exit codes: 0 ok, 1 failed, 2 usage error."
        ),
    )
    parser.add_argument("--endpoint", required=True, help="the S3 store: http(s)://host[:port]")
    parser.add_argument("--bucket", required=True, help="the bucket to write to (it must exist)")
    parser.add_argument(
        "--region",
        default="",
        help="the SigV4 signing region (default: derived from the endpoint's host as CDI v1.65 derives it)",
    )
    parser.add_argument(
        "--disk",
        action="append",
        default=[],
        metavar="NAME=PATH=KEY",
        help="a disk to upload: its name, /disk-<n>/disk.img or its block device, and the object key "
        "(repeat for each disk; at least one)",
    )
    parser.add_argument(
        "--prune",
        action="append",
        default=[],
        metavar="KEY",
        help="an object to delete once every disk is uploaded (repeatable; a missing key is fine)",
    )
    parser.add_argument(
        "--part-mib", type=int, default=32, help=f"multipart part size in MiB, {low}..{high} (default 32)"
    )
    parser.add_argument("--ca-file", default=None, help="a CA bundle to trust for an https endpoint")
    add_termination_log_argument(parser)


def run_backup_disks(args: argparse.Namespace) -> int:
    """Back up, print and record the result; returns the process exit code."""
    import signal  # noqa: PLC0415 (this and below: only the backup pod pays for them)
    import threading  # noqa: PLC0415
    import traceback  # noqa: PLC0415
    from urllib.parse import urlsplit  # noqa: PLC0415

    from uds_vm_operator.backup import copier  # noqa: PLC0415 (the operator's `run` never needs it)
    from uds_vm_operator.backup.s3 import S3Client, region_of  # noqa: PLC0415

    try:
        disks = [copier.parse_disk(text) for text in args.disk]
        copier.check_plan(disks, args.prune)
        low, high = PART_MIB_RANGE
        if not low <= args.part_mib <= high:
            raise copier.BackupUsageError(f"--part-mib {args.part_mib} must be within {low}..{high}")
        access_key = os.environ.get(ACCESS_KEY_ENV, "")
        secret_key = os.environ.get(SECRET_KEY_ENV, "")
        missing = [
            name for name, value in ((ACCESS_KEY_ENV, access_key), (SECRET_KEY_ENV, secret_key)) if not value
        ]
        if missing:
            raise copier.BackupUsageError(
                f"set {' and '.join(missing)} (the S3 credentials; the backup pod takes them from a Secret)"
            )
        region = args.region or region_of(urlsplit(args.endpoint).netloc)
        client = S3Client(args.endpoint, region, access_key, secret_key, ca_file=args.ca_file or None)
    except ValueError as exc:  # BackupUsageError, or S3Client refusing the endpoint
        return _finish(args, copier.error_json(str(exc)), 2, str(exc))
    except OSError as exc:  # the CA bundle: missing, unreadable or not PEM
        message = f"--ca-file {args.ca_file}: cannot load it: {exc.strerror or exc}"
        return _finish(args, copier.error_json(message), 2, message)

    # SIGTERM (the pod deleted, its deadline passed) becomes an exception in the main thread, so the multipart
    # upload in progress is aborted instead of left as orphaned parts the store keeps (and bills) for days.
    catching = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if catching else None
    try:
        with client:
            result = copier.back_up(client, args.bucket, disks, args.prune, part_bytes=args.part_mib << 20)
    except copier.BackupError as exc:
        return _finish(args, copier.error_json(str(exc)), 1, str(exc))
    except _TerminatedError:
        message = "stopped by SIGTERM (the pod was deleted or timed out); the upload in progress was aborted"
        return _finish(args, copier.error_json(message), 1, message)
    except Exception as exc:  # a bug: still one JSON document, so the operator reports it
        traceback.print_exc()
        message = f"unexpected {type(exc).__name__}: {exc}"
        return _finish(args, copier.error_json(message), 1, message)
    finally:
        if catching:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
    total_mib = sum(disk.size for disk in result.disks) / (1 << 20)
    rate = total_mib / max(result.seconds, 1e-9)
    summary = f"{len(result.disks)} disks, {total_mib:.0f} MiB in {result.seconds:.1f} s ({rate:.0f} MiB/s)"
    return _finish(args, result.to_json(), 0, summary)


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise _TerminatedError


def _finish(args: argparse.Namespace, document: str, code: int, summary: str) -> int:
    print(document, flush=True)
    outcome = "ok" if code == 0 else "error"
    print(f"backup-disks: {outcome}: {summary}", file=sys.stderr, flush=True)
    write_termination_log("backup-disks", args.termination_log, document)
    return code
