"""Entry point of ``uds-vmctl``.

Each command lives in its own module and registers itself on the app, so a reader finds ``prep`` in
``cli/prep.py``. Exit codes are a contract with scripts: 0 ok, 1 a check failed, 2 usage error.

Commands are imported lazily: a field engineer running ``prep`` on a multi-GB image should not pay for the
Kubernetes client, the API models and the compliance engine on every start. ``main`` registers only the
command named on the command line (all of them for ``--help``); ``app`` (for tests) has every command.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import typer

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2

COMMAND_MODULES: dict[str, str] = {
    "prep": "prep",
    "upload": "upload",
    "verify": "verify",
    "inventory": "inventory",
    "power": "power",
    "compliance": "compliance",
    "golden-image": "goldenimage",
    "version": "version",
}
"""Command name on the command line → module under ``uds_vm_operator.cli`` that registers it."""


def build_app(only: str | None = None) -> typer.Typer:
    """Build the typer app with every command, or only ``only`` when the caller knows which one runs."""
    app = typer.Typer(
        name="uds-vmctl",
        help=(
            "Field CLI for uds-vm-operator: prepare and check VM disk images before they cross the air gap, "
            "upload them, and inspect, power and audit the VMs the operator manages.\n\n"
            "Exit codes: 0 ok, 1 a check failed (air-gap violation, digest mismatch), 2 usage error."
        ),
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )

    @app.callback()
    def _root() -> None:
        """Keep uds-vmctl a command group even when a single command is registered."""

    for command, module in COMMAND_MODULES.items():
        if only is None or command == only:
            importlib.import_module(f"uds_vm_operator.cli.{module}").register(app)
    return app


def _command_named(argv: list[str]) -> str | None:
    """The sub-command on the command line, if it is one we know (options before it are root options)."""
    for arg in argv:
        if arg.startswith("-"):
            continue
        return arg if arg in COMMAND_MODULES else None
    return None


def __getattr__(name: str) -> Any:
    """Provide ``app`` (every command) on first access, for tests and ``python -m`` users."""
    if name == "app":
        return build_app()
    raise AttributeError(name)


def main() -> None:
    """Run the CLI; used by the ``uds-vmctl`` console script."""
    build_app(_command_named(sys.argv[1:]))()


if __name__ == "__main__":
    main()
