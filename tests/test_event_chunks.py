"""``apply_events`` (``emit=event``'s chunk path) against the per-record semantics it replaces.

Hypothesis draws a configuration (every native aggregation alone and composes, one to three
windows, both skew rules, ``resolution``, both ``window_end`` modes) and a stream of raw
input records (in order, out of order, equal times, late, future, several keys, malformed
JSON, missing fields, values the lift refuses or no native partial holds) cut into slices of
random sizes with the clock moving between slices. The reference is the worker's former
per-record path (parse, ``apply_one``, ``encoder.encode`` of ``lowered_windows``, each record
in offset order); the chunk path parses each slice, drops its malformed records as the worker
does and applies the rest with one ``apply_events`` call. Both run on fresh windows of the
same kind, the native kernel and the Python ``KeyWindows``, with the worker's encoder of the
build, and must give the same log: per input offset its aggregate record's bytes and key and
its store effect ``(offset, key, time, partial, evicted)``, or its rejection (reason and
detail), then the same state.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stores
from agents.events import BadEvent, EventParser
from agents.records import AggregateEncoder, aggregate_encoder
from app.settings import Settings, WindowSpec
from stores.key_windows import KeyWindows, Rejected, WindowConfig
from stores.native_windows import NativeKeyWindows
from tests.test_native_windows import FOREIGN, KEYS, NUMBERS, Clock, configs

PARTITION = 3


class Record(NamedTuple):
    """An input record as the consumer hands it over."""

    key: bytes | None
    value: bytes | None
    timestamp: int
    offset: int


MALFORMED = st.sampled_from(
    [b"{", b"not json", b'{"value": 1}', b'{"ts": "soon", "value": 1}', b"[]", None]
)


@st.composite
def streams(draw: Any, values: st.SearchStrategy[Any]) -> list[tuple[int, list[Record]]]:
    """Slices of raw records (offsets consecutive from 10), each after a clock move (ms)."""
    # times: a clock moving forward by steps (equal times when 0), each event at it or off
    # it: back (out of order, or late beyond the retention) or ahead (future, or a jump the
    # next event confirms)
    step = st.integers(0, 12)
    off = st.one_of(st.just(0), st.just(0), st.integers(-40, 0), st.integers(-130, -95))
    item = st.tuples(
        st.integers(0, 9), st.sampled_from(KEYS), step, off | st.integers(41, 90), values, MALFORMED
    )
    raw = draw(st.lists(item, min_size=1, max_size=60))
    records = []
    now = draw(st.integers(-30, 60))
    for offset, (kind, key, move, skew, value, malformed) in enumerate(raw, 10):
        now += move
        data = json.dumps({"ts": now + skew, "value": value}).encode()
        if kind == 9:
            data = malformed
        records.append(Record(key.encode(), data, 1_000 + offset, offset))
    slices = []
    while records:
        cut = draw(st.integers(1, 12))
        slices.append((draw(st.sampled_from([0, 0, 30, 150])), records[:cut]))
        records = records[cut:]
    return slices


def per_record(windows: Any, encoder: Any, parser: EventParser, records: list[Record]) -> list:
    """The former ``_process_one`` of ``emit=event``: its log per input record."""
    log: list[tuple] = []
    for record, parsed in zip(records, parser.parse_many(records), strict=True):
        if isinstance(parsed, BadEvent):
            log.append((record.offset, "dead", parsed.reason, parsed.detail))
            continue
        try:
            accepted = windows.apply_one(*parsed)
        except Rejected as rejected:
            log.append((record.offset, "dead", rejected.reason, rejected.detail))
            continue
        key, ts = accepted.key, parsed[1]
        data = encoder.encode(
            key, ts, windows.stream_time, windows.lowered_windows(key, ts), PARTITION, record.offset
        )
        effect = (record.offset, key, accepted.time, accepted.partial, accepted.evicted)
        log.append((record.offset, "record", effect, key.encode(), ts, data))
    return log


def chunked(windows: Any, encoder: Any, parser: EventParser, records: list[Record]) -> list:
    """One slice the way ``WindowsPipeline._process_events`` applies it: its log."""
    parsed = parser.parse_many(records)
    log: list[tuple] = [
        (r.offset, "dead", p.reason, p.detail)
        for r, p in zip(records, parsed, strict=True)
        if isinstance(p, BadEvent)
    ]
    good = [(r.offset, p) for r, p in zip(records, parsed, strict=True) if type(p) is tuple]
    applied = windows.apply_events([p for _, p in good], [o for o, _ in good], PARTITION, encoder)
    columns = (applied.effects, applied.keys, applied.event_ts, applied.records)
    for effect, key, ts, data in zip(*columns, strict=True):
        log.append((effect[0], "record", effect, key, ts, data))
    log.extend((offset, "dead", r.reason, r.detail) for offset, r in applied.rejected)
    return sorted(log, key=lambda entry: entry[0])


def outcome(
    make: Callable[[Clock], Any],
    apply: Callable[[Any, list[Record]], list],
    slices: list[tuple[int, list[Record]]],
) -> tuple[list, Any, Any]:
    """The log of ``slices`` applied by ``apply`` to fresh windows (the clock moved before
    each slice), the windows, and the error other than a rejection that stopped it (the
    Python path's own, e.g. a string compared with an int inside a tree), if any."""
    clock = Clock()
    windows = make(clock)
    log: list[tuple] = []
    for move, records in slices:
        clock.now += move / 1000
        try:
            log.extend(apply(windows, records))
        except Rejected:
            raise
        except Exception as error:  # compared by the caller
            return log, windows, type(error)
    return log, windows, None


def compare(
    make: Callable[[Clock], Any], config: WindowConfig, slices: list[tuple[int, list[Record]]]
) -> None:
    parser = EventParser(Settings())
    encoder = aggregate_encoder(config.aggregations, config.lowered_is_aggregates)
    expected, reference, error = outcome(
        make, lambda w, records: per_record(w, encoder, parser, records), slices
    )
    got, windows, got_error = outcome(
        make, lambda w, records: chunked(w, encoder, parser, records), slices
    )
    assert got_error is error
    if error is not None:
        return
    assert len(got) == len(expected)
    for new, old in zip(got, expected, strict=True):
        assert new == old, f"offset {old[0]}: {new!r} != {old!r}"
    assert windows.stream_time == reference.stream_time
    assert list(windows) == list(reference)
    for key in KEYS:
        assert windows.entries(key) == reference.entries(key)
    if isinstance(windows, NativeKeyWindows):
        assert windows.native == reference.native


def python_windows(config: WindowConfig) -> Callable[[Clock], Any]:
    return lambda clock: KeyWindows(config, emit="event", clock=clock)


def native_windows(config: WindowConfig) -> Callable[[Clock], Any]:
    return lambda clock: NativeKeyWindows(config, emit="event", clock=clock)


needs_native = pytest.mark.skipif(
    stores.native() is None, reason=f"no native core in this build ({stores.build()})"
)
CHECKS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@needs_native
@CHECKS
@given(config=configs(), slices=streams(NUMBERS))
def test_the_native_chunk_path_gives_the_per_record_outcome(config, slices):
    compare(native_windows(config[0]), config[0], slices)


@CHECKS
@given(config=configs(), slices=streams(NUMBERS))
def test_the_python_chunk_path_gives_the_per_record_outcome(config, slices):
    compare(python_windows(config[0]), config[0], slices)


@needs_native
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs(), slices=streams(st.one_of(NUMBERS, FOREIGN.filter(lambda v: v == v))))
def test_a_value_moving_the_partition_to_python_mid_slice_keeps_the_outcome(config, slices):
    """Strings, bools, objects, null and ints beyond int64 among the values: refused, or the
    rest of the slice and the partition move to the Python path (``_move_to_python``)."""
    compare(native_windows(config[0]), config[0], slices)


@needs_native
def test_the_python_encoder_serves_the_native_kernel_too() -> None:
    """``apply_events`` with the Python ``AggregateEncoder`` (no native one given): the same
    bytes as the native encoder's."""
    config = WindowConfig.from_settings(Settings())
    events = [("a", 5, 1), ("b", 3, 2.5), ("a", 4, -1)]
    native = aggregate_encoder(config.aggregations, config.lowered_is_aggregates)
    python = AggregateEncoder(config.aggregations, config.lowered_is_aggregates)
    results = [
        NativeKeyWindows(config).apply_events(events, [7, 8, 9], PARTITION, encoder)
        for encoder in (native, python)
    ]
    assert results[0].records == results[1].records
    assert [json.loads(r)["input_offset"] for r in results[0].records] == [7, 8, 9]


@needs_native
@pytest.mark.parametrize(
    "aggregations", [("mean", "sum"), ("geomean", "sample_stddev", "pop_stddev", "count")]
)
def test_records_written_from_native_partials_fall_back_where_python_could_differ(
    aggregations,
) -> None:
    """The kernel writes a record from its partials (``event_records.rs``) unless a lowered
    value could differ from the Python ``lower``'s: an int mean whose sum is beyond 2^53
    (Python divides ints exactly: ``(2**54 + 1) / 3`` is not ``float(2**54 + 1) / 3``) is
    the Python path's; keys that JSON escapes and values that need no fallback are written
    natively. Both give the per-record path's bytes."""
    config = WindowConfig.from_settings(
        replace(
            Settings(),
            retention=100,
            windows=(WindowSpec("w7", 7), WindowSpec("all", 100)),
            aggregations=aggregations,
        )
    )
    values = [2**54 - 1, 1, 1, 3, 2**53 + 5, 0.25, 7]
    keys = ['q"\\\n\x01é', "a", 'q"\\\n\x01é', 'q"\\\n\x01é', "a", "a", "a"]
    records = [
        Record(key.encode(), json.dumps({"ts": 10 + i, "value": v}).encode(), 1_000 + i, 10 + i)
        for i, (key, v) in enumerate(zip(keys, values, strict=True))
    ]
    compare(native_windows(config), config, [(0, records[:4]), (0, records[4:])])
