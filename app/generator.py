"""A built-in generator of keyed, out-of-order input events (for ``fiba produce`` and the demo).

``generate_events(n, keys=, ooo_fraction=, max_lateness_ms=, interval_ms=, start_ms=, seed=)``
yields ``Event(key, ts, value)`` lazily: exactly ``min(round(n * f), n - 1)`` events out of
order, each at most ``max_lateness_ms`` behind the stream time before it; in-order events
advance the stream time by ``interval_ms``; keys ``key-0..key-{keys-1}``, integer values in
``[0, 1000)``; the same arguments give the same stream. O(1) time per event and O(1) memory;
arguments checked at the call. Guarantees in full: docs/reference/cli.md.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import NamedTuple

MAX_VALUE = 1000
"""Generated values are integers in ``[0, MAX_VALUE)``."""


class Event(NamedTuple):
    """One input event: aggregation key, event time (epoch ms) and value."""

    key: str
    ts: int
    value: int


def key_name(index: int) -> str:
    """The name of generated key number ``index``."""
    return f"key-{index}"


def ooo_count(n: int, ooo_fraction: float) -> int:
    """How many of ``n`` generated events are out of order for ``ooo_fraction``."""
    return max(0, min(round(n * ooo_fraction), n - 1))


def generate_events(
    n: int,
    *,
    keys: int = 10,
    ooo_fraction: float = 0.2,
    max_lateness_ms: int = 30_000,
    interval_ms: int = 100,
    start_ms: int = 1_700_000_000_000,
    seed: int | None = None,
) -> Iterator[Event]:
    """``n`` events over ``keys`` keys, ``ooo_fraction`` of them out of order (module docstring).

    The first event is at ``start_ms``; in-order events follow ``interval_ms`` apart.
    Raises ``ValueError`` at once on arguments that cannot give such a stream.
    """
    if n < 0:
        raise ValueError(f"the number of events must be >= 0, got {n}")
    if keys < 1:
        raise ValueError(f"the number of keys must be >= 1, got {keys}")
    if not 0.0 <= ooo_fraction <= 1.0:
        raise ValueError(f"the out-of-order fraction must be in [0, 1], got {ooo_fraction}")
    if interval_ms < 1:
        raise ValueError(f"the interval must be >= 1 ms, got {interval_ms}")
    late = ooo_count(n, ooo_fraction)
    if late and max_lateness_ms < 1:
        raise ValueError("out-of-order events need a max lateness of at least 1 ms")
    return _events(n, keys, late, max_lateness_ms, interval_ms, start_ms, random.Random(seed))


def _events(
    n: int,
    keys: int,
    late: int,
    max_lateness_ms: int,
    interval_ms: int,
    start_ms: int,
    rng: random.Random,
) -> Iterator[Event]:
    """The stream of ``generate_events``, with exactly ``late`` out-of-order events.

    Which events are out of order is decided by selection sampling (Knuth's Algorithm S) over
    positions 1..n-1: position i is picked with probability (still to pick) / (positions left),
    which picks exactly ``late`` positions, uniformly, in O(1) memory.
    """
    stream_time = start_ms - interval_ms
    to_pick = late
    for i in range(n):
        left = n - i
        if i > 0 and rng.random() * left < to_pick:
            to_pick -= 1
            ts = stream_time - rng.randint(1, max_lateness_ms)
        else:
            stream_time += interval_ms
            ts = stream_time
        yield Event(key_name(rng.randrange(keys)), ts, rng.randrange(MAX_VALUE))
