"""FlatFAT: the flat fixed-sized aggregator behind the Reactive Aggregator (*General Incremental
Sliding-Window Aggregation*, VLDB 2015).

A complete binary tree over ``capacity`` leaves stored pointer-less in one list (node ``i`` has
children ``2i+1`` and ``2i+2``), the leaves a circular buffer of time-ordered entries. Inserts
at the young end only (an older time raises ``ValueError``); an evict anywhere leaves a hole
holding the identity. Inserts and evicts only write leaves; the next query repairs every
changed leaf-to-root path together, O(m + m log(n/m)) combines for m changed leaves, then
reads the root (at most 2 log2(capacity) combines when the buffer wraps). The capacity doubles
or halves at amortized O(1) per event. Details: docs/design/fiba.md.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["FlatFAT"]


class FlatFAT:
    """In-order-insert, any-order-evict sliding-window aggregator on a flat array tree.

    ``capacity`` is the initial (and minimum) number of leaves, rounded up to a power of two.
    Costs (``n`` = capacity, ``m`` = leaves changed since the previous query): ``insert``
    amortized O(1) time, ``evict`` O(log n) (binary search) plus amortized O(1), neither with
    combines (except a collision's one, and the occasional resize's rebuild);
    ``query``/``aggregate`` and ``query_range``/``aggregate_range`` O(m + m log(n/m)) combines
    of pending repair plus O(log n); ``bulk_insert``/``bulk_evict`` of ``m`` entries
    O(m + log n) time.
    """

    __slots__ = (
        "_cap",
        "_combine",
        "_count",
        "_dirty",
        "_front",
        "_identity",
        "_lift",
        "_lower",
        "_min_cap",
        "_present",
        "_span",
        "_stale_all",
        "_times",
        "_tree",
    )

    def __init__(self, monoid: Any, capacity: int = 16) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self._combine = monoid.combine
        self._lift = monoid.lift
        self._lower = monoid.lower
        self._identity = monoid.identity
        cap = 2
        while cap < capacity:
            cap *= 2
        self._min_cap = cap
        self._cap = cap
        self._tree: list[Any] = [self._identity] * (2 * cap - 1)
        self._times: list[Any] = [None] * cap
        self._present: list[bool] = [False] * cap
        self._front = 0
        self._span = 0
        self._count = 0
        self._dirty: list[int] = []
        self._stale_all = False

    @property
    def capacity(self) -> int:
        """Current number of leaves (a power of two)."""
        return self._cap

    # --- updates ----------------------------------------------------------------------------

    def insert(self, t: Any, x: Any) -> None:
        """Append event ``x`` at time ``t`` at the young end; at ``t == youngest`` combine into
        that entry (existing partial first). Raises ValueError for ``t < youngest``: FlatFAT
        (the Reactive Aggregator) requires in-order insertion. Amortized O(1), no combines
        until the next query except on a collision."""
        lifted = self._lift(x)
        cap = self._cap
        span = self._span
        dirty = self._dirty
        if span:
            slot = (self._front + span - 1) & (cap - 1)
            youngest = self._times[slot]
            if t == youngest:
                leaf = cap - 1 + slot
                tree = self._tree
                tree[leaf] = self._combine(tree[leaf], lifted)
                dirty.append(leaf)
                if len(dirty) > cap:
                    self._stale_all = True
                    dirty.clear()
                return
            if t < youngest:
                raise ValueError(
                    f"FlatFAT accepts only in-order inserts: out-of-order time {t!r} is older "
                    f"than the youngest entry {youngest!r}"
                )
            if span == cap:
                self._make_room(1)
                cap = self._cap
                span = self._span
        slot = (self._front + span) & (cap - 1)
        self._times[slot] = t
        self._present[slot] = True
        self._tree[cap - 1 + slot] = lifted
        self._span = span + 1
        self._count += 1
        dirty.append(cap - 1 + slot)
        if len(dirty) > cap:
            self._stale_all = True
            dirty.clear()

    def bulk_insert(self, pairs: Iterable[tuple[Any, Any]]) -> None:
        """Append ``(t, x)`` pairs sorted by time, none older than the youngest entry (equal
        times combine, in order). Raises ValueError, before any change, otherwise. One resize
        at most; O(m + log n) time for ``m`` pairs, and the next query repairs the ``m``
        contiguous leaves with about ``m + log n`` combines."""
        batch = list(pairs)
        if not batch:
            return
        for k in range(1, len(batch)):
            if batch[k][0] < batch[k - 1][0]:
                raise ValueError(
                    f"bulk_insert needs pairs sorted by time: {batch[k][0]!r} follows "
                    f"{batch[k - 1][0]!r}"
                )
        youngest = self.youngest()
        if self._count and batch[0][0] < youngest:
            raise ValueError(
                f"FlatFAT accepts only in-order inserts: out-of-order time {batch[0][0]!r} is "
                f"older than the youngest entry {youngest!r}"
            )
        distinct = sum(1 for k in range(len(batch)) if k == 0 or batch[k][0] != batch[k - 1][0])
        if self._count and batch[0][0] == youngest:
            distinct -= 1
        if self._span + distinct > self._cap:
            self._make_room(distinct)
        insert = self.insert
        for t, x in batch:
            insert(t, x)

    def evict(self, t: Any) -> bool:
        """Remove the entry at time ``t`` (anywhere in the window); return whether there was
        one. Its leaf becomes the identity; holes at the ends are trimmed; the capacity halves
        when fewer than a quarter of the leaves stay live. O(1) for the oldest entry, else
        O(log n) search; amortized O(1) else; no combines until the next query."""
        if not self._count:
            return False
        cap = self._cap
        front = self._front
        times = self._times
        if t == times[front]:
            pos = 0
            slot = front
        else:
            pos = self._position_left(t)
            if pos == self._span:
                return False
            slot = (front + pos) & (cap - 1)
            if not self._present[slot] or times[slot] != t:
                return False
        self._present[slot] = False
        self._tree[cap - 1 + slot] = self._identity
        dirty = self._dirty
        dirty.append(cap - 1 + slot)
        if len(dirty) > cap:
            self._stale_all = True
            dirty.clear()
        self._count -= 1
        if pos == 0:
            self._trim_front(1)
        elif pos == self._span - 1:
            self._trim_back()
        if 4 * self._count < cap and cap > self._min_cap:
            self._shrink()
        return True

    def bulk_evict(self, t: Any) -> int:
        """Remove every entry with time ``<= t``; return how many. O(k + log n) time for the
        ``k`` slots passed over (live entries and earlier holes), then at most one resize; the
        next query repairs the contiguous leaves with about ``k + log n`` combines."""
        if not self._count:
            return 0
        pos = self._position_right(t)
        if pos == 0:
            return 0
        cap = self._cap
        mask = cap - 1
        present, tree, identity, dirty = self._present, self._tree, self._identity, self._dirty
        front = self._front
        removed = 0
        for k in range(pos):
            slot = (front + k) & mask
            if present[slot]:
                present[slot] = False
                tree[cap - 1 + slot] = identity
                dirty.append(cap - 1 + slot)
                removed += 1
        self._count -= removed
        self._trim_front(pos)
        if len(dirty) > cap:
            self._stale_all = True
            dirty.clear()
        if 4 * self._count < cap and cap > self._min_cap:
            self._shrink()
        return removed

    def _trim_front(self, k: int) -> None:
        """Advance the front by ``k`` slots, then past any holes."""
        mask = self._cap - 1
        present = self._present
        front = (self._front + k) & mask
        span = self._span - k
        while span and not present[front]:
            front = (front + 1) & mask
            span -= 1
        self._front = front if span else 0
        self._span = span

    def _trim_back(self) -> None:
        """Pull the back of the span past trailing holes."""
        mask = self._cap - 1
        present = self._present
        front = self._front
        span = self._span
        while span and not present[(front + span - 1) & mask]:
            span -= 1
        self._span = span
        if not span:
            self._front = 0

    def _make_room(self, k: int) -> None:
        """Make room for ``k`` more slots at the young end (§5.1.1): compact in place when the
        live entries plus ``k`` fit in 3/4 of the leaves, else grow (doubling at least)."""
        need = self._count + k
        cap = self._cap
        if 4 * need <= 3 * cap:
            self._rebuild(cap)
            return
        cap *= 2
        while cap < need:
            cap *= 2
        self._rebuild(cap)

    def _shrink(self) -> None:
        """Halve the capacity until a quarter of it is live (or the minimum is reached)."""
        cap = self._cap
        while 4 * self._count < cap and cap > self._min_cap:
            cap //= 2
        self._rebuild(cap)

    def _rebuild(self, cap: int) -> None:
        """Lay the live entries out from slot 0 in a tree of ``cap`` leaves and compute every
        internal node bottom-up (Algorithm 1): O(old + new capacity), <= cap - 1 combines."""
        old_cap = self._cap
        old_mask = old_cap - 1
        old_tree, old_times, present = self._tree, self._times, self._present
        identity = self._identity
        tree = [identity] * (2 * cap - 1)
        times: list[Any] = [None] * cap
        flags = [False] * cap
        front = self._front
        j = 0
        for k in range(self._span):
            slot = (front + k) & old_mask
            if present[slot]:
                times[j] = old_times[slot]
                flags[j] = True
                tree[cap - 1 + j] = old_tree[old_cap - 1 + slot]
                j += 1
        self._cap = cap
        self._tree, self._times, self._present = tree, times, flags
        self._front = 0
        self._span = j
        self._dirty.clear()
        self._stale_all = False
        self._recompute_all()

    def _recompute_all(self) -> None:
        """Recompute every internal node from its children, deepest first."""
        tree, combine, identity = self._tree, self._combine, self._identity
        for p in range(self._cap - 2, -1, -1):
            left, right = tree[2 * p + 1], tree[2 * p + 2]
            if left is identity:
                tree[p] = right
            elif right is identity:
                tree[p] = left
            else:
                tree[p] = combine(left, right)

    def _repair(self) -> None:
        """Batched ``update`` (Algorithm 2): recompute the internal nodes on the leaf-to-root
        paths of the recorded leaves, one level at a time (levels as sorted lists of node
        indices, whose parents stay sorted, so duplicates are adjacent), each node once."""
        if self._stale_all:
            self._stale_all = False
            self._recompute_all()
            return
        dirty = self._dirty
        if not dirty:
            return
        tree, combine, identity = self._tree, self._combine, self._identity
        if len(dirty) <= 2:
            # One or two paths (a FIFO round: one eviction, one insertion), in lockstep until
            # they meet, then one path to the root.
            p, q = dirty[0], dirty[-1]
            while p != q:
                p = (p - 1) >> 1
                q = (q - 1) >> 1
                c = 2 * p + 1
                left, right = tree[c], tree[c + 1]
                if left is identity:
                    tree[p] = right
                elif right is identity:
                    tree[p] = left
                else:
                    tree[p] = combine(left, right)
                if p != q:
                    c = 2 * q + 1
                    left, right = tree[c], tree[c + 1]
                    if left is identity:
                        tree[q] = right
                    elif right is identity:
                        tree[q] = left
                    else:
                        tree[q] = combine(left, right)
            while p:
                p = (p - 1) >> 1
                c = 2 * p + 1
                left, right = tree[c], tree[c + 1]
                if left is identity:
                    tree[p] = right
                elif right is identity:
                    tree[p] = left
                else:
                    tree[p] = combine(left, right)
        else:
            level = sorted({(leaf - 1) >> 1 for leaf in dirty})
            while True:
                parents = []
                last = -2
                for p in level:
                    c = 2 * p + 1
                    left, right = tree[c], tree[c + 1]
                    if left is identity:
                        tree[p] = right
                    elif right is identity:
                        tree[p] = left
                    else:
                        tree[p] = combine(left, right)
                    q = (p - 1) >> 1
                    if q != last:
                        parents.append(q)
                        last = q
                if last < 0:
                    break
                level = parents
        dirty.clear()

    # --- positions --------------------------------------------------------------------------

    def _position_left(self, t: Any) -> int:
        """Logical position (0 = front) of the first span slot with time ``>= t``."""
        times = self._times
        front = self._front
        end = front + self._span
        cap = self._cap
        if end <= cap:
            return bisect_left(times, t, front, end) - front
        if t <= times[cap - 1]:
            return bisect_left(times, t, front, cap) - front
        return cap - front + bisect_left(times, t, 0, end - cap)

    def _position_right(self, t: Any) -> int:
        """Logical position (0 = front) of the first span slot with time ``> t``."""
        times = self._times
        front = self._front
        end = front + self._span
        cap = self._cap
        if end <= cap:
            return bisect_right(times, t, front, end) - front
        if t < times[cap - 1]:
            return bisect_right(times, t, front, cap) - front
        return cap - front + bisect_right(times, t, 0, end - cap)

    def _slot_of(self, t: Any) -> int:
        """Slot of the live entry at time ``t``, or -1."""
        if not self._count:
            return -1
        pos = self._position_left(t)
        if pos == self._span:
            return -1
        slot = (self._front + pos) & (self._cap - 1)
        if self._present[slot] and self._times[slot] == t:
            return slot
        return -1

    # --- queries ----------------------------------------------------------------------------

    def query(self) -> Any:
        """Lowered :meth:`aggregate`."""
        return self._lower(self.aggregate())

    def aggregate(self) -> Any:
        """The raw (un-lowered) partial of the whole window in time order (identity when
        empty): pending batched repair, then the root (the paper's ``aggregate()``, no
        combine) or, if the buffer wraps, ``suffix(front) ⊕ prefix(back)``."""
        if not self._count:
            return self._identity
        self._repair()
        cap = self._cap
        end = self._front + self._span
        if end <= cap:
            return self._tree[0]
        return self._combine(self._suffix(self._front), self._prefix(end - cap - 1))

    def query_range(self, t_from: Any, t_to: Any) -> Any:
        """Lowered :meth:`aggregate_range`."""
        return self._lower(self.aggregate_range(t_from, t_to))

    def aggregate_range(self, t_from: Any, t_to: Any) -> Any:
        """The raw partial of the entries with ``t_from <= time <= t_to`` in time order; the
        identity when there are none or ``t_to < t_from``. Pending repair, O(log n) binary
        search, then at most ``2 log2(capacity) + 1`` combines over the leaf run."""
        if t_to < t_from or not self._count:
            return self._identity
        lo = self._position_left(t_from)
        hi = self._position_right(t_to)
        if lo >= hi:
            return self._identity
        self._repair()
        mask = self._cap - 1
        first = (self._front + lo) & mask
        last = (self._front + hi - 1) & mask
        if first <= last:
            return self._fold_leaves(first, last)
        return self._combine(self._suffix(first), self._prefix(last))

    def _fold_leaves(self, first: int, last: int) -> Any:
        """Aggregate of leaf slots ``first..last`` (inclusive, ``first <= last``) from the
        repaired tree: bottom-up, one node per side per level, at most ``2 log2(capacity)``
        combines."""
        tree, combine, identity = self._tree, self._combine, self._identity
        offset = self._cap - 1
        lo = first + offset
        hi = last + offset
        left = identity
        right = identity
        while lo <= hi:
            if not lo & 1:  # a right child (or the root): take it whole
                node = tree[lo]
                if node is not identity:
                    left = node if left is identity else combine(left, node)
                lo += 1
            if hi & 1:  # a left child: take it whole
                node = tree[hi]
                if node is not identity:
                    right = node if right is identity else combine(node, right)
                hi -= 1
            lo = (lo - 1) >> 1
            hi = (hi - 1) >> 1
        if right is identity:
            return left
        if left is identity:
            return right
        return combine(left, right)

    def _suffix(self, first: int) -> Any:
        """``suffix``: aggregate of leaf slots ``first..capacity-1`` from the repaired tree,
        one leaf-to-root walk (§4.2.3, the mirror of Algorithm 3), <= log2(capacity) combines."""
        tree, combine, identity = self._tree, self._combine, self._identity
        i = self._cap - 1 + first
        acc = tree[i]
        while i:
            if i & 1:  # a left child: its right sibling follows
                sibling = tree[i + 1]
                if sibling is not identity:
                    acc = sibling if acc is identity else combine(acc, sibling)
            i = (i - 1) >> 1
        return acc

    def _prefix(self, last: int) -> Any:
        """``prefix`` (Algorithm 3): aggregate of leaf slots ``0..last`` from the repaired
        tree, one leaf-to-root walk, <= log2(capacity) combines."""
        tree, combine, identity = self._tree, self._combine, self._identity
        i = self._cap - 1 + last
        acc = tree[i]
        while i:
            if not i & 1:  # a right child: its left sibling precedes
                sibling = tree[i - 1]
                if sibling is not identity:
                    acc = sibling if acc is identity else combine(sibling, acc)
            i = (i - 1) >> 1
        return acc

    def __len__(self) -> int:
        """Number of live entries (distinct times), O(1)."""
        return self._count

    def __contains__(self, t: Any) -> bool:
        """Whether a live entry at time ``t`` exists, O(log n)."""
        return self._slot_of(t) >= 0

    def get(self, t: Any) -> Any:
        """The (lifted) partial at time ``t``, or None, O(log n)."""
        slot = self._slot_of(t)
        return None if slot < 0 else self._tree[self._cap - 1 + slot]

    def oldest(self) -> Any:
        """Smallest time in the window or None, O(1)."""
        return self._times[self._front] if self._count else None

    def youngest(self) -> Any:
        """Largest time in the window or None, O(1)."""
        if not self._count:
            return None
        return self._times[(self._front + self._span - 1) & (self._cap - 1)]

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        """``(time, partial)`` pairs of the live entries in time order."""
        cap = self._cap
        mask = cap - 1
        front = self._front
        times, present, tree = self._times, self._present, self._tree
        for k in range(self._span):
            slot = (front + k) & mask
            if present[slot]:
                yield times[slot], tree[cap - 1 + slot]

    # --- invariants -------------------------------------------------------------------------

    def check_invariants(self) -> None:
        """Raise AssertionError naming the first broken invariant: array shape, circular buffer
        bounds (span starts and ends live, nothing live outside), time order along the span,
        identity in every non-live leaf, live count, utilization (>= 1/4 unless at minimum
        capacity) and, after applying pending repairs, invariant (4.1) at every internal node
        (needs partials comparable with ``==``). O(capacity)."""
        cap = self._cap
        mask = cap - 1
        _require(cap >= 2 and cap & mask == 0, f"shape: capacity {cap} not a power of two >= 2")
        _require(len(self._tree) == 2 * cap - 1, "shape: tree length != 2 * capacity - 1")
        _require(len(self._times) == cap == len(self._present), "shape: leaf arrays != capacity")
        _require(0 <= self._span <= cap, f"circular buffer: span {self._span} outside [0, cap]")
        _require(0 <= self._front < cap, "circular buffer: front outside the array")
        tree, times, present, identity = self._tree, self._times, self._present, self._identity
        span_slots = {(self._front + k) & mask for k in range(self._span)}
        live = 0
        previous = None
        for k in range(self._span):
            slot = (self._front + k) & mask
            if k:
                _require(previous < times[slot], "time order: span times not increasing")
            previous = times[slot]
            live += present[slot]
        for slot in range(cap):
            if not present[slot]:
                _require(tree[cap - 1 + slot] == identity, "holes: non-live leaf != identity")
            else:
                _require(slot in span_slots, "circular buffer: live entry outside the span")
        if self._span:
            _require(present[self._front], "circular buffer: span starts with a hole")
            _require(
                present[(self._front + self._span - 1) & mask],
                "circular buffer: span ends with a hole",
            )
        _require(live == self._count, f"count: {live} live entries, recorded {self._count}")
        _require(
            4 * self._count >= cap or cap == self._min_cap,
            f"utilization: {self._count} live entries in capacity {cap}",
        )
        self._repair()
        combine = self._combine
        for p in range(cap - 1):
            _require(
                tree[p] == combine(tree[2 * p + 1], tree[2 * p + 2]),
                f"aggregation invariant (4.1) broken at node {p}",
            )


def _require(condition: bool, invariant: str) -> None:
    if not condition:
        raise AssertionError(f"FlatFAT: {invariant}")
