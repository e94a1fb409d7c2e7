"""Entry point of the ``uds-vm-operator`` process.

Kept on argparse rather than typer/rich: the operator's cold start is a measured goal, and every import
here is paid on each pod start. Heavy modules (kopf, lightkube) are imported only by the sub-command that
needs them.
"""

from __future__ import annotations

import argparse
import sys

from uds_vm_operator import __version__


def build_parser() -> argparse.ArgumentParser:
    """Describe the sub-commands; separate from ``main`` so tests can check the help text."""
    parser = argparse.ArgumentParser(
        prog="uds-vm-operator",
        description="Reconcile UDSVirtualMachine and UDSVirtualMachinePool resources on KubeVirt + CDI.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("version", help="print the version")
    from uds_vm_operator.verify.command import add_verify_disk_parser  # noqa: PLC0415 (lazy: fast start)

    add_verify_disk_parser(sub)
    from uds_vm_operator.backup.command import add_backup_disks_parser  # noqa: PLC0415 (lazy: fast start)

    add_backup_disks_parser(sub)
    from uds_vm_operator.controller.run_command import add_run_parser  # noqa: PLC0415 (lazy: fast start)

    add_run_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and dispatch; returns the process exit code."""
    args = build_parser().parse_args(argv)
    if args.command == "version":
        print(f"uds-vm-operator {__version__}")
        return 0
    if args.command == "verify-disk":
        from uds_vm_operator.verify.command import run_verify_disk  # noqa: PLC0415

        return run_verify_disk(args)
    if args.command == "backup-disks":
        from uds_vm_operator.backup.command import run_backup_disks  # noqa: PLC0415

        return run_backup_disks(args)
    if args.command == "run":
        from uds_vm_operator.controller.run_command import run_from_args  # noqa: PLC0415

        return run_from_args(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
