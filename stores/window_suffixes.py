"""One window size's aggregate of one key, kept between events: Two-Stacks over a FiBA.

``KeyWindows`` answers every window ``[S - w, S]`` of a key from the key's one FiBA (window
sharing). Asked afresh, a window smaller than the retained data is a suffix range query,
O(log m) combines for the m entries it holds, on every event. ``WindowSuffix`` remembers the
answer for one ``w`` split at a time ``split`` (``S - margin`` when it was last rebuilt)::

    A[start, S] = front_folds[first] ⊕ back        (start = S - w)

* ``front``: the times of the entries with ``start <= t < split`` at the last rebuild, and their
  suffix folds (``front_folds[i]`` is the fold of the entries from ``front_times[i]`` up to
  ``split``). As ``start`` advances, ``first`` moves right (a bisect): no combine.
* ``back``: the fold of every entry with ``t >= split``. An insert at the young end (a new
  youngest time, or the youngest time again, combined after the old partial) costs one combine;
  any other insert at ``t >= split`` marks it stale, and the next answer recomputes it with one
  FiBA suffix aggregate, O(log b) for the ``b`` entries from ``split`` on.
* ``start > split`` (the front is used up): rebuild. The entries from ``start`` on are walked
  (``FiBA.items_from``), the front folded right to left and the back left to right: O(log n + m)
  once per ``w - margin`` of stream-time advance, O(1) amortized per entry.
* An insert at ``start <= t < split`` (further behind ``S`` than the margin) invalidates the
  front: until the next rebuild the window is answered by a FiBA range query, as without this
  cache. The margin is twice the largest lateness seen (``S - t`` of an out-of-order insert),
  at most ``w / 2``, so after the first late event such inserts land in the back.

Entries older than ``start`` never matter again (``start`` only grows), so evictions, which
remove entries older than ``S - R <= start``, need no notice. Costs per event: O(1) combines
amortized in order, O(log b) for an out-of-order insert behind the split; never more than the
range query plus O(1) amortized. Memory: the front holds one time and one partial per entry of
the window at its last rebuild.

The answer is always the fold, in time order, of exactly the entries with
``start <= t <= S`` (``S`` at or after every entry's time); ``tests/test_key_windows.py``
compares every window of every record with a brute-force model.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

from stores.fiba import FiBA


class WindowSuffix:
    """The raw partial of one key's entries in ``[start, S]`` for a window whose ``start``
    (``S - w``) never decreases; told of every insert into the key's FiBA (``inserted``)."""

    __slots__ = (
        "_back",
        "_back_fresh",
        "_combine",
        "_first",
        "_floor",
        "_front_folds",
        "_front_fresh",
        "_front_times",
        "_identity",
        "_size",
        "_split",
    )

    def __init__(self, monoid: Any, size: int) -> None:
        self._combine = monoid.combine
        self._identity = monoid.identity
        self._size = size
        self._split: int | None = None  # None: not built yet
        self._front_times: list[int] = []
        self._front_folds: list[Any] = []
        self._first = 0
        self._back: Any = None  # None: no entry at or after the split
        self._back_fresh = True
        self._front_fresh = True
        self._floor: int | None = None  # the latest start asked: older entries never count

    def aggregate(self, fiba: FiBA, start: int, stream_time: int, lateness: int) -> Any:
        """The partial of the entries of ``fiba`` with ``start <= t <= stream_time`` (the
        identity when there are none). ``lateness`` is the largest ``S - t`` of an insert
        seen so far (the margin of a rebuild)."""
        self._floor = start
        split = self._split
        if split is None or start > split:
            return self._rebuild(fiba, start, stream_time, lateness)
        if not self._front_fresh:
            return fiba.aggregate_range(start, stream_time)
        back = self._back
        if not self._back_fresh:
            back = self._back = fiba.aggregate_range(split, stream_time)
            self._back_fresh = True
        times = self._front_times
        first = self._first = bisect_left(times, start, self._first)
        if first == len(times):
            return self._identity if back is None else back
        front = self._front_folds[first]
        return front if back is None else self._combine(front, back)

    def inserted(self, t: int, partial: Any, appended: bool) -> None:
        """``partial`` was inserted at ``t``; ``appended``: ``t`` was at or after every time
        of the key before (so the entry at ``t`` is now the old one, if any, ⊕ ``partial``)."""
        split = self._split
        if split is None:
            return
        if t >= split:
            if appended and self._back_fresh:
                back = self._back
                self._back = partial if back is None else self._combine(back, partial)
            else:
                self._back_fresh = False
        elif self._floor is None or t >= self._floor:
            self._front_fresh = False

    def _rebuild(self, fiba: FiBA, start: int, stream_time: int, lateness: int) -> Any:
        margin = min(2 * lateness + 1, self._size // 2)
        split = self._split = max(start, stream_time - margin)
        combine = self._combine
        times: list[int] = []
        folds: list[Any] = []
        back = None
        entries = fiba.items_from(start)
        for t, partial in entries:
            if t >= split:
                back = partial
                for _, later in entries:
                    back = combine(back, later)
                break
            times.append(t)
            folds.append(partial)
        for i in range(len(folds) - 2, -1, -1):
            folds[i] = combine(folds[i], folds[i + 1])
        self._front_times, self._front_folds, self._first = times, folds, 0
        self._back, self._back_fresh, self._front_fresh = back, True, True
        if not folds:
            return self._identity if back is None else back
        return folds[0] if back is None else combine(folds[0], back)
