"""One window size's aggregate of one key, kept between events: Two-Stacks over a FiBA.

``WindowSuffix`` answers the window ``[S - w, S]`` of one key without a range query on every
event: a front of suffix folds (consumed as ``S`` advances, no combine), a middle fold and a
back fold behind a split that follows the lateness seen, rebuilt once per span of stream-time
advance. Costs per event: O(1) combines amortized in order, O(log b) for a late insert behind
the split, never more than the FiBA range query plus that; memory about ``FRONT_ENTRIES``
partials per key and window. The answer is always the fold, in time order, of exactly the
entries with ``start <= t <= S`` (tests compare it with brute force). Design:
docs/design/windows.md.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

from stores.fiba import FiBA

SPAN_FRACTION = 64
"""The first rebuild's front spans ``w / SPAN_FRACTION`` of stream time (at least 1)."""

FRONT_ENTRIES = 256
"""Each rebuild sets the next front's span so that it would have held about this many entries
at the rate of the last one (a rebuild walks its front, O(k), and asks two range aggregates,
O(log n): a few hundred entries make the latter small per entry and the walk short)."""

MIN_ANSWERS = 4
"""A window asked at most this many times between two rebuilds (few events of its key per
span: a sparse key, or a window of a few entries) costs more kept than asked afresh: it is then
answered by range queries for ``DIRECT_ANSWERS`` answers, and kept again after them."""

DIRECT_ANSWERS = 64
"""Answers given by range query before a window given up on (``MIN_ANSWERS``) is kept again."""

FOLD_AT_MOST = 4
"""A bulk insert of at most this many entries is folded into a fresh ``back`` entry by entry
(``inserted_many``); a larger one leaves it to one range aggregate at the next answer."""


class WindowSuffix:
    """The raw partial of one key's entries in ``[start, S]`` for a window whose ``start``
    (``S - w``) never decreases; told of every insert into the key's FiBA (``inserted``)."""

    __slots__ = (
        "_answers",
        "_back",
        "_back_fresh",
        "_combine",
        "_cut",
        "_direct",
        "_first",
        "_floor",
        "_front_folds",
        "_front_fresh",
        "_front_times",
        "_identity",
        "_mid",
        "_mid_fresh",
        "_size",
        "_span",
        "_split",
    )

    def __init__(self, monoid: Any, size: int) -> None:
        self._combine = monoid.combine
        self._identity = monoid.identity
        self._size = size
        self._span = max(1, size // SPAN_FRACTION)
        self._cut: int | None = None  # None: not built yet
        self._split = 0
        self._front_times: list[int] = []
        self._front_folds: list[Any] = []
        self._first = 0
        self._mid: Any = None  # None: no entry in [cut, split)
        self._back: Any = None  # None: no entry at or after split
        self._front_fresh = self._mid_fresh = self._back_fresh = True
        self._floor = 0  # the latest start asked (set before any build): older entries never count
        self._answers = 0  # since the last rebuild
        self._direct = 0  # answers left to give by range query before keeping the window again

    def aggregate(self, fiba: FiBA, start: int, stream_time: int, lateness: int) -> Any:
        """The partial of the entries of ``fiba`` with ``start <= t <= stream_time`` (the
        identity when there are none). ``lateness`` is the largest ``S - t`` of an insert
        seen so far (the margin of a rebuild)."""
        self._floor = start
        if self._direct:
            self._direct -= 1
            return fiba.aggregate_range(start, stream_time)
        cut = self._cut
        self._answers += 1
        if cut is None or start > cut:
            if cut is not None and self._answers <= MIN_ANSWERS:
                self._cut = None  # not kept: inserts need no notice
                self._direct = DIRECT_ANSWERS - 1
                return fiba.aggregate_range(start, stream_time)
            self._answers = 1
            cut = self._rebuild(fiba, start, stream_time, lateness)
        elif not self._front_fresh:
            return fiba.aggregate_range(start, stream_time)
        if not self._mid_fresh:  # after a rebuild, or an insert in [cut, split)
            self._mid = self._range(fiba, cut, self._split - 1)
            self._mid_fresh = True
        if not self._back_fresh:  # after a rebuild, or an insert behind the young end
            self._back = self._range(fiba, self._split, stream_time)
            self._back_fresh = True
        combine = self._combine
        result = self._back
        mid = self._mid
        if mid is not None:
            result = mid if result is None else combine(mid, result)
        times = self._front_times
        first = self._first = bisect_left(times, start, self._first)
        if first < len(times):
            front = self._front_folds[first]
            result = front if result is None else combine(front, result)
        return self._identity if result is None else result

    def inserted(self, t: int, partial: Any, appended: bool) -> None:
        """``partial`` was inserted at ``t``; ``appended``: ``t`` was at or after every time
        of the key before (so the entry at ``t`` is now the old one, if any, ⊕ ``partial``)."""
        cut = self._cut
        if cut is None:
            return
        if t >= self._split:
            if appended and self._back_fresh:
                back = self._back
                self._back = partial if back is None else self._combine(back, partial)
            else:
                self._back_fresh = False
        elif t >= cut:
            self._mid_fresh = False
        elif t >= self._floor:
            self._front_fresh = False

    def inserted_many(self, times: list[int], partials: list[Any], youngest: int | None) -> None:
        """``inserted`` for every ``(times[i], partials[i])`` of one bulk insert (``times``
        sorted; ``youngest``: the key's youngest time before them, ``None`` if none). Up to
        ``FOLD_AT_MOST`` inserts are noticed one by one; more only mark the parts they land in
        stale, so the next answer folds them with one range aggregate, O(log b), instead of
        one combine per insert. O(log m) for ``m`` inserts."""
        if self._cut is None:
            return
        if len(times) <= FOLD_AT_MOST:
            for t, partial in zip(times, partials, strict=True):
                self.inserted(t, partial, youngest is None or t >= youngest)
            return
        cut, split = self._cut, self._split
        if times[-1] >= split:
            self._back_fresh = False
        i = bisect_left(times, cut)
        if i < len(times) and times[i] < split:
            self._mid_fresh = False
        i = bisect_left(times, self._floor)
        if i < len(times) and times[i] < cut:
            self._front_fresh = False

    def _rebuild(self, fiba: FiBA, start: int, stream_time: int, lateness: int) -> int:
        """Set the new ``cut`` and ``split`` and fold the front; ``mid`` and ``back`` are left
        stale for ``aggregate`` to fold. Returns the new cut."""
        size = self._size
        split = self._split = max(start, stream_time - min(2 * lateness + 1, size // 2))
        span = self._span
        cut = self._cut = min(split, start + span)
        times: list[int] = []
        folds: list[Any] = []
        for t, partial in fiba.items_from(start):
            if t >= cut:
                break
            times.append(t)
            folds.append(partial)
        if cut > start:  # the next span: about FRONT_ENTRIES entries at this one's rate
            self._span = min(size, max(1, (cut - start) * FRONT_ENTRIES // max(1, len(folds))))
        combine = self._combine
        for i in range(len(folds) - 2, -1, -1):
            folds[i] = combine(folds[i], folds[i + 1])
        self._front_times, self._front_folds, self._first = times, folds, 0
        self._front_fresh = True
        self._mid_fresh = self._back_fresh = False
        return cut

    def _range(self, fiba: FiBA, t_from: int, t_to: int) -> Any:
        """The fold of the entries with ``t_from <= t <= t_to``; ``None`` for the identity
        (no entries, ``t_to < t_from``, or a fold equal to it: leaving it out changes no
        answer)."""
        partial = fiba.aggregate_range(t_from, t_to)
        return None if partial == self._identity else partial
