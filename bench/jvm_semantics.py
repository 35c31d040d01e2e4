"""What the JVM peers (``bench/jvm``) must emit, and the checks of what they did emit.

Both models see every input record of a run (the prefill's and the measured input's, in any
order: neither depends on the order, since no record of the benchmark's input is late enough
to be dropped, see below) as ``(key, JSON value {"ts", "value"})`` and aggregate count, sum and
max of ``value``.

- **Flink SQL ``OVER (PARTITION BY k ORDER BY rt RANGE BETWEEN INTERVAL r PRECEDING AND
  CURRENT ROW)``**: one output row per input row, ``(ts, cnt, sm, mx)`` over the rows of the
  same key with time in ``[ts - r, ts]``, both bounds inclusive, rows of equal time included
  (they are peers: each sees the others). Flink drops a row behind the watermark (``max ts -
  grace``); the input's lateness is below ``grace``, so none is.
- **Kafka Streams ``SlidingWindows`` (KIP-450)**, ``timeDifference`` d: windows ``[start,
  start + d]``, both bounds inclusive, per key: the *left* window ``[t - d, t]`` of every
  distinct record time t, and the *right* window ``[t + 1, t + 1 + d]`` of every record time t
  with a record in ``(t, t + 1 + d]``; every window holds the key's records inside it. Kafka
  Streams emits each window each time a record creates or updates it (all of them with the cache
  off, the latest at each cache flush with it on), so the last record of a window in the output
  is its final value, which the check compares; it also checks that the windows emitted are
  exactly the model's. A record is dropped only when ``t + 1 + d <= stream time - grace``
  (stream time per task), again never in this input.

O((n + w) log n) for n records and w windows (prefix sums and a sparse table per key).
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
