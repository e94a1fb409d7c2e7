"""``uds-vm-operator verify-disk``: the entry point of the in-cluster verifier pod.

Kept on argparse and the standard library: it starts in every verifier pod, so it must start fast and
must not import kopf or lightkube. Exit codes: 0 match, 1 mismatch, 2 error or usage error.
"""

from __future__ import annotations

import argparse
import sys
import time

from uds_vm_operator.termination import add_termination_log_argument, write_termination_log


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of bytes") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of bytes")
    return value


def add_verify_disk_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Describe ``verify-disk`` on the operator's sub-command parser."""
    parser = sub.add_parser(
        "verify-disk",
        help="hash the first VIRTUAL_SIZE bytes of a disk and compare with the expected digest",
        description=(
            "Hash exactly the first --virtual-size bytes of a disk image file or block device and compare "
            "the result with --expected. Prints one JSON object and writes it to the termination log. "
            "Exit codes: 0 match, 1 mismatch, 2 error."
        ),
    )
    parser.add_argument("--path", required=True, help="disk.img on a filesystem volume, or the block device")
    parser.add_argument("--virtual-size", required=True, type=_positive_int, help="bytes to hash")
    parser.add_argument("--expected", required=True, help="sha256:<64 hex> or sha512:<128 hex>")
    add_termination_log_argument(parser)


def run_verify_disk(args: argparse.Namespace) -> int:
    """Verify, print and record the result; returns the process exit code."""
    from uds_vm_operator.verify.core import verify_disk  # noqa: PLC0415 (the operator's `run` never needs it)

    started = time.monotonic()
    result = verify_disk(args.path, args.virtual_size, args.expected)
    elapsed_s = max(time.monotonic() - started, 1e-9)
    document = result.to_json()
    print(document, flush=True)
    if result.result == "error":
        print(f"verify-disk: error: {result.message}", file=sys.stderr)
    else:
        mib_per_s = result.bytes / elapsed_s / (1 << 20)
        summary = f"hashed {result.bytes} bytes in {elapsed_s:.2f} s ({mib_per_s:.0f} MiB/s)"
        print(f"verify-disk: {result.result}: {summary}", file=sys.stderr)
    write_termination_log("verify-disk", args.termination_log, document)
    return result.exit_code
