"""Durations: ``"250ms"``, ``"10s"``, ``"5m"``, ``"1h"``, ``"1d"``, integer milliseconds or a
``timedelta``, read as int milliseconds; the one parser of the worker's settings, the ``fiba``
CLI and the Faust API (``agents.sliding``). Both directions are O(1).
"""

from __future__ import annotations

import re
from datetime import timedelta

UNITS_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)?\s*$")
_ONE_MS = timedelta(milliseconds=1)


def parse_duration(value: str | int | timedelta) -> int:
    """Milliseconds of ``"250ms"``, ``"10s"``, ``"5m"``, ``"1h"``, ``"1d"``, a string or int of
    ms, or a whole-millisecond ``timedelta`` (spaces around the number and unit are allowed).

    Raises ``ValueError`` for anything else (negative durations, fractions, unknown units, bools).
    """
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, timedelta):
        ms, rest = divmod(value, _ONE_MS)
        if rest:
            raise ValueError(f"not a duration: {value!r} (not a whole number of milliseconds)")
        value = ms
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"negative duration: {value}")
        return value
    match = _DURATION.match(str(value))
    if match is None:
        raise ValueError(
            f"not a duration: {value!r} (use e.g. 250ms, 10s, 5m, 1h, 1d or integer ms)"
        )
    number, unit = match.groups()
    return int(number) * UNITS_MS[unit or "ms"]


def format_duration(ms: int) -> str:
    """A duration in the largest unit that divides it exactly: 3600000 -> "1h", 250 -> "250ms"."""
    for unit, size in sorted(UNITS_MS.items(), key=lambda item: -item[1]):
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"
