"""ReCalc: the recalculate-from-scratch baseline (worst O(n) per query).

The "Related Work" baseline of *Low-Latency Sliding-Window Aggregation in Worst-Case Constant
Time* (DEBS 2017).

The window is a sorted map from time to the entry's partial; nothing else is stored, so updates
are cheap and every query folds the monoid over the window (or the sub-window) oldest first.
Any insert/evict order is supported, and any associative monoid. It is the brute-force oracle's
twin, but built as an aggregator (same interface as FiBA, query_range included) so the
benchmarks can show what incremental aggregation buys.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import reduce
from typing import Any

from sortedcontainers import SortedDict

__all__ = ["ReCalc"]


class ReCalc:
    """Out-of-order window aggregator that recomputes every query.

    Costs (n entries in the window, combine calls in brackets): insert O(log n) [1 on a
    collision, else 0], evict O(log n) [0], bulk_evict O(m log n) for m evicted, query O(n)
    [n - 1], query_range O(log n + k) [k - 1] for k entries in range; ``aggregate`` and
    ``aggregate_range`` are their un-lowered forms.
    """

    __slots__ = ("_combine", "_entries", "_identity", "_lift", "_lower", "monoid")

    def __init__(self, monoid: Any) -> None:
        self.monoid = monoid
        self._combine = monoid.combine
        self._identity = monoid.identity
        self._lift = monoid.lift
        self._lower = monoid.lower
        self._entries: SortedDict = SortedDict()

    def insert(self, t: Any, x: Any) -> None:
        """Add event ``x`` at time ``t`` (any order); at an existing ``t`` it is combined into
        that entry, existing partial first."""
        lifted = self._lift(x)
        entries = self._entries
        existing = entries.get(t, _ABSENT)
        entries[t] = lifted if existing is _ABSENT else self._combine(existing, lifted)

    def evict(self, t: Any) -> bool:
        """Remove the entry at time ``t``; False if there is none."""
        return self._entries.pop(t, _ABSENT) is not _ABSENT

    def bulk_evict(self, t: Any) -> int:
        """Remove every entry with time ``<= t``; return how many."""
        entries = self._entries
        doomed = entries.bisect_right(t)
        for _ in range(doomed):
            entries.popitem(0)
        return doomed

    def bulk_insert(self, pairs: Iterable[tuple[Any, Any]]) -> None:
        """Insert ``(t, x)`` pairs in the given order (any times)."""
        for t, x in pairs:
            self.insert(t, x)

    def _fold(self, partials: Iterable[Any]) -> Any:
        return reduce(self._combine, partials, self._identity)

    def query(self) -> Any:
        """Lowered combine of the whole window, oldest first; the lowered identity if empty."""
        return self._lower(self.aggregate())

    def aggregate(self) -> Any:
        """The raw (un-lowered) partial of the whole window, folded from scratch."""
        return self._fold(self._entries.values())

    def query_range(self, t_from: Any, t_to: Any) -> Any:
        """Lowered combine of the entries with ``t_from <= t <= t_to``, oldest first."""
        return self._lower(self.aggregate_range(t_from, t_to))

    def aggregate_range(self, t_from: Any, t_to: Any) -> Any:
        """The raw partial of the entries with ``t_from <= t <= t_to`` (both inclusive); the
        identity when there are none or ``t_to < t_from``."""
        entries = self._entries
        if t_to < t_from:
            return self._identity
        start = entries.bisect_left(t_from)
        stop = entries.bisect_right(t_to)
        return self._fold(map(entries.__getitem__, entries.islice(start, stop)))

    def __len__(self) -> int:
        """Number of distinct times in the window."""
        return len(self._entries)

    def __contains__(self, t: Any) -> bool:
        return t in self._entries

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        """``(t, partial)`` for every entry, oldest first."""
        return iter(self._entries.items())

    def get(self, t: Any) -> Any:
        """Partial of the entry at ``t``; ``None`` if absent."""
        return self._entries.get(t)

    def oldest(self) -> Any:
        """Time of the oldest entry, ``None`` if empty."""
        return self._entries.peekitem(0)[0] if self._entries else None

    def youngest(self) -> Any:
        """Time of the youngest entry, ``None`` if empty."""
        return self._entries.peekitem(-1)[0] if self._entries else None

    def check_invariants(self) -> None:
        """Raise AssertionError if the sorted map's internal index is inconsistent."""
        self._entries._check()


_ABSENT = object()
