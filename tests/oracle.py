"""Brute-force oracle for the sliding-window aggregator ADT shared by FiBA and the baselines.

``OracleWindow`` keeps the window as a ``SortedDict`` from time to the combined partial of the
events at that time and answers every query by folding the monoid over the entries in time
order. It is deliberately naive (O(n) per query) and shares no code with the aggregators it
checks: only the monoid's ``identity``, ``lift``, ``combine`` and ``lower``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from sortedcontainers import SortedDict


class OracleWindow:
    """Reference semantics of a time-ordered window of lifted partials (see ``stores.fiba``)."""

    def __init__(self, monoid: Any) -> None:
        self.monoid = monoid
        self.entries: SortedDict = SortedDict()

    def insert(self, t: Any, x: Any) -> None:
        lifted = self.monoid.lift(x)
        if t in self.entries:
            self.entries[t] = self.monoid.combine(self.entries[t], lifted)
        else:
            self.entries[t] = lifted

    def evict(self, t: Any) -> bool:
        return self.entries.pop(t, _ABSENT) is not _ABSENT

    def bulk_evict(self, t: Any) -> int:
        doomed = list(self.entries.irange(maximum=t))
        for key in doomed:
            del self.entries[key]
        return len(doomed)

    def bulk_insert(self, pairs: Iterable[tuple[Any, Any]]) -> None:
        for t, x in pairs:
            self.insert(t, x)

    def _fold(self, partials: Iterable[Any]) -> Any:
        acc = self.monoid.identity
        for p in partials:
            acc = self.monoid.combine(acc, p)
        return acc

    def query(self) -> Any:
        return self.monoid.lower(self._fold(self.entries.values()))

    def query_range(self, t_from: Any, t_to: Any) -> Any:
        if t_to < t_from:
            return self.monoid.lower(self.monoid.identity)
        keys = self.entries.irange(t_from, t_to)
        return self.monoid.lower(self._fold(self.entries[k] for k in keys))

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, t: Any) -> bool:
        return t in self.entries

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        return iter(self.entries.items())

    def get(self, t: Any) -> Any:
        return self.entries.get(t)

    def oldest(self) -> Any:
        return self.entries.keys()[0] if self.entries else None

    def youngest(self) -> Any:
        return self.entries.keys()[-1] if self.entries else None


_ABSENT = object()
