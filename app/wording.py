"""Counts in messages: ``counted(1, "record")`` is "1 record", never "1 records"."""

from __future__ import annotations


def counted(count: int, singular: str, plural: str | None = None) -> str:
    """``count`` followed by the noun agreeing with it: ``singular`` for 1 (and -1), else
    ``plural`` (default: ``singular`` + "s"), e.g. ``counted(2, "entry", "entries")``."""
    noun = singular if abs(count) == 1 else (plural or singular + "s")
    return f"{count} {noun}"


def were(count: int) -> str:
    """The past tense of "to be" agreeing with ``count``: "was" for 1, else "were"."""
    return "was" if abs(count) == 1 else "were"


def are(count: int) -> str:
    """The present tense of "to be" agreeing with ``count``: "is" for 1, else "are"."""
    return "is" if abs(count) == 1 else "are"
