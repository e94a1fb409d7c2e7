"""Arguments of ``uds-vm-operator run`` (kept light: kopf is imported only when the command runs)."""

from __future__ import annotations

import argparse
import gc
from typing import Any

from uds_vm_operator.runtime.peering import DEFAULT_LIFETIME_S, MAX_LIFETIME_S, MIN_LIFETIME_S


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
    run.add_argument(
        "--priority",
        type=int,
        default=None,
        help="peering priority, higher wins (default: chosen per replica so replicas never tie; "
        "the longest-running replica leads, and any explicit value >= 0 outranks every chosen one)",
    )
    run.add_argument(
        "--peering-lifetime",
        type=_peering_lifetime,
        default=DEFAULT_LIFETIME_S,
        metavar="SECONDS",
        help=f"how long a silent replica counts as alive; a SIGKILLed leader is replaced within it "
        f"({MIN_LIFETIME_S}-{MAX_LIFETIME_S}, default {DEFAULT_LIFETIME_S})",
    )
    run.add_argument("--max-workers", type=_positive, default=8, help="concurrent reconciles (default 8)")
    run.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    run.add_argument(
        "--controllers",
        type=_controllers,
        default=("vm", "pool", "backup"),
        metavar="LIST",
        help="comma-separated controllers to run: vm, pool, backup (default vm,pool,backup)",
    )


def run_from_args(args: argparse.Namespace) -> int:
    """Start the operator with the parsed arguments; returns the exit code."""
    from uds_vm_operator.runtime.trust import restrict_default_trust  # noqa: PLC0415

    restrict_default_trust(args.kubeconfig)  # before aiohttp is imported: it builds a default SSL context
    # This import creates ~100k long-lived objects (kopf, aiohttp, pydantic): the collector would run ~150
    # times while they load and find next to nothing to free. memory.tune_allocator collects and freezes
    # them once, when they are all in place.
    gc.disable()
    try:
        from uds_vm_operator.controller.process import RunOptions, run  # noqa: PLC0415 (lazy: fast --help)
    finally:
        gc.enable()

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
            peering_lifetime=args.peering_lifetime,
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


def _peering_lifetime(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of seconds") from None
    if value < MIN_LIFETIME_S:
        raise argparse.ArgumentTypeError(
            f"{value} s is below {MIN_LIFETIME_S} s: a live leader would look dead whenever one keep-alive "
            f"PATCH or the clock skew between nodes took a few seconds"
        )
    if value > MAX_LIFETIME_S:
        raise argparse.ArgumentTypeError(
            f"{value} s is above {MAX_LIFETIME_S} s: a killed leader would leave the VMs unreconciled that "
            f"long (default {DEFAULT_LIFETIME_S})"
        )
    return value


def _controllers(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = [name for name in names if name not in ("vm", "pool", "backup")]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"{text!r}: choose from vm, pool, backup (comma-separated), e.g. --controllers pool"
        )
    return names
