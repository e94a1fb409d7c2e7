"""``uds-vmctl version``: what is installed, for bug reports and assessors."""

from __future__ import annotations

import json
import platform

import typer

from uds_vm_operator import __version__


def register(app: typer.Typer) -> None:
    """Attach the ``version`` command to the CLI app."""

    @app.command("version")
    def version_command(
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of text."),
    ) -> None:
        """Print the uds-vmctl version and the Python it runs on."""
        info = {"version": __version__, "python": platform.python_version()}
        if as_json:
            typer.echo(json.dumps(info))
        else:
            typer.echo(f"uds-vmctl {info['version']} (python {info['python']})")
