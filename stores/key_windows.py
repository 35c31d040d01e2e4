"""The per-key sliding windows of one input partition, one FiBA per key.

Semantics (KIP-450 sliding windows, generalised to out-of-order data and several sizes):

* Event times are mapped to *window times*: the event time itself, or with a ``resolution`` r
  the start of its pane, ``t - t mod r`` (all events of one pane combine into one entry).
  Everything below is in window times.
* The stream time ``S`` of the partition is the largest window time accepted on it (``None``
  before the first event).
* An event at time ``t`` is *late* when ``t < S - R`` (``R`` = retention) and *future* when
  ``t`` is more than ``max_wall_clock_skew`` ahead of the worker's clock (unless that is off:
  ``None``), which keeps one wrong timestamp (microseconds instead of ms) from moving ``S``
  decades ahead, on a fresh partition too. With ``max_future_skew`` set (default ``None``:
  off, as Kafka Streams and Quix just advance the stream time) an event is also *future* when
  ``t > S + max_future_skew`` *and* ``t > P + max_future_skew``, ``P`` being the window time
  of the partition's previous event whose time was checked, whatever became of it (``S`` in
  its place after a ``clear``/``restore``): a lone outlier is refused, but a jump that the next
  event confirms (a pause in a healthy stream) costs one event, never every later one, since
  a refused event still moves ``P``. All are rejected (``Rejected``), move no stream time and
  change nothing but ``P``. Otherwise it
  is accepted, ``S`` becomes ``max(S, t)`` and the event is inserted at ``t`` into its key's
  window. Distinct events with equal times all count (their partials combine, older first).
* The window of size ``w`` of key ``k`` at stream time ``S`` holds the accepted events of ``k``
  with ``S - w <= t <= S`` (both bounds inclusive).
* ``window_end``: with ``stream_time`` (the default) a record reports the windows
  ``[S - w, S]``; with ``event_time`` the windows ``[t - w, t]`` ending at the window time ``t``
  of the event that made it (in ``batch`` mode: the key's last event of the batch), over the
  entries present after that event (``windows_ending``). An in-order event (``t = S``) gets the
  same windows in both modes; a late one gets its own windows as they are now, and the records
  of the later windows it also falls in are not sent again.
* Retention: entries with ``t < S - R`` are dropped. For the key being touched this happens at
  once (``bulk_evict``, lazily); idle keys are cleaned by ``sweep()``, which finds them through a
  ``SortedList`` of ``(time, key)``, the time a lower bound of the key's oldest time: lazy
  eviction leaves it behind (no index update per event), an insert before it lowers it, and a
  sweep visiting a key indexes it at its oldest time again. Queries never see entries older
  than ``S - R``, so results do not depend on when the sweep last ran.

Each key has ONE aggregator over a composed monoid (every configured aggregation plus the
event count); every window size is answered from it (window sharing, the FiBA paper's §4): by
the O(1)
whole-window query when the window covers every retained entry, otherwise from a
``WindowSuffix`` per key and window size smaller than the retention
(``stores.window_suffixes``: Two-Stacks over the FiBA's entries, O(1) amortized per in-order
event, falling back on the FiBA range query ``[S - w, S]``).

Emission modes (``emit``): ``event`` — ``accept`` returns the ``KeyAggregates`` of the key
(every window at the new ``S``) after each accepted event (``apply_one`` then
``lowered_windows``: the same windows, for an encoder that writes the record without building
it); ``changes`` — the same, but ``None`` when no window's count or aggregates changed since the
key's previous record; ``batch`` — ``apply`` takes many events columnar (admission and lift in
one pass, then per touched key one sort, one ``bulk_insert`` and one notice to its kept
windows), ``evict_expired`` and ``record_of`` then run once per touched key (``accept_batch``
does all three): one record per touched key, at the stream time after the batch. Acceptance
decisions inside a batch are made event by event, so every mode ends in the same state.

Costs, with ``d`` the distance of an insert from the younger end of its key's window, ``m`` the
entries a call evicts, ``W`` the number of windows and ``K`` the number of keys: ``accept`` is
O(log d + log m + W) combines amortized for an insert within the kept windows' margins
(otherwise O(log b) more per window, b <= n; see ``stores.window_suffixes``), plus O(log K)
when it inserts before the key's indexed time;
``sweep`` is O(log m + log K) per cleaned key, and O(log K) per key that lazy eviction cleaned
since it was indexed; ``query_range`` is O(log n).
"""

from __future__ import annotations

import json
import time
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import takewhile
from typing import Any, NamedTuple

from sortedcontainers import SortedList

from stores.aggregations import aggregation_names, named, resolve_aggregation
from stores.fiba import FiBA
from stores.monoids import compose, make_monoid, monoid
from stores.window_settings import WindowSettings, WindowSpec
from stores.window_suffixes import WindowSuffix

COUNT = "count"
STREAM_TIME = "stream_time"
EVENT_TIME = "event_time"

# Rejection reasons (``Rejected.reason``; the dead letters' reason codes, ``agents.records``).
REASON_BAD_VALUE = "bad_value"
REASON_LATE = "late"
REASON_FUTURE = "future"


@dataclass(frozen=True, slots=True)
class WindowResult:
    """The aggregates of one window ``[start, end]`` (inclusive) of one key."""

    start: int
    end: int
    count: int
    aggregates: dict[str, Any]


@dataclass(frozen=True, slots=True)
class KeyAggregates:
    """Every configured window of ``key`` at ``stream_time``, after the event at ``event_ts``
    (the aggregates topic's record, ``agents.records.AggregateRecord``, adds where it came
    from)."""

    key: str
    event_ts: int
    stream_time: int
    windows: dict[str, WindowResult] = field(default_factory=dict)


LoweredWindow = tuple[str, int, int, dict[str, Any]]
"""One window of a key as ``KeyWindows.lowered_windows`` gives it: name, start, end (both
inclusive) and the composed monoid's lowered result over it (``count`` and every
aggregation)."""


class Rejected(Exception):
    """An event that was not inserted: ``reason`` (a dead-letter code) and ``detail``."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class WindowConfig:
    """What the windows of a partition are: sizes, retention, skew, panes, aggregations.

    ``partial_monoid`` is the composed monoid (``aggregations`` plus ``count``) with an identity
    ``lift``: the aggregators store partials lifted once, by ``lift`` here.
    """

    windows: tuple[WindowSpec, ...]
    retention: int
    max_future_skew: int | None
    max_wall_clock_skew: int | None
    resolution: int | None
    aggregations: tuple[str, ...]
    composed: Any
    partial_monoid: Any
    window_end: str = STREAM_TIME
    parts: Mapping[str, Any] | None = None
    """The composed monoid's parts by name (``None``: not known), for the native kernel."""

    @classmethod
    def from_settings(cls, settings: WindowSettings) -> WindowConfig:
        """The configuration of ``settings``; raises ``ValueError`` (``AggregationError``) for
        an aggregation that names no monoid."""
        parts = {
            name: resolve_aggregation(spec) for name, spec in map(named, settings.aggregations)
        }
        parts.setdefault(COUNT, monoid(COUNT))
        composed = compose(parts)
        return cls(
            windows=settings.windows,
            retention=settings.retention,
            max_future_skew=settings.max_future_skew,
            max_wall_clock_skew=settings.max_wall_clock_skew,
            resolution=settings.resolution,
            aggregations=aggregation_names(settings.aggregations),
            composed=composed,
            partial_monoid=_prelifted(composed),
            window_end=settings.window_end,
            parts=parts,
        )

    @property
    def lowered_is_aggregates(self) -> bool:
        """Whether a lowered result of the composed monoid is exactly a record's
        ``aggregates`` (``count`` is one of the aggregations, so it holds nothing else, in
        their order); otherwise the aggregates are its ``aggregations`` items. O(parts)."""
        return tuple(self.composed.lower(self.composed.identity)) == self.aggregations

    def window_time(self, ts: int) -> int:
        """The window time of event time ``ts``: itself, or the start of its pane."""
        r = self.resolution
        return ts if r is None else ts - ts % r

    def lift(self, value: Any) -> Any:
        """The partial of one event's ``value``; ``Rejected(bad_value)`` if it cannot be one.

        Non-numbers (objects) are also combined with themselves once, so a value that lifts
        but cannot be combined (an object fed to ``sum``) is refused here, not inside a tree.
        """
        composed = self.composed
        try:
            partial = composed.lift(value)
            if not isinstance(value, int | float):
                composed.combine(partial, partial)
        except LIFT_ERRORS as exc:
            raise cannot_aggregate(value, exc) from None
        return partial


LIFT_ERRORS = (TypeError, ValueError, KeyError, ArithmeticError)
"""What a monoid's ``lift`` or ``combine`` raises for a value it cannot aggregate."""


def cannot_aggregate(value: Any, exc: Exception) -> Rejected:
    """The rejection of ``value``, whose lift (or combine) raised ``exc``."""
    return Rejected(REASON_BAD_VALUE, f"cannot aggregate {value!r}: {exc}")


class PartialJsonCodec:
    """Bytes of a monoid's partials: JSON of its ``to_state`` (floats round-trip exactly)."""

    format = "json-state/1"

    def __init__(self, composed: Any) -> None:
        self._to_state = composed.to_state
        self._from_state = composed.from_state

    def encode(self, partial: Any) -> bytes:
        return json.dumps(self._to_state(partial), separators=(",", ":")).encode()

    def decode(self, data: bytes) -> Any:
        return self._from_state(json.loads(data))


def _same(x: Any) -> Any:
    return x


def _prelifted(composed: Any) -> Any:
    return make_monoid(
        composed.identity,
        _same,
        composed.combine,
        composed.lower,
        name="prelifted",
        to_state=composed.to_state,
        from_state=composed.from_state,
    )


@dataclass(frozen=True, slots=True)
class Accepted:
    """An applied event: its window ``time``, the key's partial now stored at that time, the
    times the key's lazy eviction removed, and the record to emit (``None``: nothing to emit).
    """

    key: str
    time: int
    partial: Any
    evicted: tuple[int, ...]
    record: KeyAggregates | None


@dataclass(slots=True)
class BatchResult:
    """Outcome of ``accept_batch``: per input event an ``Accepted`` (``record`` is ``None``)
    or a ``Rejected``, in input order; the emitted records (one per touched key, unless
    suppressed); the times evicted per touched key; the touched keys in first-touch order with
    their last event's time (``last_ts``).
    """

    outcomes: list[Accepted | Rejected] = field(default_factory=list)
    records: list[KeyAggregates] = field(default_factory=list)
    evicted: dict[str, tuple[int, ...]] = field(default_factory=dict)
    last_ts: dict[str, int] = field(default_factory=dict)


class AppliedBatch(NamedTuple):
    """What ``KeyWindows.apply`` did, columnar: ``effects`` — per accepted event, in input
    order, ``(tag, key, time, partial)`` with the key's partial at ``time`` right after it;
    ``rejected`` — ``(tag, Rejected)`` per refused event, in input order; ``last`` — per
    touched key, in first-touch order, the ``(tag, ts)`` of its last accepted event."""

    effects: list[tuple[Any, str, int, Any]]
    rejected: list[tuple[Any, Rejected]]
    last: dict[str, tuple[Any, int]]


class AppliedEvents(NamedTuple):
    """What ``KeyWindows.apply_events`` did, per event as ``apply_one`` and the record's bytes
    as ``encoder.encode`` of ``lowered_windows`` right after it: ``effects`` — per accepted
    event, in input order, ``(offset, key, time, partial, evicted)`` (``Accepted``'s time,
    partial and evicted times: what ``WindowStore.record_many`` takes); ``keys`` — its key's
    UTF-8 bytes; ``event_ts`` — its event time; ``records`` — its aggregate record's bytes;
    ``rejected`` — ``(offset, Rejected)`` per refused event, in input order."""

    effects: list[tuple[int, str, int, Any, tuple[int, ...]]]
    keys: list[bytes]
    event_ts: list[int]
    records: list[bytes]
    rejected: list[tuple[int, Rejected]]


class KeyWindows:
    """The per-key windows of one partition (see the module docstring for the semantics).

    ``window_type`` is the per-key aggregator: ``window_type(monoid)`` makes an empty one and
    ``window_type.from_sorted(monoid, pairs)`` builds one from sorted partials in O(n).
    ``clock`` is the worker's clock in seconds since the epoch (``max_wall_clock_skew``).
    """

    def __init__(
        self,
        config: WindowConfig,
        emit: str = "event",
        window_type: type[FiBA] = FiBA,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self._clock = clock
        self.emit = emit
        self.stream_time: int | None = None
        self._type = window_type
        self._windows: dict[str, FiBA] = {}
        self._oldest: dict[str, int] = {}
        """Per key, its oldest time (``_NEVER`` while its new window is empty)."""
        self._indexed: dict[str, int] = {}
        """Per key, its time in ``_by_oldest``: at most its oldest time."""
        self._by_oldest: SortedList = SortedList()
        self._last_emitted: dict[str, tuple] = {}
        self._suffixes: dict[str, list[WindowSuffix | None]] = {}
        self._lateness = 0
        """The largest ``S - t`` of an accepted out-of-order event (``WindowSuffix`` margins)."""
        self._previous: int | None = None
        """``P``: the window time of the previous event whose time was checked (accepted or
        not; ``None``: ``S`` stands for it), for ``max_future_skew``."""
        self._empty = config.composed.lower(config.composed.identity)
        self._sizes = tuple((spec.name, spec.size_ms) for spec in config.windows)
        self._lower = config.composed.lower
        self._lowered_is_aggregates = config.lowered_is_aggregates
        """``count`` is one of the aggregations: a lowered partial is the aggregates dict."""

    # --- state --------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Number of keys holding at least one entry."""
        return len(self._windows)

    def entry_count(self) -> int:
        """Number of entries over all keys (retained or not yet swept). O(keys)."""
        return sum(map(len, self._windows.values()))

    def __iter__(self) -> Iterator[str]:
        """The keys holding at least one entry."""
        return iter(self._windows)

    def __contains__(self, key: object) -> bool:
        return key in self._windows

    def entries(self, key: str) -> list[tuple[int, Any]]:
        """The ``(time, partial)`` entries of ``key`` in time order (retained or not yet swept)."""
        window = self._windows.get(key)
        return list(window) if window is not None else []

    def restore(
        self, windows: Mapping[str, Sequence[tuple[int, Any]]]
    ) -> list[tuple[str, tuple[int, ...]]]:
        """Replace the state by ``windows`` (key -> entries sorted by time, partials).

        ``S`` becomes the youngest time of all entries. O(total entries); entries already
        older than ``S - R`` are evicted at once and returned as ``sweep`` returns them.
        (``clear``, ``load`` per key and ``sweep`` do the same in steps.)
        """
        self.clear()
        for key, pairs in windows.items():
            self.load(key, pairs)
        return self.sweep()

    def clear(self) -> None:
        """Forget every key and the stream time, freeing their entries at once
        (``FiBA.clear``). O(total nodes)."""
        self.stream_time = None
        for window in self._windows.values():
            window.clear()
        self._windows.clear()
        self._oldest.clear()
        self._indexed.clear()
        self._by_oldest.clear()
        self._last_emitted.clear()
        self._suffixes.clear()
        self._lateness = 0
        self._previous = None

    def forget(self, key: str) -> None:
        """Drop ``key`` and its entries, its tree freed at once (``FiBA.clear``); the stream
        time stays. O(nodes of the key's tree)."""
        del self._oldest[key]
        self._by_oldest.remove((self._indexed.pop(key), key))
        self._windows.pop(key).clear()
        self._last_emitted.pop(key, None)
        self._suffixes.pop(key, None)

    def load(self, key: str, pairs: Sequence[tuple[int, Any]]) -> None:
        """Set ``key``'s entries (sorted by time, partials; no entries: nothing) with an O(n)
        bulk build; the stream time becomes at least the youngest of them."""
        if not pairs:
            return
        if key in self._windows:
            self.forget(key)
        self._windows[key] = self._type.from_sorted(self.config.partial_monoid, pairs)
        self._set_oldest(key, pairs[0][0])
        youngest = pairs[-1][0]
        if self.stream_time is None or youngest > self.stream_time:
            self.stream_time = youngest

    def resume(
        self,
        stream_time: int | None,
        previous: int | None,
        keys: Iterable[tuple[str, Sequence[tuple[int, Any]], int]],
        last_emitted: Mapping[str, tuple],
    ) -> None:
        """Take over the state of another kernel of the same config (the native one, when a
        value needs the Python path): per key in key order its entries and its time in the
        sweep index, the stream time, ``P`` and ``emit=changes``' last records. O(entries)."""
        self.clear()
        for key, pairs, indexed in keys:
            self.load(key, pairs)
            self._by_oldest.remove((self._indexed[key], key))
            self._index(key, indexed)
        self.stream_time = stream_time
        self._previous = previous
        self._last_emitted.update(last_emitted)

    # --- events -------------------------------------------------------------------------------

    def admit(self, ts: int) -> int:
        """The window time of event time ``ts``, or ``Rejected`` (late/future) at ``S`` and the
        worker's clock."""
        t = self.config.window_time(ts)
        s = self.stream_time
        config = self.config
        skew = config.max_wall_clock_skew
        wall = None if skew is None else int(self._clock() * 1000) + skew
        previous = self._previous
        self._previous = t
        if (s is not None and t < s - config.retention) or (wall is not None and t > wall):
            raise self._rejection(t, wall, previous)
        if self._too_far_ahead(t, s, previous):
            raise self._rejection(t, wall, previous)
        return t

    def _too_far_ahead(self, t: int, s: int | None, previous: int | None) -> bool:
        """Whether ``t`` breaks ``max_future_skew`` at stream time ``s`` after an event at
        ``previous`` (see the module docstring)."""
        max_skew = self.config.max_future_skew
        if max_skew is None or s is None or t <= s + max_skew:
            return False
        return t > (s if previous is None else previous) + max_skew

    def accept(self, key: str, ts: int, value: Any) -> Accepted:
        """Apply one event (``emit`` = ``event`` or ``changes``); ``Rejected`` if it is refused.
        ``apply_one``, then the key's record (``record_of``)."""
        accepted = self.apply_one(key, ts, value)
        return Accepted(
            key, accepted.time, accepted.partial, accepted.evicted, self.record_of(key, ts)
        )

    def apply_one(self, key: str, ts: int, value: Any) -> Accepted:
        """The state part of ``accept`` (its ``record`` is ``None``): admit, insert, evict the
        key's expired entries. A caller that encodes the key's windows itself asks
        ``lowered_windows`` next."""
        t = self.admit(ts)
        partial = self.config.lift(value)
        self._advance(t)
        window = self._window(key)
        youngest = window.youngest()
        window.insert(t, partial)
        self._tell_suffixes(key, [t], [partial], youngest)
        if t < self._oldest[key]:
            self._set_oldest(key, t)
        evicted = self._evict_expired(key)
        # a new youngest time holds just this event's partial (no lookup)
        stored = partial if youngest is None or t > youngest else window.get(t)
        return Accepted(key, t, stored, evicted, None)

    def accept_batch(self, events: Sequence[tuple[str, int, Any]]) -> BatchResult:
        """Apply ``(key, ts, value)`` events with one bulk insert and evict per touched key.

        Decisions (late, future, bad value) are made in input order as ``accept`` would make
        them; each ``Accepted.partial`` is the key's partial at that time right after that event
        (what a store must persist to resume exactly after it). Records: one per touched key,
        all windows at the stream time after the batch (``event_ts`` = the key's last event).
        The same as ``apply`` on consecutive slices of ``events``, then ``evict_expired`` and
        ``record_of`` per touched key (what the worker does, without an object per event).
        """
        return accepted_batch(self, events)

    def apply_events(
        self,
        events: Sequence[tuple[str, int, Any]],
        offsets: Sequence[int],
        partition: int,
        encoder: Any,
    ) -> AppliedEvents:
        """``emit=event`` for a slice of ``(key, ts, value)`` events with their input
        ``offsets`` (``applied_events``): each applied as ``apply_one`` applies it, its
        record encoded by ``encoder`` (an ``agents.records.AggregateEncoder`` or its native
        twin) answering input ``partition`` at its offset. O(``apply_one`` +
        ``lowered_windows``) per event."""
        return applied_events(self, events, offsets, partition, encoder)

    def apply(self, events: Iterable[tuple[str, int, Any]], tags: Iterable[Any]) -> AppliedBatch:
        """Apply ``(key, ts, value)`` events, each with its ``tag`` (the worker: its input
        offset), columnar: admission and lift in one pass in input order (the decisions
        ``accept`` would make, with the worker's clock read once per call), then per touched
        key one sort by time, one ``bulk_insert`` and one notice to its kept windows. No
        eviction (``evict_expired`` per touched key, once per batch) and no records
        (``record_of``); after the call the state is the one of the events so far applied one
        by one, so a batch may be applied in slices with other work (queries) in between.

        Returns the accepted events' effects ``(tag, key, time, partial)`` in input order,
        ``partial`` being the key's partial at ``time`` right after that event (what a store
        must persist to resume exactly after it), the rejections ``(tag, Rejected)``, and per
        touched key its last accepted ``(tag, ts)``. O(n) Python steps plus per key
        O(m log m) for the sort (C) and the bulk insert's cost; an entry already at an
        inserted time costs one lookup, O(log d), and a combine.
        """
        config = self.config
        retention, max_skew = config.retention, config.max_future_skew
        resolution = config.resolution
        skew = config.max_wall_clock_skew
        wall = None if skew is None else int(self._clock() * 1000) + skew
        ceiling = _NEVER if wall is None else wall
        lift_number, lift = config.composed.lift, config.lift
        s = self.stream_time
        previous = s if self._previous is None else self._previous
        low = -_NEVER if s is None else s - retention
        high = ceiling if s is None or max_skew is None else min(s + max_skew, ceiling)
        lateness = self._lateness
        effects: list[tuple[Any, str, int, Any]] = []
        rejected: list[tuple[Any, Rejected]] = []
        last: dict[str, tuple[Any, int]] = {}
        groups: dict[str, tuple[list[int], list[Any], list[int]]] = {}
        for tag, (key, ts, value) in zip(tags, events, strict=True):
            t = ts if resolution is None else ts - ts % resolution
            if not low <= t <= high and (
                # beyond S + max_future_skew only: still in if the previous event confirms it
                t < low or t > ceiling or previous is None or t > previous + max_skew  # type: ignore[operator]
            ):
                rejected.append((tag, self._rejection(t, wall, previous)))
                previous = t
                continue
            previous = t
            try:
                # a number needs no combine check (``WindowConfig.lift``)
                partial = lift_number(value) if type(value) in _NUMBERS else lift(value)
            except Rejected as bad:
                rejected.append((tag, bad))
                continue
            except LIFT_ERRORS as exc:
                rejected.append((tag, cannot_aggregate(value, exc)))
                continue
            if s is None or t > s:
                s = self.stream_time = t
                low = t - retention
                high = ceiling if max_skew is None else min(t + max_skew, ceiling)
            elif s - t > lateness:
                lateness = self._lateness = s - t
            group = groups.get(key)
            if group is None:
                group = groups[key] = ([], [], [])
            group[0].append(t)
            group[1].append(partial)
            group[2].append(len(effects))
            effects.append((tag, key, t, partial))
            last[key] = (tag, ts)
        if previous is not None:
            self._previous = previous
        for key, (times, partials, slots) in groups.items():
            self._insert_group(key, times, partials, slots, effects)
        return AppliedBatch(effects, rejected, last)

    def _rejection(self, t: int, wall: int | None, previous: int | None) -> Rejected:
        """Why window time ``t`` is refused at the stream time after an event at ``previous``
        (``wall``: the worker's clock plus ``max_wall_clock_skew``, as read for the batch)."""
        s, config = self.stream_time, self.config
        if s is not None and t < s - config.retention:
            return Rejected(
                REASON_LATE, f"time {t} < stream time {s} - retention {config.retention}"
            )
        if (wall is None or t <= wall) and self._too_far_ahead(t, s, previous):
            return Rejected(
                REASON_FUTURE,
                f"time {t} > stream time {s} + max_future_skew {config.max_future_skew}, "
                f"and > the previous event's time {s if previous is None else previous} + "
                "max_future_skew",
            )
        return Rejected(
            REASON_FUTURE,
            f"time {t} > the worker's clock {wall - config.max_wall_clock_skew} + "  # type: ignore[operator]
            f"max_wall_clock_skew {config.max_wall_clock_skew}",
        )

    def _insert_group(
        self,
        key: str,
        times: list[int],
        partials: list[Any],
        slots: list[int],
        effects: list[tuple[Any, str, int, Any]],
    ) -> None:
        """Insert one key's accepted events of a batch (``times``, ``partials`` in input order;
        ``slots``: their places in ``effects``) with one ``bulk_insert``, fixing the effects of
        those landing on a time already present (in the key's window, or earlier in the batch):
        their partial after them is the combined one."""
        window = self._window(key)
        youngest = window.youngest()
        if len(times) > 1 and times != sorted(times):
            order = sorted(range(len(times)), key=times.__getitem__)  # stable: equal times keep
            times = [times[i] for i in order]  # their input order
            partials = [partials[i] for i in order]
            slots = [slots[i] for i in order]
        present = 0 if youngest is None else bisect_right(times, youngest)
        if present or len(set(times)) < len(times):
            combine = self.config.composed.combine
            previous_t, after = None, None
            for i, t in enumerate(times):
                if t == previous_t:
                    after = combine(after, partials[i])
                else:
                    before = window.get(t) if i < present else None
                    after = partials[i] if before is None else combine(before, partials[i])
                    previous_t = t
                    if before is None:
                        continue
                slot = slots[i]
                effects[slot] = (effects[slot][0], key, t, after)
        window.bulk_insert(list(zip(times, partials, strict=True)))
        self._tell_suffixes(key, times, partials, youngest)
        if times[0] < self._oldest[key]:
            self._set_oldest(key, times[0])

    def evict_expired(self, key: str) -> tuple[int, ...]:
        """Evict ``key``'s entries older than ``S - R`` (as lazy eviction does); their times.
        O(log m) for ``m`` evicted entries."""
        return self._evict_expired(key) if key in self._windows else ()

    # --- retention ----------------------------------------------------------------------------

    def sweep(self) -> list[tuple[str, tuple[int, ...]]]:
        """Evict every key's entries older than ``S - R``; keys left empty are forgotten.

        Returns ``(key, evicted times)`` per cleaned key. Only keys indexed at an expired time
        are visited (through the sorted index): those whose oldest entry is expired, O(log m +
        log K) each, and those that lazy eviction cleaned since they were indexed, O(log K)
        each; every key visited and kept is indexed at its oldest time again.
        """
        if self.stream_time is None:
            return []
        horizon = self.stream_time - self.config.retention
        cleaned: list[tuple[str, tuple[int, ...]]] = []
        by_oldest = self._by_oldest
        while by_oldest and by_oldest[0][0] < horizon:
            indexed, key = by_oldest[0]
            evicted = self._evict_expired(key)
            if evicted:
                cleaned.append((key, evicted))
            if key in self._indexed:  # kept: its oldest time is not expired
                by_oldest.remove((indexed, key))
                self._index(key, self._oldest[key])
        return cleaned

    def _evict_expired(self, key: str) -> tuple[int, ...]:
        assert self.stream_time is not None
        horizon = self.stream_time - self.config.retention
        if self._oldest[key] >= horizon:
            return ()
        window = self._windows[key]
        # the usual case, one or a few entries expired: evicted one by one at the old end (O(1)
        # amortized each), no walk of the tree; beyond SINGLE_EVICTS, the rest in bulk
        evicted: list[int] = []
        oldest = window.oldest()
        while oldest is not None and oldest < horizon and len(evicted) < SINGLE_EVICTS:
            window.evict(oldest)
            evicted.append(oldest)
            oldest = window.oldest()
        if oldest is not None and oldest < horizon:
            evicted.extend(t for t, _ in takewhile(lambda entry: entry[0] < horizon, window))
            window.bulk_evict(horizon - 1)
        times = tuple(evicted)
        if len(window):
            self._oldest[key] = window.oldest()  # later: its index stays a lower bound
        else:
            self.forget(key)
        return times

    def _advance(self, t: int) -> None:
        """Account for an accepted event at window time ``t``: the stream time, or the
        lateness."""
        s = self.stream_time
        if s is None or t > s:
            self.stream_time = t
        elif s - t > self._lateness:
            self._lateness = s - t

    def _tell_suffixes(
        self, key: str, times: list[int], partials: list[Any], youngest: int | None
    ) -> None:
        """Tell ``key``'s kept windows of the ``(times[i], partials[i])`` just inserted (sorted
        by time; ``youngest``: the key's youngest time before them, ``None`` if it had none)."""
        suffixes = self._suffixes.get(key)
        if suffixes is not None:
            for suffix in suffixes:
                if suffix is not None:
                    suffix.inserted_many(times, partials, youngest)

    def _window(self, key: str) -> FiBA:
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = self._type(self.config.partial_monoid)
            self._oldest[key] = _NEVER
            self._index(key, _NEVER)
        return window

    def _set_oldest(self, key: str, t: int) -> None:
        """``key``'s oldest time is now ``t``: earlier than before (an insert), or its first."""
        self._oldest[key] = t
        indexed = self._indexed.get(key)
        if indexed is None or t < indexed:
            if indexed is not None:
                self._by_oldest.remove((indexed, key))
            self._index(key, t)

    def _index(self, key: str, t: int) -> None:
        self._indexed[key] = t
        self._by_oldest.add((t, key))

    # --- results ------------------------------------------------------------------------------

    def windows_of(self, key: str) -> dict[str, WindowResult]:
        """Every configured window of ``key`` at the stream time (``{}`` before any event).

        Every window reaching back to the key's oldest entry shares one O(1) whole-window
        query; the others smaller than the retention come from the key's ``WindowSuffix``
        (O(1) amortized in order), larger ones from a range query, O(log n)."""
        result = self._result
        return {name: result(start, end, low) for name, start, end, low in self._lowered_of(key)}

    def windows_ending(self, key: str, end: int) -> dict[str, WindowResult]:
        """Every configured window ``[end - w, end]`` of ``key`` (``window_end = event_time``),
        over the key's entries present now and retained (``t >= S - R``): every event of
        that span accepted so far, whenever it arrived. One range query per window,
        O(W log n); ``{}`` before any event."""
        result = self._result
        return {
            name: result(start, stop, low)
            for name, start, stop, low in self._lowered_ending(key, end)
        }

    def lowered_windows(self, key: str, event_ts: int) -> list[LoweredWindow]:
        """The windows ``record_of(key, event_ts)`` reports, without building its record: per
        configured window ``(name, start, end, lowered)``, ``lowered`` being the composed
        monoid's lowered result (every aggregation and ``count``; possibly shared, never to
        be changed); ``[]`` before any event. For an encoder that writes the record itself
        (``agents.records.AggregateEncoder``). Same cost as ``record_of``."""
        if self.config.window_end == EVENT_TIME:
            return self._lowered_ending(key, self.config.window_time(event_ts))
        return self._lowered_of(key)

    def _lowered_of(self, key: str) -> list[LoweredWindow]:
        s = self.stream_time
        if s is None:
            return []
        window = self._windows.get(key)
        if window is None:
            return [(name, s - size, s, self._empty) for name, size in self._sizes]
        oldest = window.oldest()
        covers_youngest = window.youngest() <= s
        whole = None
        results = []
        for index, (name, size) in enumerate(self._sizes):
            start = s - size
            if start <= oldest and covers_youngest:
                if whole is None:
                    whole = window.query()
                lowered = whole
            elif size < self.config.retention:
                suffix = self._suffix(key, index, size)
                lowered = self._lower(suffix.aggregate(window, start, s, self._lateness))
            else:
                lowered = window.query_range(start, s)
            results.append((name, start, s, lowered))
        return results

    def _lowered_ending(self, key: str, end: int) -> list[LoweredWindow]:
        s = self.stream_time
        if s is None:
            return []
        window = self._windows.get(key)
        horizon = s - self.config.retention
        lowered = self._lowered
        return [
            (name, end - size, end, lowered(window, max(end - size, horizon), end))
            for name, size in self._sizes
        ]

    def _suffix(self, key: str, index: int, size: int) -> WindowSuffix:
        suffixes = self._suffixes.get(key)
        if suffixes is None:
            suffixes = self._suffixes[key] = [None] * len(self._sizes)
        suffix = suffixes[index]
        if suffix is None:
            suffix = suffixes[index] = WindowSuffix(self.config.composed, size)
        return suffix

    def query_range(self, key: str, t_from: int, t_to: int) -> tuple[int, dict[str, Any]]:
        """``(count, aggregates)`` of ``key``'s retained events with ``t_from <= t <= t_to``.

        Bounds are window times (with panes, a pane counts when its start is in range).
        An unknown key, an empty or inverted range give ``0`` and the empty aggregates.
        """
        s = self.stream_time
        window = self._windows.get(key)
        if s is None or window is None:
            lowered = self._empty
        else:
            lowered = self._lowered(window, max(t_from, s - self.config.retention), t_to)
        return lowered[COUNT], {name: lowered[name] for name in self.config.aggregations}

    def _lowered(self, window: FiBA | None, t_from: int, t_to: int) -> dict[str, Any]:
        if window is None or t_to < t_from:
            return self._empty
        if t_from <= window.oldest() and t_to >= window.youngest():
            return window.query()
        return window.query_range(t_from, t_to)

    def _result(self, start: int, end: int, lowered: dict[str, Any]) -> WindowResult:
        return window_result(self.config, self._lowered_is_aggregates, start, end, lowered)

    def record_of(self, key: str, event_ts: int) -> KeyAggregates | None:
        """The record of ``key``: every window at the stream time, or (``window_end =
        event_time``) ending at ``event_ts``'s window time, ``event_ts`` being the event that
        triggered it; with ``emit = "changes"``, ``None`` when nothing changed since
        the key's previous record (which this call then becomes). O(W log n)."""
        assert self.stream_time is not None
        if self.config.window_end == EVENT_TIME:
            windows = self.windows_ending(key, self.config.window_time(event_ts))
        else:
            windows = self.windows_of(key)
        return emitted_record(
            key, event_ts, self.stream_time, windows, self.emit, self._last_emitted
        )


def accepted_batch(windows: Any, events: Sequence[tuple[str, int, Any]]) -> BatchResult:
    """``accept_batch`` of ``windows`` (a ``KeyWindows`` or its native twin): ``apply`` with
    each event's index as its tag, then per touched key ``evict_expired`` and ``record_of``."""
    applied = windows.apply(events, range(len(events)))
    outcomes: list[Accepted | Rejected | None] = [None] * len(events)
    for index, key, t, partial in applied.effects:
        outcomes[index] = Accepted(key, t, partial, (), None)
    for index, rejected in applied.rejected:
        outcomes[index] = rejected
    result = BatchResult(outcomes=outcomes)  # type: ignore[arg-type]  # every slot set
    for key, (_, event_ts) in applied.last.items():
        result.evicted[key] = windows.evict_expired(key)
        result.last_ts[key] = event_ts
        record = windows.record_of(key, event_ts)
        if record is not None:
            result.records.append(record)
    return result


def applied_events(
    windows: Any,
    events: Sequence[tuple[str, int, Any]],
    offsets: Sequence[int],
    partition: int,
    encoder: Any,
) -> AppliedEvents:
    """``apply_events`` of ``windows`` (a ``KeyWindows``, or its native twin's Python rest):
    per event in order ``apply_one``, then for an accepted one ``encoder.encode`` of its key's
    ``lowered_windows`` at the stream time after it."""
    effects: list[tuple[int, str, int, Any, tuple[int, ...]]] = []
    keys: list[bytes] = []
    stamps: list[int] = []
    records: list[bytes] = []
    rejected: list[tuple[int, Rejected]] = []
    apply_one, lowered_windows, encode = windows.apply_one, windows.lowered_windows, encoder.encode
    for (key, ts, value), offset in zip(events, offsets, strict=True):
        try:
            accepted = apply_one(key, ts, value)
        except Rejected as refused:
            rejected.append((offset, refused))
            continue
        effects.append((offset, key, accepted.time, accepted.partial, accepted.evicted))
        keys.append(key.encode())
        stamps.append(ts)
        lowered = lowered_windows(key, ts)
        records.append(encode(key, ts, windows.stream_time, lowered, partition, offset))
    return AppliedEvents(effects, keys, stamps, records, rejected)


def window_result(
    config: WindowConfig,
    lowered_is_aggregates: bool,
    start: int,
    end: int,
    lowered: dict[str, Any],
) -> WindowResult:
    """The ``WindowResult`` of one window from the composed monoid's ``lowered`` result over it
    (copied: it may be shared, as the whole window's or the empty one)."""
    if lowered_is_aggregates:
        aggregates = lowered.copy()
    else:
        aggregates = {name: lowered[name] for name in config.aggregations}
    return WindowResult(start, end, lowered[COUNT], aggregates)


def emitted_record(
    key: str,
    event_ts: int,
    stream_time: int,
    windows: dict[str, WindowResult],
    emit: str,
    last_emitted: dict[str, tuple],
) -> KeyAggregates | None:
    """The record of ``key``'s ``windows``; with ``emit = "changes"``, ``None`` when no
    window's count or aggregates changed since the key's previous record in ``last_emitted``
    (which this one then becomes)."""
    if emit == "changes":
        fingerprint = tuple((w.count, _frozen(w.aggregates)) for w in windows.values())
        if last_emitted.get(key) == fingerprint:
            return None
        last_emitted[key] = fingerprint
    return KeyAggregates(key=key, event_ts=event_ts, stream_time=stream_time, windows=windows)


_NEVER = 2**63

SINGLE_EVICTS = 8
"""Expired entries of a key that lazy eviction removes one by one at the old end before it
evicts the rest with one ``bulk_evict`` (which walks the tree for their times first)."""

_NUMBERS = (int, float)
"""Value types lifted without ``WindowConfig.lift``'s combine check (``bool`` is not one)."""


def _frozen(aggregates: dict[str, Any]) -> tuple:
    return tuple((name, repr(value)) for name, value in aggregates.items())
