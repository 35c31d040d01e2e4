"""The part every FIFO aggregator shares: time bookkeeping, collisions, FIFO rules, bulk loops.

``FifoAggregator`` turns a structure that only appends at the young end and removes at the old
end (Two-Stacks, DABA) into the window ADT of ``stores.fiba``, with FiBA's collision rule (an
insert at the youngest time combines into it). The youngest entry is staged outside the
structure, so collisions cost O(1) and every entry is pushed once; a query costs one more
combine. An out-of-order insert, or an evict other than of the oldest entry, raises
``ValueError`` with the reason. Details: docs/design/fiba.md.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from itertools import pairwise
from typing import Any

__all__ = ["FifoAggregator", "FifoEntries", "prefix_aggregates", "suffix_aggregates"]

_NOTHING = object()


class FifoAggregator(ABC):
    """Window ADT over a FIFO aggregation structure (see the module docstring).

    Subclasses provide the structure through the ``_push``/``_pop``/``_aggregate``/... hooks;
    every public operation costs the hook calls it makes plus O(1), except the membership tests
    (``__contains__``, and ``evict`` of a non-oldest time), which cost one O(log n) search.
    """

    __slots__ = ("_combine", "_identity", "_lift", "_lower", "_staged", "_staged_t", "monoid")

    def __init__(self, monoid: Any) -> None:
        self.monoid = monoid
        self._combine = monoid.combine
        self._identity = monoid.identity
        self._lift = monoid.lift
        self._lower = monoid.lower
        self._staged_t: Any = _NOTHING  # youngest time, _NOTHING iff the window is empty
        self._staged: Any = None  # its partial

    # --- the structure (subclass hooks) ---------------------------------------------------------

    @abstractmethod
    def _push(self, t: Any, partial: Any) -> None:
        """Append entry ``(t, partial)`` at the young end (``t`` younger than every entry)."""

    @abstractmethod
    def _pop(self) -> None:
        """Remove the oldest entry of the structure (which is not empty)."""

    @abstractmethod
    def _aggregate(self) -> Any:
        """Combine of all structure entries, oldest first (``identity`` when empty)."""

    @abstractmethod
    def _size(self) -> int:
        """Number of entries in the structure."""

    @abstractmethod
    def _oldest_time(self) -> Any:
        """Time of the oldest structure entry (the structure is not empty)."""

    @abstractmethod
    def _times(self) -> Iterator[Any]:
        """Times of the structure entries, oldest first."""

    @abstractmethod
    def _holds(self, t: Any) -> bool:
        """Whether the structure has an entry at time ``t`` (O(log n) search)."""

    @abstractmethod
    def _check_structure(self) -> None:
        """Raise AssertionError if a stored aggregate disagrees with its definition."""

    # --- updates ----------------------------------------------------------------------------

    def insert(self, t: Any, x: Any) -> None:
        """Add event ``x`` at time ``t >= youngest()``; at ``t == youngest()`` it is combined into
        that entry (existing partial first). O(1) plus at most one ``_push``."""
        lifted = self._lift(x)
        staged_t = self._staged_t
        if staged_t is not _NOTHING:
            if t == staged_t:
                self._staged = self._combine(self._staged, lifted)
                return
            if t < staged_t:
                raise ValueError(
                    f"out-of-order insert at t={t!r}: this FIFO aggregator only appends at or "
                    f"after the youngest time {staged_t!r} (use FiBA for out-of-order windows)"
                )
            self._push(staged_t, self._staged)
        self._staged_t = t
        self._staged = lifted

    def evict(self, t: Any) -> bool:
        """Remove the entry at time ``t`` if it is the oldest: True; ``False`` if there is no
        entry at ``t``; ValueError if ``t`` is present but not the oldest. O(1) plus one
        ``_pop`` (O(log n) search on the ValueError/False paths)."""
        if self._size():
            if t == self._oldest_time():
                self._pop()
                return True
        elif self._staged_t is not _NOTHING and t == self._staged_t:
            self._staged_t = _NOTHING
            self._staged = None
            return True
        if t in self:
            raise ValueError(
                f"evict(t={t!r}) of an entry that is not the oldest ({self.oldest()!r}): this "
                "FIFO aggregator only evicts at the old end (use bulk_evict, or FiBA)"
            )
        return False

    def bulk_evict(self, t: Any) -> int:
        """Evict every entry with time ``<= t``, oldest first; return how many. O(1) per entry."""
        count = 0
        while self._size() and not t < self._oldest_time():
            self._pop()
            count += 1
        if self._staged_t is not _NOTHING and not self._size() and not t < self._staged_t:
            self._staged_t = _NOTHING
            self._staged = None
            count += 1
        return count

    def bulk_insert(self, pairs: Iterable[tuple[Any, Any]]) -> None:
        """Insert ``(t, x)`` pairs, a loop of inserts; all or nothing: ValueError, and no change,
        unless the times are non-decreasing and none is older than ``youngest()``."""
        pairs = list(pairs)
        previous = self._staged_t
        for t, _ in pairs:
            if previous is not _NOTHING and t < previous:
                raise ValueError(
                    f"bulk_insert needs pairs sorted by time, none older than the youngest: "
                    f"t={t!r} comes after {previous!r} (this aggregator is FIFO)"
                )
            previous = t
        for t, x in pairs:
            self.insert(t, x)

    # --- queries ----------------------------------------------------------------------------

    def query(self) -> Any:
        """Lowered combine of the whole window, oldest first; the lowered identity if empty."""
        return self._lower(self.aggregate())

    def aggregate(self) -> Any:
        """The raw (un-lowered) partial of the whole window; the identity if empty. O(1)."""
        if self._staged_t is _NOTHING:
            return self._identity
        if not self._size():
            return self._staged
        return self._combine(self._aggregate(), self._staged)

    def __len__(self) -> int:
        """Number of distinct times in the window."""
        return self._size() + (self._staged_t is not _NOTHING)

    def __contains__(self, t: Any) -> bool:
        """Whether an entry at time ``t`` exists. O(log n)."""
        staged_t = self._staged_t
        if staged_t is _NOTHING:
            return False
        return t == staged_t or self._holds(t)

    def oldest(self) -> Any:
        """Time of the oldest entry, ``None`` if empty."""
        if self._size():
            return self._oldest_time()
        return None if self._staged_t is _NOTHING else self._staged_t

    def youngest(self) -> Any:
        """Time of the youngest entry, ``None`` if empty."""
        return None if self._staged_t is _NOTHING else self._staged_t

    def check_invariants(self) -> None:
        """Raise AssertionError naming the first broken invariant: times strictly increasing
        (structure, then the staged youngest), a non-empty window has a staged entry, and the
        subclass's aggregation invariants. O(n) combines."""
        times = list(self._times())
        _require(len(times) == self._size(), "size: structure count != its times")
        if self._staged_t is _NOTHING:
            _require(not times, "staging: entries in the structure but nothing staged")
        else:
            times.append(self._staged_t)
        for older, younger in pairwise(times):
            _require(older < younger, f"time order: {older!r} before {younger!r}")
        self._check_structure()


class FifoEntries(FifoAggregator):
    """A :class:`FifoAggregator` whose structure keeps every entry's own partial, so it can
    also iterate over ``(t, partial)`` and look entries up by time."""

    __slots__ = ()

    @abstractmethod
    def _items(self) -> Iterator[tuple[Any, Any]]:
        """``(t, partial)`` of the structure entries, oldest first."""

    @abstractmethod
    def _lookup(self, t: Any) -> Any:
        """Partial of the structure entry at ``t``, or ``None`` if absent. O(log n)."""

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        """``(t, partial)`` for every entry, oldest first."""
        yield from self._items()
        if self._staged_t is not _NOTHING:
            yield self._staged_t, self._staged

    def get(self, t: Any) -> Any:
        """Partial (lifted, combined on collisions) of the entry at ``t``; ``None`` if absent."""
        if self._staged_t is _NOTHING:
            return None
        if t == self._staged_t:
            return self._staged
        return self._lookup(t)


def prefix_aggregates(values: list[Any], combine: Callable[[Any, Any], Any]) -> list[Any]:
    """``out[i] = values[0] ⊕ ... ⊕ values[i]``: ``len - 1`` combines."""
    out = values[:]
    for i in range(1, len(out)):
        out[i] = combine(out[i - 1], out[i])
    return out


def suffix_aggregates(values: list[Any], combine: Callable[[Any, Any], Any]) -> list[Any]:
    """``out[i] = values[i] ⊕ ... ⊕ values[-1]``, computed from the end: ``len - 1`` combines."""
    out = values[:]
    for i in range(len(out) - 2, -1, -1):
        out[i] = combine(out[i], out[i + 1])
    return out


def _require(condition: bool, invariant: str) -> None:
    if not condition:
        raise AssertionError(f"FIFO aggregator: {invariant}")
