"""Every built-in aggregation, grouped and fed as the worker feeds it: shared by the tests that
must cover the whole registry (worker end to end, JSON Schemas, Spark decoders).

``aggregation_groups()`` splits ``stores.monoids.monoid_names()`` into the groups one worker can
run together, found by trying each aggregation on a sample input (not listed by hand, so a new
aggregation cannot be missed): ``"numbers"`` (every aggregation of numeric values) and
``"objects"`` (every aggregation of ``{"value": ..., "arg": ...}`` objects: argmax, argmin and
the ones that take any input). An aggregation that takes neither raises ``AssertionError``.

``group_values(group, n, seed)`` are input values for a group (positive, with ties, exactly
representable: sums are exact); ``group_settings(group)`` the window settings of the group's
samples; ``aggregate_samples()`` maps every registry name to aggregate records as the worker
writes them (``agents.records.encode_aggregate`` of ``KeyWindows`` records, ``emit=event``,
one input partition): some windows hold several events, some are empty.
"""

from __future__ import annotations

import random
from dataclasses import replace
from functools import cache
from typing import Any

from agents.records import encode_aggregate
from app.settings import Settings, WindowSpec
from stores.key_windows import KeyWindows, WindowConfig
from stores.monoids import monoid, monoid_names

NUMBER_SAMPLE = 2.5
OBJECT_SAMPLE = {"value": 2.5, "arg": "a"}
GROUPS = ("numbers", "objects")


def _takes(name: str, x: Any) -> bool:
    m = monoid(name)
    try:
        p = m.lift(x)
        m.lower(m.combine(p, m.combine(p, m.identity)))
    except (TypeError, ValueError, KeyError):
        return False
    return True


@cache
def aggregation_groups() -> dict[str, tuple[str, ...]]:
    """``{"numbers": names, "objects": names}`` over the whole registry (see the module)."""
    names = monoid_names()
    groups = {
        "numbers": tuple(n for n in names if _takes(n, NUMBER_SAMPLE)),
        "objects": tuple(n for n in names if _takes(n, OBJECT_SAMPLE)),
    }
    ungrouped = set(names) - set(groups["numbers"]) - set(groups["objects"])
    assert not ungrouped, f"aggregations taking neither numbers nor objects: {ungrouped}"
    return groups


def group_values(group: str, n: int, seed: int) -> list[Any]:
    """``n`` input values for ``group``: numbers from a small set (ties for maxcount, mincount,
    argmax; exact binary fractions), or objects with such a ``value`` and a distinct ``arg``."""
    rng = random.Random(seed)
    numbers = [rng.choice([1, 2, 3, 0.5, 2.5, 4.25]) for _ in range(n)]
    if group == "numbers":
        return numbers
    return [{"value": x, "arg": f"a{i}"} for i, x in enumerate(numbers)]


def group_settings(group: str) -> Settings:
    """Window settings for the samples of ``group``: windows of 1 s, 3 s and 10 s."""
    return replace(
        Settings(),
        retention=10_000,
        windows=(WindowSpec("1s", 1_000), WindowSpec("3s", 3_000), WindowSpec("10s", 10_000)),
        aggregations=aggregation_groups()[group],
        max_future_skew=60_000,
    )


@cache
def _group_records(group: str) -> tuple[bytes, ...]:
    settings = group_settings(group)
    windows = KeyWindows(WindowConfig.from_settings(settings), emit="event")
    records = []
    base = 1_700_000_000_000
    # gaps of 0.7 s and one of 5 s (empty 1 s windows), then late events, two at one time
    times = [base + 700 * i + (5_000 if i >= 6 else 0) for i in range(10)]
    times += [base + 700 * 12, base + 700 * 13, base + 700 * 12]
    values = group_values(group, len(times), 7)
    for offset, (ts, value) in enumerate(zip(times, values, strict=True)):
        key = "k-even" if offset % 2 == 0 else "k-odd"
        outcome = windows.accept(key, ts, value)
        assert outcome.record is not None
        records.append(encode_aggregate(outcome.record, 0, offset))
    return tuple(records)


def aggregate_samples() -> dict[str, tuple[bytes, ...]]:
    """Every registry name -> aggregate records carrying it (those of its first group)."""
    samples: dict[str, tuple[bytes, ...]] = {}
    for group, names in aggregation_groups().items():
        for name in names:
            samples.setdefault(name, _group_records(group))
    return samples
