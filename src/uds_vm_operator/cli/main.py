"""Entry point of ``uds-vmctl``.

Each command lives in its own module and registers itself on the app, so a reader finds ``prep`` in
``cli/prep.py``. Exit codes are a contract with scripts: 0 ok, 1 a check failed, 2 usage error (defined in
:mod:`._errors`, which also turns every failure into one line on stderr: :class:`GuardedGroup` applies it to
whatever a command raises, and :func:`main` to anything that escapes before a command runs).

Commands are imported lazily: a field engineer running ``prep`` on a multi-GB image should not pay for the
Kubernetes client, the API models and the compliance engine on every start. ``main`` registers only the
command named on the command line (all of them for ``--help``); ``app`` (for tests) has every command.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import typer
from typer.core import TyperGroup

from uds_vm_operator.cli._errors import debug_from_env, report

COMMAND_MODULES: dict[str, str] = {
    "prep": "prep",
    "upload": "upload",
    "verify": "verify",
    "inventory": "inventory",
    "power": "power",
    "backup": "backup",
    "restore": "backup",
    "compliance": "compliance",
    "golden-image": "goldenimage",
    "version": "version",
}
"""Command name on the command line → module under ``uds_vm_operator.cli`` that registers it."""


def _typer_outcomes() -> tuple[type[BaseException], ...]:
    """typer's own outcomes: Exit, Abort and usage errors (``TyperException`` in typer releases that vendor
    click, click's ``ClickException`` in those that use click itself, as the floor typer 0.16 does)."""
    outcomes: list[type[BaseException]] = [typer.Exit, typer.Abort, BrokenPipeError]
    vendored = getattr(typer, "TyperException", None)
    if isinstance(vendored, type) and issubclass(vendored, BaseException):
        outcomes.append(vendored)
    try:
        from click.exceptions import ClickException  # noqa: PLC0415 (only where typer uses click itself)
    except ImportError:
        pass
    else:
        outcomes.append(ClickException)
    return tuple(outcomes)


_PASSTHROUGH = _typer_outcomes()


class GuardedGroup(TyperGroup):
    """The root command group: whatever a command raises ends as one line on stderr and an exit code.

    Wrapping the root group's ``invoke`` covers every command and sub-group (``compliance validate``,
    ``golden-image rbac``) in one place, in-process (typer's test runner) as well as from the console
    script. typer's own outcomes pass through: ``typer.Exit``, usage errors (exit 2, typer prints them),
    and a broken pipe on stdout, which typer already silences.
    """

    def invoke(self, ctx: Any) -> Any:  # typer's (vendored click) Context; not a public name
        """Run the command; report an exception through :func:`._errors.report` instead of a traceback."""
        try:
            return super().invoke(ctx)
        except _PASSTHROUGH:
            raise
        except (Exception, KeyboardInterrupt) as exc:
            code = report(exc, debug=bool(ctx.params.get("debug")) or debug_from_env())
            raise typer.Exit(code) from None


def build_app(only: str | None = None) -> typer.Typer:
    """Build the typer app with every command, or only ``only`` when the caller knows which one runs."""
    app = typer.Typer(
        name="uds-vmctl",
        help=(
            "Field CLI for uds-vm-operator: prepare and check VM disk images before they cross the air gap, "
            "upload them, and inspect, power and audit the VMs the operator manages.\n\n"
            "Exit codes: 0 ok, 1 a check failed (air-gap violation, digest mismatch), 2 usage error."
        ),
        cls=GuardedGroup,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )

    @app.callback()
    def _root(
        debug: bool = typer.Option(
            False,
            "--debug",
            help="On an error, print the Python traceback before the one-line message (for bug reports; "
            "or set UDS_VMCTL_DEBUG=1).",
        ),
    ) -> None:
        """Keep uds-vmctl a command group even when a single command is registered.

        ``debug`` is read by :class:`GuardedGroup` from the context; nothing to do with it here.
        """

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
    """Run the CLI; used by the ``uds-vmctl`` console script.

    The guard here catches what fails before a command runs (a broken installation that cannot import a
    command module): still one line, and the traceback only with ``--debug`` or ``UDS_VMCTL_DEBUG``.
    """
    argv = sys.argv[1:]
    try:
        build_app(_command_named(argv))(prog_name="uds-vmctl")
    except SystemExit:
        raise
    except (Exception, KeyboardInterrupt) as exc:
        sys.exit(report(exc, debug="--debug" in argv or debug_from_env()))


if __name__ == "__main__":
    main()
