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
from pathlib import Path
from typing import Any

import pytest
from aiokafka.producer.message_accumulator import BatchBuilder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stores
from agents.events import BadEvent, EventParser
from app.settings import Settings
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


def compare(config: Any, slices: list[tuple[int, list[Record]]]) -> None:
    parser = EventParser(Settings())
    codec = MarshalStateCodec(config.composed)
    clocks = Clock(), Clock()
    reference = NativeKeyWindows(config, emit="batch", clock=clocks[0])
    windows = NativeKeyWindows(config, emit="batch", clock=clocks[1])
    for move, records in slices:
        for clock in clocks:
            clock.now += move / 1000
        chunk = fetched(records)
        expected = log_of(*parsed_then_applied(reference, parser, chunk, codec))
        taken = windows.apply_fetched(chunk, parser.native_parser, codec)
        if taken is None:  # as the pipeline does
            taken = parsed_then_applied(windows, parser, chunk, codec)
        assert log_of(*taken) == expected
    assert windows.stream_time == reference.stream_time
    assert list(windows) == list(reference)
    for key in KEYS:
        if key in reference:
            assert windows.entries(key) == reference.entries(key)
    assert windows.native == reference.native


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
    parser = EventParser(Settings())
    codec = MarshalStateCodec(config.composed)
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
    parser = EventParser(Settings())
    codec = MarshalStateCodec(config.composed)
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
