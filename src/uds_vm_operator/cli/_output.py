"""Small output helpers shared by commands: files written whole or not at all, a progress bar on a TTY.

Errors are not printed here: commands raise and :mod:`._errors` prints the one line.
rich is imported lazily: ``prep --json`` in a script should not pay for it, and on a 1 GiB image every
100 ms of start-up is 15 % of the run.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from uds_vm_operator.cli._errors import UsageError, os_error_message

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress


def write_files(directory: str | Path, texts: Mapping[str, str], *, option: str) -> list[str]:
    """Write every ``name → text`` into ``directory`` (created if missing) whole, or none of them.

    Each file goes to a hidden temporary name first and is renamed only once all are written, so a full
    disk or a bad path never leaves a truncated manifest that a later ``kubectl apply`` would take for
    the real one. A directory this call created is removed again on failure. ``option`` names the flag
    in the error (:class:`UsageError`, exit 2).
    """
    folder = Path(directory)
    created = not folder.exists()
    staged: list[tuple[str, Path]] = []
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in texts.items():
            staged.append((_stage(folder, name, text), folder / name))
        for _, final in staged:  # every check before the first rename: all or none
            _refuse_non_file(final)
        for temporary, final in staged:
            os.replace(temporary, final)
    except OSError as exc:
        for temporary, _ in staged:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        if created:
            with contextlib.suppress(OSError):
                folder.rmdir()  # only if empty: never removes what was there
        raise UsageError(f"cannot write {option} {directory}: {os_error_message(exc)}") from None
    return [str(final) for _, final in staged]


def write_file(path: str | Path, text: str, *, option: str, make_parents: bool = False) -> None:
    """Write ``text`` to ``path`` whole or not at all (see :func:`write_files`); a device is written directly.

    ``--output /dev/stdout`` keeps working; a directory, or a missing parent unless ``make_parents``, is a
    :class:`UsageError`.
    """
    target = Path(os.path.realpath(path))
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise UsageError(f"cannot write {option} {path}: {os_error_message(exc)}") from None
    if mode is not None and (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
        try:
            with open(target, "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as exc:
            raise UsageError(f"cannot write {option} {path}: {os_error_message(exc)}") from None
        return
    if mode is not None and stat.S_ISDIR(mode):
        raise UsageError(f"cannot write {option} {path}: it is a directory; give a file name")
    if not make_parents and not target.parent.is_dir():
        raise UsageError(f"cannot write {option} {path}: the directory {target.parent} does not exist")
    write_files(target.parent, {target.name: text}, option=option)


def _stage(folder: Path, name: str, text: str) -> str:
    descriptor, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(temporary, 0o666 & ~_umask())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return temporary


def _umask() -> int:
    """The process umask (mkstemp creates 0600; manifests are read by others, as ``open`` would make them)."""
    current = os.umask(0o022)
    os.umask(current)
    return current


def _refuse_non_file(final: Path) -> None:
    """Renaming over a directory or a device would replace it: refuse (as an OSError naming the path)."""
    try:
        mode = final.lstat().st_mode
    except FileNotFoundError:
        return
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        raise IsADirectoryError(errno.EISDIR, "exists and is not a regular file", str(final))


def byte_progress(console: Console) -> Progress:
    """The CLI's one progress bar for long byte work (digests, uploads): bytes, speed, time left; it vanishes
    when done so the output keeps only results."""
    from rich.progress import (  # noqa: PLC0415 (lazy: see module docstring)
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(binary_units=True),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )


class TerminalProgress:
    """A rich progress bar on stderr; used only when stderr is a terminal."""

    def __init__(self) -> None:
        from rich.console import Console  # noqa: PLC0415 (lazy: see module docstring)

        self._progress = byte_progress(Console(stderr=True))
        self._task: Any = None

    def start(self, description: str, total_bytes: int) -> None:
        """Begin a new bar (the previous one is completed)."""
        if self._task is not None:
            self._progress.update(self._task, completed=self._progress.tasks[-1].total)
        self._task = self._progress.add_task(description, total=total_bytes)

    def advance(self, n_bytes: int) -> None:
        """Called from worker threads; rich's Progress is thread-safe."""
        if self._task is not None:
            self._progress.advance(self._task, n_bytes)

    def __enter__(self) -> TerminalProgress:
        self._progress.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._progress.stop()


def stderr_is_terminal() -> bool:
    """Progress bars and colour only for humans."""
    return sys.stderr.isatty()
