"""Synthetic sliding-window workloads driven by monotonic counters.

:class:`AdversarialWindow` is the papers' out-of-order load generator (§5.1 of *Sub-O(log n)
Out-of-Order Sliding-Window Aggregation*, and the authors' ``ooo_benchmark``): the window is
pre-populated with ``d`` *high* timestamps at its young end and ``n - d`` consecutive *low*
timestamps below them; every round evicts the oldest low, inserts the next low — which lands
exactly ``d`` entries from the young end — and queries. With ``d = 0`` it is the plain in-order
FIFO workload. Timestamps come from counters, never from clocks or random numbers, and the value
of timestamp ``t`` is ``1 + t % 101``, so every algorithm sees exactly the same data.

The window can be moved between configurations without a rebuild: :meth:`widen` raises ``d``
(appending highs, evicting the oldest lows) and :meth:`grow` raises ``n`` (inserting lows at
distance ``d`` without evicting), which is what lets one experiment sweep ``d`` or ``n``
without paying an O(n) fill per point.
"""

from __future__ import annotations

from collections.abc import Callable
from time import perf_counter_ns
from typing import Any

HIGH_BASE = 1 << 48  # every high timestamp is above every low one


def value_of(t: int) -> int:
    """The data value carried by timestamp ``t`` (as in the authors' benchmark driver)."""
    return 1 + t % 101


class AdversarialWindow:
    """A window of exactly ``n`` entries whose inserts land ``d`` entries from the young end.

    ``agg`` must accept out-of-order inserts when ``d > 0``; with ``d = 0`` every insert is at
    the young end and every evict takes the oldest entry, so FIFO-only aggregators qualify.
    """

    def __init__(
        self, agg: Any, n: int, d: int = 0, *, first_low: int = 0, first_high: int = HIGH_BASE
    ) -> None:
        if not 0 <= d < n:
            raise ValueError(f"need 0 <= d < n, got d={d}, n={n}")
        self.agg = agg
        self.n = n
        self.d = 0
        self.oldest_low = first_low  # the oldest timestamp in the window
        self.next_high = first_high
        self._append_highs(d)
        insert = agg.insert
        for t in range(first_low, first_low + n - d):
            insert(t, value_of(t))
        self.next_low = first_low + n - d  # the next low timestamp to insert
        self.d = d

    def _append_highs(self, count: int) -> None:
        insert = self.agg.insert
        for t in range(self.next_high, self.next_high + count):
            insert(t, value_of(t))
        self.next_high += count

    def widen(self, d: int) -> None:
        """Raise the distance to ``d``: append ``d - self.d`` highs, evict as many oldest lows."""
        if not self.d <= d < self.n:
            raise ValueError(f"can only widen from d={self.d} to below n={self.n}, got {d}")
        extra = d - self.d
        self._append_highs(extra)
        evict = self.agg.evict
        for t in range(self.oldest_low, self.oldest_low + extra):
            evict(t)
        self.oldest_low += extra
        self.d = d

    def grow(self, n: int) -> None:
        """Raise the size to ``n`` by inserting ``n - self.n`` lows at distance ``d``."""
        if n < self.n:
            raise ValueError(f"can only grow, from n={self.n} to {n}")
        insert = self.agg.insert
        for t in range(self.next_low, self.next_low + n - self.n):
            insert(t, value_of(t))
        self.next_low += n - self.n
        self.n = n

    def rounds(self, count: int) -> None:
        """``count`` rounds of evict oldest, insert at distance ``d``, query."""
        agg = self.agg
        evict, insert, query = agg.evict, agg.insert, agg.query
        old, new = self.oldest_low, self.next_low
        for k in range(count):
            evict(old + k)
            t = new + k
            insert(t, 1 + t % 101)
            query()
        self.oldest_low = old + count
        self.next_low = new + count

    def round_latencies(self, count: int, clock: Callable[[], int] = perf_counter_ns) -> list[int]:
        """Like :meth:`rounds`, returning each round's duration in ``clock`` nanoseconds."""
        agg = self.agg
        evict, insert, query = agg.evict, agg.insert, agg.query
        old, new = self.oldest_low, self.next_low
        samples = [0] * count
        for k in range(count):
            t = new + k
            start = clock()
            evict(old + k)
            insert(t, 1 + t % 101)
            query()
            samples[k] = clock() - start
        self.oldest_low = old + count
        self.next_low = new + count
        return samples

    def evict_batch(self, m: int, *, bulk: bool) -> None:
        """Evict the ``m`` oldest entries: one ``bulk_evict`` or ``m`` single evicts."""
        old = self.oldest_low
        if bulk:
            self.agg.bulk_evict(old + m - 1)
        else:
            evict = self.agg.evict
            for t in range(old, old + m):
                evict(t)
        self.oldest_low = old + m

    def next_batch(self, m: int) -> list[tuple[int, int]]:
        """The next ``m`` low ``(t, x)`` pairs, to be passed to :meth:`insert_batch`."""
        return [(t, 1 + t % 101) for t in range(self.next_low, self.next_low + m)]

    def insert_batch(self, pairs: list[tuple[int, int]], *, bulk: bool) -> None:
        """Insert :meth:`next_batch`'s pairs: one ``bulk_insert`` or single inserts."""
        if bulk:
            self.agg.bulk_insert(pairs)
        else:
            insert = self.agg.insert
            for t, x in pairs:
                insert(t, x)
        self.next_low += len(pairs)

    def batch_rounds(self, count: int, m: int, *, bulk_evict: bool, bulk_insert: bool) -> None:
        """``count`` rounds of evicting the ``m`` oldest, inserting ``m`` lows, one query."""
        query = self.agg.query
        for _ in range(count):
            self.evict_batch(m, bulk=bulk_evict)
            self.insert_batch(self.next_batch(m), bulk=bulk_insert)
            query()

    def batch_latencies(
        self,
        count: int,
        m: int,
        *,
        bulk_evict: bool,
        bulk_insert: bool,
        clock: Callable[[], int] = perf_counter_ns,
    ) -> tuple[list[int], list[int]]:
        """Run ``count`` batch rounds; return the ``clock`` ns of each eviction and insertion.

        The insertion's pairs are built before its clock starts; the query is not timed.
        """
        query = self.agg.query
        evictions = [0] * count
        insertions = [0] * count
        for k in range(count):
            start = clock()
            self.evict_batch(m, bulk=bulk_evict)
            evictions[k] = clock() - start
            pairs = self.next_batch(m)
            start = clock()
            self.insert_batch(pairs, bulk=bulk_insert)
            insertions[k] = clock() - start
            query()
        return evictions, insertions
