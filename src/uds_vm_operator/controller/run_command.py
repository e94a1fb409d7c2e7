"""Arguments of ``uds-vm-operator run`` (kept light: kopf is imported only when the command runs)."""

from __future__ import annotations

import argparse
from typing import Any


def add_run_parser(sub: Any) -> None:
    """Register the ``run`` sub-command on the operator's argparse sub-parsers."""
    run = sub.add_parser("run", help="run the operator (watches, reconciles, metrics and probes)")
    run.add_argument(
        "--kubeconfig", help="kubeconfig file (default: in-cluster service account, $KUBECONFIG)"
    )
    scope = run.add_mutually_exclusive_group()
    scope.add_argument(
        "--namespace", "-n", action="append", default=[], metavar="NS", help="serve only NS (repeatable)"
    )
    scope.add_argument("--all-namespaces", "-A", action="store_true", help="serve every namespace (default)")
    run.add_argument(
        "--metrics-port", type=_port, default=8080, help="Prometheus /metrics port (default 8080)"
    )
    run.add_argument(
        "--health-port", type=_port, default=8081, help="/healthz and /readyz port (default 8081)"
    )
    run.add_argument("--bind-address", default="0.0.0.0", help="address for metrics and probes")
    peering = run.add_mutually_exclusive_group()
    peering.add_argument("--peering", metavar="NAME", help="kopf peering object name (replicas coordinate)")
    peering.add_argument("--standalone", action="store_true", help="run without peering (single replica)")
    run.add_argument("--priority", type=int, default=0, help="peering priority (higher wins)")
    run.add_argument("--max-workers", type=_positive, default=8, help="concurrent reconciles (default 8)")
    run.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    run.add_argument(
        "--controllers",
        type=_controllers,
        default=("vm", "pool"),
        metavar="LIST",
        help="comma-separated controllers to run: vm, pool (default vm,pool)",
    )


def run_from_args(args: argparse.Namespace) -> int:
    """Start the operator with the parsed arguments; returns the exit code."""
    from uds_vm_operator.controller.process import RunOptions, run  # noqa: PLC0415 (lazy: fast --help)

    return run(
        RunOptions(
            kubeconfig=args.kubeconfig,
            namespaces=tuple(args.namespace),
            all_namespaces=args.all_namespaces,
            metrics_port=args.metrics_port,
            health_port=args.health_port,
            bind_address=args.bind_address,
            peering=args.peering,
            standalone=args.standalone,
            priority=args.priority,
            max_workers=args.max_workers,
            log_level=args.log_level,
            controllers=args.controllers,
        )
    )


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text} is not a TCP port (0-65535)")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be at least 1")
    return value


def _controllers(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = [name for name in names if name not in ("vm", "pool")]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"{text!r}: choose from vm, pool (comma-separated), e.g. --controllers pool"
        )
    return names
