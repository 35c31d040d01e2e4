"""``NativeKeyWindows.apply_fetched`` (``emit=batch`` on natively fetched records) against the
path it replaces: ``parse_many`` of the chunk, its malformed records dropped, and
``apply_encoded`` of the rest with their offsets as tags.

Hypothesis draws a configuration and slices of raw input records (``tests.test_event_chunks``:
in order, out of order, late, future, malformed, values the lift refuses or no native partial
holds), each slice one Fetch response's record batch decoded by ``FetchedRecords``; both paths
run on fresh native windows with the same clock and must give the same effects (the store's
bytes), rejections, last events per key, dead letters and state. The effects come as one
native ``Effects`` buffer (the Python blocks a call keeps are counted), which the window store
writes as it would the same effects as tuples.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aiokafka.producer.message_accumulator import BatchBuilder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stores
from agents.events import BadEvent, EventParser
from agents.records import AggregateEncoder, aggregate_encoder
from app.settings import Settings, WindowSpec
from stores.key_windows import WindowConfig
from stores.native_windows import NativeKeyWindows
from stores.window_store import MarshalStateCodec, WindowStore
from tests.test_event_chunks import Record, streams
from tests.test_fetched_records import assert_indexes_as_a_list
from tests.test_native_windows import FOREIGN, KEYS, NUMBERS, Clock, configs
from tests.test_store_writes import MOMENTS, Recorder

needs_native = pytest.mark.skipif(
    stores.native() is None, reason=f"no native core in this build ({stores.build()})"
)


def kernel_parts(config: WindowConfig) -> tuple[EventParser, MarshalStateCodec, Any]:
    """What a kernel call on windows of ``config`` takes besides them: the default settings'
    event parser, the state codec and the native aggregate encoder."""
    encoder = aggregate_encoder(config.aggregations, config.lowered_is_aggregates)
    return EventParser(Settings()), MarshalStateCodec(config.composed), encoder


def fetched(records: list[Record]) -> Any:
    """``records`` (consecutive offsets) as the chunk the consumer hands over for them."""
    builder = BatchBuilder(1 << 20, 0, is_transactional=False)
    for r in records:
        builder.append(timestamp=r.timestamp, key=r.key, value=r.value, headers=[])
    data = bytearray(builder._build())
    data[:8] = records[0].offset.to_bytes(8, "big")
    chunk = stores.native().FetchedRecords.decode(  # type: ignore[union-attr]
        bytes(data), "input", 0, records[0].offset, None, True
    )
    assert chunk is not None and chunk.offsets() == [r.offset for r in records]
    return chunk


def parsed_then_applied(windows: Any, parser: EventParser, chunk: Any, codec: Any) -> tuple:
    """The former path: ``parse_many``, then ``apply_encoded`` of the well-formed events."""
    outcomes = parser.parse_many(chunk)
    offsets = chunk.offsets()
    bad = [(o, p) for o, p in zip(offsets, outcomes, strict=True) if isinstance(p, BadEvent)]
    good = [(o, p) for o, p in zip(offsets, outcomes, strict=True) if type(p) is tuple]
    applied = windows.apply_encoded([p for _, p in good], [o for o, _ in good], codec)
    return applied, bad


def log_of(applied: Any, bad: list) -> tuple:
    return (
        list(applied.effects),
        [(o, r.reason, r.detail) for o, r in applied.rejected],
        dict(applied.last),
        [(o, b.reason, b.detail) for o, b in bad],
    )


def twin_windows(config: WindowConfig, emit: str) -> tuple[Any, Any, tuple[Clock, Clock]]:
    """Two empty native windows of ``config``, the former path's and the one under test, and
    their test clocks (one each, moved alike by the comparisons)."""
    clocks = Clock(), Clock()
    reference = NativeKeyWindows(config, emit=emit, clock=clocks[0])
    return reference, NativeKeyWindows(config, emit=emit, clock=clocks[1]), clocks


def assert_same_state(windows: Any, reference: Any) -> None:
    """``windows`` hold what ``reference`` holds: stream time, keys, entries, and which
    partitions moved to the Python path."""
    assert windows.stream_time == reference.stream_time
    assert list(windows) == list(reference)
    for key in KEYS:
        if key in reference:
            assert windows.entries(key) == reference.entries(key)
    assert windows.native == reference.native


def compare(config: Any, slices: list[tuple[int, list[Record]]]) -> None:
    parser, codec, _ = kernel_parts(config)
    reference, windows, clocks = twin_windows(config, "batch")
    for move, records in slices:
        for clock in clocks:
            clock.now += move / 1000
        chunk = fetched(records)
        expected = log_of(*parsed_then_applied(reference, parser, chunk, codec))
        taken = windows.apply_fetched(chunk, parser.native_parser, codec)
        if taken is None:  # as the pipeline does
            taken = parsed_then_applied(windows, parser, chunk, codec)
        assert log_of(*taken) == expected
    assert_same_state(windows, reference)


CHECKS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@needs_native
@CHECKS
@given(config=configs(), slices=streams(NUMBERS))
def test_a_fetched_chunk_applied_natively_is_parse_many_then_apply_encoded(config, slices):
    compare(config[0], slices)


@needs_native
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs(), slices=streams(st.one_of(NUMBERS, FOREIGN.filter(lambda v: v == v))))
def test_values_refused_or_needing_the_python_path_keep_the_outcome(config, slices):
    """Strings, bools, objects, null and ints beyond int64 (these parsed by the Python
    parser: 22 digits): refused with the Python lift's detail, or the call answers None with
    nothing changed and the caller's path moves the partition to Python."""
    compare(config[0], slices)


@needs_native
def test_the_call_declines_what_it_cannot_take() -> None:
    """None for a chunk of aiokafka's records, no native parser, another codec, or a
    partition already on the Python path."""
    from agents.fetched_input import RecordList
    from stores.window_store import PartialCodec

    config = WindowConfig.from_settings(Settings())
    parser, codec, _ = kernel_parts(config)
    records = [Record(b"a", b'{"ts": 5, "value": 1}', 1_000, 10)]
    windows = NativeKeyWindows(config, emit="batch")
    assert windows.apply_fetched(RecordList(records), parser.native_parser, codec) is None
    assert windows.apply_fetched(fetched(records), None, codec) is None

    class OtherCodec(MarshalStateCodec):
        format = "other/1"

    other: PartialCodec = OtherCodec(config.composed)
    assert windows.apply_fetched(fetched(records), parser.native_parser, other) is None
    assert windows.entry_count() == 0
    applied, bad = windows.apply_fetched(fetched(records), parser.native_parser, codec)
    assert [e[:3] for e in applied.effects] == [(10, "a", config.window_time(5))] and not bad


def parsed_then_applied_events(
    windows: Any, parser: EventParser, chunk: Any, encoder: Any, codec: Any
) -> list[tuple]:
    """The former ``emit=event`` path (``agents.windows._parsed_events`` then
    ``apply_events``): its outcome per record, the partials as the store's bytes."""
    outcomes = parser.parse_many(chunk)
    offsets = chunk.offsets()
    good = [(o, p) for o, p in zip(offsets, outcomes, strict=True) if type(p) is tuple]
    applied = windows.apply_events([p for _, p in good], [o for o, _ in good], 7, encoder)
    log: list[tuple] = [
        ("bad", o, p.reason, p.detail)
        for o, p in zip(offsets, outcomes, strict=True)
        if isinstance(p, BadEvent)
    ]
    log += [("rejected", o, r.reason, r.detail) for o, r in applied.rejected]
    for (o, key, t, partial, evicted), key_bytes, event_ts, record in zip(
        applied.effects, applied.keys, applied.event_ts, applied.records, strict=True
    ):
        stored = (o, key, t, codec.encode(partial), tuple(evicted))
        log.append(("accepted", o, stored, key_bytes, event_ts, record, chunk.timestamp_at(o)))
    return sorted(log, key=lambda entry: entry[1])


def fetched_events(
    windows: Any, parser: EventParser, chunk: Any, encoder: Any, codec: Any
) -> list[tuple]:
    """``apply_fetched_events``, the rest of the chunk on the former path (as the pipeline
    does): the same log."""
    taken = windows.apply_fetched_events(chunk, parser.native_parser, codec, 7, encoder)
    if taken is None:
        return parsed_then_applied_events(windows, parser, chunk, encoder, codec)
    assert type(taken.effects).__name__ == "Effects"
    log = [("bad", o, b.reason, b.detail) for o, b in taken.bad]
    log += [("rejected", o, r.reason, r.detail) for o, r in taken.rejected]
    for (o, key, t, partial, evicted), (key_bytes, record, event_ts), input_ts in zip(
        taken.effects, taken.records, taken.input_ts, strict=True
    ):
        log.append(
            ("accepted", o, (o, key, t, partial, evicted), key_bytes, event_ts, record, input_ts)
        )
    if taken.rest is not None:
        assert all(entry[1] < taken.rest for entry in log)
        rest = chunk.after(taken.rest - 1)
        log += parsed_then_applied_events(windows, parser, rest, encoder, codec)
    return sorted(log, key=lambda entry: entry[1])


def compare_events(config: Any, slices: list[tuple[int, list[Record]]], native: bool) -> None:
    parser, codec, encoder = kernel_parts(config)
    if not native:  # the Python encoder, called from the kernel
        encoder = AggregateEncoder(config.aggregations, config.lowered_is_aggregates)
    reference, windows, clocks = twin_windows(config, "event")
    for move, records in slices:
        for clock in clocks:
            clock.now += move / 1000
        chunk = fetched(records)
        expected = parsed_then_applied_events(reference, parser, chunk, encoder, codec)
        assert fetched_events(windows, parser, chunk, encoder, codec) == expected
    assert_same_state(windows, reference)


@needs_native
@CHECKS
@given(config=configs(), slices=streams(NUMBERS), native=st.booleans())
def test_fetched_events_applied_natively_are_parse_many_then_apply_events(config, slices, native):
    """``emit=event``: per record the same dead letter, rejection, or store effect (the
    partial's bytes, evicted times), record key, event time, record bytes and input
    timestamp as the former path, in order, and the same state."""
    compare_events(config[0], slices, native)


@needs_native
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs(), slices=streams(st.one_of(NUMBERS, FOREIGN.filter(lambda v: v == v))))
def test_fetched_events_needing_the_python_path_leave_the_rest_to_it(config, slices):
    """A value the native partial cannot hold stops the call at its record (``rest``),
    nothing changed from there; the former path takes the rest and moves the partition to
    Python, with the same outcome as that path alone."""
    compare_events(config[0], slices, True)


@needs_native
def test_fetched_events_keep_no_python_object_per_event() -> None:
    """``apply_fetched_events`` keeps per event its input timestamp (an int in a list), not
    the parsed tuples, partials, effect tuples, keys, event times and record bytes of
    ``parse_many`` + ``apply_events`` (which keep about 14 blocks per event)."""
    config = WindowConfig.from_settings(Settings())
    parser, codec, encoder = kernel_parts(config)
    records = [
        Record(f"k{i % 3}".encode(), f'{{"ts": {i * 7}, "value": {i}.5}}'.encode(), 1_000, 10 + i)
        for i in range(200)
    ]
    windows = NativeKeyWindows(config, emit="event")
    windows.apply_fetched_events(fetched(records[:1]), parser.native_parser, codec, 0, encoder)
    chunk = fetched(records[1:])
    before = sys.getallocatedblocks()
    taken = windows.apply_fetched_events(chunk, parser.native_parser, codec, 0, encoder)
    kept = sys.getallocatedblocks() - before
    assert taken.rest is None and len(taken.records) == 199
    assert kept < 1.5 * 199, kept  # the input timestamps (+ the list and buffers)


async def stored(effects: Any, state_dir: Path) -> tuple[list, list]:
    """The changelog records and pending local writes of ``record_many(effects)`` on a fresh
    store (``stores.window_store``, native writes)."""
    settings = Settings(app_id="fetched", partitions=1, state_dir=state_dir)
    link = Recorder()
    store = WindowStore(settings, MarshalStateCodec(MOMENTS), link)  # type: ignore[arg-type]
    await store.start()
    await store.restore(0)
    half = len(effects) // 2
    store.record_many(0, effects[:half], encoded=True)
    store.record_many(0, effects[half:], encoded=True)
    pending = store._open[0].pending.items()
    await store.send_changes(0)
    await store.stop()
    return [r for _, batch in link.sent for r in batch], pending


@needs_native
def test_the_effects_buffer_is_written_as_its_tuples_would_be(tmp_path: Path) -> None:
    """``apply_fetched``'s effects are one native ``Effects`` buffer (no Python object per
    event), a sequence of ``(offset, key, time, partial bytes)`` whose slices are views;
    ``WindowStore.record_many`` reads it natively and writes what the same effects as a list
    of tuples write."""
    config = WindowConfig.from_settings(Settings())
    parser, codec, _ = kernel_parts(config)
    records = [
        Record(f"k{i % 3}é".encode(), f'{{"ts": {i * 7}, "value": {i}}}'.encode(), 1_000, 10 + i)
        for i in range(50)
    ]
    windows, chunk = NativeKeyWindows(config, emit="batch"), fetched(records)
    windows.apply_fetched(fetched(records[:1]), parser.native_parser, codec)  # warm
    before = sys.getallocatedblocks()
    applied, _ = windows.apply_fetched(chunk, parser.native_parser, codec)
    assert sys.getallocatedblocks() - before < 30  # what a batch of 3 keys keeps, not 50 events
    effects = applied.effects
    assert type(effects).__name__ == "Effects" and len(effects) == 50
    tuples = list(effects)
    assert_indexes_as_a_list(effects, tuples, "effect")
    assert [e[0] for e in tuples] == [r.offset for r in records]
    assert asyncio.run(stored(effects, tmp_path / "buffer")) == asyncio.run(
        stored(tuples, tmp_path / "tuples")
    )


@needs_native
def test_an_effects_buffer_with_evictions_is_written_as_its_tuples_would_be(
    tmp_path: Path,
) -> None:
    """``apply_fetched_events``' effects carry each event's evicted times: the buffer's items
    are ``(offset, key, time, partial bytes, evicted)`` and the store writes the buffer as it
    writes those tuples (upserts with the evicted times, tombstones)."""
    config = WindowConfig.from_settings(
        replace(Settings(), retention=100, windows=(WindowSpec("w", 50),))
    )
    parser, codec, encoder = kernel_parts(config)
    records = [
        Record(f"k{i % 2}".encode(), f'{{"ts": {i * 40}, "value": {i}}}'.encode(), 1_000, 10 + i)
        for i in range(20)
    ]
    windows = NativeKeyWindows(config, emit="event")
    taken = windows.apply_fetched_events(fetched(records), parser.native_parser, codec, 0, encoder)
    effects = taken.effects
    tuples = list(effects)
    assert len(tuples) == 20 and sum(len(e[4]) for e in tuples) >= 10
    assert list(effects[5:9]) == tuples[5:9]
    assert asyncio.run(stored(effects, tmp_path / "buffer")) == asyncio.run(
        stored(tuples, tmp_path / "tuples")
    )


@needs_native
def test_the_records_buffer_is_queued_as_its_lists_would_be() -> None:
    """``apply_fetched_events``' records are one native ``KeyedRecords`` buffer of ``(key,
    record, event time)``; ``OutputQueue.add_records`` queues it as ``add_many`` queues the
    same records as lists (same partitions, bytes, timestamps, least timestamp)."""
    config = WindowConfig.from_settings(Settings())
    parser, codec, encoder = kernel_parts(config)
    records = [
        Record(f"k{i % 7}".encode(), f'{{"ts": {i * 7}, "value": {i}}}'.encode(), 1_000, 10 + i)
        for i in range(50)
    ]
    windows = NativeKeyWindows(config, emit="event")
    taken = windows.apply_fetched_events(fetched(records), parser.native_parser, codec, 0, encoder)
    assert type(taken.records).__name__ == "KeyedRecords" and len(taken.records) == 50
    assert taken.records[-1] == list(taken.records)[49]
    keys, values, stamps = (list(column) for column in zip(*taken.records, strict=True))
    assert stamps == [i * 7 for i in range(50)]
    native = stores.native()
    buffered, listed = native.OutputQueue(4), native.OutputQueue(4)  # type: ignore[union-attr]
    assert buffered.add_records(taken.records) == listed.add_many(keys, values, stamps, 0) == 0
    assert buffered.partitions() == listed.partitions() and len(buffered.partitions()) > 1
    for partition in listed.partitions():
        assert list(buffered.take(partition)) == list(listed.take(partition))
