"""Classic B-tree augmented with aggregates: the O(log n) baseline that FiBA is measured against.

The "basic algorithm" of *Sub-O(log n) Out-of-Order Sliding-Window Aggregation* (§3.1):
timestamps are the keys, every node holds sorted ``(time, partial)`` entries and its subtree's
up-aggregate, ``MIN_ARITY <= arity <= 2 * MIN_ARITY`` except at the root. No fingers and no
parent pointers: every ``insert``/``evict`` searches from the root and repairs the aggregates
on the whole path, O(log n) combines whatever the distance; ``query`` O(1). The same interface
as ``stores.fiba.FiBA``. Details: docs/design/fiba.md.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator
from functools import reduce
from typing import Any

__all__ = ["ClassicBTree"]


class _Node:
    """One B-tree node: sorted ``times``, their ``values`` (partials), ``children`` or None."""

    __slots__ = ("agg", "children", "times", "values")

    def __init__(
        self, times: list[Any], values: list[Any], children: list[_Node] | None, agg: Any
    ) -> None:
        self.times = times
        self.values = values
        self.children = children
        self.agg = agg


def _up_aggregate(node: _Node, combine: Callable[[Any, Any], Any], identity: Any) -> Any:
    """The up-aggregate of ``node`` from its entries and its children's (current) aggregates.

    Costs ``2 * entries`` combines for an internal node, ``entries - 1`` for a leaf.
    """
    values = node.values
    children = node.children
    if children is None:
        return reduce(combine, values) if values else identity
    acc = children[0].agg
    k = 1
    for v in values:
        acc = combine(combine(acc, v), children[k].agg)
        k += 1
    return acc


def _repair_ancestors(path: list[tuple[_Node, int]], combine: Callable[[Any, Any], Any]) -> None:
    """Recompute the up-aggregates of the internal nodes on ``path``, deepest first (the
    classic repair "all the way to the root"; ``_up_aggregate`` inlined)."""
    for node, _ in reversed(path):
        values = node.values
        children: list[_Node] = node.children  # type: ignore[assignment]
        acc = children[0].agg
        k = 1
        for v in values:
            acc = combine(combine(acc, v), children[k].agg)
            k += 1
        node.agg = acc


class ClassicBTree:
    """Out-of-order sliding-window aggregator on a classic aggregate-augmented B-tree.

    ``min_arity`` (>= 2) sets ``MAX_ARITY = 2 * min_arity``. All operations are ``O(log n)``
    (``n`` = number of distinct times in the window) with ``O(min_arity)`` combines per tree
    level, except ``query()``, ``aggregate()`` and ``__len__``, which are ``O(1)``, and the
    loops ``bulk_evict`` / ``bulk_insert``, which cost ``O(m log n)`` for ``m`` entries.
    """

    __slots__ = (
        "_combine",
        "_identity",
        "_lift",
        "_lower",
        "_max_entries",
        "_min_arity",
        "_min_entries",
        "_root",
        "_size",
    )

    def __init__(self, monoid: Any, min_arity: int = 4) -> None:
        if min_arity < 2:
            raise ValueError(f"min_arity must be >= 2, got {min_arity}")
        self._combine = monoid.combine
        self._lift = monoid.lift
        self._lower = monoid.lower
        self._identity = monoid.identity
        self._min_arity = min_arity
        self._min_entries = min_arity - 1
        self._max_entries = 2 * min_arity - 1
        self._root = _Node([], [], None, self._identity)
        self._size = 0

    @property
    def min_arity(self) -> int:
        """MIN_ARITY of the tree (MAX_ARITY is twice this)."""
        return self._min_arity

    # --- updates ----------------------------------------------------------------------------

    def insert(self, t: Any, x: Any) -> None:
        """Add event ``x`` at time ``t`` (any order). At an existing ``t`` the lifted value is
        combined into that entry, existing partial first. ``O(log n)``: search from the root,
        split overflowing nodes bottom-up, repair up-aggregates up to the root."""
        lifted = self._lift(x)
        combine = self._combine
        identity = self._identity
        node = self._root
        path: list[tuple[_Node, int]] = []
        while True:
            times = node.times
            i = bisect_left(times, t)
            if i < len(times) and times[i] == t:
                node.values[i] = combine(node.values[i], lifted)
                node.agg = _up_aggregate(node, combine, identity)
                _repair_ancestors(path, combine)
                return
            children = node.children
            if children is None:
                break
            path.append((node, i))
            node = children[i]
        times.insert(i, t)
        node.values.insert(i, lifted)
        self._size += 1
        max_entries = self._max_entries
        while len(node.times) > max_entries:
            right, sep_t, sep_v = self._split(node)
            if not path:
                self._root = _Node(
                    [sep_t],
                    [sep_v],
                    [node, right],
                    combine(combine(node.agg, sep_v), right.agg),
                )
                return
            parent, ci = path.pop()
            parent.times.insert(ci, sep_t)
            parent.values.insert(ci, sep_v)
            parent.children.insert(ci + 1, right)  # type: ignore[union-attr]
            node = parent
        node.agg = _up_aggregate(node, combine, identity)
        _repair_ancestors(path, combine)

    def _split(self, node: _Node) -> tuple[_Node, Any, Any]:
        """Split an overflowing node (``2 * MIN_ARITY`` entries) in place: ``node`` keeps the
        first ``MIN_ARITY`` entries, the returned right sibling the last ``MIN_ARITY - 1``;
        returns ``(right, separator time, separator partial)`` with both aggregates repaired."""
        combine = self._combine
        identity = self._identity
        mid = self._min_arity
        times, values, children = node.times, node.values, node.children
        right = _Node(
            times[mid + 1 :],
            values[mid + 1 :],
            None if children is None else children[mid + 1 :],
            identity,
        )
        sep_t, sep_v = times[mid], values[mid]
        del times[mid:], values[mid:]
        if children is not None:
            del children[mid + 1 :]
        node.agg = _up_aggregate(node, combine, identity)
        right.agg = _up_aggregate(right, combine, identity)
        return right, sep_t, sep_v

    def evict(self, t: Any) -> bool:
        """Remove the entry at time ``t``; return whether there was one. ``O(log n)``: search
        from the root, swap an internal entry with its predecessor leaf entry, fix underflows
        bottom-up (move from a sibling or merge), repair up-aggregates up to the root."""
        node = self._root
        path: list[tuple[_Node, int]] = []
        while True:
            times = node.times
            i = bisect_left(times, t)
            if i < len(times) and times[i] == t:
                break
            if node.children is None:
                return False
            path.append((node, i))
            node = node.children[i]
        if node.children is not None:
            holder = node
            path.append((node, i))
            node = node.children[i]
            while node.children is not None:
                last = len(node.children) - 1
                path.append((node, last))
                node = node.children[last]
            holder.times[i] = node.times.pop()
            holder.values[i] = node.values.pop()
        else:
            del times[i]
            del node.values[i]
        self._after_removal(node, path)
        return True

    def _after_removal(self, node: _Node, path: list[tuple[_Node, int]]) -> None:
        """Finish removing one entry from leaf ``node`` (reached from the root by ``path``):
        fix underflows bottom-up, then repair the remaining up-aggregates up to the root."""
        combine = self._combine
        identity = self._identity
        self._size -= 1
        min_entries = self._min_entries
        while path and len(node.times) < min_entries:
            parent, ci = path.pop()
            self._fix_underflow(parent, ci)
            node = parent
        if path:
            node.agg = _up_aggregate(node, combine, identity)
            _repair_ancestors(path, combine)
        elif not node.times and node.children is not None:
            self._root = node.children[0]
        else:
            node.agg = _up_aggregate(node, combine, identity)

    def _fix_underflow(self, parent: _Node, ci: int) -> None:
        """Restore the size invariant of ``parent.children[ci]`` (one entry short): move an entry
        through the parent from a sibling that can spare one, else merge with a sibling (the
        parent loses an entry). Repairs the aggregates of the touched children, not the parent."""
        combine = self._combine
        identity = self._identity
        min_entries = self._min_entries
        children: list[_Node] = parent.children  # type: ignore[assignment]
        node = children[ci]
        if ci > 0 and len(children[ci - 1].times) > min_entries:
            left = children[ci - 1]
            node.times.insert(0, parent.times[ci - 1])
            node.values.insert(0, parent.values[ci - 1])
            parent.times[ci - 1] = left.times.pop()
            parent.values[ci - 1] = left.values.pop()
            if node.children is not None:
                node.children.insert(0, left.children.pop())  # type: ignore[union-attr]
            left.agg = _up_aggregate(left, combine, identity)
            node.agg = _up_aggregate(node, combine, identity)
            return
        if ci + 1 < len(children) and len(children[ci + 1].times) > min_entries:
            right = children[ci + 1]
            node.times.append(parent.times[ci])
            node.values.append(parent.values[ci])
            parent.times[ci] = right.times.pop(0)
            parent.values[ci] = right.values.pop(0)
            if node.children is not None:
                node.children.append(right.children.pop(0))  # type: ignore[union-attr]
            right.agg = _up_aggregate(right, combine, identity)
            node.agg = _up_aggregate(node, combine, identity)
            return
        sep = ci - 1 if ci > 0 else ci
        left, right = children[sep], children[sep + 1]
        left.times.append(parent.times.pop(sep))
        left.values.append(parent.values.pop(sep))
        left.times.extend(right.times)
        left.values.extend(right.values)
        if left.children is not None:
            left.children.extend(right.children)  # type: ignore[arg-type]
        del children[sep + 1]
        left.agg = _up_aggregate(left, combine, identity)

    def bulk_evict(self, t: Any) -> int:
        """Remove every entry with time ``<= t``; return how many. A loop of single evictions
        of the oldest entry, each descending from the root to the leftmost leaf and repairing
        up to the root: ``O(m log n)`` for ``m`` removed entries (no bulk algorithm here)."""
        removed = 0
        while self._size:
            node = self._root
            path: list[tuple[_Node, int]] = []
            while node.children is not None:
                path.append((node, 0))
                node = node.children[0]
            if t < node.times[0]:
                break
            del node.times[0]
            del node.values[0]
            self._after_removal(node, path)
            removed += 1
        return removed

    def bulk_insert(self, pairs: Iterable[tuple[Any, Any]]) -> None:
        """Insert ``(t, x)`` pairs sorted by time (equal times allowed, combined in order).
        Raises ValueError, before any change, if they are not sorted. ``O(m log n)``."""
        batch = list(pairs)
        for k in range(1, len(batch)):
            if batch[k][0] < batch[k - 1][0]:
                raise ValueError(
                    f"bulk_insert needs pairs sorted by time: {batch[k][0]!r} follows "
                    f"{batch[k - 1][0]!r}"
                )
        insert = self.insert
        for t, x in batch:
            insert(t, x)

    # --- queries ----------------------------------------------------------------------------

    def query(self) -> Any:
        """Lowered aggregate of the whole window, in time order: the root's aggregate, O(1)."""
        return self._lower(self._root.agg)

    def aggregate(self) -> Any:
        """The raw (un-lowered) partial of the whole window (identity when empty), O(1)."""
        return self._root.agg

    def query_range(self, t_from: Any, t_to: Any) -> Any:
        """Lowered :meth:`aggregate_range`."""
        return self._lower(self.aggregate_range(t_from, t_to))

    def aggregate_range(self, t_from: Any, t_to: Any) -> Any:
        """The raw partial of the entries with ``t_from <= time <= t_to`` in time order; the
        identity when there are none or ``t_to < t_from``. ``O(MAX_ARITY * log n)``: descend
        to the node where the bounds part, then along the two boundary paths."""
        if t_to < t_from or not self._size:
            return self._identity
        combine = self._combine
        node = self._root
        while True:
            times = node.times
            i = bisect_left(times, t_from)
            j = bisect_right(times, t_to)
            children = node.children
            if children is None:
                return reduce(combine, node.values[i:j]) if i < j else self._identity
            if i < j:
                break
            node = children[i]
        values = node.values
        acc = self._suffix(children[i], t_from)
        for k in range(i, j):
            acc = values[k] if acc is None else combine(acc, values[k])
            if k + 1 < j:
                acc = combine(acc, children[k + 1].agg)
        tail = self._prefix(children[j], t_to)
        return acc if tail is None else combine(acc, tail)

    def _suffix(self, node: _Node, t_from: Any) -> Any:
        """Aggregate of the entries of ``node``'s subtree with time ``>= t_from`` (None: none)."""
        combine = self._combine
        right = None
        while True:
            times, values, children = node.times, node.values, node.children
            n = len(times)
            i = bisect_left(times, t_from)
            if children is None:
                if i == n:
                    return right
                part = reduce(combine, values[i:])
                return part if right is None else combine(part, right)
            if i < n:
                part = values[i]
                for k in range(i + 1, n):
                    part = combine(combine(part, children[k].agg), values[k])
                part = combine(part, children[n].agg)
                right = part if right is None else combine(part, right)
                if times[i] == t_from:
                    return right
            node = children[i]

    def _prefix(self, node: _Node, t_to: Any) -> Any:
        """Aggregate of the entries of ``node``'s subtree with time ``<= t_to`` (None: none)."""
        combine = self._combine
        left = None
        while True:
            times, values, children = node.times, node.values, node.children
            j = bisect_right(times, t_to)
            if children is None:
                if j == 0:
                    return left
                part = reduce(combine, values[:j])
                return part if left is None else combine(left, part)
            if j > 0:
                part = children[0].agg
                for k in range(j - 1):
                    part = combine(combine(part, values[k]), children[k + 1].agg)
                part = combine(part, values[j - 1])
                left = part if left is None else combine(left, part)
                if times[j - 1] == t_to:
                    return left
            node = children[j]

    def __len__(self) -> int:
        """Number of distinct times in the window, O(1)."""
        return self._size

    def __contains__(self, t: Any) -> bool:
        """Whether an entry at time ``t`` exists, O(log n)."""
        return self._find(t) is not None

    def get(self, t: Any) -> Any:
        """The (lifted) partial at time ``t``, or None, O(log n)."""
        found = self._find(t)
        return None if found is None else found[0].values[found[1]]

    def _find(self, t: Any) -> tuple[_Node, int] | None:
        node = self._root
        while True:
            times = node.times
            i = bisect_left(times, t)
            if i < len(times) and times[i] == t:
                return node, i
            if node.children is None:
                return None
            node = node.children[i]

    def oldest(self) -> Any:
        """Smallest time in the window or None, O(log n) (no fingers)."""
        node = self._root
        while node.children is not None:
            node = node.children[0]
        return node.times[0] if node.times else None

    def youngest(self) -> Any:
        """Largest time in the window or None, O(log n) (no fingers)."""
        node = self._root
        while node.children is not None:
            node = node.children[-1]
        return node.times[-1] if node.times else None

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        """``(time, partial)`` pairs in time order (in-order walk with an explicit stack)."""
        stack: list[tuple[_Node, int]] = []
        node = self._root
        while True:
            while node.children is not None:
                stack.append((node, 0))
                node = node.children[0]
            yield from zip(node.times, node.values, strict=True)
            while stack:
                parent, i = stack.pop()
                if i < len(parent.times):
                    yield parent.times[i], parent.values[i]
                    stack.append((parent, i + 1))
                    node = parent.children[i + 1]  # type: ignore[index]
                    break
            else:
                return

    # --- invariants -------------------------------------------------------------------------

    def check_invariants(self) -> None:
        """Raise AssertionError naming the first broken invariant: node shape, size invariants
        (arity bounds), equal leaf depth, time order (within nodes and against separators),
        up-aggregation invariant (needs partials comparable with ``==``), entry count. O(n)."""
        combine = self._combine
        identity = self._identity
        min_arity, max_arity = self._min_arity, 2 * self._min_arity
        leaf_depth = None
        count = 0
        stack: list[tuple[_Node, Any, Any, int]] = [(self._root, None, None, 0)]
        while stack:
            node, lo, hi, depth = stack.pop()
            times, values, children = node.times, node.values, node.children
            n = len(times)
            _require(len(values) == n, "node shape: one partial per time")
            arity = n + 1
            if depth == 0:
                _require(arity <= max_arity, f"size invariant: root arity {arity} > {max_arity}")
                _require(
                    arity >= 2 or (self._size == 0 and children is None),
                    "size invariant: root arity < 2 in a non-empty tree",
                )
            else:
                _require(
                    min_arity <= arity <= max_arity,
                    f"size invariant: arity {arity} outside [{min_arity}, {max_arity}]",
                )
            for k in range(1, n):
                _require(times[k - 1] < times[k], "time order: node times not increasing")
            if n:
                _require(lo is None or lo < times[0], "time order: entry below its separator")
                _require(hi is None or times[-1] < hi, "time order: entry above its separator")
            if children is None:
                if leaf_depth is None:
                    leaf_depth = depth
                _require(depth == leaf_depth, "balance: leaves at different depths")
            else:
                _require(len(children) == arity, "node shape: children != entries + 1")
                for k, child in enumerate(children):
                    stack.append(
                        (
                            child,
                            times[k - 1] if k else lo,
                            times[k] if k < n else hi,
                            depth + 1,
                        )
                    )
            _require(
                node.agg == _up_aggregate(node, combine, identity),
                "up-aggregation invariant: node.agg != agg(children and entries)",
            )
            count += n
        _require(count == self._size, f"size: counted {count} entries, recorded {self._size}")


def _require(condition: bool, invariant: str) -> None:
    if not condition:
        raise AssertionError(f"ClassicBTree: {invariant}")
