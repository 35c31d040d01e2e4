"""What the JVM peers (``bench/jvm``) must emit, and the checks of what they did emit.

Both models see every input record of a run (prefill and measured input, in any order) as
``(key, JSON value {"ts", "value"})`` and aggregate count, sum and max of ``value``. Flink SQL's
``OVER ... RANGE``: one row per input row over the key's rows with time in ``[ts - r, ts]``,
both bounds inclusive. Kafka Streams' ``SlidingWindows`` (KIP-450): per key the left window
``[t - d, t]`` of every distinct record time and the right window ``[t + 1, t + 1 + d]`` where a
later record falls in it; the last emitted value of each window is compared, and the windows
emitted must be exactly the model's. No record of the benchmark's input is late enough to be
dropped by either. O((n + w) log n) for n records and w windows. The models in full:
docs/bench-methods.md.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

Aggregate = tuple[int, float, float]
"""(count, sum, max) of a set of values."""


class KeyRange:
    """One key's records sorted by time, answering the aggregate of any closed time range in
    O(log n) (bisect, prefix sums, a sparse table of maxima built in O(n log n))."""

    def __init__(self, events: list[tuple[int, float]]) -> None:
        events = sorted(events)
        self.times = [t for t, _ in events]
        values = [v for _, v in events]
        self.prefix = [0.0]
        for v in values:
            self.prefix.append(self.prefix[-1] + v)
        self.maxima = [values]
        span = 1
        while 2 * span <= len(values):
            row = self.maxima[-1]
            self.maxima.append([max(row[i], row[i + span]) for i in range(len(row) - span)])
            span *= 2

    def aggregate(self, lo: int, hi: int) -> Aggregate | None:
        """(count, sum, max) of the values with time in ``[lo, hi]``; ``None`` when none."""
        i, j = bisect_left(self.times, lo), bisect_right(self.times, hi)
        if i >= j:
            return None
        level = (j - i).bit_length() - 1
        row = self.maxima[level]
        return j - i, self.prefix[j] - self.prefix[i], max(row[i], row[j - (1 << level)])


def by_key(records: Iterable[tuple[bytes, bytes]]) -> dict[bytes, list[tuple[int, float]]]:
    """Each key's ``(ts, value)`` events from input records."""
    events: dict[bytes, list[tuple[int, float]]] = defaultdict(list)
    for key, raw in records:
        event = json.loads(raw)
        events[key].append((int(event["ts"]), float(event["value"])))
    return events


def over_range_rows(
    records: Iterable[tuple[bytes, bytes]], range_ms: int
) -> dict[bytes, list[tuple[int, int, float, float]]]:
    """Per key, the Flink OVER RANGE rows ``(ts, cnt, sm, mx)`` for ``records``, sorted."""
    out = {}
    for key, events in by_key(records).items():
        index = KeyRange(events)
        rows = []
        for t, _ in events:
            count, total, top = index.aggregate(t - range_ms, t) or (0, 0.0, 0.0)
            rows.append((t, count, total, top))
        out[key] = sorted(rows)
    return out


def sliding_windows(
    records: Iterable[tuple[bytes, bytes]], difference_ms: int
) -> dict[tuple[bytes, int, int], Aggregate]:
    """The KIP-450 windows ``(key, start, end)`` of ``records`` and their final aggregates."""
    out = {}
    for key, events in by_key(records).items():
        index = KeyRange(events)
        times = sorted(set(index.times))
        for n, t in enumerate(times):
            bounds = [(t - difference_ms, t)]
            if n + 1 < len(times) and times[n + 1] <= t + 1 + difference_ms:
                bounds.append((t + 1, t + 1 + difference_ms))
            for start, end in bounds:
                aggregate = index.aggregate(start, end)
                assert aggregate is not None
                out[(key, start, end)] = aggregate
    return out


@dataclass(frozen=True, slots=True)
class Check:
    """The outcome of checking one peer's output: records read, rows or windows compared,
    and the first mismatches (empty when the output is right)."""

    records: int
    compared: int
    mismatches: list[str]

    def summary(self) -> dict[str, Any]:
        return {
            "output_records": self.records,
            "compared": self.compared,
            "mismatches": len(self.mismatches),
            "first_mismatches": self.mismatches[:5],
        }


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)


def check_over_range(
    emitted: Iterable[tuple[bytes, bytes]], records: Iterable[tuple[bytes, bytes]], range_ms: int
) -> Check:
    """Flink's output (``(key, JSON {"ts", "cnt", "sm", "mx"})``) against
    ``over_range_rows``: per key the same multiset of rows (sums within 1e-6)."""
    got: dict[bytes, list[tuple[int, int, float, float]]] = defaultdict(list)
    n = 0
    for key, raw in emitted:
        row = json.loads(raw)
        got[key].append((int(row["ts"]), int(row["cnt"]), float(row["sm"]), float(row["mx"])))
        n += 1
    expected = over_range_rows(records, range_ms)
    mismatches = []
    for key in sorted(expected.keys() | got.keys()):
        want, have = expected.get(key, []), sorted(got.get(key, []))
        if len(want) != len(have):
            mismatches.append(f"{key!r}: {len(have)} rows, expected {len(want)}")
            continue
        for w, h in zip(want, have, strict=True):
            if w[:2] != h[:2] or w[3] != h[3] or not _close(w[2], h[2]):
                mismatches.append(f"{key!r}: row {h}, expected {w}")
                break
    compared = sum(len(rows) for rows in expected.values())
    return Check(n, compared, mismatches)


def check_sliding(
    emitted: Iterable[tuple[bytes, bytes]],
    records: Iterable[tuple[bytes, bytes]],
    difference_ms: int,
) -> Check:
    """Kafka Streams' output (``(key, JSON {"start", "end", "count", "sum", "max"})``, in
    topic order per key) against ``sliding_windows``: the same windows, each one's last
    emitted value equal to its final aggregate (sums within 1e-6)."""
    final: dict[tuple[bytes, int, int], Aggregate] = {}
    n = 0
    for key, raw in emitted:
        w = json.loads(raw)
        final[(key, int(w["start"]), int(w["end"]))] = (
            int(w["count"]),
            float(w["sum"]),
            float(w["max"]),
        )
        n += 1
    expected = sliding_windows(records, difference_ms)
    mismatches = [f"window {w} not emitted" for w in sorted(expected.keys() - final.keys())]
    mismatches += [f"window {w} not a KIP-450 window" for w in sorted(final.keys() - expected)]
    for window in sorted(expected.keys() & final.keys()):
        (wc, ws, wm), (hc, hs, hm) = expected[window], final[window]
        if wc != hc or wm != hm or not _close(ws, hs):
            mismatches.append(f"window {window}: {final[window]}, expected {expected[window]}")
    return Check(n, len(expected), mismatches)
