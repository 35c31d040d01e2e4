"""Sliding windows of many keys over partitioned streams: the state behind ``agents.sliding``.

Entries are ``(key, t) -> partial`` (``t`` an int, e.g. milliseconds), kept as one FiBA per key
in time order. Each partition ``p`` has its own stream time ``S_p``, the largest ``t`` added on
it. ``add`` rejects a time older than ``S_p - retention`` (``LateEvent``, nothing changes),
refuses one more than ``max_future_skew`` after ``S_p`` *and* after ``P_p``, the time of the
partition's previous ``add`` whatever became of it (``FutureEvent``; none when None: a pause
costs at most one event); then it inserts the lifted value (equal times combine, older first),
advances ``S_p`` and evicts every entry of the partition with ``t < S_p - retention``,
returning the evicted ``(key, t)`` so that a changelog can delete them. The window of size
``w`` of a key is ``[S_p - w, S_p]`` (both bounds inclusive); ``range`` is any span of the
retained entries. ``put``/``remove`` set or delete one entry as a changelog record does
(replacing), so replaying a changelog in order rebuilds the state. Design:
docs/design/faust-api.md.

Costs (``d``: distance of an insert from the young end of its key's tree; ``n_w``: entries of
a window; ``K``: keys of the partition): ``add`` O(log d + sum over windows of log n_w) combines
amortized, plus O(log K) per key whose oldest time changes or is cleaned; evictions O(1)
amortized per entry; ``put``/``remove`` O(log d); ``window`` O(log n_w); ``range`` O(log n).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import takewhile
from typing import Any

from sortedcontainers import SortedList

import stores
from stores.fiba import FiBA
from stores.monoids import make_monoid
from stores.native_fiba import NativeFiBA, native_kinds


class LateEvent(ValueError):
    """An event older than its partition's stream time minus the retention: not added."""


class FutureEvent(ValueError):
    """An event further ahead of its partition's stream time than the allowed skew: not added
    (one wrong timestamp would otherwise move the stream time ahead and evict everything)."""


class KeyPartitionError(ValueError):
    """A key met on a second partition: its entries would be split between two changelog
    partitions (the stream must be partitioned by the key, e.g. with ``group_by``)."""


@dataclass(frozen=True, slots=True)
class AddOutcome:
    """What ``add`` did: the key's partial now stored at ``t`` and the evicted entries."""

    partial: Any
    evicted: list[tuple[Hashable, int]]


def _same(x: Any) -> Any:
    return x


class PartitionWindows:
    """The entries of one partition: one FiBA of partials per key and the stream time."""

    __slots__ = (
        "_by_oldest",
        "_max_future_skew",
        "_new_tree",
        "_oldest",
        "_previous",
        "_retention",
        "_stored",
        "_trees",
        "stream_time",
    )

    def __init__(
        self,
        stored: Any,
        retention: int,
        max_future_skew: int | None = None,
        new_tree: Callable[[], Any] | None = None,
    ) -> None:
        self._stored = stored  # the monoid of stored partials (lift = identity)
        self._new_tree = new_tree or (lambda: FiBA(stored))  # a key's tree of partials
        self._retention = retention
        self._max_future_skew = max_future_skew
        self._trees: dict[Hashable, FiBA] = {}
        self._oldest: dict[Hashable, int] = {}
        self._by_oldest = SortedList()  # (oldest time, key), for the retention
        self.stream_time: int | None = None
        self._previous: int | None = None  # P: the previous add's time (None: S stands for it)

    def __len__(self) -> int:
        """Number of entries. O(keys)."""
        return sum(map(len, self._trees.values()))

    def __contains__(self, key: object) -> bool:
        return key in self._trees

    def __iter__(self) -> Iterator[Hashable]:
        """The keys holding entries."""
        return iter(self._trees)

    def entries(self) -> Iterator[tuple[Hashable, int, Any]]:
        """``(key, t, partial)`` of every entry, key by key in time order."""
        for key, tree in self._trees.items():
            for t, partial in tree:
                yield key, t, partial

    def entry(self, key: Hashable, t: int) -> Any:
        """The partial at ``(key, t)``, or None."""
        tree = self._trees.get(key)
        return None if tree is None else tree.get(t)

    def horizon(self) -> int | None:
        """The oldest retained time ``S - retention`` (None before any entry)."""
        s = self.stream_time
        return None if s is None else s - self._retention

    def admit(self, t: int) -> None:
        """Check time ``t`` of an event about to be added (``LateEvent``, ``FutureEvent``; see
        the module doc); it becomes ``P``, whatever the outcome."""
        s, previous = self.stream_time, self._previous
        self._previous = t
        if s is None:
            return
        if t < s - self._retention:
            raise LateEvent(f"time {t} < stream time {s} - retention {self._retention}")
        skew = self._max_future_skew
        if skew is None or t <= s + skew:
            return
        p = s if previous is None else previous
        if t > p + skew:
            raise FutureEvent(
                f"time {t} > stream time {s} + max_future_skew {skew}, and > the previous "
                f"event's time {p} + max_future_skew"
            )

    def add(self, key: Hashable, t: int, partial: Any) -> AddOutcome:
        """Combine ``partial`` into ``(key, t)`` after its old partial, ``t`` admitted
        (``admit``); see the module doc."""
        tree = self._insert(key, t, partial)
        if t < self._oldest[key]:
            self._set_oldest(key, t)
        evicted: list[tuple[Hashable, int]] = []
        if self.stream_time is None or t > self.stream_time:
            self.stream_time = t
            self._evict_expired(evicted)
        return AddOutcome(tree.get(t), evicted)

    def put(self, key: Hashable, t: int, partial: Any) -> None:
        """Set ``(key, t)`` to ``partial`` (replacing it); the stream time becomes at least
        ``t``. Entries older than the retention stay until the next ``add`` evicts them."""
        self._tree(key).evict(t)
        self._insert(key, t, partial)
        if t < self._oldest[key]:
            self._set_oldest(key, t)
        if self.stream_time is None or t > self.stream_time:
            self.stream_time = t

    def remove(self, key: Hashable, t: int) -> bool:
        """Delete ``(key, t)``; False if absent. The stream time stays."""
        tree = self._trees.get(key)
        if tree is None or not tree.evict(t):
            return False
        if not len(tree):
            self._forget(key)
        elif t == self._oldest[key]:
            self._set_oldest(key, tree.oldest())
        return True

    def total(self, key: Hashable) -> Any:
        """The raw partial of all of ``key``'s entries. O(1)."""
        tree = self._trees.get(key)
        return self._stored.identity if tree is None else tree.aggregate()

    def aggregate(self, key: Hashable, t_from: int, t_to: int) -> Any:
        """The raw partial of ``key``'s retained entries with ``t_from <= t <= t_to``."""
        tree = self._trees.get(key)
        if tree is None:
            return self._stored.identity
        horizon = self.horizon()
        return tree.aggregate_range(max(t_from, horizon) if horizon is not None else t_from, t_to)

    def _insert(self, key: Hashable, t: int, partial: Any) -> Any:
        """Combine ``partial`` into ``key``'s entry at ``t``; a partial that the key's native
        tree cannot hold (a string for ``max``, or int sums that might leave int64) moves the key
        to a Python FiBA first. Its tree."""
        tree = self._tree(key)
        try:
            tree.insert(t, partial)
        except (TypeError, OverflowError):
            if type(tree) is FiBA:
                raise
            tree = self._trees[key] = FiBA.from_sorted(self._stored, list(tree))
            tree.insert(t, partial)
        return tree

    def _tree(self, key: Hashable) -> Any:
        tree = self._trees.get(key)
        if tree is None:
            tree = self._trees[key] = self._new_tree()
            self._oldest[key] = _NEVER
            self._by_oldest.add((_NEVER, key))
        return tree

    def _set_oldest(self, key: Hashable, t: int) -> None:
        self._by_oldest.remove((self._oldest[key], key))
        self._oldest[key] = t
        self._by_oldest.add((t, key))

    def _forget(self, key: Hashable) -> None:
        self._by_oldest.remove((self._oldest.pop(key), key))
        self._trees.pop(key).clear()

    def _evict_expired(self, evicted: list[tuple[Hashable, int]]) -> None:
        """Evict every entry older than the horizon, appending its ``(key, t)``."""
        horizon = self.horizon()
        by_oldest = self._by_oldest
        while by_oldest and by_oldest[0][0] < horizon:
            key = by_oldest[0][1]
            tree = self._trees[key]
            if type(tree) is FiBA:
                evicted.extend((key, t) for t, _ in takewhile(lambda e: e[0] < horizon, tree))
                tree.bulk_evict(horizon - 1)
            else:  # native: from the old end, O(1) amortized each (no walk of its items)
                while (oldest := tree.oldest()) is not None and oldest < horizon:
                    evicted.append((key, oldest))
                    tree.evict(oldest)
            if len(tree):
                self._set_oldest(key, tree.oldest())
            else:
                self._forget(key)

    def clear(self) -> None:
        """Drop every entry and the stream time, freeing the trees at once."""
        for tree in self._trees.values():
            tree.clear()
        self._trees.clear()
        self._oldest.clear()
        self._by_oldest.clear()
        self.stream_time = None
        self._previous = None


_NEVER = 1 << 62
"""The oldest time of a key whose tree was just made (larger than any time)."""


class SlidingState:
    """Sliding windows of many keys, each key in one partition (see the module doc).

    ``monoid`` lifts values and combines partials (its ``lower`` gives the results);
    ``windows`` maps window names to sizes, each at most ``retention``; ``max_future_skew``:
    how far ahead of the stream time an event may be (None: any). ``parts``: the parts
    ``monoid`` composes, by name; when each has a native twin and the native core is loaded,
    every key's tree is the native FiBA (``stores.native_fiba``, partials crossing as the
    compose's tuples), else the Python one.
    """

    def __init__(
        self,
        monoid: Any,
        windows: Mapping[str, int],
        retention: int,
        max_future_skew: int | None = None,
        parts: Mapping[str, Any] | None = None,
    ) -> None:
        for name, size in windows.items():
            if not 0 <= size <= retention:
                raise ValueError(f"window {name!r} ({size}) must be in [0, retention {retention}]")
        self.monoid = monoid
        self.windows = dict(windows)
        self.retention = retention
        self.max_future_skew = max_future_skew
        self._stored = make_monoid(
            monoid.identity,
            _same,
            monoid.combine,
            monoid.lower,
            name="stored",
        )
        self._lower = monoid.lower
        self._new_tree: Callable[[], Any] | None = None
        if parts is not None and stores.native() is not None and native_kinds(parts):
            self._new_tree = lambda: NativeFiBA(parts, partials=True)
        self._partitions: dict[int, PartitionWindows] = {}
        self._key_partition: dict[Hashable, int] = {}

    # --- events -------------------------------------------------------------------------------

    def lift(self, value: Any, into: Any = None) -> Any:
        """The partial of ``value``; ``ValueError`` naming it if the monoid refuses it. A
        value that is no number must also combine after ``into`` (the aggregate it is about
        to join; default the identity), so that it cannot fail inside a tree."""
        monoid = self.monoid
        try:
            partial = monoid.lift(value)
            if not isinstance(value, int | float):  # lifts but cannot combine (object + sum)
                monoid.combine(monoid.identity if into is None else into, partial)
        except (TypeError, ValueError, KeyError, ArithmeticError) as exc:
            raise ValueError(f"cannot aggregate {value!r}: {exc}") from None
        return partial

    def add(self, partition: int, key: Hashable, t: int, value: Any) -> AddOutcome:
        """Add ``value`` at ``(key, t)`` on ``partition``: ``LateEvent``, ``FutureEvent``,
        ``ValueError`` (bad value, bad time) or ``KeyPartitionError`` before any change."""
        if type(t) is not int:
            raise ValueError(f"time must be an int (e.g. milliseconds), got {t!r}")
        self._check_partition(key, partition)
        windows = self._partition(partition)
        windows.admit(t)
        outcome = windows.add(key, t, self.lift(value, windows.total(key)))
        self._key_partition[key] = partition
        for evicted_key, _ in outcome.evicted:
            if evicted_key not in windows:
                self._key_partition.pop(evicted_key, None)
        return outcome

    def put(self, partition: int, key: Hashable, t: int, partial: Any) -> None:
        """Set ``(key, t)`` to ``partial`` (a changelog record's value)."""
        self._check_partition(key, partition)
        self._partition(partition).put(key, t, partial)
        self._key_partition[key] = partition

    def remove(self, partition: int, key: Hashable, t: int) -> bool:
        """Delete ``(key, t)`` (a changelog tombstone); False if absent."""
        windows = self._partitions.get(partition)
        if windows is None or not windows.remove(key, t):
            return False
        if key not in windows:
            self._key_partition.pop(key, None)
        return True

    # --- results ------------------------------------------------------------------------------

    def stream_time(self, key: Hashable) -> int | None:
        """The stream time of ``key``'s partition (None for a key without entries here)."""
        partition = self._key_partition.get(key)
        return None if partition is None else self._partitions[partition].stream_time

    def window(self, key: Hashable, name: str) -> Any:
        """The lowered aggregate of window ``name`` of ``key``: ``[S - w, S]``."""
        size = self.windows.get(name)
        if size is None:
            raise KeyError(f"no window {name!r} (windows: {', '.join(self.windows)})")
        partition = self._key_partition.get(key)
        if partition is None:
            return self._lower(self.monoid.identity)
        windows = self._partitions[partition]
        s = windows.stream_time
        return self._lower(windows.aggregate(key, s - size, s))

    def all_windows(self, key: Hashable) -> dict[str, Any]:
        """Every window's lowered aggregate of ``key``, by window name."""
        return {name: self.window(key, name) for name in self.windows}

    def range(self, key: Hashable, t_from: int, t_to: int) -> Any:
        """The lowered aggregate of ``key``'s retained entries with ``t_from <= t <= t_to``."""
        partition = self._key_partition.get(key)
        if partition is None:
            return self._lower(self.monoid.identity)
        return self._lower(self._partitions[partition].aggregate(key, t_from, t_to))

    # --- state --------------------------------------------------------------------------------

    def entry(self, key: Hashable, t: int) -> Any:
        """The partial stored at ``(key, t)``, or None."""
        partition = self._key_partition.get(key)
        return None if partition is None else self._partitions[partition].entry(key, t)

    def partition_of(self, key: Hashable) -> int | None:
        return self._key_partition.get(key)

    def entries(self) -> Iterator[tuple[Hashable, int, Any]]:
        """``(key, t, partial)`` of every entry."""
        for windows in self._partitions.values():
            yield from windows.entries()

    def __len__(self) -> int:
        """Number of entries. O(keys)."""
        return sum(map(len, self._partitions.values()))

    def partitions(self) -> Sequence[int]:
        return list(self._partitions)

    def drop_partition(self, partition: int) -> None:
        """Forget every entry of ``partition`` and its stream time. O(its nodes)."""
        windows = self._partitions.pop(partition, None)
        if windows is None:
            return
        for key in windows:
            self._key_partition.pop(key, None)
        windows.clear()

    def clear(self) -> None:
        for partition in list(self._partitions):
            self.drop_partition(partition)

    def _partition(self, partition: int) -> PartitionWindows:
        windows = self._partitions.get(partition)
        if windows is None:
            windows = self._partitions[partition] = PartitionWindows(
                self._stored, self.retention, self.max_future_skew, self._new_tree
            )
        return windows

    def _check_partition(self, key: Hashable, partition: int) -> None:
        known = self._key_partition.get(key)
        if known is not None and known != partition:
            raise KeyPartitionError(
                f"key {key!r} is in partition {known}, not {partition}: partition the stream "
                "by this key (e.g. stream.group_by) so that its windows live in one partition"
            )
