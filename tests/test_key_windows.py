"""KeyWindows against an independent brute-force model of the sliding-window semantics.

The model (``Model``) keeps every accepted event as a plain list and recomputes every window
from scratch with Python builtins; it shares nothing with ``stores.key_windows`` but the
settings. ``collect`` is among the aggregations, so the order of combination (time order, equal
times in arrival order) is checked too, not only commutative results.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sortedcontainers import SortedList

from app.settings import Settings, WindowSpec
from stores.fiba import FiBA, _Node
from stores.key_windows import Accepted, KeyWindows, Rejected, WindowConfig
from tests.cyclic_garbage import cyclic_garbage

SETTINGS = replace(
    Settings(),
    retention=100,
    windows=(WindowSpec("w10", 10), WindowSpec("w40", 40), WindowSpec("w80", 80)),
    aggregations=("sum", "max", "mean", "pop_stddev", "collect"),
    max_future_skew=50,
)
KEYS = ("a", "b", "c")


class Model:
    """Brute force: accepted events per key, in arrival order; windows recomputed each time."""

    def __init__(self, settings: Settings) -> None:
        self.s = settings
        self.stream_time: int | None = None
        self.events: dict[str, list[tuple[int, int, object]]] = {}
        self.arrivals = 0
        self.previous: int | None = None

    def decide(self, ts: int, value: object) -> str | int:
        r = self.s.resolution
        t = ts if r is None else ts // r * r
        previous, self.previous = self.previous, t
        s, skew = self.stream_time, self.s.max_future_skew
        if s is not None:
            if t < s - self.s.retention:
                return "late"
            # future: beyond the skew from both S and the previous event, whatever became of it
            p = s if previous is None else previous
            if skew is not None and t > s + skew and t > p + skew:
                return "future"
        if not isinstance(value, int):
            return "bad_value"
        return t

    def accept(self, key: str, ts: int, value: object) -> str | int:
        t = self.decide(ts, value)
        if isinstance(t, str):
            return t
        self.stream_time = t if self.stream_time is None else max(self.stream_time, t)
        self.arrivals += 1
        self.events.setdefault(key, []).append((t, self.arrivals, value))
        return t

    def values(self, key: str, lo: int, hi: int) -> list[int]:
        lo = max(lo, self.stream_time - self.s.retention)
        inside = sorted(e for e in self.events.get(key, []) if lo <= e[0] <= hi)
        return [v for _, _, v in inside]

    def aggregates(self, values: list[int]) -> tuple[int, dict[str, object]]:
        return len(values), {
            "count": len(values),
            "sum": sum(values),
            "max": max(values) if values else None,
            "mean": statistics.fmean(values) if values else None,
            "pop_stddev": statistics.pstdev(values) if values else None,
            "collect": list(values),
        }

    def windows(self, key: str) -> dict[str, tuple[int, int, int, dict[str, object]]]:
        s = self.stream_time
        out = {}
        for spec in self.s.windows:
            count, aggs = self.aggregates(self.values(key, s - spec.size_ms, s))
            out[spec.name] = (s - spec.size_ms, s, count, aggs)
        return out

    def retained(self, key: str) -> dict[int, list[int]]:
        horizon = self.stream_time - self.s.retention
        by_time: dict[int, list[int]] = {}
        for t, _, v in sorted(self.events.get(key, [])):
            if t >= horizon:
                by_time.setdefault(t, []).append(v)
        return by_time


def same_aggregates(actual: dict[str, object], expected: dict[str, object]) -> bool:
    """``actual``'s aggregates equal ``expected``'s (floats within 1e-9)."""
    for name, got in actual.items():
        want = expected[name]
        if isinstance(want, float) and isinstance(got, float):
            if not math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9):
                return False
        elif got != want:
            return False
    return True


def check_record(record, model: Model, key: str) -> None:
    assert record.key == key
    assert record.stream_time == model.stream_time
    expected = model.windows(key)
    assert list(record.windows) == list(expected)
    for name, (start, end, count, aggs) in expected.items():
        got = record.windows[name]
        assert (got.start, got.end, got.count) == (start, end, count), name
        assert tuple(got.aggregates) == model.s.aggregations
        assert same_aggregates(got.aggregates, aggs), (name, got.aggregates, aggs)


def check_entries(windows: KeyWindows, model: Model) -> None:
    """Retained entries hold, per time, exactly the events at that time in arrival order."""
    horizon = model.stream_time - model.s.retention
    for key in KEYS:
        stored = {t: p for t, p in windows.entries(key) if t >= horizon}
        expected = model.retained(key)
        assert sorted(stored) == sorted(expected)
        for t, values in expected.items():
            lowered = windows.config.composed.lower(stored[t])
            assert lowered["collect"] == values and lowered["count"] == len(values)


event = st.tuples(
    st.sampled_from(KEYS),
    st.integers(min_value=0, max_value=400),
    st.one_of(st.integers(-50, 50), st.just({"value": 1})),
)


def _drift(steps: list[tuple[str, int, int, object]]) -> list[tuple[str, int, object]]:
    """Events whose times mostly advance a little, some late by ``late``."""
    stream, now = [], 0
    for key, step, late, value in steps:
        now += step
        stream.append((key, max(0, now - late), value))
    return stream


drifting = st.lists(
    st.tuples(
        st.sampled_from(KEYS),
        st.integers(0, 4),
        st.one_of(st.just(0), st.just(0), st.integers(1, 60)),
        st.one_of(st.integers(-50, 50), st.just({"value": 1})),
    ),
    max_size=150,
).map(_drift)
"""Mostly in order, as streams are: exercises the windows kept between events
(``stores.window_suffixes``) through their rebuilds, appends and late inserts."""
events = st.one_of(st.lists(event, max_size=60), drifting)


def run_one_by_one(settings: Settings, stream, emit: str) -> tuple[KeyWindows, Model]:
    windows = KeyWindows(WindowConfig.from_settings(settings), emit=emit)
    model = Model(settings)
    last: dict[str, dict] = {}
    for key, ts, value in stream:
        expected = model.accept(key, ts, value)
        try:
            outcome = windows.accept(key, ts, value)
        except Rejected as rejected:
            assert rejected.reason == expected
            continue
        assert outcome.time == expected
        assert windows.stream_time == model.stream_time
        current = {n: (w[2], w[3]) for n, w in model.windows(key).items()}
        if emit == "changes" and last.get(key) == current:
            assert outcome.record is None
        else:
            check_record(outcome.record, model, key)
            last[key] = current
        lowered = windows.config.composed.lower(outcome.partial)
        assert lowered["collect"] == model.retained(key)[expected]
    return windows, model


@pytest.mark.parametrize("emit", ["event", "changes"])
@given(stream=events)
def test_event_and_changes_modes_match_the_model(emit, stream):
    windows, model = run_one_by_one(SETTINGS, stream, emit)
    if model.stream_time is not None:
        check_entries(windows, model)


@given(stream=events)
def test_an_accepted_event_reports_exactly_the_entries_it_evicted(stream):
    """``Accepted.evicted`` (what the store deletes) is every time the event removed from its
    key, each once: one expired entry (evicted at the old end) or several (bulk)."""
    windows = KeyWindows(WindowConfig.from_settings(SETTINGS))
    for key, ts, value in stream:
        before = {t for t, _ in windows.entries(key)}
        try:
            outcome = windows.apply_one(key, ts, value)
        except Rejected:
            continue
        after = {t for t, _ in windows.entries(key)}
        assert sorted(outcome.evicted) == sorted((before | {outcome.time}) - after)


def test_many_expired_entries_are_evicted_and_reported_at_once():
    """More expired entries than lazy eviction takes one by one: the rest go in bulk, and
    every one is reported."""
    windows = KeyWindows(WindowConfig.from_settings(SETTINGS))
    for t in range(0, 40, 2):
        windows.apply_one("k", t, 1)
    windows.apply_one("k", 88, 1)
    outcome = windows.apply_one("k", 138, 1)  # S - R = 38: the 19 entries from 0 to 36 expire
    assert outcome.evicted == tuple(range(0, 38, 2))
    assert [t for t, _ in windows.entries("k")] == [38, 88, 138]


@given(stream=events, resolution=st.sampled_from([3, 7, 25]))
def test_panes_round_times_down(stream, resolution):
    settings = replace(SETTINGS, resolution=resolution)
    windows, model = run_one_by_one(settings, stream, "event")
    if model.stream_time is not None:
        assert model.stream_time % resolution == 0
        check_entries(windows, model)


@given(stream=events, cuts=st.lists(st.integers(0, 60), max_size=6))
def test_batch_mode_matches_the_model(stream, cuts):
    windows = KeyWindows(WindowConfig.from_settings(SETTINGS), emit="batch")
    model = Model(SETTINGS)
    bounds = sorted({0, len(stream), *(c for c in cuts if c <= len(stream))})
    for lo, hi in itertools.pairwise(bounds):
        batch = stream[lo:hi]
        result = windows.accept_batch(batch)
        touched = []
        for (key, ts, value), outcome in zip(batch, result.outcomes, strict=True):
            expected = model.accept(key, ts, value)
            if isinstance(outcome, Rejected):
                assert outcome.reason == expected
                continue
            assert isinstance(outcome, Accepted) and outcome.time == expected
            lowered = windows.config.composed.lower(outcome.partial)
            # the partial right after this event: the model's events at that time so far
            assert lowered["collect"] == [v for t, _, v in model.events[key] if t == expected]
            if key not in touched:
                touched.append(key)
        assert [r.key for r in result.records] == touched
        for record in result.records:
            check_record(record, model, record.key)
    if model.stream_time is not None:
        check_entries(windows, model)


def same_record(actual, expected) -> bool:
    """Two records of one key with the same windows (float aggregates within 1e-9: a bulk
    insert may associate a window's combines otherwise than single inserts)."""
    return (actual.key, actual.event_ts, actual.stream_time, list(actual.windows)) == (
        expected.key,
        expected.event_ts,
        expected.stream_time,
        list(expected.windows),
    ) and all(
        (got.start, got.end, got.count) == (want.start, want.end, want.count)
        and same_aggregates(got.aggregates, want.aggregates)
        for got, want in zip(actual.windows.values(), expected.windows.values(), strict=True)
    )


@given(
    stream=events,
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=10),
    resolution=st.sampled_from([None, 5]),
)
def test_columnar_batches_equal_one_by_one_application(stream, sizes, resolution):
    """``apply`` on consecutive batches, then per touched key ``evict_expired`` and
    ``record_of`` (the worker's ``emit=batch``), against ``accept`` event by event: the same
    decisions, the same partial right after each accepted event, the same records and the same
    retained entries. With panes (``resolution``) many events share a time."""
    settings = replace(SETTINGS, resolution=resolution)
    batched = KeyWindows(WindowConfig.from_settings(settings), emit="batch")
    single = KeyWindows(WindowConfig.from_settings(settings), emit="event")
    lo = 0
    for size in itertools.cycle(sizes):
        if lo >= len(stream):
            break
        batch = stream[lo : lo + size]
        tags = range(lo, lo + len(batch))
        applied = batched.apply(batch, tags)
        rejected = dict(applied.rejected)
        effects = []
        last: dict[str, tuple[int, int]] = {}
        for tag, (key, ts, value) in zip(tags, batch, strict=True):
            try:
                outcome = single.accept(key, ts, value)
            except Rejected as refused:
                assert (rejected.pop(tag).reason, tag) == (refused.reason, tag)
                continue
            effects.append((tag, key, outcome.time, outcome.partial))
            last[key] = (tag, ts)
        assert applied.effects == effects and not rejected
        assert applied.last == last
        assert batched.stream_time == single.stream_time
        for key, (_, ts) in last.items():
            batched.evict_expired(key)
            assert same_record(batched.record_of(key, ts), single.record_of(key, ts))
        lo += size
    if single.stream_time is not None:
        horizon = single.stream_time - settings.retention
        for key in KEYS:
            retained = [(t, p) for t, p in single.entries(key) if t >= horizon]
            assert [(t, p) for t, p in batched.entries(key) if t >= horizon] == retained


@given(
    stream=events,
    ranges=st.lists(
        st.tuples(
            st.sampled_from((*KEYS, "unknown")), st.integers(-50, 450), st.integers(-50, 450)
        ),
        max_size=10,
    ),
)
def test_range_queries_match_the_model(stream, ranges):
    windows, model = run_one_by_one(SETTINGS, stream, "event")
    for key, lo, hi in ranges:
        count, aggregates = windows.query_range(key, lo, hi)
        if model.stream_time is None:
            assert count == 0 and aggregates["collect"] == [] and aggregates["max"] is None
            continue
        want_count, want = model.aggregates(model.values(key, lo, hi))
        assert count == want_count
        assert same_aggregates(aggregates, want)


@given(stream=events, split=st.integers(0, 60))
def test_restore_then_continue_equals_uninterrupted(stream, split):
    """Without ``max_future_skew`` (its previous event's time is not state: see
    ``test_a_restart_costs_at_most_one_more_event_after_a_pause``)."""
    first, rest = stream[:split], stream[split:]
    windows, _ = run_one_by_one(replace(SETTINGS, max_future_skew=None), first, "event")
    copy = KeyWindows(windows.config, emit="event")
    copy.restore({key: windows.entries(key) for key in windows})
    assert copy.stream_time == windows.stream_time
    for key, ts, value in rest:
        try:
            a = windows.accept(key, ts, value)
        except Rejected as rejected:
            with pytest.raises(Rejected) as info:
                copy.accept(key, ts, value)
            assert info.value.reason == rejected.reason
            continue
        b = copy.accept(key, ts, value)
        assert a.record == b.record


@given(stream=events)
def test_sweep_leaves_only_retained_entries_and_forgets_empty_keys(stream):
    windows, model = run_one_by_one(SETTINGS, stream, "event")
    cleaned = dict(windows.sweep())
    if model.stream_time is None:
        assert cleaned == {}
        return
    horizon = model.stream_time - SETTINGS.retention
    for key in KEYS:
        times = [t for t, _ in windows.entries(key)]
        assert all(t >= horizon for t in times)
        assert sorted(times) == sorted(model.retained(key))
        assert (key in windows) == bool(times)
    assert windows.sweep() == []


class CountingFiBA(FiBA):
    """FiBA counting its ``evict`` and ``bulk_evict`` calls (to show how much work a sweep
    does; one expired entry is evicted with ``evict``, more with ``bulk_evict`` too)."""

    __slots__ = ()
    calls = 0

    def evict(self, t):
        CountingFiBA.calls += 1
        return super().evict(t)

    def bulk_evict(self, t):
        CountingFiBA.calls += 1
        return super().bulk_evict(t)


def test_sweep_visits_only_keys_with_expired_entries():
    config = WindowConfig.from_settings(replace(SETTINGS, max_future_skew=1000))
    windows = KeyWindows(config, window_type=CountingFiBA)
    windows.accept("old", 1000, 1)
    for k in range(100):
        windows.accept(f"idle-{k}", 1100 + k, 1)  # S = 1199: only "old" is behind S - R
    CountingFiBA.calls = 0
    assert [key for key, _ in windows.sweep()] == ["old"]
    assert CountingFiBA.calls == 1
    assert "old" not in windows


class CountingSortedList(SortedList):
    """SortedList counting its ``add`` and ``remove`` calls (``changes``)."""

    changes = 0

    def add(self, value):
        self.changes += 1
        super().add(value)

    def remove(self, value):
        self.changes += 1
        super().remove(value)


def test_lazy_eviction_leaves_the_sweep_index_alone():
    """An event that evicts its key's expired entries moves the key's oldest time without
    touching the sweep's index (a lower bound of it); a sweep then visits each such key once,
    reports nothing for it and indexes it at its oldest time, so the next sweep visits none."""
    windows = KeyWindows(WindowConfig.from_settings(SETTINGS))
    windows._by_oldest = index = CountingSortedList()
    for t in range(300):  # in order: from t = 101 on, every event evicts an entry of its key
        for key in KEYS:
            windows.accept(key, t, 1)
    assert index.changes == 3 * 3  # per key: indexed empty, then at its first time
    assert windows.sweep() == []
    assert index.changes == 3 * 3 + 3 * 2  # each key visited once: moved to its oldest time
    assert sorted(index) == sorted((windows.entries(key)[0][0], key) for key in KEYS)
    assert windows.sweep() == [] and index.changes == 15


class CallCountingFiBA(FiBA):
    """FiBA counting the calls of its inserts and lookups by name (``calls``)."""

    __slots__ = ()
    calls: Counter[str] = Counter()

    def insert(self, t, x):
        CallCountingFiBA.calls["insert"] += 1
        super().insert(t, x)

    def bulk_insert(self, pairs):
        CallCountingFiBA.calls["bulk_insert"] += 1
        super().bulk_insert(pairs)

    def get(self, t):
        CallCountingFiBA.calls["get"] += 1
        return super().get(t)


def test_a_batch_costs_one_bulk_insert_per_key_and_lookups_only_behind_the_young_end():
    """``apply``: per touched key one ``bulk_insert`` (no single inserts), and a lookup of the
    partial already present only for an event at or before the key's youngest time before the
    batch; the rest of the per-event work is the admission pass."""
    config = WindowConfig.from_settings(replace(SETTINGS, retention=1000, max_future_skew=1000))
    windows = KeyWindows(config, emit="batch", window_type=CallCountingFiBA)
    keys = [f"k{i}" for i in range(5)]
    windows.apply([(key, 100, 1) for key in keys], range(5))  # every key's youngest: 100
    batch = [(key, 101 + t, 1) for t in range(20) for key in keys]
    behind = [("k0", 100, 2), ("k1", 50, 3), ("k2", 99, 4)]  # at, before its youngest
    CallCountingFiBA.calls.clear()
    applied = windows.apply(batch + behind, range(len(batch) + 3))
    assert len(applied.effects) == 103 and not applied.rejected
    assert CallCountingFiBA.calls == Counter(bulk_insert=5, get=3)
    assert applied.effects[100][3] == config.composed.combine(config.lift(1), config.lift(2))


def test_dropped_keys_and_cleared_windows_leave_no_cyclic_garbage():
    """Every way ``KeyWindows`` drops a key's tree frees its nodes by reference counting
    (``FiBA.clear``): a key left empty by a sweep, a key loaded again, a key forgotten (a
    released partition's keys), and ``clear``. The worker freezes its state, and a frozen tree
    dropped linked would never be freed."""
    config = WindowConfig.from_settings(replace(SETTINGS, max_future_skew=1000))
    with cyclic_garbage() as garbage:
        windows = KeyWindows(config)
        windows.load("reloaded", [(t, config.lift(t)) for t in range(50)])
        windows.load("reloaded", [(t, config.lift(t)) for t in range(60)])
        for t in range(0, 200, 2):
            windows.accept("swept", t, 1)
        for t in range(500, 510):
            windows.accept("other", t, 1)
        assert "swept" in dict(windows.sweep()) and "swept" not in windows
        windows.accept("forgotten", 505, 1)
        windows.forget("forgotten")
        assert "forgotten" not in windows and windows.stream_time == 509
        windows.clear()
        assert len(windows) == 0
    assert not [obj for obj in garbage if isinstance(obj, _Node)]


def test_changes_mode_suppresses_events_outside_every_window():
    settings = replace(SETTINGS, aggregations=("sum",), windows=SETTINGS.windows[:2])
    windows = KeyWindows(WindowConfig.from_settings(settings), emit="changes")
    assert windows.accept("k", 100, 1).record is not None
    assert windows.accept("k", 50, 5).record is None  # within R, outside the 40 ms window
    assert windows.accept("k", 100, 0).record is not None  # the count changed


def test_an_event_far_ahead_of_the_clock_is_future_and_moves_no_stream_time():
    """A microsecond timestamp on a fresh partition would set the stream time decades ahead
    and make every later event late: it is rejected as ``future`` against the worker's clock
    (``max_wall_clock_skew``), and later events are accepted; ``off`` accepts it."""
    now_ms = 1_700_000_000_000
    config = WindowConfig.from_settings(
        replace(SETTINGS, max_future_skew=2 * 86_400_000, max_wall_clock_skew=86_400_000)
    )
    windows = KeyWindows(config, clock=lambda: now_ms / 1000)
    with pytest.raises(Rejected) as rejected:
        windows.accept("a", now_ms * 1000, 1)  # microseconds
    assert rejected.value.reason == "future" and "max_wall_clock_skew" in rejected.value.detail
    assert windows.stream_time is None
    assert windows.accept("a", now_ms, 1).time == now_ms
    assert windows.accept("b", now_ms + 86_400_000, 2).time == now_ms + 86_400_000  # at the limit
    batch = windows.accept_batch([("a", now_ms * 1000, 3), ("a", now_ms + 86_399_990, 4)])
    assert [type(o) for o in batch.outcomes] == [Rejected, Accepted]
    assert windows.stream_time == now_ms + 86_400_000

    replay = KeyWindows(replace(config, max_wall_clock_skew=None), clock=lambda: now_ms / 1000)
    assert replay.accept("a", now_ms * 1000, 1).time == now_ms * 1000


MINUTE, DAY = 60_000, 86_400_000
T0 = 1_700_000_000_000


def paused_stream(pause: int) -> list[tuple[str, int, int]]:
    """Three keys, an event every 7 s (every fifth 20 s late) for 10 minutes, a pause of
    ``pause`` in event time, then 10 minutes more."""
    stream = []
    for i in range(2 * 86):
        t = T0 + 7_000 * i + (pause if i >= 86 else 0)
        stream.append((KEYS[i % 3], t - 20_000 if i % 5 == 4 else t, i % 11))
    return stream


@pytest.mark.parametrize("emit", ["event", "batch"])
@pytest.mark.parametrize(
    "pause, wall_clock_skew",
    [(6 * MINUTE, DAY), (DAY, DAY), (30 * DAY, None)],
    ids=["6 minutes", "a day", "a month, replayed"],
)
def test_a_pause_in_event_time_rejects_nothing(pause, wall_clock_skew, emit):
    """Default settings (``max_future_skew`` off): a healthy stream that pauses for 6 minutes
    or a day, read live (the worker's clock at the newest event), or for a month replayed
    ahead of the clock (``max_wall_clock_skew = off``), has every event accepted and every
    record equal to the brute-force model. (Before: everything after the pause was
    ``future``, for good.)"""
    settings = replace(
        Settings(), aggregations=("sum", "max", "collect"), max_wall_clock_skew=wall_clock_skew
    )
    stream = paused_stream(pause)
    live = wall_clock_skew is not None
    newest = [T0]
    windows = KeyWindows(
        WindowConfig.from_settings(settings),
        emit=emit,
        clock=lambda: (newest[0] if live else T0) / 1000,
    )
    model = Model(settings)
    for lo in range(0, len(stream), 1 if emit == "event" else 9):
        batch = stream[lo : lo + (1 if emit == "event" else 9)]
        newest[0] = max(newest[0], *(ts for _, ts, _ in batch))
        result = windows.accept_batch(batch)
        for (key, ts, value), outcome in zip(batch, result.outcomes, strict=True):
            assert isinstance(outcome, Accepted), (ts, outcome)
            assert model.accept(key, ts, value) == outcome.time
        for record in result.records:
            check_record(record, model, record.key)
    assert windows.stream_time == stream[-1][1] - 20_000 * (len(stream) % 5 == 0)
    check_entries(windows, model)


def test_max_future_skew_refuses_a_lone_outlier_and_cannot_latch():
    """With ``max_future_skew`` set: an event more than it ahead of the stream time and of the
    previous event is ``future`` (a lone outlier; the stream goes on); a pause costs only the
    first event after it, which the next one confirms, one by one and in a batch alike."""
    settings = replace(Settings(), max_future_skew=5 * MINUTE, max_wall_clock_skew=None)
    stream = [("a", T0, 1), ("a", T0 + 365 * DAY, 2), ("a", T0 + 1000, 3)]  # outlier
    stream += [("a", T0 + 10 * MINUTE + i, 10 + i) for i in range(5)]  # after a pause
    stream += [("b", T0 + 12 * MINUTE, 20)]
    for emit in ("event", "batch"):
        windows = KeyWindows(WindowConfig.from_settings(settings), emit=emit)
        if emit == "batch":
            outcomes = windows.accept_batch(stream).outcomes
        else:
            outcomes = []
            for event in stream:
                try:
                    outcomes.append(windows.accept(*event))
                except Rejected as rejected:
                    outcomes.append(rejected)
        refused = [i for i, o in enumerate(outcomes) if isinstance(o, Rejected)]
        assert refused == [1, 3], emit
        assert outcomes[1].reason == outcomes[3].reason == "future"
        assert "and > the previous event's time" in outcomes[3].detail
        assert windows.stream_time == T0 + 12 * MINUTE
        after = [T0 + 10 * MINUTE + i for i in range(1, 5)]
        assert [t for t, _ in windows.entries("a")] == [T0, T0 + 1000, *after]


def test_a_restart_costs_at_most_one_more_event_after_a_pause():
    """The previous event's time is not state: a partition restored right after a refused
    event measures the next one against the stream time alone, so the pause may cost one
    more event, never every later one."""
    settings = replace(Settings(), max_future_skew=5 * MINUTE, max_wall_clock_skew=None)
    windows = KeyWindows(WindowConfig.from_settings(settings))
    windows.accept("a", T0, 1)
    with pytest.raises(Rejected):
        windows.accept("a", T0 + 10 * MINUTE, 2)
    restored = KeyWindows(windows.config)
    restored.restore({"a": windows.entries("a")})
    with pytest.raises(Rejected):
        restored.accept("a", T0 + 10 * MINUTE + 1, 3)
    assert restored.accept("a", T0 + 10 * MINUTE + 2, 4).time == T0 + 10 * MINUTE + 2
    assert windows.accept("a", T0 + 10 * MINUTE + 1, 3).time == T0 + 10 * MINUTE + 1
