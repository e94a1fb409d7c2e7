"""Entry point of ``uds-vmctl``.

Each command lives in its own module and registers itself on the shared app, so a reader finds
``prep`` in ``cli/prep.py``. Exit codes are a contract with scripts: 0 ok, 1 a check failed,
2 usage error.
"""

from __future__ import annotations

import typer

from uds_vm_operator.cli import compliance, goldenimage, inventory, power, prep, upload, verify, version

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2

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
    """Keep uds-vmctl a command group even while few commands are registered."""


version.register(app)
prep.register(app)
inventory.register(app)
power.register(app)
upload.register(app)
verify.register(app)
compliance.register(app)
goldenimage.register(app)


def main() -> None:
    """Run the CLI; used by the ``uds-vmctl`` console script."""
    app()


if __name__ == "__main__":
    main()
