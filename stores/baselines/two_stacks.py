"""Two-Stacks: the amortized O(1) FIFO sliding-window aggregator (*Low-Latency Sliding-Window
Aggregation in Worst-Case Constant Time*).

A back stack takes inserts with its running aggregate, a front stack holds the older entries
with theirs, and an evict that finds the front empty flips the back onto it. Combines: insert
1, evict 0 except the flip (O(n) once, amortized O(1)), query 1; any associative combine.
``TwoStacksLite`` keeps only the aggregates the query needs. In order only (see
``stores.baselines.fifo``). Details: docs/design/fiba.md.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from typing import Any

from stores.baselines.fifo import (
    FifoAggregator,
    FifoEntries,
    prefix_aggregates,
    suffix_aggregates,
)

__all__ = ["TwoStacks", "TwoStacksLite"]


def _index(times: list[Any], lo: int, t: Any) -> int:
    """Index of ``t`` in the sorted ``times[lo:]``, or -1."""
    i = bisect_left(times, t, lo)
    return i if i < len(times) and times[i] == t else -1


class _StackTimes:
    """The times of a two-stack window: the front stack's ``_front_t[_head:]`` (oldest first),
    then the back stack's ``_back_t``. Shared by TwoStacks and TwoStacksLite."""

    __slots__ = ()
    _front_t: list[Any]
    _back_t: list[Any]
    _head: int

    def _size(self) -> int:
        return len(self._front_t) - self._head + len(self._back_t)

    def _oldest_time(self) -> Any:
        return self._front_t[self._head] if self._head < len(self._front_t) else self._back_t[0]

    def _times(self) -> Iterator[Any]:
        yield from self._front_t[self._head :]
        yield from self._back_t

    def _holds(self, t: Any) -> bool:
        return _index(self._front_t, self._head, t) >= 0 or _index(self._back_t, 0, t) >= 0


class TwoStacks(_StackTimes, FifoEntries):
    """Two-Stacks FIFO aggregator (see the module docstring): amortized O(1), worst case O(n).

    Front stack: ``_front_t``/``_front_v``/``_front_a`` from index ``_head`` (the top, oldest)
    to the end (the bottom, youngest); ``_front_a[i] = v[i] ⊕ ... ⊕ v[-1]``. Back stack:
    ``_back_t``/``_back_v``/``_back_a`` from the bottom (oldest) to the top (youngest);
    ``_back_a[i] = v[0] ⊕ ... ⊕ v[i]``.
    """

    __slots__ = ("_back_a", "_back_t", "_back_v", "_front_a", "_front_t", "_front_v", "_head")

    def __init__(self, monoid: Any) -> None:
        super().__init__(monoid)
        self._front_t: list[Any] = []
        self._front_v: list[Any] = []
        self._front_a: list[Any] = []
        self._head = 0
        self._back_t: list[Any] = []
        self._back_v: list[Any] = []
        self._back_a: list[Any] = []

    def _push(self, t: Any, partial: Any) -> None:
        back_a = self._back_a
        self._back_t.append(t)
        self._back_v.append(partial)
        back_a.append(self._combine(back_a[-1], partial) if back_a else partial)

    def _flip(self) -> None:
        """Move the whole back onto the (empty) front: one combine per entry but one."""
        self._front_t = self._back_t
        self._front_v = self._back_v
        self._front_a = suffix_aggregates(self._back_v, self._combine)
        self._head = 0
        self._back_t = []
        self._back_v = []
        self._back_a = []

    def _pop(self) -> None:
        if self._head == len(self._front_t):
            self._flip()
        head = self._head
        self._front_v[head] = self._front_a[head] = None  # release the partials now
        self._head = head + 1

    def _aggregate(self) -> Any:
        front = self._head < len(self._front_t)
        if not self._back_t:
            return self._front_a[self._head] if front else self._identity
        if not front:
            return self._back_a[-1]
        return self._combine(self._front_a[self._head], self._back_a[-1])

    def _items(self) -> Iterator[tuple[Any, Any]]:
        head = self._head
        yield from zip(self._front_t[head:], self._front_v[head:], strict=True)
        yield from zip(self._back_t, self._back_v, strict=True)

    def _lookup(self, t: Any) -> Any:
        i = _index(self._front_t, self._head, t)
        if i >= 0:
            return self._front_v[i]
        i = _index(self._back_t, 0, t)
        return self._back_v[i] if i >= 0 else None

    def _check_structure(self) -> None:
        combine = self._combine
        head = self._head
        lengths = {len(self._front_t), len(self._front_v), len(self._front_a)}
        _require(len(lengths) == 1, "front arrays of different lengths")
        lengths = {len(self._back_t), len(self._back_v), len(self._back_a)}
        _require(len(lengths) == 1, "back arrays of different lengths")
        expected = suffix_aggregates(self._front_v[head:], combine)
        _require(self._front_a[head:] == expected, "front aggregates != v[i] ⊕ ... ⊕ v[-1]")
        expected = prefix_aggregates(self._back_v, combine)
        _require(self._back_a == expected, "back aggregates != v[0] ⊕ ... ⊕ v[i]")


class TwoStacksLite(_StackTimes, FifoAggregator):
    """Two-Stacks with one stored partial per entry (see the module docstring).

    Back: values ``_back_v`` (oldest first) and their running aggregate ``_back_sum``. Front:
    only aggregates ``_front_a[i] = v[i] ⊕ ... ⊕ v[-1]`` from index ``_head`` (the oldest), the
    values themselves being forgotten at the flip. Same costs as :class:`TwoStacks`.
    """

    __slots__ = ("_back_sum", "_back_t", "_back_v", "_front_a", "_front_t", "_head")

    def __init__(self, monoid: Any) -> None:
        super().__init__(monoid)
        self._front_t: list[Any] = []
        self._front_a: list[Any] = []
        self._head = 0
        self._back_t: list[Any] = []
        self._back_v: list[Any] = []
        self._back_sum = self._identity

    def _push(self, t: Any, partial: Any) -> None:
        self._back_sum = self._combine(self._back_sum, partial) if self._back_t else partial
        self._back_t.append(t)
        self._back_v.append(partial)

    def _pop(self) -> None:
        if self._head == len(self._front_t):
            self._front_t = self._back_t
            self._front_a = suffix_aggregates(self._back_v, self._combine)
            self._head = 0
            self._back_t = []
            self._back_v = []
            self._back_sum = self._identity
        self._front_a[self._head] = None  # release the partial now
        self._head += 1

    def _aggregate(self) -> Any:
        front = self._head < len(self._front_t)
        if not self._back_t:
            return self._front_a[self._head] if front else self._identity
        if not front:
            return self._back_sum
        return self._combine(self._front_a[self._head], self._back_sum)

    def _check_structure(self) -> None:
        """Array shapes and ``Σ_B``; the front's aggregates cannot be re-derived (its values
        are not kept), the window's queries are what the property tests check them by."""
        _require(len(self._front_t) == len(self._front_a), "front arrays of different lengths")
        _require(len(self._back_t) == len(self._back_v), "back arrays of different lengths")
        back = self._back_v
        expected = prefix_aggregates(back, self._combine)[-1] if back else self._identity
        _require(self._back_sum == expected, "back sum != v[0] ⊕ ... ⊕ v[-1]")


def _require(condition: bool, invariant: str) -> None:
    if not condition:
        raise AssertionError(f"TwoStacks: {invariant}")
