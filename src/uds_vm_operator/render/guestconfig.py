"""Structure-aware writers for the configuration files the operator puts into a guest (issue 32).

A value from a VM's spec must never change the *structure* of the file it lands in: a newline in a systemd
value starts a new directive (``Unit=poweroff.target``), one in an INI value a new key (``gpgcheck=0``), a
quote in an apt.conf string ends it. The CRD already refuses such characters; these writers refuse them
again where the file is built (defence in depth: a CRD applied without the schema, an older stored object),
and build the file from (section, key, value) data rather than by pasting strings.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from uds_vm_operator.api.errors import SpecError

_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")
"""Control characters and the Unicode line separators YAML and some parsers also break lines at."""
Section = tuple[str, Sequence[tuple[str, str]]]


def checked_value(where: str, value: str, *, forbid: str = "") -> str:
    """``value`` unchanged when it cannot break the line it goes on; else SpecError naming ``where``."""
    if _FORBIDDEN.search(value) or any(char in value for char in forbid):
        shown = "control characters" + (f" or any of {forbid!r}" if forbid else "")
        raise SpecError(f"{where} must not contain {shown}: it would change the guest file's structure")
    if value != value.strip():
        raise SpecError(f"{where} must not start or end with whitespace")
    return value


def ini_file(sections: Sequence[Section], where: str, separator: str = "=") -> str:
    """A systemd unit / INI file: ``[Section]`` headers and ``Key=value`` lines, each value checked.

    ``separator``: ``=`` for systemd (which keeps spaces as part of the value), `` = `` for ConfigParser-style
    files such as dnf's automatic.conf.
    """
    lines: list[str] = []
    for name, entries in sections:
        lines.append(f"[{checked_value(where, name, forbid='[]=')}]")
        for key, value in entries:
            checked_value(where, key, forbid="[]= ")
            lines.append(f"{key}{separator if value else '='}{checked_value(where, value) if value else ''}")
    return "\n".join(lines) + "\n"


def apt_conf_string(where: str, value: str) -> str:
    """A quoted apt.conf string: no quote, semicolon, brace or control character can end it early."""
    return '"' + checked_value(where, value, forbid='";{}') + '"'
