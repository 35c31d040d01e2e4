"""FiBA: the finger B-tree aggregator for out-of-order sliding windows.

Implements Tangwongsan, Hirzel and Schneider, *Sub-O(log n) Out-of-Order Sliding-Window
Aggregation* ("the FiBA paper": insert/evict/query, range query) and *Out-of-Order
Sliding-Window Aggregation with Efficient Bulk Evictions and Insertions* ("the bulk paper":
``bulk_evict``, ``bulk_insert``). The window is
a time-ordered sequence of entries ``(t, partial)`` with distinct times (an insert at an
existing time combines into it, older first), over any totally ordered times and any monoid
(``identity``, ``lift``, associative ``combine``, ``lower``; see ``stores.monoids``).

Costs (``d`` = distance from the nearer end, ``m`` = entries in bulk): ``insert``/``evict``
amortized O(log d), O(1) in order; ``bulk_evict`` amortized O(log m); ``bulk_insert`` amortized
O(log d + m (1 + log(d / m))); ``query`` O(1); ``query_range`` logarithmic; ``from_sorted``
O(n). ``check_invariants()`` verifies the whole structure in O(n). The position-aware partial
aggregates, the spine folds and the in-order paths: docs/design/fiba.md.
"""

from __future__ import annotations

import operator
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
from functools import reduce
from typing import Any

__all__ = ["FiBA"]


def _discard(node: _Node, keep: _Node | None = None) -> None:
    """Unlink the subtree of ``node``, which left the tree, except ``keep`` (a node inside it
    that stays in the tree), so that reference counting frees it at once.

    Parent links make every subtree a reference cycle, which only CPython's cyclic garbage
    collector would free: in one pause proportional to all such garbage since its last full
    collection, inside whatever the event loop runs then. Dropping the children lists
    top-down breaks every cycle. O(inner nodes of the subtree); no operator call.
    """
    stack = [node]
    while stack:
        inner = stack.pop()
        children = inner.children
        if children is None or inner is keep:
            continue
        inner.children = None
        stack.extend(children)


class _Node:
    """A FiBA node: sorted ``times`` with their ``values`` (partials), ``children`` or None.

    ``agg``/``cnt`` are the position-aware partial aggregate and the number of entries it covers;
    ``left_spine``/``right_spine`` say whether a non-root node lies on a spine (the root has
    both flags False). A non-root inner spine node also caches ``local_cnt``, the number of
    entries of its own sequence (its aggregate without the parent's term), whose folds it
    caches too. Every non-root left-spine node caches ``suffix``: ``suffix[i]`` is
    ``v_i up(c_{i+1}) ... v_{a-2} up(c_{a-1})`` (a leaf: the fold of ``values[i:]``), so that a
    change of the parent's aggregate alone costs it one combine, and so does dropping its first
    entry (and child) on an in-order evict or refill. Every non-root inner right-spine node
    caches ``prefix``: ``prefix[i]`` is ``up(c_0) v_0 ... up(c_i) v_i``, so that appending an
    entry and child costs two combines; the non-root right finger may cache the prefix folds
    ``prefix[i]`` = fold of ``values[:i + 1]`` of its first ``len(prefix)`` entries. Both are
    None on every other node.
    """

    __slots__ = (
        "agg",
        "children",
        "cnt",
        "left_spine",
        "local_cnt",
        "parent",
        "prefix",
        "right_spine",
        "suffix",
        "times",
        "values",
    )

    def __init__(
        self,
        parent: _Node | None,
        times: list[Any],
        values: list[Any],
        children: list[_Node] | None,
    ) -> None:
        self.parent = parent
        self.times = times
        self.values = values
        self.children = children
        self.agg: Any = None
        self.cnt = 0
        self.prefix: list[Any] | None = None
        self.local_cnt = 0
        self.left_spine = False
        self.right_spine = False
        self.suffix: list[Any] | None = None


class FiBA:
    """Finger B-tree aggregator: exact sliding-window aggregation over out-of-order streams.

    ``FiBA(monoid, min_arity=4)``; ``MAX_ARITY = 2 * min_arity``. Operations and costs are listed
    in the module docstring. Entries are ``(t, partial)`` with ``partial = monoid.lift(x)``, or
    the combination of several lifted inputs that arrived with the same time, in arrival order.
    """

    __slots__ = (
        "_add",
        "_combine",
        "_identity",
        "_lf",
        "_lf_start",
        "_lift",
        "_lift_is_identity",
        "_lower",
        "_lower_is_identity",
        "_max_entries",
        "_min_arity",
        "_min_entries",
        "_rf",
        "_root",
        "_spare",
        "monoid",
    )

    def __init__(self, monoid: Any, min_arity: int = 4) -> None:
        if min_arity < 2:
            raise ValueError(f"min_arity must be at least 2, got {min_arity}")
        self.monoid = monoid
        self._identity = monoid.identity
        self._lift = monoid.lift
        self._lift_is_identity = bool(getattr(monoid, "lift_is_identity", False))
        self._lower_is_identity = bool(getattr(monoid, "lower_is_identity", False))
        self._combine = monoid.combine
        self._add = monoid.combine is operator.add
        self._lower = monoid.lower
        self._min_arity = min_arity
        self._min_entries = min_arity - 1
        self._max_entries = 2 * min_arity - 1
        self._reset()

    @property
    def min_arity(self) -> int:
        """MIN_ARITY of the tree (MAX_ARITY is twice that)."""
        return self._min_arity

    def _reset(self) -> None:
        root = _Node(None, [], [], None)
        root.agg = self._identity
        self._root = self._lf = self._rf = root
        self._lf_start = 0
        self._spare: _Node | None = None

    def _settle(self) -> None:
        """Drop the entries that in-order evicts left at the front of the left finger (its
        ``times``, ``values`` and ``suffix`` start at ``_lf_start``; see :meth:`evict`), so
        that every node holds exactly its entries again. Every operation other than an
        in-order evict, an append at the right finger and the O(1) observers settles first.
        O(1) amortized (each entry is dropped once), no operator call."""
        start = self._lf_start
        if start:
            self._lf_start = 0
            lf = self._lf
            suffix: list[Any] = lf.suffix  # type: ignore[assignment]
            lf.times = lf.times[start:]  # (new lists: cheaper than a del in the compiled build)
            lf.values = lf.values[start:]
            lf.suffix = suffix[start:]

    # --- construction from sorted data -----------------------------------------------------

    @classmethod
    def from_sorted(cls, monoid: Any, pairs: Iterable[tuple[Any, Any]], min_arity: int = 4) -> FiBA:
        """Build a FiBA bottom-up from ``(t, partial)`` pairs sorted by time, in O(n).

        ``partial`` values are already lifted (e.g. read back from a store to rebuild the
        in-memory index after a restart). Equal consecutive times are combined in the given
        order; a time smaller than its predecessor raises ``ValueError``. Nodes are filled to
        about 3/4 of MAX_ARITY so that both inserts and evicts find slack.
        """
        tree = cls(monoid, min_arity)
        combine = tree._combine
        times: list[Any] = []
        values: list[Any] = []
        for t, partial in pairs:
            if times and not times[-1] < t:
                if t == times[-1]:
                    values[-1] = combine(values[-1], partial)
                    continue
                raise ValueError(f"from_sorted: time {t!r} after {times[-1]!r} is out of order")
            times.append(t)
            values.append(partial)
        if times:
            tree._build(times, values)
        return tree

    def _build(self, times: list[Any], values: list[Any]) -> None:
        mu = self._min_arity
        target = mu + mu // 2
        children: list[_Node] | None = None
        levels: list[list[_Node]] = []
        while len(times) > self._max_entries:
            total = len(times) + 1  # sum of the arities of this level's nodes
            count = max(-(-total // (2 * mu)), total // target)
            base, extra = divmod(total, count)
            nodes: list[_Node] = []
            up_times: list[Any] = []
            up_values: list[Any] = []
            pos = 0
            for j in range(count):
                end = pos + (base if j < extra else base - 1)
                node = _Node(None, times[pos:end], values[pos:end], None)
                nodes.append(node)
                if j < count - 1:
                    up_times.append(times[end])
                    up_values.append(values[end])
                pos = end + 1
            if children is not None:
                cpos = 0
                for node in nodes:
                    arity = len(node.times) + 1
                    kids = children[cpos : cpos + arity]
                    cpos += arity
                    node.children = kids
                    for kid in kids:
                        kid.parent = node
            levels.append(nodes)
            times, values, children = up_times, up_values, nodes
        root = _Node(None, times, values, children)
        if children is not None:
            for kid in children:
                kid.parent = root
        self._root = root
        node = root
        while node.children is not None:
            node = node.children[0]
            node.left_spine = True
        self._lf = node
        node = root
        while node.children is not None:
            node = node.children[-1]
            node.right_spine = True
        self._rf = node
        recalc = self._recalc
        for nodes in levels:
            for node in nodes:
                if not (node.left_spine or node.right_spine):
                    recalc(node)
        self._repair_spines(root, True, True)

    # --- position-aware aggregates ------------------------------------------------------------

    def _recalc(self, node: _Node) -> None:
        """Recompute ``node.agg``/``node.cnt`` from its entries, its children's aggregates and,
        on a spine below the root's children, its parent's aggregate. O(arity) combines."""
        combine = self._combine
        values = node.values
        children = node.children
        parent = node.parent
        k = len(values)
        if children is None:
            if node.left_spine:  # the left finger below the root: its suffix folds
                start = self._lf_start  # (entries before it are evicted: stale folds)
                agg = values[-1]
                suffix = [agg] * k
                for i in range(k - 2, start - 1, -1):
                    agg = combine(values[i], agg)
                    suffix[i] = agg
                node.suffix = suffix
                node.agg = combine(agg, parent.agg)
                node.cnt = k - start + parent.cnt
                return
            agg = reduce(combine, values) if k else self._identity
            cnt = k
            node.suffix = node.prefix = None
            if node.right_spine and parent.parent is not None:
                agg = combine(parent.agg, agg)
                cnt += parent.cnt
            node.agg = agg
            node.cnt = cnt
            return
        if parent is None:  # the root: inner aggregate
            node.suffix = node.prefix = None
            if not k:
                node.agg = self._identity
                node.cnt = 0
                return
            agg = values[0]
            cnt = k
            for child, value in zip(children[1:k], values[1:], strict=True):
                agg = combine(combine(agg, child.agg), value)
                cnt += child.cnt
        elif node.left_spine:  # suffix folds from the right, then the parent's term
            last = children[k]
            agg = combine(values[k - 1], last.agg)
            cnt = k + last.cnt
            suffix = [agg] * k
            for i in range(k - 2, -1, -1):
                child = children[i + 1]
                agg = combine(combine(values[i], child.agg), agg)
                cnt += child.cnt
                suffix[i] = agg
            node.suffix = suffix
            node.local_cnt = cnt
            agg = combine(agg, parent.agg)  # (the root's inner aggregate too)
            cnt += parent.cnt
        elif node.right_spine:  # prefix folds from the left, then the parent's term
            first = children[0]
            agg = combine(first.agg, values[0])
            cnt = k + first.cnt
            prefix = [agg] * k
            for i in range(1, k):
                child = children[i]
                agg = combine(combine(agg, child.agg), values[i])
                cnt += child.cnt
                prefix[i] = agg
            node.prefix = prefix
            node.local_cnt = cnt
            if parent.parent is not None:
                agg = combine(parent.agg, agg)
                cnt += parent.cnt
        else:
            node.prefix = None  # (a split can turn a right-spine node into an up node)
            first = children[0]
            agg = first.agg
            cnt = k + first.cnt
            for value, child in zip(values, children[1:], strict=True):
                agg = combine(combine(agg, value), child.agg)
                cnt += child.cnt
        node.agg = agg
        node.cnt = cnt

    def _repair_spines(self, top: _Node, walk_left: bool, walk_right: bool) -> None:
        """Recompute ``top`` and then, top-down, the left and/or right spine below it."""
        self._recalc(top)
        self._repair_spines_below(top, walk_left, walk_right)

    def _repair_aggs(self, top: _Node, hit_left: bool, hit_right: bool) -> None:
        """Repair aggregates after a change that ended at ``top`` (Fig. 7, repairAggs).

        ``top`` itself is recomputed, then its up-aggregate ancestors up to the first spine node
        or the root, then the spine(s) below that node: down the left spine if it is a left-spine
        node (or the root and ``hit_left``), likewise on the right.
        """
        recalc = self._recalc
        recalc(top)
        while top.parent is not None and not (top.left_spine or top.right_spine):
            top = top.parent
            recalc(top)
        if top.parent is None:
            if top.children is not None:  # the left spine holds the root's aggregate
                if not hit_left:
                    self._refresh_left_spine(top.children[0])
                self._repair_spines_below(top, hit_left, hit_right)
        elif top.left_spine:
            self._repair_spines_below(top, True, False)
        else:
            self._repair_spines_below(top, False, True)

    def _repair_path(self, node: _Node, delta: int) -> None:
        """Aggregate repair after a change confined to ``node``'s own entries that changed the
        entry count of its subtree by ``delta`` (no rebalancing below ``node``, or only of
        up-aggregate nodes already recomputed): ``node`` and its up-aggregate ancestors get
        their up aggregates refolded (and ``delta`` added to their counts) up to the first spine
        node or the root, which is recomputed. The spine nodes below that spine node (below the
        root: the left spine) changed only through their parent's aggregate, so each costs one
        combine with its cached folds (the right finger: the fold of its entries)."""
        combine = self._combine
        parent = node.parent
        while parent is not None and not (node.left_spine or node.right_spine):
            children = node.children
            if children is None:
                node.agg = reduce(combine, node.values)
            else:
                agg = children[0].agg
                for value, child in zip(node.values, children[1:]):  # noqa: B905 (hot loop)
                    agg = combine(combine(agg, value), child.agg)
                node.agg = agg
            node.cnt += delta
            node = parent
            parent = node.parent
        self._recalc(node)
        children = node.children
        if children is None:
            return
        if node.left_spine or parent is None:  # (the left spine holds the root's aggregate)
            self._refresh_left_spine(children[0])
        else:
            self._refresh_right_spine(children[-1])

    def _repair_spines_below(self, top: _Node, walk_left: bool, walk_right: bool) -> None:
        recalc = self._recalc
        if walk_left:
            node = top
            while node.children is not None:
                node = node.children[0]
                recalc(node)
        if walk_right:
            node = top
            while node.children is not None:
                node = node.children[-1]
                recalc(node)

    # --- search ---------------------------------------------------------------------------------

    def _find(self, t: Any) -> tuple[_Node, int, bool]:
        """Finger search: ``(node, index, found)``; when not found, ``node`` is the leaf where
        ``t`` belongs at ``index``. Climbs from the nearer finger to the lowest spine node whose
        range holds ``t``, then descends: O(log d)."""
        root = self._root
        node = root
        if root.children is not None:
            rtimes = root.times
            if t < rtimes[0]:
                node = self._lf
                parent = node.parent
                while parent is not root and not t < parent.times[0]:
                    node = parent  # type: ignore[assignment]
                    parent = node.parent
            elif t > rtimes[-1]:
                node = self._rf
                parent = node.parent
                while parent is not root and not t > parent.times[-1]:
                    node = parent  # type: ignore[assignment]
                    parent = node.parent
        while True:
            times = node.times
            i = bisect_left(times, t)
            if i < len(times) and times[i] == t:
                return node, i, True
            if node.children is None:
                return node, i, False
            node = node.children[i]

    # --- observers ------------------------------------------------------------------------------

    def query(self) -> Any:
        """The lowered aggregate of the whole window (lowered identity when empty). O(1)."""
        root = self._root
        if root.children is None:
            agg = root.agg
        elif self._add:
            agg = self._lf.agg + self._rf.agg
        else:
            agg = self._combine(self._lf.agg, self._rf.agg)
        return agg if self._lower_is_identity else self._lower(agg)

    def aggregate(self) -> Any:
        """The raw (un-lowered) partial aggregate of the whole window. O(1)."""
        root = self._root
        if root.children is None:
            return root.agg
        return self._combine(self._lf.agg, self._rf.agg)

    def __len__(self) -> int:
        root = self._root
        if root.children is None:
            return root.cnt
        return self._lf.cnt + self._rf.cnt

    def __contains__(self, t: Any) -> bool:
        if not self._root.times:
            return False
        self._settle()
        return self._find(t)[2]

    def get(self, t: Any) -> Any:
        """The partial stored at time ``t``, or None when absent. O(log d)."""
        if not self._root.times:
            return None
        self._settle()
        node, i, found = self._find(t)
        return node.values[i] if found else None

    def oldest(self) -> Any:
        """The smallest time in the window, or None when empty. O(1)."""
        times = self._lf.times
        return times[self._lf_start] if times else None

    def youngest(self) -> Any:
        """The largest time in the window, or None when empty. O(1)."""
        times = self._rf.times
        return times[-1] if times else None

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        """``(t, partial)`` pairs in time order."""
        self._settle()
        return _walk(self._root)

    def items_from(self, t: Any) -> Iterator[tuple[Any, Any]]:
        """``(time, partial)`` pairs with ``time >= t``, in time order: one descent from the
        root, then an in-order walk; O(log n + k) for the first ``k`` pairs taken."""
        self._settle()
        path: list[tuple[_Node, int]] = []
        node = self._root
        while True:
            times = node.times
            i = bisect_left(times, t)
            if node.children is None:
                yield from zip(times[i:], node.values[i:], strict=True)
                break
            path.append((node, i))
            if i < len(times) and times[i] == t:
                break  # children[i] holds only times < t
            node = node.children[i]
        for node, i in reversed(path):
            times, values, children = node.times, node.values, node.children
            for j in range(i, len(times)):
                yield times[j], values[j]
                yield from _walk(children[j + 1])

    def clear(self) -> None:
        """Remove every entry. Call it on a tree about to be dropped: its nodes are unlinked
        (``_discard``), so that reference counting frees them at once. A dropped tree left
        linked is one reference cycle per node, freed only by a full collection, and never
        once the tree has been frozen (``stores.gc_pause.freeze_survivors``). O(inner nodes);
        no operator call."""
        _discard(self._root)
        self._reset()

    def __repr__(self) -> str:
        return f"<FiBA min_arity={self._min_arity} len={len(self)}>"

    # --- insert ---------------------------------------------------------------------------------

    def insert(self, t: Any, x: Any) -> None:
        """Add ``lift(x)`` at time ``t``; an existing entry at ``t`` becomes
        ``combine(existing, lift(x))``. Amortized O(log d), O(1) at either end."""
        lifted = x if self._lift_is_identity else self._lift(x)
        rf = self._rf
        rtimes = rf.times
        if rtimes:
            if t > rtimes[-1]:  # in order: append at the right finger
                rtimes.append(t)
                rf.values.append(lifted)
                rf.agg = rf.agg + lifted if self._add else self._combine(rf.agg, lifted)
                rf.cnt += 1
                if len(rtimes) > self._max_entries:
                    self._split_right_finger(rf)
                return
            lf = self._lf
            if t < lf.times[self._lf_start]:  # older than everything: prepend at the left finger
                self._settle()
                lf.times.insert(0, t)
                lf.values.insert(0, lifted)
                suffix = lf.suffix
                if suffix is not None:
                    suffix.insert(0, self._combine(lifted, suffix[0]))
                lf.agg = self._combine(lifted, lf.agg)
                lf.cnt += 1
                if len(lf.times) > self._max_entries:
                    self._overflow(lf)
                return
        else:  # empty window
            rtimes.append(t)
            rf.values.append(lifted)
            rf.agg = lifted
            rf.cnt = 1
            return
        node, i, found = self._find(t)
        if node is self._lf and self._lf_start:  # (other nodes: the spine repair skips them)
            i -= self._lf_start
            self._settle()
        if found:
            node.values[i] = self._combine(node.values[i], lifted)
            self._repair_path(node, 0)
            return
        node.times.insert(i, t)
        node.values.insert(i, lifted)
        if len(node.times) > self._max_entries:
            self._overflow(node)
        else:
            self._repair_path(node, 1)

    def _split_right_finger(self, rf: _Node) -> None:
        """Split the overflowing right finger after an in-order append, and its ancestors up
        the right spine while they overflow in turn. Each split half on the left becomes an up
        node whose aggregate comes from its prefix folds (a leaf: a fold); the separator and the
        new right-spine node are appended to the parent, whose cached prefix folds (or, at the
        root, inner aggregate) just gain ``up(left half)`` and the separator: two combines
        instead of recomputing the parent. The right spine below the highest changed node is
        then refreshed in one combine per level, plus the new finger's fold. A split of the
        root (height increase) takes the general path."""
        parent = rf.parent
        if parent is None:  # (the root leaf: nothing to settle)
            self._overflow(rf)
            return
        mu = self._min_arity
        max_entries = self._max_entries
        combine = self._combine
        add = self._add
        times = rf.times
        values = rf.values
        k = len(values) - mu - 1  # the new finger's entries
        new_values = values[mu + 1 :]
        new = self._spare
        if new is None:
            new = _Node(parent, times[mu + 1 :], new_values, None)
            new_time = times[mu]
            separator = values[mu]
            rf.times = times[:mu]  # (new lists, of a leaf's size)
            rf.values = values = values[:mu]
        else:  # the up leaf a refill merged away: its fields are all set below, and its lists
            self._spare = None  # take the finger's first entries (the finger's lists go)
            new.parent = parent
            up_times = new.times
            up_values = new.values
            if len(up_times) != mu:  # (a steady sliding window: never)
                _resize(up_times, mu)
                _resize(up_values, mu)
            for i in range(mu):
                up_times[i] = times[i]
                up_values[i] = values[i]
            new.times = times[mu + 1 :]
            new.values = new_values
            new_time = times[mu]
            separator = values[mu]
            rf.times = up_times
            rf.values = values = up_values
        prefix = rf.prefix  # the folds of the finger's first entries, as far as cached
        if prefix:
            j = min(len(prefix), mu)
            up = prefix[j - 1]
        else:
            j = 1
            up = values[0]
            prefix = [up]
        for i in range(j, mu):
            up = up + values[i] if add else combine(up, values[i])
        rf.agg = up
        rf.cnt = mu
        rf.prefix = None
        rf.right_spine = False  # now an up node: neither spine holds a parent's last child
        if len(prefix) != k:  # the new finger's prefix folds, in the old finger's list: its
            _resize(prefix, k)  # fold, and most of the next up
        acc = new_values[0]
        prefix[0] = acc
        for i in range(1, k):
            acc = acc + new_values[i] if add else combine(acc, new_values[i])
            prefix[i] = acc
        new.prefix = prefix
        new.right_spine = True
        self._rf = new
        node = rf
        while True:  # ``node``, the parent's last child, became an up node; ``new`` follows it
            ptimes = parent.times
            pvalues = parent.values
            pchildren: list[_Node] = parent.children  # type: ignore[assignment]
            ptimes.append(new_time)
            pvalues.append(separator)
            pchildren.append(new)
            grandparent = parent.parent
            if len(ptimes) <= max_entries:
                if grandparent is None:  # the root's inner aggregate gains up(node), separator
                    parent.agg = combine(combine(parent.agg, up), separator)
                    parent.cnt += node.cnt + 1
                    self._refresh_right_spine(new)
                    self._settle()  # the left spine holds the root's aggregate
                    self._refresh_left_spine(pchildren[0])
                    return
                folds: list[Any] = parent.prefix  # type: ignore[assignment]
                acc = folds[-1]
                folds.append(acc + up + separator if add else combine(combine(acc, up), separator))
                parent.local_cnt += node.cnt + 1
                self._refresh_right_spine(parent)
                return
            if grandparent is None:  # height increase
                self._settle()
                self._overflow(parent)
                return
            # split the right-spine parent: its first mu entries and mu + 1 children stay (an up
            # node now), the rest go to a new right-spine node
            right = _Node(grandparent, ptimes[mu + 1 :], pvalues[mu + 1 :], pchildren[mu + 1 :])
            new_time = ptimes[mu]
            separator = pvalues[mu]
            _resize(ptimes, mu)
            _resize(pvalues, mu)
            _resize(pchildren, mu + 1)
            last = pchildren[mu]
            up = combine(parent.prefix[mu - 1], last.agg)
            cnt = mu
            for child in pchildren:
                cnt += child.cnt
            parent.agg = up
            parent.cnt = cnt
            parent.prefix = None
            parent.right_spine = False
            right.right_spine = True
            rchildren: list[_Node] = right.children  # type: ignore[assignment]
            rvalues = right.values
            first = rchildren[0]
            first.parent = right
            acc = combine(first.agg, rvalues[0])
            cnt = len(rvalues) + first.cnt
            prefix = [acc] * len(rvalues)
            for i in range(1, len(rvalues)):
                child = rchildren[i]
                child.parent = right
                acc = combine(combine(acc, child.agg), rvalues[i])
                cnt += child.cnt
                prefix[i] = acc
            rchildren[-1].parent = right
            right.prefix = prefix
            right.local_cnt = cnt
            node = parent
            new = right
            parent = grandparent

    def _refresh_right_spine(self, node: _Node) -> None:
        """Recompute the aggregates of the non-root right-spine ``node`` and of the right-spine
        nodes below it from their (valid) prefix folds and counts: one combine per level, and
        the right finger's fold of its entries."""
        combine = self._combine
        add = self._add
        parent: _Node = node.parent  # type: ignore[assignment]
        if parent.parent is None:  # a child of the root: no parent term
            if node.children is None:
                self._recalc(node)
                return
            prefix: list[Any] = node.prefix  # type: ignore[assignment]
            node.agg = prefix[-1]
            node.cnt = node.local_cnt
            parent = node
            node = node.children[-1]
        while node.children is not None:
            prefix = node.prefix  # type: ignore[assignment]
            agg = parent.agg
            node.agg = agg + prefix[-1] if add else combine(agg, prefix[-1])
            node.cnt = node.local_cnt + parent.cnt
            parent = node
            node = node.children[-1]
        agg = parent.agg
        fold = self._finger_fold(node)
        node.agg = agg + fold if add else combine(agg, fold)
        node.cnt = len(node.values) + parent.cnt

    def _finger_fold(self, rf: _Node) -> Any:
        """The fold of the non-root right finger's entries, from its cached prefix folds as far
        as they reach (a finger made by an in-order split caches all of them)."""
        combine = self._combine
        values = rf.values
        prefix = rf.prefix
        if prefix:
            acc = prefix[-1]
            done = len(prefix)
            if done == len(values):  # (a finger made by an in-order split, not yet appended to)
                return acc
            rest = values[done:]
        else:  # the finger below the root holds at least one entry
            acc = values[0]
            rest = values[1:]
        for value in rest:
            acc = combine(acc, value)
        return acc

    def _overflow(self, node: _Node) -> None:
        """Split ``node`` and its overflowing ancestors, then repair aggregates (Fig. 7). When
        no spine node was split, the spines below the top are unchanged: the cheap repair."""
        hit_left = node.left_spine
        hit_right = node.right_spine
        split_spine = False
        max_entries = self._max_entries
        while len(node.times) > max_entries:
            if node.parent is None:
                hit_left = hit_right = True
            split_spine = split_spine or hit_left or hit_right
            node = self._split(node)
            hit_left = hit_left or node.left_spine
            hit_right = hit_right or node.right_spine
        if split_spine:
            self._repair_aggs(node, hit_left, hit_right)
        else:  # one entry more below ``node``; the split halves below it are recomputed
            self._repair_path(node, 1)

    def _split(self, node: _Node) -> _Node:
        """Split an overflowing node (2 MIN_ARITY entries) around its middle entry, which moves
        up; a new root is made first if ``node`` is the root. Returns the parent, whose
        aggregate is left to the caller; the two halves are repaired if they hold up
        aggregates."""
        mu = self._min_arity
        parent = node.parent
        was_right = node.right_spine or parent is None
        if parent is None:  # height increase
            parent = _Node(None, [], [], [node])
            node.parent = parent
            node.left_spine = True
            self._root = parent
            i = 0
        else:
            siblings = parent.children
            i = len(siblings) - 1 if siblings[-1] is node else siblings.index(node)  # type: ignore[arg-type]
        times = node.times
        values = node.values
        right = _Node(parent, times[mu + 1 :], values[mu + 1 :], None)
        parent.times.insert(i, times[mu])
        parent.values.insert(i, values[mu])
        parent.children.insert(i + 1, right)
        del times[mu:]
        del values[mu:]
        children = node.children
        if children is not None:
            moved = children[mu + 1 :]
            del children[mu + 1 :]
            for child in moved:
                child.parent = right
            right.children = moved
        if was_right:
            node.right_spine = False
            right.right_spine = True
            if self._rf is node:
                self._rf = right
        else:
            self._recalc(right)
        if not node.left_spine:
            self._recalc(node)
        return parent

    # --- evict ----------------------------------------------------------------------------------

    def evict(self, t: Any) -> bool:
        """Remove the entry at exactly ``t`` (its whole partial); False when absent.
        Amortized O(log d), O(1) at the old end.

        An in-order evict at a left finger below the root moves ``_lf_start`` past the entry
        instead of deleting it from the front of three lists (its suffix folds still hold the
        fold of the entries after it); the evicted entries are overwritten by the refill that
        merges, or dropped when another operation looks at the finger (:meth:`_settle`)."""
        lf = self._lf
        ltimes = lf.times
        if not ltimes:  # (an empty leaf root: its start is 0)
            return False
        start = self._lf_start
        if t == ltimes[start]:  # in order: pop at the left finger
            parent = lf.parent
            if parent is None:
                del ltimes[0]
                values = lf.values
                del values[0]
                lf.agg = reduce(self._combine, values) if values else self._identity
                lf.cnt = len(values)
                return True
            start += 1
            self._lf_start = start
            if len(ltimes) - start < self._min_entries:
                self._refill_left_finger(lf, parent)
            else:
                suffix: list[Any] = lf.suffix  # type: ignore[assignment]
                agg = parent.agg
                lf.agg = suffix[start] + agg if self._add else self._combine(suffix[start], agg)
                lf.cnt -= 1
            return True
        self._settle()
        node, i, found = self._find(t)
        if not found:
            return False
        if node.children is None:
            del node.times[i]
            del node.values[i]
            if node.parent is None or len(node.times) >= self._min_entries:
                self._repair_path(node, -1)
            else:
                top, hit_left, hit_right, _ = self._underflow(
                    node, node.left_spine, node.right_spine
                )
                self._repair_aggs(top, hit_left, hit_right)
        else:
            self._evict_inner(node, i)
        return True

    def _refill_left_finger(self, lf: _Node, parent: _Node) -> None:
        """Repair the left finger after an in-order evict left it one entry short (its suffix
        folds already dropped the evicted entry): merge with its sibling when the result fits
        (:meth:`_merge_up_left_spine`), else move entries over until the two are balanced, or
        become the root when the sibling is the right finger and both fit in one node. Merging
        first fills the finger up, so that the next several in-order evicts need no refill."""
        combine = self._combine
        siblings: list[_Node] = parent.children  # type: ignore[assignment]
        sibling = siblings[1]
        stimes = sibling.times
        total = len(lf.times) - self._lf_start + 1 + len(stimes)
        if total <= self._max_entries and not sibling.right_spine:
            self._merge_up_left_spine(lf, parent)  # (in the finger's lists: start back to 0)
            return
        self._settle()
        if total <= self._max_entries:
            # parent is the root with two children: merge them into a leaf root
            lf.times.append(parent.times[0])
            lf.times.extend(stimes)
            lf.values.append(parent.values[0])
            lf.values.extend(sibling.values)
            _discard(parent, keep=lf)
            lf.parent = None
            lf.left_spine = False
            lf.suffix = None
            self._root = self._rf = lf
            lf.agg = reduce(combine, lf.values)
            lf.cnt = len(lf.values)
            return
        # move: the finger takes half of the entries, the last of them as the new separator
        ptimes = parent.times
        pvalues = parent.values
        svalues = sibling.values
        lf.times.append(ptimes[0])
        lf.values.append(pvalues[0])
        k = total // 2 - len(lf.times)
        lf.times.extend(stimes[:k])
        lf.values.extend(svalues[:k])
        ptimes[0] = stimes[k]
        pvalues[0] = svalues[k]
        del stimes[: k + 1]
        del svalues[: k + 1]
        # an up leaf, or the right finger below the root: either way a plain fold
        sibling.agg = reduce(combine, svalues)
        sibling.cnt = len(svalues)
        sibling.prefix = None  # (the finger's cached prefix folds lost their first entries)
        self._recalc(parent)
        self._recalc(lf)

    def _merge_up_left_spine(self, node: _Node, parent: _Node) -> None:
        """In-order refill by merging: the left-spine ``node``, one entry short with valid
        suffix folds, absorbs its parent's first separator and its right sibling (an up node
        that fits). The parent loses its first suffix fold; when it underflows in turn, it is
        refilled the same way if it can merge, else by the general rebalancing. The aggregates
        are then refreshed from the highest changed spine node down, one combine per level
        (the root, if reached, is recomputed). Costs the merged sibling's size in combines plus
        one per level, instead of recomputing every node on the way."""
        min_entries = self._min_entries
        max_entries = self._max_entries
        while True:
            siblings: list[_Node] = parent.children  # type: ignore[assignment]
            sibling = siblings[1]
            self._absorb_into_left_spine(node, parent, sibling)
            if sibling.children is None:  # an up leaf: kept for the next right-finger split
                sibling.parent = None
                self._spare = sibling
            grandparent = parent.parent
            if grandparent is None:  # the root keeps an entry: sibling was not its last child
                self._recalc(parent)
                self._refresh_left_spine(node)
                return
            folds: list[Any] = parent.suffix  # type: ignore[assignment]
            folds.pop(0)  # (a primitive of the compiled build, unlike del)
            parent.local_cnt -= 1 + sibling.cnt
            if len(parent.times) >= min_entries:
                self._refresh_left_spine(parent)
                return
            node = parent
            parent = grandparent
            siblings = parent.children  # type: ignore[assignment]
            sibling = siblings[1]
            if sibling.right_spine or len(node.times) + 1 + len(sibling.times) > max_entries:
                self._settle()
                top, hit_left, hit_right, _ = self._underflow(node, True, False)
                self._repair_aggs(top, hit_left, hit_right)
                return

    def _absorb_into_left_spine(self, node: _Node, parent: _Node, sibling: _Node) -> None:
        """Merge ``parent``'s first separator and its second child ``sibling`` (not on a spine)
        into its first child, the left-spine ``node``, extending ``node``'s suffix folds (and
        ``local_cnt`` if inner): each old fold gains ``separator + up(sibling)``, and the
        sibling's entries get theirs from the right (the first one of a leaf is its stored up
        aggregate). ``parent`` keeps stale aggregates, for the caller. The left finger (a leaf
        ``node``) is rewritten in its own lists: its entries after ``_lf_start`` move to the
        front (the evicted ones are overwritten), the separator and the sibling's entries
        follow, and ``_lf_start`` becomes 0."""
        combine = self._combine
        add = self._add
        separator = parent.values[0]
        svalues = sibling.values
        schildren = sibling.children
        tail = separator + sibling.agg if add else combine(separator, sibling.agg)
        suffix: list[Any] = node.suffix  # type: ignore[assignment]
        m = len(svalues)
        if schildren is None:  # the left finger
            times = node.times
            values = node.values
            start = self._lf_start
            live = len(times) - start
            for i in range(live):
                times[i] = times[start + i]
                values[i] = values[start + i]
                fold = suffix[start + i]
                suffix[i] = fold + tail if add else combine(fold, tail)
            base = live + 1
            size = base + m
            if len(times) != size:  # (a steady sliding window: never)
                _resize(times, size)
                _resize(values, size)
                _resize(suffix, size)
            times[live] = parent.times[0]
            values[live] = separator
            suffix[live] = tail
            stimes = sibling.times
            acc = svalues[m - 1]  # the sibling's folds: the last is its value, the first its up
            for i in range(m - 1, -1, -1):
                value = svalues[i]
                times[base + i] = stimes[i]
                values[base + i] = value
                if 0 < i < m - 1:
                    acc = value + acc if add else combine(value, acc)
                suffix[base + i] = acc
            if m > 1:
                suffix[base] = sibling.agg
            self._lf_start = 0
        else:
            for i in range(len(suffix)):
                suffix[i] = suffix[i] + tail if add else combine(suffix[i], tail)
            folds = [tail] * (m + 1)
            acc = combine(svalues[-1], schildren[-1].agg)
            folds[m] = acc
            for i in range(m - 2, -1, -1):
                acc = combine(combine(svalues[i], schildren[i + 1].agg), acc)
                folds[i + 1] = acc
            for child in schildren:
                child.parent = node
            children: list[_Node] = node.children  # type: ignore[assignment]
            children.extend(schildren)
            node.local_cnt += 1 + sibling.cnt
            suffix.extend(folds)
            node.times.append(parent.times[0])
            node.times.extend(sibling.times)
            node.values.append(separator)
            node.values.extend(svalues)
        siblings: list[_Node] = parent.children  # type: ignore[assignment]
        parent.times.pop(0)  # (primitives of the compiled build, unlike del)
        parent.values.pop(0)
        siblings.pop(1)

    def _refresh_left_spine(self, node: _Node) -> None:
        """Recompute the aggregates of the non-root left-spine ``node`` and of the left-spine
        nodes below it from their (valid) suffix folds and counts: one combine per level (the
        left finger's live entries start at ``_lf_start``)."""
        combine = self._combine
        add = self._add
        parent: _Node = node.parent  # type: ignore[assignment]
        while node.children is not None:
            suffix: list[Any] = node.suffix  # type: ignore[assignment]
            agg = parent.agg
            node.agg = suffix[0] + agg if add else combine(suffix[0], agg)
            node.cnt = node.local_cnt + parent.cnt
            parent = node
            node = node.children[0]
        start = self._lf_start
        suffix = node.suffix  # type: ignore[assignment]
        agg = parent.agg
        node.agg = suffix[start] + agg if add else combine(suffix[start], agg)
        node.cnt = len(node.values) - start + parent.cnt

    def _evict_inner(self, node: _Node, i: int) -> None:
        """Evict entry ``i`` of an inner node: a neighbouring leaf entry (the oldest of the right
        subtree, or the youngest of the left one) takes its place (Fig. 8)."""
        right = node.children[i + 1]
        depth = 1
        if len(right.times) >= self._min_arity:
            leaf = right
            while leaf.children is not None:
                leaf = leaf.children[0]
                depth += 1
            t = leaf.times.pop(0)
            value = leaf.values.pop(0)
        else:
            leaf = node.children[i]
            while leaf.children is not None:
                leaf = leaf.children[-1]
                depth += 1
            t = leaf.times.pop()
            value = leaf.values.pop()
        node.times[i] = t
        node.values[i] = value
        top, hit_left, hit_right, level = self._underflow(leaf, leaf.left_spine, leaf.right_spine)
        if level < depth:  # rebalancing stopped below ``node``: repair up to it
            recalc = self._recalc
            while top is not node:
                if not (top.left_spine or top.right_spine):
                    recalc(top)
                hit_left = hit_left or top.left_spine
                hit_right = hit_right or top.right_spine
                top = top.parent  # type: ignore[assignment]
        self._repair_aggs(top, hit_left, hit_right)

    def _underflow(
        self, node: _Node, hit_left: bool, hit_right: bool
    ) -> tuple[_Node, bool, bool, int]:
        """Rebalance after an eviction from ``node`` (Fig. 7, rebalanceForEvict): while a
        non-root node underflows, merge it with a sibling or move an entry over. Returns the
        node where rebalancing stopped (its aggregate still to repair), the spine-hit flags and
        how many levels it climbed."""
        min_entries = self._min_entries
        level = 0
        while node.parent is not None and len(node.times) < min_entries:
            parent = node.parent
            siblings = parent.children
            idx = 0 if siblings[0] is node else siblings.index(node)
            sib_idx = idx - 1 if idx == len(siblings) - 1 else idx + 1  # type: ignore[arg-type]
            sibling = siblings[sib_idx]
            hit_left = hit_left or sibling.left_spine
            hit_right = hit_right or sibling.right_spine
            level += 1
            if len(sibling.times) <= min_entries:
                merged = self._merge(parent, min(idx, sib_idx))
                if parent.parent is None and not parent.times:  # height decrease
                    merged.parent = None
                    merged.left_spine = merged.right_spine = False
                    self._root = merged
                    if merged.children is None:
                        self._lf = self._rf = merged
                    return merged, True, True, level
            else:
                self._move(parent, idx, sib_idx)
            node = parent
            hit_left = hit_left or node.left_spine
            hit_right = hit_right or node.right_spine
        return node, hit_left, hit_right, level

    def _merge(self, parent: _Node, i: int) -> _Node:
        """Merge child ``i + 1`` of ``parent`` and separator ``i`` into child ``i``."""
        left = parent.children[i]
        right = parent.children[i + 1]
        left.times.append(parent.times[i])
        left.times.extend(right.times)
        left.values.append(parent.values[i])
        left.values.extend(right.values)
        del parent.times[i]
        del parent.values[i]
        del parent.children[i + 1]
        if left.children is not None:
            for child in right.children:
                child.parent = left
            left.children.extend(right.children)  # type: ignore[arg-type]
        if right.right_spine:
            left.right_spine = True
            if self._rf is right:
                self._rf = left
        if not (left.left_spine or left.right_spine):
            self._recalc(left)
        return left

    def _move(self, parent: _Node, idx: int, sib_idx: int) -> None:
        """Rotate one entry (and child) from sibling ``sib_idx`` through the parent into the
        underflowing child ``idx``."""
        node = parent.children[idx]
        sibling = parent.children[sib_idx]
        if sib_idx > idx:
            node.times.append(parent.times[idx])
            node.values.append(parent.values[idx])
            parent.times[idx] = sibling.times.pop(0)
            parent.values[idx] = sibling.values.pop(0)
            if node.children is not None:
                child = sibling.children.pop(0)
                child.parent = node
                node.children.append(child)
        else:
            node.times.insert(0, parent.times[sib_idx])
            node.values.insert(0, parent.values[sib_idx])
            parent.times[sib_idx] = sibling.times.pop()
            parent.values[sib_idx] = sibling.values.pop()
            if node.children is not None:
                child = sibling.children.pop()
                child.parent = node
                node.children.insert(0, child)
        recalc = self._recalc
        if not (node.left_spine or node.right_spine):
            recalc(node)
        if not (sibling.left_spine or sibling.right_spine):
            recalc(sibling)

    # --- range query ----------------------------------------------------------------------------

    def query_range(self, t_from: Any, t_to: Any) -> Any:
        """The lowered aggregate of the entries with ``t_from <= t <= t_to`` (lowered identity
        when there are none or the range is inverted). See :meth:`aggregate_range`."""
        agg = self.aggregate_range(t_from, t_to)
        return agg if self._lower_is_identity else self._lower(agg)

    def aggregate_range(self, t_from: Any, t_to: Any) -> Any:
        """The raw (un-lowered) partial of the entries with ``t_from <= t <= t_to``, both bounds
        inclusive; the identity when there are none or ``t_to < t_from``.

        The FiBA paper, Fig. 10: finger-search the lowest node whose range holds both bounds, then
        descend along at most two chains, using stored up aggregates for the subtrees in
        between. O(log d_from + log d_to + log of the sub-window size). A suffix of the window
        (``t_to >= youngest()``) starts from the right finger instead: it climbs the right
        spine to the lowest node holding ``t_from`` and descends from there along one chain,
        where the spine subtrees right of the chain cost one combine per level (their cached
        prefix folds); so it costs O(log d) combines for the d entries of the suffix,
        independent of the window size. A prefix (``t_from <= oldest()``) is the mirror image,
        from the left finger.
        """
        root = self._root
        if t_to < t_from or not root.times:
            return self._identity
        self._settle()
        lf = self._lf
        rf = self._rf
        if not t_to < rf.times[-1]:  # a suffix of the window
            if not t_from > lf.times[0]:
                return self.aggregate()
            node = rf
            parent = node.parent
            while parent is not None and not t_from > parent.times[-1]:
                node = parent
                parent = node.parent
            return self._suffix_of(node, t_from)
        if not t_from > lf.times[0]:  # a prefix of the window
            node = lf
            parent = node.parent
            while parent is not None and not t_to < parent.times[0]:
                node = parent
                parent = node.parent
            return self._prefix_of(node, t_to)
        node = root
        if root.children is not None:
            if t_to < root.times[0]:
                node = lf
                parent = node.parent
                while parent is not root and not t_to < parent.times[0]:
                    node = parent  # type: ignore[assignment]
                    parent = node.parent
            elif t_from > root.times[-1]:
                node = rf
                parent = node.parent
                while parent is not root and not t_from > parent.times[-1]:
                    node = parent  # type: ignore[assignment]
                    parent = node.parent
            while node.children is not None:
                i = bisect_left(node.times, t_from)
                if i != bisect_right(node.times, t_to):
                    break
                node = node.children[i]
        return self._range(node, t_from, t_to)

    def _range(self, node: _Node, lo: Any, hi: Any) -> Any:
        """Aggregate of the entries of ``node``'s subtree within ``[lo, hi]``, where ``node`` is
        a leaf or has an entry in ``[lo, hi]`` (the search of :meth:`aggregate_range` stops at
        the first such node)."""
        combine = self._combine
        times = node.times
        values = node.values
        i0 = bisect_left(times, lo)
        i1 = bisect_right(times, hi)
        children = node.children
        if children is None:
            if i0 >= i1:
                return self._identity
            acc = values[i0]
            for value in values[i0 + 1 : i1]:
                acc = combine(acc, value)
            return acc
        acc = values[i0]
        if times[i0] != lo:  # the child left of entry i0 may hold times >= lo
            acc = combine(self._suffix_of(children[i0], lo), acc)
        for i in range(i0 + 1, i1):
            acc = combine(combine(acc, children[i].agg), values[i])
        if times[i1 - 1] != hi:
            acc = combine(acc, self._prefix_of(children[i1], hi))
        return acc

    def _suffix_of(self, node: _Node, lo: Any) -> Any:
        """Aggregate of the entries ``>= lo`` in ``node``'s subtree (identity if none): one
        chain down from ``node``; at each level the entries and subtrees right of the chain."""
        combine = self._combine
        parts: list[Any] = []  # what lies right of the chain, one part per level, top first
        while True:
            times = node.times
            values = node.values
            children = node.children
            i = bisect_left(times, lo)
            if children is None:
                if i < len(values):
                    acc = values[i]
                    for value in values[i + 1 :]:
                        acc = combine(acc, value)
                elif parts:
                    acc = parts.pop()
                else:
                    return self._identity
                break
            k = len(values)
            if i < k:
                acc = values[i]
                for j in range(i + 1, k):
                    acc = combine(combine(acc, children[j].agg), values[j])
                last = children[k]
                up = self._spine_up(last) if last.right_spine else last.agg
                acc = combine(acc, up)
                if times[i] == lo:
                    break
                parts.append(acc)
            node = children[i]
        while parts:
            acc = combine(acc, parts.pop())
        return acc

    def _prefix_of(self, node: _Node, hi: Any) -> Any:
        """Aggregate of the entries ``<= hi`` in ``node``'s subtree (identity if none): the
        mirror image of :meth:`_suffix_of`."""
        combine = self._combine
        parts: list[Any] = []  # what lies left of the chain, one part per level, top first
        while True:
            times = node.times
            values = node.values
            children = node.children
            i = bisect_right(times, hi)
            if children is None:
                if i:
                    acc = values[0]
                    for value in values[1:i]:
                        acc = combine(acc, value)
                elif parts:
                    acc = parts.pop()
                else:
                    return self._identity
                break
            if i:
                first = children[0]
                acc = self._spine_up(first) if first.left_spine else first.agg
                acc = combine(acc, values[0])
                for j in range(1, i):
                    acc = combine(combine(acc, children[j].agg), values[j])
                if times[i - 1] == hi:
                    break
                parts.append(acc)
            node = children[i]
        while parts:
            acc = combine(parts.pop(), acc)
        return acc

    def _spine_up(self, node: _Node) -> Any:
        """The up aggregate of the non-root spine node ``node``'s subtree (which its stored
        aggregate is not), from the cached folds down its spine: one combine per level, and the
        right finger's fold; for the root's last child, the right finger's stored aggregate."""
        if node.left_spine:
            combine = self._combine
            acc = node.suffix[0]
            while node.children is not None:
                node = node.children[0]
                acc = combine(node.suffix[0], acc)
            return acc
        if node.parent.parent is None:
            return self._rf.agg
        if node.children is None:
            return self._finger_fold(node)
        combine = self._combine
        acc = node.prefix[-1]
        node = node.children[-1]
        while node.children is not None:
            acc = combine(acc, node.prefix[-1])
            node = node.children[-1]
        return combine(acc, self._finger_fold(node))

    # --- bulk evict -----------------------------------------------------------------------------

    def bulk_evict(self, t: Any) -> int:
        """Remove every entry with time ``<= t``; return how many were removed.

        The bulk paper, §4: search the eviction boundary from the nearer finger, cut the tree
        along it in one pass up (moving entries from, or merging into, the right neighbour at
        each level, which need not be a sibling), then repair the left spine in one pass down.
        Amortized O(log m) for m evicted entries, worst case O(log n); safe for any ``t``.
        """
        root = self._root
        if root.children is None:
            times = root.times
            k = bisect_right(times, t)
            if k:
                del times[:k]
                del root.values[:k]
                self._recalc(root)
            return k
        lf = self._lf
        ltimes = lf.times
        start = self._lf_start
        if t < ltimes[start]:
            return 0
        if not t < self._rf.times[-1]:
            count = len(self)
            _discard(self._root)
            self._reset()
            return count
        k = bisect_right(ltimes, t, start)
        if k == start + 1 and len(ltimes) > k:  # just the oldest entry, a sliding window's
            self.evict(ltimes[start])  # usual case
            return 1
        if len(ltimes) - k >= self._min_entries:  # the boundary is inside the left finger
            self._lf_start = k  # (dropped lazily, as by in-order evicts)
            parent = lf.parent
            lf.agg = self._combine(lf.suffix[k], parent.agg)  # type: ignore[index]
            lf.cnt = len(ltimes) - k + parent.cnt
            return k - start
        self._settle()
        before = len(self)
        self._cut(t)
        return before - len(self)

    def _cut(self, t: Any) -> None:
        """bulk_evict(t) when the boundary leaves the left finger: oldest <= t < youngest."""
        root = self._root
        min_entries = self._min_entries
        # Step 1: boundary search, from the top node down; each level holds the node straddling
        # t, its right neighbour at that level and their lowest common ancestor.
        neighbor: _Node | None = None
        ancestor: _Node | None = None
        if t < root.times[0]:
            node = self._lf
            parent = node.parent
            while parent is not root and not t < parent.times[0]:
                node = parent  # type: ignore[assignment]
                parent = node.parent
            neighbor = parent.children[1]
            ancestor = parent
        elif t > root.times[-1]:
            node = self._rf
            parent = node.parent
            while parent is not root and not t > parent.times[-1]:
                node = parent  # type: ignore[assignment]
                parent = node.parent
        else:
            node = root
        levels = [(node, neighbor, ancestor)]
        while node.children is not None:
            times = node.times
            i = bisect_left(times, t)
            if i < len(times) and times[i] == t:
                break
            if i == len(times):
                if neighbor is not None:
                    neighbor = neighbor.children[0]
            else:
                ancestor = node
                neighbor = node.children[i + 1]
            node = node.children[i]
            levels.append((node, neighbor, ancestor))
        # Step 2: pass up, evicting locally and restoring the arity of each boundary node.
        recalc = self._recalc
        skip_to: _Node | None = None
        top = root
        for node, neighbor, ancestor in reversed(levels):
            if skip_to is not None:
                if node is not skip_to:
                    continue  # merged away: its neighbour is now on the left spine
                skip_to = None
            times = node.times
            k = bisect_right(times, t)
            if k:
                del times[:k]
                del node.values[:k]
                if node.children is not None:
                    for child in node.children[:k]:
                        _discard(child)
                    del node.children[:k]
            if neighbor is None:  # everything left of node's subtree is gone: new root
                if node.children is not None and not times:
                    node = node.children[0]
                _discard(self._root, keep=node)
                node.parent = None
                node.left_spine = node.right_spine = False
                self._root = top = node
                break
            assert ancestor is not None
            if len(times) >= min_entries:
                top = node
                continue
            deficit = min_entries - len(times)
            surplus = len(neighbor.times) - min_entries
            if deficit <= surplus:
                self._move_batch(node, neighbor, ancestor, deficit)
            elif node.parent is ancestor:
                self._absorb_sibling(node, neighbor, ancestor)
            else:
                self._merge_into_neighbor(node, neighbor, ancestor)
                skip_to = ancestor
            top = ancestor
        # Above the boundary at most one entry is missing: ordinary rebalancing.
        if top.parent is not None:
            if len(top.times) < min_entries:
                top = self._underflow(top, True, False)[0]
        elif top.children is not None and not top.times:  # root with a single child
            top = top.children[0]
            top.parent = None
            top.left_spine = top.right_spine = False
            self._root = top
        # Step 3: pass down the left spine (and the right one below a changed root).
        recalc(top)
        node = top
        while node.children is not None:
            node = node.children[0]
            node.left_spine = True
            recalc(node)
        self._lf = node
        if top.parent is None:
            if top.children is None:
                self._rf = top
            else:
                self._repair_spines_below(top, False, True)

    def _move_batch(self, node: _Node, neighbor: _Node, ancestor: _Node, k: int) -> None:
        """Move ``k`` children (and ``k - 1`` entries) from the front of ``neighbor`` into the
        underflowing ``node``, rotating through the separator in ``ancestor`` (bulk paper,
        Fig. 2)."""
        a = bisect_left(ancestor.times, neighbor.times[0]) - 1
        ntimes = neighbor.times
        nvalues = neighbor.values
        node.times.append(ancestor.times[a])
        node.times.extend(ntimes[: k - 1])
        node.values.append(ancestor.values[a])
        node.values.extend(nvalues[: k - 1])
        ancestor.times[a] = ntimes[k - 1]
        ancestor.values[a] = nvalues[k - 1]
        del ntimes[:k]
        del nvalues[:k]
        if node.children is not None:
            moved = neighbor.children[:k]
            del neighbor.children[:k]
            for child in moved:
                child.parent = node
            node.children.extend(moved)
        if not neighbor.right_spine:
            self._recalc(neighbor)

    def _absorb_sibling(self, node: _Node, neighbor: _Node, parent: _Node) -> None:
        """Merge the right sibling ``neighbor`` and their separator into ``node``."""
        a = bisect_left(parent.times, neighbor.times[0]) - 1
        node.times.append(parent.times[a])
        node.times.extend(neighbor.times)
        node.values.append(parent.values[a])
        node.values.extend(neighbor.values)
        if node.children is not None:
            for child in neighbor.children:
                child.parent = node
            node.children.extend(neighbor.children)  # type: ignore[arg-type]
        del parent.times[a]
        del parent.values[a]
        del parent.children[a + 1]
        if neighbor.right_spine:
            node.right_spine = True
            if self._rf is neighbor:
                self._rf = node

    def _merge_into_neighbor(self, node: _Node, neighbor: _Node, ancestor: _Node) -> None:
        """Merge what is left of ``node`` and the separator in ``ancestor`` into the front of the
        non-sibling ``neighbor``; the ancestor's subtrees left of that separator, which held only
        evicted entries and ``node``, are cut off (bulk paper, Fig. 3)."""
        a = bisect_left(ancestor.times, neighbor.times[0]) - 1
        neighbor.times[:0] = [*node.times, ancestor.times[a]]
        neighbor.values[:0] = [*node.values, ancestor.values[a]]
        if node.children is not None:
            for child in node.children:
                child.parent = neighbor
            neighbor.children[:0] = node.children
            node.children = None  # moved: not to be unlinked with node's old subtree below
        del ancestor.times[: a + 1]
        del ancestor.values[: a + 1]
        for cut in ancestor.children[: a + 1]:
            _discard(cut)
        del ancestor.children[: a + 1]

    # --- bulk insert ----------------------------------------------------------------------------

    def bulk_insert(self, pairs: Iterable[tuple[Any, Any]]) -> None:
        """Insert ``(t, x)`` pairs given in ascending time order (``ValueError`` otherwise,
        before any change); equal times are combined in the given order, and into an existing
        entry at that time, exactly as a loop of :meth:`insert` would.

        The bulk paper, §5: one finger search visits all insertion sites in order (each next search
        climbs only to the common ancestor with the previous site); then one pass up, level by
        level, interleaves the new entries into their nodes and splits overflowing nodes into
        several at once, promoting separators to the next level; a final pass down repairs the
        spines. Amortized O(log d + m (1 + log(d / m))) for m pairs, d the distance of the
        oldest pair from the young end.
        """
        self._settle()
        items = pairs if isinstance(pairs, list) else list(pairs)
        if not items:
            return
        previous = items[0][0]
        for t, _ in items:
            if t < previous:
                raise ValueError(f"bulk_insert: time {t!r} after {previous!r} is out of order")
            previous = t
        if len(items) == 1:
            self.insert(*items[0])
            return
        rf = self._rf
        if not rf.times or items[0][0] > rf.times[-1]:  # all younger: one site, the right finger
            self._bulk_pass_up([[rf, 0, self._twigs(items)]])
        else:
            self._bulk_pass_up(self._insertion_sites(items))

    def _twigs(self, items: list[tuple[Any, Any]]) -> list[list[Any]]:
        """``[t, partial, None]`` for sorted pairs, equal times combined."""
        lift = self._lift
        combine = self._combine
        twigs: list[list[Any]] = []
        last: list[Any] = [None, None, None]
        for t, x in items:
            if twigs and t == last[0]:
                last[1] = combine(last[1], lift(x))
            else:
                last = [t, lift(x), None]
                twigs.append(last)
        return twigs

    def _insertion_sites(self, items: list[tuple[Any, Any]]) -> list[list[Any]]:
        """Step 1 of bulk insert: combine pairs at existing times in place and group the new
        entries by target leaf. Returns groups ``[node, level, twigs]`` in time order, where
        ``twigs`` are ``[t, partial, child]`` to add to ``node`` (no twigs: ``node`` only needs
        its aggregate recomputed, when its level is reached)."""
        lift = self._lift
        combine = self._combine
        # path: (node, lo, hi, level) from the apex down; (lo, hi) is the open time range of the
        # node's subtree, None when unbounded. The apex is where the finger search for the first
        # (oldest) time stopped; every later time is larger, so it is always below the apex.
        first = items[0][0]
        node = self._rf
        level = 0
        parent = node.parent
        while parent is not None and not first > parent.times[-1]:
            node = parent
            parent = node.parent
            level += 1
        path: list[tuple[_Node, Any, Any, int]] = [
            (node, None if parent is None else parent.times[-1], None, level)
        ]
        groups: list[list[Any]] = []
        target: _Node | None = None
        index = 0
        found = False
        twig: list[Any] = []
        previous = first
        started = False
        for t, x in items:
            value = lift(x)
            if started and t == previous:
                if found:
                    assert target is not None
                    target.values[index] = combine(target.values[index], value)
                else:
                    twig[1] = combine(twig[1], value)
                continue
            started = True
            previous = t
            while len(path) > 1:
                node, lo, hi, level = path[-1]
                if (lo is None or lo < t) and (hi is None or t < hi):
                    break
                path.pop()
            node, lo, hi, level = path[-1]
            while True:
                times = node.times
                i = bisect_left(times, t)
                found = i < len(times) and times[i] == t
                if found or node.children is None:
                    break
                if i:
                    lo = times[i - 1]
                if i < len(times):
                    hi = times[i]
                node = node.children[i]
                level -= 1
                path.append((node, lo, hi, level))
            target = node
            index = i
            if found:
                node.values[i] = combine(node.values[i], value)
                if not groups or groups[-1][0] is not node:
                    groups.append([node, level, []])
            else:
                twig = [t, value, None]
                if groups and groups[-1][0] is node:
                    groups[-1][2].append(twig)
                else:
                    groups.append([node, 0, [twig]])
        return groups

    def _bulk_pass_up(self, groups: list[list[Any]]) -> None:
        """Steps 2 and 3 of bulk insert: level by level, add each group's twigs to its node
        (splitting it into several if it overflows) and queue its parent; then repair the
        spines from the highest spine node reached."""
        recalc = self._recalc
        max_entries = self._max_entries
        top_left: _Node | None = None
        top_right: _Node | None = None
        level = 0
        while groups:
            upper: list[list[Any]] = []
            for node, node_level, twigs in groups:
                if twigs:
                    if len(node.times) + len(twigs) <= max_entries:
                        self._interleave(node, twigs)
                    else:
                        self._bulk_split(node, twigs, upper, level + 1)
                elif node_level > level:  # an existing time combined higher up: wait for it
                    if upper and upper[-1][0] is node:
                        continue
                    upper.append([node, node_level, []])
                    continue
                parent = node.parent
                if parent is None:
                    top_left = top_right = node
                elif node.left_spine:
                    top_left = node
                elif node.right_spine:
                    top_right = node
                else:
                    recalc(node)
                    if not upper or upper[-1][0] is not parent:
                        upper.append([parent, level + 1, []])
            groups = upper
            level += 1
        if top_left is not None and top_left is top_right:
            self._repair_spines(top_left, True, True)
            return
        if top_left is not None:
            self._repair_spines(top_left, True, False)
        if top_right is not None:
            self._repair_spines(top_right, False, True)

    def _interleave(self, node: _Node, twigs: list[list[Any]]) -> None:
        """Add twigs to a node that does not overflow."""
        times = node.times
        values = node.values
        children = node.children
        if children is None:
            for t, value, _ in twigs:
                i = bisect_left(times, t)
                times.insert(i, t)
                values.insert(i, value)
            return
        for t, value, child in twigs:
            i = bisect_left(times, t)
            times.insert(i, t)
            values.insert(i, value)
            children.insert(i + 1, child)
            child.parent = node

    def _bulk_split(
        self, node: _Node, twigs: list[list[Any]], upper: list[list[Any]], upper_level: int
    ) -> None:
        """Interleave twigs into ``node`` and split the result into nodes of arity
        MIN_ARITY + 1 and a last one of arity between MIN_ARITY and MAX_ARITY (bulk paper,
        Claim 1); ``node`` keeps the first part. The separators, each with the new node on its
        right, are queued as twigs for the parent in ``upper`` (a new root is made first if
        ``node`` is the root)."""
        mu = self._min_arity
        max_entries = self._max_entries
        times = node.times
        values = node.values
        children = node.children
        if not times or times[-1] < twigs[0][0]:  # all twigs after the node's entries
            all_times = times + [twig[0] for twig in twigs]
            all_values = values + [twig[1] for twig in twigs]
            all_children = [] if children is None else children + [twig[2] for twig in twigs]
        else:
            all_times = []
            all_values = []
            all_children = [] if children is None else [children[0]]
            i = 0
            n = len(times)
            for t, value, child in twigs:
                while i < n and times[i] < t:
                    all_times.append(times[i])
                    all_values.append(values[i])
                    if children is not None:
                        all_children.append(children[i + 1])
                    i += 1
                all_times.append(t)
                all_values.append(value)
                if children is not None:
                    all_children.append(child)
            all_times.extend(times[i:])
            all_values.extend(values[i:])
            if children is not None:
                all_children.extend(children[i + 1 :])
        parent = node.parent
        was_right = parent is None or node.right_spine
        if parent is None:  # height increase
            parent = _Node(None, [], [], [node])
            node.parent = parent
            node.left_spine = True
            self._root = parent
        node.times = all_times[:mu]
        node.values = all_values[:mu]
        if children is not None:
            node.children = kids = all_children[: mu + 1]
            for kid in kids:
                kid.parent = node
        total = len(all_times)
        pos = mu  # index of the next separator
        while True:
            start = pos + 1
            end = start + mu if total - start > max_entries else total
            new = _Node(parent, all_times[start:end], all_values[start:end], None)
            if children is not None:
                new.children = kids = all_children[start : end + 1]
                for kid in kids:
                    kid.parent = new
            twig = [all_times[pos], all_values[pos], new]
            if upper and upper[-1][0] is parent:
                upper[-1][2].append(twig)
            else:
                upper.append([parent, upper_level, [twig]])
            if end == total:
                break
            self._recalc(new)
            pos = end
        if was_right:
            node.right_spine = False
            new.right_spine = True
            if self._rf is node:
                self._rf = new
        else:
            self._recalc(new)

    # --- invariants -----------------------------------------------------------------------------

    def check_invariants(self) -> None:
        """Verify the whole structure in O(n); raise ``AssertionError`` naming the broken
        invariant: height (all leaves equally deep), order (times strictly increasing within
        nodes and between separators), arity (MIN_ARITY..MAX_ARITY, root 2..MAX_ARITY unless a
        leaf), structure (parent pointers, spine flags, fingers) or aggregates (every node's
        position-aware partial and count, the cached ``suffix``/``prefix`` folds and
        ``local_cnt`` counts of spine nodes, recomputed independently; partials must compare
        with ``==``). The left finger's entries before ``_lf_start`` (evicted, not yet dropped)
        are not part of it; at least MIN_ARITY - 1 of its entries follow them."""
        combine = self._combine
        identity = self._identity
        min_arity = self._min_arity
        max_arity = 2 * min_arity
        root = self._root
        lf = self._lf
        start = self._lf_start
        _require(
            start == 0
            or (
                lf.parent is not None
                and len(lf.times) - start >= min_arity - 1
                and lf.suffix is not None
                and len(lf.suffix) == len(lf.values) == len(lf.times)
            ),
            "structure: lazily evicted entries of the left finger out of range",
        )
        _require(root.parent is None, "structure: the root has a parent")
        _require(not (root.left_spine or root.right_spine), "structure: the root is on a spine")
        up: dict[int, tuple[Any, int]] = {}  # id(node) -> (up aggregate, entry count)
        leaf_depth: int | None = None
        order: list[_Node] = []
        stack: list[tuple[_Node, Any, Any, int, bool, bool]] = [(root, None, None, 0, False, False)]
        while stack:
            node, lo, hi, depth, on_left, on_right = stack.pop()
            order.append(node)
            times, values, _ = _entries(node, lf, start)
            children = node.children
            n = len(times)
            arity = n + 1
            _require(len(values) == n, "structure: one partial per time")
            if node is root:
                _require(arity <= max_arity, f"arity: root arity {arity} > {max_arity}")
                _require(children is None or arity >= 2, "arity: inner root with one child")
            else:
                _require(
                    min_arity <= arity <= max_arity,
                    f"arity: {arity} outside [{min_arity}, {max_arity}]",
                )
            _require(
                node.left_spine == on_left and node.right_spine == on_right,
                "structure: wrong spine flags",
            )
            for k in range(1, n):
                _require(times[k - 1] < times[k], "order: times within a node not increasing")
            if n:
                _require(lo is None or lo < times[0], "order: time below its separator")
                _require(hi is None or times[-1] < hi, "order: time above its separator")
            if children is None:
                if leaf_depth is None:
                    leaf_depth = depth
                _require(depth == leaf_depth, "height: leaves at different depths")
                continue
            _require(len(children) == arity, "structure: children != entries + 1")
            for k, child in enumerate(children):
                _require(child.parent is node, "structure: wrong parent pointer")
                stack.append(
                    (
                        child,
                        times[k - 1] if k else lo,
                        times[k] if k < n else hi,
                        depth + 1,
                        k == 0 and (node is root or on_left),
                        k == n and (node is root or on_right),
                    )
                )
        for node in reversed(order):  # children before parents
            parts: list[Any] = []
            counts = len(node.times)
            if node.children is None:
                parts = list(_entries(node, lf, start)[1])
                counts = len(parts)
            else:
                for k, child in enumerate(node.children):
                    child_up, child_count = up[id(child)]
                    parts.append(child_up)
                    counts += child_count
                    if k < len(node.values):
                        parts.append(node.values[k])
            up[id(node)] = (_fold(combine, identity, parts), counts)
        for node in order:  # parents before children
            parent = node.parent
            _, values, suffix = _entries(node, lf, start)
            children = node.children
            # parts: the node's own sequence without its edge child; the leaf's values
            parts = []
            count = len(values)
            for k, value in enumerate(values):
                parts.append(value)
                if children is not None and k + 1 < len(values):
                    child_up, child_count = up[id(children[k + 1])]
                    parts.append(child_up)
                    count += child_count
            if parent is None:
                expected = (_fold(combine, identity, parts), count)
            elif node.left_spine or node.right_spine:
                if children is not None:
                    edge_up, edge_count = up[id(children[-1] if node.left_spine else children[0])]
                    parts = [*parts, edge_up] if node.left_spine else [edge_up, *parts]
                    count += edge_count
                if node.left_spine:
                    step = 1 if children is None else 2  # one fold per entry
                    _require(
                        suffix is not None
                        and len(suffix) == len(values)
                        and all(
                            suffix[k] == _fold(combine, identity, parts[k * step :])
                            for k in range(len(values))
                        ),
                        "aggregates: stale suffix folds of a left-spine node",
                    )
                    _require(
                        children is None or node.local_cnt == count,
                        "aggregates: stale cached own count of a left-spine node",
                    )
                elif children is not None:
                    _require(
                        node.prefix is not None
                        and len(node.prefix) == len(values)
                        and all(
                            node.prefix[k] == _fold(combine, identity, parts[: 2 * k + 2])
                            for k in range(len(values))
                        ),
                        "aggregates: stale prefix folds of a right-spine node",
                    )
                    _require(
                        node.local_cnt == count,
                        "aggregates: stale cached own count of a right-spine node",
                    )
                if node.left_spine:  # the root's inner aggregate too
                    parts = [*parts, parent.agg]
                    count += parent.cnt
                elif parent.parent is not None:
                    parts = [parent.agg, *parts]
                    count += parent.cnt
                expected = (_fold(combine, identity, parts), count)
            else:
                expected = up[id(node)]
            _require(
                node.left_spine or node.suffix is None,
                "aggregates: suffix folds off the left spine",
            )
            if node.right_spine and children is None and node.prefix is not None:
                _require(
                    len(node.prefix) <= len(values)
                    and all(
                        node.prefix[k] == _fold(combine, identity, values[: k + 1])
                        for k in range(len(node.prefix))
                    ),
                    "aggregates: stale prefix folds of the right finger",
                )
            else:
                _require(
                    (node.right_spine and children is not None) or node.prefix is None,
                    "aggregates: prefix folds off the right spine",
                )
            _require(node.agg == expected[0], "aggregates: stored partial differs from recomputed")
            _require(node.cnt == expected[1], "aggregates: stored count differs from recomputed")
        leftmost = rightmost = root
        while leftmost.children is not None:
            leftmost = leftmost.children[0]
        while rightmost.children is not None:
            rightmost = rightmost.children[-1]
        _require(self._lf is leftmost, "structure: left finger is not the leftmost leaf")
        _require(self._rf is rightmost, "structure: right finger is not the rightmost leaf")
        _require(len(self) == up[id(root)][1], "aggregates: len() differs from the entry count")


def _entries(node: _Node, lf: _Node, start: int) -> tuple[list[Any], list[Any], list[Any] | None]:
    """``node``'s times, values and suffix folds without the ``start`` entries that in-order
    evicts left at the front of the left finger ``lf`` (copies when there are any)."""
    suffix = node.suffix
    if node is not lf or not start:
        return node.times, node.values, suffix
    return node.times[start:], node.values[start:], None if suffix is None else suffix[start:]


def _resize(items: list[Any], k: int) -> None:
    """Make ``items`` hold ``k`` entries in place: pops from its end, or Nones appended to be
    overwritten. (The compiled build's primitives: cheaper than a new list or a ``del``.)"""
    while len(items) > k:
        items.pop()
    while len(items) < k:
        items.append(None)


def _fold(combine: Any, identity: Any, parts: list[Any]) -> Any:
    acc = identity
    for part in parts:
        acc = combine(acc, part)
    return acc


def _require(condition: bool, invariant: str) -> None:
    if not condition:
        raise AssertionError(f"FiBA invariant broken: {invariant}")


def _walk(root: _Node) -> Iterator[tuple[Any, Any]]:
    """``(t, partial)`` pairs of the subtree of ``root`` in time order."""
    stack: list[tuple[_Node, int]] = [(root, 0)]
    while stack:
        node, i = stack.pop()
        children = node.children
        if children is None:
            yield from zip(node.times, node.values, strict=True)
            continue
        if i:
            yield node.times[i - 1], node.values[i - 1]
        if i + 1 < len(children):
            stack.append((node, i + 1))
        stack.append((children[i], 0))
