"""A validator for systemd calendar expressions (``OnCalendar=``, systemd.time(7)), pure.

``autoUpdate.schedule`` is written into a systemd drop-in inside the guest. The CRD pattern already keeps
control characters and ``=`` out (no second line, no second key); this checks the grammar too, so a typo
is refused at the API with a message instead of leaving the guest's timer silently dead (systemd ignores a
drop-in line it cannot parse). It accepts the forms systemd documents that an update schedule needs:

- the shorthands ``minutely hourly daily weekly monthly yearly annually quarterly semiannually``;
- ``[weekdays] [date] [time] [timezone]`` where weekdays are names or ranges (``Mon..Fri``, ``Sat,Sun``),
  the date is ``[Y-]M-D`` and the time ``H:M[:S]``, each component ``*``, numbers, ``A..B`` ranges and
  ``/step`` repetitions, comma-separated; ``~`` counts days back from the month's end; the timezone is
  ``UTC`` or an ``Area/City`` name.

It is deliberately stricter than systemd on spelling (no ``@epoch``, no bare ``today``), never looser.
"""

from __future__ import annotations

import re

SCHEDULE_CHARSET = r"^[A-Za-z0-9*,./:~ _+-]+$"
"""What the CRD lets through: no control characters, no ``=``, no quotes (a schedule stays one value)."""
SHORTHANDS = frozenset(
    {"minutely", "hourly", "daily", "weekly", "monthly", "yearly", "annually", "quarterly", "semiannually"}
)
_C = r"(\*|[0-9]+(\.[0-9]+)?(\.\.[0-9]+)?)(/[0-9]+)?(,(\*|[0-9]+(\.[0-9]+)?(\.\.[0-9]+)?)(/[0-9]+)?)*"
_D = r"(mon|tue|wed|thu|fri|sat|sun)[a-z]{0,6}"
_DOW = rf"{_D}(\.\.{_D})?(,{_D}(\.\.{_D})?)*"
CALENDAR_SHAPE = (
    r"(?i)^(minutely|hourly|daily|weekly|monthly|yearly|annually|quarterly|semiannually|"
    rf"({_DOW} )?((({_C}-)?{_C}[-~]{_C})( {_C}:{_C}(:{_C})?)?|{_C}:{_C}(:{_C})?|{_DOW})"
    r"( (UTC|[a-z][a-z_+-]*(/[a-z0-9_+-]+){1,2}))?)$"
)
"""The grammar's shape as one RE2 regex, for the CRD's CEL rule: the API server refuses a malformed schedule
before it is stored; :func:`calendar_problem` adds the value ranges (hour <= 23, ...) at reconcile."""
_DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_FULL_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_NUMBER = re.compile(r"^[0-9]+$")
_SECONDS = re.compile(r"^[0-9]+(\.[0-9]{1,6})?$")
_TIMEZONE = re.compile(r"^(UTC|[A-Z][A-Za-z_+-]*(/[A-Za-z0-9_+-]+){1,2})$")


def _day_name(text: str) -> bool:
    lowered = text.lower()
    return lowered in _DAYS or lowered in _FULL_DAYS


def _weekdays(token: str) -> bool:
    for part in token.split(","):
        ends = part.split("..")
        if len(ends) > 2 or not all(_day_name(end) for end in ends):
            return False
    return True


def _value(text: str, low: int, high: int, *, fraction: bool = False) -> bool:
    if fraction and _SECONDS.fullmatch(text):
        return low <= float(text) < high + 1
    return bool(_NUMBER.fullmatch(text)) and low <= int(text) <= high


def _component(text: str, low: int, high: int, *, fraction: bool = False, year: bool = False) -> bool:
    """One field: ``*``, ``*/N``, ``A``, ``A..B``, ``A/N``, ``A..B/N``, comma-separated."""
    if year:
        low, high = 1970, 2199
    for part in text.split(","):
        if not part:
            return False
        base, slash, step = part.partition("/")
        if slash and not (_NUMBER.fullmatch(step) and int(step) > 0):
            return False
        if base == "*":
            continue
        ends = base.split("..")
        if len(ends) > 2 or not all(_value(end, low, high, fraction=fraction) for end in ends):
            return False
    return True


def _date(token: str) -> bool:
    day_sep = "~" if "~" in token else "-"
    head, sep, day = token.rpartition(day_sep)
    if not sep:
        return False
    fields = head.split("-")
    if len(fields) == 1:
        year, month = None, fields[0]
    elif len(fields) == 2:
        year, month = fields
    else:
        return False
    if year is not None and not _component(year, 0, 0, year=True):
        return False
    return _component(month, 1, 12) and _component(day, 1, 31)


def _time(token: str) -> bool:
    fields = token.split(":")
    if len(fields) not in (2, 3):
        return False
    hour, minute = fields[0], fields[1]
    ok = _component(hour, 0, 23) and _component(minute, 0, 59)
    return ok and (len(fields) == 2 or _component(fields[2], 0, 59, fraction=True))


def calendar_problem(expression: str) -> str | None:
    """Why ``expression`` is not an accepted systemd calendar expression, or None when it is."""
    if not re.fullmatch(SCHEDULE_CHARSET.strip("^$"), expression):  # fullmatch: no "\n" before "$"
        return "may contain only letters, digits, spaces and * , . / : ~ _ + -"
    tokens = expression.split()
    if not tokens:
        return "is empty"
    if len(tokens) == 1 and tokens[0].lower() in SHORTHANDS:
        return None
    if _TIMEZONE.fullmatch(tokens[-1]) and not _weekdays(tokens[-1]):
        tokens = tokens[:-1]
    if not tokens:
        return "names only a timezone"
    kinds: list[str] = []
    for position, token in enumerate(tokens):
        if not kinds and _weekdays(token):
            kinds.append("weekdays")
        elif "date" not in kinds and "time" not in kinds and _date(token):
            kinds.append("date")
        elif "time" not in kinds and _time(token):
            kinds.append("time")
        else:
            return (
                f"token {position + 1} ({token!r}) is not a weekday list, a [Y-]M-D date or an H:M[:S] time "
                "(systemd.time(7), e.g. 'Mon..Fri *-*-* 03:00:00' or 'daily')"
            )
    return None
