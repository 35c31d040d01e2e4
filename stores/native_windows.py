"""The per-key windows of one partition on the native kernel (``stores._native.KeyWindows``).

:class:`NativeKeyWindows` has the API and the semantics of
:class:`stores.key_windows.KeyWindows` and returns its types (``AppliedBatch``, ``Accepted``,
``Rejected``, ``KeyAggregates``, ``WindowResult``); a batch crosses the FFI in one call,
partials cross as the Python compose's own tuples, and ``lower`` is the Python compose's, so
lowered results are the Python ones (floats to the last bits where the combine order differs:
windows come from the FiBA's range query instead of ``stores.window_suffixes``);
``apply_events`` writes its records from the native partials, lowered as the Python built-ins
lower them (``src/event_records.rs``); ``apply_fetched`` and ``apply_fetched_events`` parse
natively fetched records in the kernel. Ints within int64, floats and None lift natively; a
value the Python lift refuses is refused with its ``Rejected``; a value it takes but a native
partial cannot hold (a string for ``max``, a bool, an object for ``first``, an int beyond int64)
moves the partition to a Python ``KeyWindows`` with its whole state before that call, so results
stay the Python path's; so do ints whose sums might leave int64 (``src/overflow.rs`` checks each
batch, event and load). :func:`new_key_windows` picks the kernel. Design: docs/native-core.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import stores
from stores.key_windows import (
    COUNT,
    EVENT_TIME,
    Accepted,
    AppliedBatch,
    AppliedEvents,
    BatchResult,
    KeyAggregates,
    KeyWindows,
    LoweredWindow,
    Rejected,
    WindowConfig,
    WindowResult,
    accepted_batch,
    emitted_record,
    window_result,
)
from stores.native_fiba import native_kinds
from stores.restored_entries import MARSHAL_FORMAT

if TYPE_CHECKING:
    from stores.window_store import PartialCodec

_DELEGATED = (
    "apply",
    "apply_one",
    "apply_events",
    "accept",
    "accept_batch",
    "evict_expired",
    "sweep",
    "lowered_windows",
    "windows_of",
    "windows_ending",
    "record_of",
    "query_range",
    "load",
    "restore",
    "clear",
    "forget",
    "entries",
    "entry_count",
)
"""The methods an instance hands to its Python ``KeyWindows`` once it has moved there."""


class FetchedEvents(NamedTuple):
    """What ``NativeKeyWindows.apply_fetched_events`` did, per event as ``apply_events``:
    ``effects`` one native ``Effects`` buffer (the partials the store codec's bytes),
    ``records`` one native ``KeyedRecords`` buffer of ``(key bytes, record bytes, event
    time)`` per accepted event (``KeyedOutputs.add_records`` queues it), ``input_ts`` their
    input records' Kafka timestamps, ``rejected``, ``(offset, BadEvent)`` per malformed
    record (``bad``) and ``rest``: None, or the offset of the first record left to the
    caller."""

    effects: Sequence[tuple[int, str, int, bytes, tuple[int, ...]]]
    records: Sequence[tuple[bytes, bytes, int]]
    input_ts: list[int]
    rejected: list[tuple[int, Rejected]]
    bad: list[tuple[int, Any]]
    rest: int | None


def native_windows_kinds(config: WindowConfig) -> list[str] | None:
    """The native parts of ``config``'s composed monoid, or None when some part has none (or
    the native core is not loaded)."""
    if stores.native() is None or config.parts is None:
        return None
    return native_kinds(config.parts)


def new_key_windows(
    config: WindowConfig, emit: str = "event", clock: Callable[[], float] = time.time
) -> Any:
    """The windows of one partition: the native kernel when the native core is loaded and every
    aggregation has a native twin, else the Python ``KeyWindows`` (``FIBA_PURE_PYTHON=1``, a
    custom monoid, ``collect``, ``argmax``...)."""
    if native_windows_kinds(config) is None:
        return KeyWindows(config, emit=emit, clock=clock)
    return NativeKeyWindows(config, emit=emit, clock=clock)


class NativeKeyWindows:
    """The per-key windows of one partition on the native kernel (see the module doc)."""

    def __init__(
        self,
        config: WindowConfig,
        emit: str = "event",
        clock: Callable[[], float] = time.time,
        min_arity: int = 4,
    ) -> None:
        kinds = native_windows_kinds(config)
        if kinds is None:
            raise ValueError("no native twin for these aggregations (or no native core)")
        self.config = config
        self.emit = emit
        self._clock = clock
        self._skew = config.max_wall_clock_skew
        composed = config.composed
        self._empty = composed.lower(composed.identity)
        self._core = stores.native().KeyWindows(  # type: ignore[union-attr]  # checked above
            kinds,
            [spec.name for spec in config.windows],
            [spec.size_ms for spec in config.windows],
            config.retention,
            config.max_future_skew,
            config.max_wall_clock_skew,
            config.resolution,
            config.window_end == EVENT_TIME,
            composed.lower,
            config.lift,
            Rejected,
            self._empty,
            min_arity,
            list(config.parts),  # type: ignore[arg-type]  # checked by native_windows_kinds
        )
        self._python: KeyWindows | None = None
        self._last_emitted: dict[str, tuple] = {}
        self._lowered_is_aggregates = config.lowered_is_aggregates

    # --- the Python path, when a value needs it -------------------------------------------------

    @property
    def native(self) -> bool:
        """Whether the state is still in the native kernel."""
        return self._python is None

    def _move_to_python(self) -> KeyWindows:
        """Hand the whole state to a Python ``KeyWindows`` and use it from now on. O(entries)."""
        core = self._core
        python = KeyWindows(self.config, emit=self.emit, clock=self._clock)
        keys = core.keys()
        python.resume(
            core.stream_time,
            core.previous,
            ((key, core.entries(key), core.indexed(key)) for key in keys),
            self._last_emitted,
        )
        core.clear()
        self._python = python
        for name in _DELEGATED:
            setattr(self, name, getattr(python, name))
        return python

    # --- state ------------------------------------------------------------------------------

    @property
    def stream_time(self) -> int | None:
        python = self._python
        return self._core.stream_time if python is None else python.stream_time

    @stream_time.setter
    def stream_time(self, value: int | None) -> None:
        if self._python is None:
            self._core.stream_time = value
        else:
            self._python.stream_time = value

    def __len__(self) -> int:
        """Number of keys holding at least one entry."""
        return len(self._core) if self._python is None else len(self._python)

    def __iter__(self) -> Iterator[str]:
        """The keys holding at least one entry (in the order they were created)."""
        return iter(self._core.keys()) if self._python is None else iter(self._python)

    def __contains__(self, key: object) -> bool:
        return key in (self._core if self._python is None else self._python)

    def entry_count(self) -> int:
        """Number of entries over all keys (retained or not yet swept). O(keys)."""
        return self._core.entry_count()

    def entries(self, key: str) -> list[tuple[int, Any]]:
        """The ``(time, partial)`` entries of ``key`` in time order."""
        return self._core.entries(key)

    def restore(
        self, windows: Mapping[str, Sequence[tuple[int, Any]]]
    ) -> list[tuple[str, tuple[int, ...]]]:
        """Replace the state by ``windows`` (key -> sorted entries); ``sweep``'s result."""
        self.clear()
        for key, pairs in windows.items():
            self.load(key, pairs)
        return self.sweep()

    def clear(self) -> None:
        """Forget every key, the stream time and ``P``."""
        self._core.clear()
        self._last_emitted.clear()

    def forget(self, key: str) -> None:
        """Drop ``key`` and its entries (``KeyError`` if absent); the stream time stays."""
        self._core.forget(key)
        self._last_emitted.pop(key, None)

    def load(self, key: str, pairs: Sequence[tuple[int, Any]]) -> None:
        """Set ``key``'s entries (sorted ``(time, partial)``); a partial the native kernel
        cannot hold moves the state to the Python path, which loads it (or refuses it)."""
        try:
            self._core.load(key, pairs)
        except (TypeError, OverflowError):
            self._move_to_python().load(key, pairs)
            return
        self._last_emitted.pop(key, None)

    # --- events -----------------------------------------------------------------------------

    def _now(self) -> int | None:
        return None if self._skew is None else int(self._clock() * 1000)

    def apply(self, events: Iterable[tuple[str, int, Any]], tags: Iterable[Any]) -> AppliedBatch:
        """``KeyWindows.apply``: one call into the kernel for the whole batch."""
        if not isinstance(events, list):
            events = list(events)
        if not isinstance(tags, list | range):
            tags = list(tags)
        applied = self._core.apply(events, tags, self._now())
        if applied is None:
            return self._move_to_python().apply(events, tags)
        return AppliedBatch(*applied)

    def apply_encoded(
        self, events: Iterable[tuple[str, int, Any]], tags: Iterable[Any], codec: PartialCodec
    ) -> AppliedBatch:
        """``apply``, each effect's partial given as ``codec.encode(partial)``, the bytes the
        window store writes (``WindowStore.record_many(..., encoded=True)``): written by the
        kernel with no Python partial made when ``codec`` is the ``marshal`` one
        (``stores/native/src/store_writes.rs``, byte for byte ``MarshalStateCodec.encode``),
        else (another codec, or the state moved to the Python path) by ``codec.encode``."""
        if not isinstance(events, list):
            events = list(events)
        if not isinstance(tags, list | range):
            tags = list(tags)
        if self._python is not None:
            applied = self._python.apply(events, tags)
        elif codec.format != MARSHAL_FORMAT:
            applied = self.apply(events, tags)
        else:
            encoded = self._core.apply(events, tags, self._now(), True)
            if encoded is not None:
                return AppliedBatch(*encoded)
            applied = self._move_to_python().apply(events, tags)
        encode = codec.encode
        effects = [(tag, key, t, encode(partial)) for tag, key, t, partial in applied.effects]
        return AppliedBatch(effects, applied.rejected, applied.last)

    def apply_fetched(
        self, chunk: Any, parser: Any, codec: PartialCodec
    ) -> tuple[AppliedBatch, list[tuple[int, Any]]] | None:
        """``apply_encoded`` of the events that the native ``parser`` (``stores._native.
        EventParser``, as ``EventParser.parse_many`` would) reads from the records of the
        fetched ``chunk`` (``stores._native.FetchedRecords``), in one call, with no Python
        object per event, the offsets as tags: the batch (its effects one
        ``stores._native.Effects`` buffer, a sequence of ``(offset, key, time, bytes)`` that
        ``WindowStore.record_many`` reads natively) and ``(offset, BadEvent)`` per malformed
        record. None, with nothing changed, where the caller must
        parse and ``apply_encoded`` instead: ``chunk`` is not a ``FetchedRecords``, ``parser``
        is None, ``codec`` is not the ``marshal`` one, or the state is (or must move) on the
        Python path."""
        if not self._takes_fetched(chunk, parser, codec):
            return None
        applied = self._core.apply_fetched(chunk, parser, self._now())
        if applied is None:
            return None
        effects, rejected, last, bad = applied
        return AppliedBatch(effects, rejected, last), bad

    def _takes_fetched(self, chunk: Any, parser: Any, codec: PartialCodec) -> bool:
        """Whether the kernel can parse and apply ``chunk`` itself: a native ``FetchedRecords``
        with a native ``parser``, the ``marshal`` codec, and the state on the native path."""
        native = stores.native()
        return (
            self._python is None
            and parser is not None
            and codec.format == MARSHAL_FORMAT
            and native is not None
            and isinstance(chunk, native.FetchedRecords)
        )

    def apply_fetched_events(
        self, chunk: Any, parser: Any, codec: PartialCodec, partition: int, encoder: Any
    ) -> FetchedEvents | None:
        """``apply_events`` of the events that the native ``parser`` reads from the records
        of the fetched ``chunk`` (as ``apply_fetched`` does), in one call, with no Python
        object per event but its input timestamp: the effects one ``stores._native.Effects``
        buffer of ``(offset, key, time, codec bytes, evicted)`` (what
        ``WindowStore.record_many(..., encoded=True)`` reads natively), the records one
        ``KeyedRecords`` buffer, and ``rest``:
        None, or the offset from which the records are left to the caller's path (parse and
        ``apply_events``: a value needs the Python path; nothing changed from there). None,
        with nothing changed, where ``apply_fetched`` answers None for ``chunk``, ``parser``
        and ``codec``."""
        if not self._takes_fetched(chunk, parser, codec):
            return None
        return FetchedEvents(
            *self._core.apply_fetched_events(chunk, parser, partition, encoder, self._now())
        )

    def apply_one(self, key: str, ts: int, value: Any) -> Accepted:
        """``KeyWindows.apply_one``: admit, insert, evict the key's expired entries."""
        outcome = self._core.apply_one(key, ts, value, self._now())
        if outcome is None:
            return self._move_to_python().apply_one(key, ts, value)
        t, partial, evicted = outcome
        return Accepted(key, t, partial, evicted, None)

    def apply_events(
        self,
        events: Sequence[tuple[str, int, Any]],
        offsets: Sequence[int],
        partition: int,
        encoder: Any,
    ) -> AppliedEvents:
        """``KeyWindows.apply_events`` in one call into the kernel (the clock read once for
        the call), which encodes the records with ``encoder`` (the native
        ``AggregateEncoder`` in Rust); from an event whose value needs the Python path on,
        the rest of the slice runs there."""
        if not isinstance(events, list):
            events = list(events)
        if not isinstance(offsets, list):
            offsets = list(offsets)
        effects, keys, stamps, records, rejected, done = self._core.apply_events(
            events, offsets, partition, encoder, self._now()
        )
        if done < len(events):
            rest = self._move_to_python().apply_events(
                events[done:], offsets[done:], partition, encoder
            )
            effects += rest.effects
            keys += rest.keys
            stamps += rest.event_ts
            records += rest.records
            rejected += rest.rejected
        return AppliedEvents(effects, keys, stamps, records, rejected)

    def accept(self, key: str, ts: int, value: Any) -> Accepted:
        """``KeyWindows.accept``: ``apply_one``, then the key's record."""
        accepted = self.apply_one(key, ts, value)  # then record_of: the Python one if it moved
        return Accepted(
            key, accepted.time, accepted.partial, accepted.evicted, self.record_of(key, ts)
        )

    def accept_batch(self, events: Sequence[tuple[str, int, Any]]) -> BatchResult:
        """``KeyWindows.accept_batch``: ``apply``, then per touched key its eviction and
        record."""
        return accepted_batch(self, events)

    def evict_expired(self, key: str) -> tuple[int, ...]:
        """Evict ``key``'s entries older than ``S - R``; their times."""
        evicted = self._core.evict_expired(key)
        if evicted and key not in self._core:
            self._last_emitted.pop(key, None)
        return evicted

    def sweep(self) -> list[tuple[str, tuple[int, ...]]]:
        """Evict every key's expired entries (``KeyWindows.sweep``)."""
        cleaned = self._core.sweep()
        core, last_emitted = self._core, self._last_emitted
        if last_emitted:
            for key, _ in cleaned:
                if key not in core:
                    last_emitted.pop(key, None)
        return cleaned

    # --- results ----------------------------------------------------------------------------

    def lowered_windows(self, key: str, event_ts: int) -> list[LoweredWindow]:
        """``KeyWindows.lowered_windows``: per window ``(name, start, end, lowered)``."""
        return self._core.lowered_windows(key, event_ts)

    def windows_of(self, key: str) -> dict[str, WindowResult]:
        """Every configured window of ``key`` at the stream time."""
        result = self._result
        return {
            name: result(start, end, low) for name, start, end, low in self._core.lowered_of(key)
        }

    def windows_ending(self, key: str, end: int) -> dict[str, WindowResult]:
        """Every configured window ``[end - w, end]`` of ``key``."""
        result = self._result
        return {
            name: result(start, stop, low)
            for name, start, stop, low in self._core.lowered_ending(key, end)
        }

    def query_range(self, key: str, t_from: int, t_to: int) -> tuple[int, dict[str, Any]]:
        """``(count, aggregates)`` of ``key``'s retained events with ``t_from <= t <= t_to``."""
        lowered = self._core.query_range(key, t_from, t_to)
        return lowered[COUNT], {name: lowered[name] for name in self.config.aggregations}

    def _result(self, start: int, end: int, lowered: dict[str, Any]) -> WindowResult:
        return window_result(self.config, self._lowered_is_aggregates, start, end, lowered)

    def record_of(self, key: str, event_ts: int) -> KeyAggregates | None:
        """``KeyWindows.record_of``: the key's record, ``None`` under ``emit=changes`` when
        nothing changed since its previous one."""
        stream_time = self._core.stream_time
        assert stream_time is not None
        if self.config.window_end == EVENT_TIME:
            windows = self.windows_ending(key, self.config.window_time(event_ts))
        else:
            windows = self.windows_of(key)
        return emitted_record(key, event_ts, stream_time, windows, self.emit, self._last_emitted)
