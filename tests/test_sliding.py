"""The sliding-window API (``agents.sliding`` over ``stores.sliding_state``) against a brute-force
oracle, and its changelog: replaying the records ``SlidingWindows.add`` writes (or their
compaction) rebuilds the same state.

The oracle keeps one ``tests.oracle.OracleWindow`` per key (every accepted event, never evicted)
and a stream time per partition; a window is the oracle's fold over ``[S - w, S]``, a range its
fold over ``[max(t_from, S - R), t_to]``. Aggregations include ``collect`` and a custom
non-commutative monoid, so the order of combination is checked, not only the multiset.
"""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from pathlib import Path

import faust
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from agents.sliding import AggregationError, SlidingWindows, composed_monoid
from app.settings import ConfigError, load_settings
from stores.faust_sliding import SlidingStore
from stores.monoids import argmax, make_monoid, monoid
from stores.sliding_state import FutureEvent, KeyPartitionError, LateEvent, SlidingState
from tests import custom_monoids
from tests.oracle import OracleWindow

LAST_TWO = make_monoid(
    (), lambda x: (x,), lambda a, b: (a + b)[-2:], list, name="last_two", to_state=list,
    from_state=tuple,
)  # fmt: skip
AGGREGATIONS = ["count", "sum", "collect", LAST_TWO]
WINDOWS = {"w5": 5, "w20": 20, "w40": 40}
RETENTION = 40
MAX_FUTURE_SKEW = 30
KEYS = ("a", "b", "c", "d")


def partition_of(key: str) -> int:
    return KEYS.index(key) % 2


class Oracle:
    """Brute force over every accepted event (see the module doc)."""

    def __init__(self, composed) -> None:
        self.composed = composed
        self.keys: dict[str, OracleWindow] = {}
        self.stream_time: dict[int, int] = {}
        self.previous: dict[int, int] = {}

    def add(self, key: str, t: int, value: int) -> type[Exception] | None:
        """The exception of an event that is late or too far ahead of both the stream time and
        the partition's previous event, whatever became of that (nothing changes)."""
        p = partition_of(key)
        s = self.stream_time.get(p)
        previous = self.previous.get(p, s)
        self.previous[p] = t
        if s is not None and t < s - RETENTION:
            return LateEvent
        if s is not None and t > s + MAX_FUTURE_SKEW and t > previous + MAX_FUTURE_SKEW:
            return FutureEvent
        self.keys.setdefault(key, OracleWindow(self.composed)).insert(t, value)
        self.stream_time[p] = t if s is None else max(s, t)
        return None

    def range(self, key: str, t_from: int, t_to: int):
        window = self.keys.get(key)
        if window is None:
            return self.composed.lower(self.composed.identity)
        s = self.stream_time[partition_of(key)]
        return window.query_range(max(t_from, s - RETENTION), t_to)

    def windows(self, key: str) -> dict:
        s = self.stream_time.get(partition_of(key))
        if s is None or key not in self.keys:
            return {name: self.composed.lower(self.composed.identity) for name in WINDOWS}
        return {name: self.range(key, s - w, s) for name, w in WINDOWS.items()}


@st.composite
def events(draw) -> list[tuple[str, int, int]]:
    """``(key, t, value)``: times drift forward by steps of -6..12, or jump 45 back (late) or
    ahead (too far ahead for ``MAX_FUTURE_SKEW``: refused, then the next event is accepted)."""
    steps = draw(
        st.lists(
            st.tuples(
                st.sampled_from(KEYS),
                st.integers(-6, 12) | st.sampled_from([-45, 45]),
                st.integers(-5, 5),
            ),
            max_size=120,
        )
    )
    t = 0
    out = []
    for key, step, value in steps:
        t = max(0, t + step)
        out.append((key, t, value))
    return out


def replay(composed, changelog) -> SlidingState:
    """A new state holding what ``changelog`` records ``(partition, (key, t), state | None)``
    say, applied in order as the store's ``apply_changelog_batch`` does."""
    state = SlidingState(composed, WINDOWS, RETENTION)
    for partition, (key, t), value in changelog:
        if value is None:
            state.remove(partition, key, t)
        else:
            state.put(partition, key, t, composed.from_state(value))
    return state


@given(events(), st.integers(0, 150), st.integers(0, 150))
@example([("a", 10, 1), ("a", 11, 2), ("a", 51, 3), ("a", 10, 4)], 0, 150)  # 11 stays, 10 goes
def test_windows_and_ranges_equal_the_oracle(evs, t_from, t_to) -> None:
    composed = composed_monoid(AGGREGATIONS)
    state = SlidingState(composed, WINDOWS, RETENTION, MAX_FUTURE_SKEW)
    oracle = Oracle(composed)
    changelog = []
    for key, t, value in evs:
        p = partition_of(key)
        refused = oracle.add(key, t, value)
        if refused is not None:
            with pytest.raises(refused):
                state.add(p, key, t, value)
            continue
        outcome = state.add(p, key, t, value)
        changelog.append((p, (key, t), composed.to_state(outcome.partial)))
        changelog.extend((p, evicted, None) for evicted in outcome.evicted)
        assert state.all_windows(key) == oracle.windows(key)
        assert state.stream_time(key) == oracle.stream_time[p]
    for key in KEYS:
        assert state.all_windows(key) == oracle.windows(key)
        assert state.range(key, t_from, t_to) == oracle.range(key, t_from, t_to)
    # nothing older than the retention is kept (each evicted entry got a tombstone)
    horizon = {p: s - RETENTION for p, s in oracle.stream_time.items()}
    assert all(t >= horizon[partition_of(key)] for key, t, _ in state.entries())
    # the changelog, in full or compacted (the last record per entry), rebuilds the state
    last = {entry: (p, entry, value) for p, entry, value in changelog}
    for records in (changelog, list(last.values())):
        restored = replay(composed, records)
        assert sorted(restored.entries()) == sorted(state.entries())
        for key in KEYS:
            assert restored.all_windows(key) == state.all_windows(key)
            assert restored.stream_time(key) == state.stream_time(key)


@given(events())
def test_replaying_a_changelog_twice_changes_nothing(evs) -> None:
    """Faust may re-apply records already applied (recovery from a persisted offset)."""
    composed = composed_monoid(AGGREGATIONS)
    state = SlidingState(composed, WINDOWS, RETENTION)
    changelog = []
    for key, t, value in evs:
        p = partition_of(key)
        try:
            outcome = state.add(p, key, t, value)
        except LateEvent:
            continue
        changelog.append((p, (key, t), composed.to_state(outcome.partial)))
        changelog.extend((p, evicted, None) for evicted in outcome.evicted)
    restored = replay(composed, changelog + changelog)
    assert sorted(restored.entries()) == sorted(state.entries())


def test_bad_input_changes_nothing() -> None:
    state = SlidingState(composed_monoid(["sum"]), WINDOWS, RETENTION, MAX_FUTURE_SKEW)
    state.add(0, "a", 100, 1)
    with pytest.raises(LateEvent, match="time 59 < stream time 100 - retention 40"):
        state.add(0, "a", 59, 1)
    with pytest.raises(FutureEvent, match="time 131 > stream time 100 \\+ max_future_skew 30"):
        state.add(0, "a", 131, 1)
    with pytest.raises(ValueError, match="cannot aggregate 'x'"):
        state.add(0, "a", 100, "x")
    with pytest.raises(ValueError, match="time must be an int"):
        state.add(0, "a", 100.5, 1)
    with pytest.raises(KeyPartitionError, match="key 'a' is in partition 0, not 1"):
        state.add(1, "a", 100, 1)
    assert state.all_windows("a") == {name: {"sum": 1} for name in WINDOWS}
    assert list(state.entries()) == [("a", 100, (1,))]


def test_keys_and_partitions_are_dropped_with_their_entries() -> None:
    state = SlidingState(composed_monoid(["count"]), WINDOWS, RETENTION)
    state.add(0, "a", 10, None)
    state.add(1, "b", 10, None)
    state.drop_partition(0)
    assert state.partition_of("a") is None and state.stream_time("a") is None
    assert state.add(1, "a", 10, None).evicted == []  # "a" may now live in partition 1
    assert state.window("b", "w5") == {"count": 1}
    outcome = state.add(1, "b", 61, None)  # S = 61: entries older than 21 go
    assert sorted(outcome.evicted) == [("a", 10), ("b", 10)]
    assert state.partition_of("a") is None


def test_declaration_errors() -> None:
    with pytest.raises(ValueError, match="window 'w' \\(50\\) must be in \\[0, retention 40\\]"):
        SlidingState(composed_monoid(["count"]), {"w": 50}, 40)
    with pytest.raises(ValueError, match="unknown aggregation 'median'"):
        composed_monoid(["median"])
    with pytest.raises(ValueError, match="is a builtin_function_or_method, not a monoid"):
        composed_monoid([len])
    with pytest.raises(ValueError, match="two aggregations named 'count'"):
        composed_monoid(["count", monoid("count")])


def test_durations_are_read_as_the_worker_settings_read_them() -> None:
    """One parser (``stores.durations``) for the Faust API and the settings: ``" 2 s "`` and
    ``"1500"`` as in a TOML file, a ``timedelta`` of whole milliseconds; the settings' errors."""
    app = faust.App(f"sliding-{uuid.uuid4().hex[:8]}", broker="kafka://127.0.0.1:1")
    windows = SlidingWindows(
        app, "d", windows=[" 2 s ", timedelta(seconds=1)], retention="2500",
        max_future_skew=timedelta(minutes=1), aggregations=["count"],
    )  # fmt: skip
    assert windows.state.windows == {"2 s": 2_000, "1000ms": 1_000}
    assert (windows.state.retention, windows.state.max_future_skew) == (2_500, 60_000)
    bad = [
        (
            "5 minutes",
            "not a duration: '5 minutes' \\(use e.g. 250ms, 10s, 5m, 1h, 1d or integer ms\\)",
        ),
        (timedelta(microseconds=1500), "not a whole number of milliseconds"),
        (timedelta(seconds=-1), "negative duration: -1000"),
        (True, "not a duration: True"),
    ]
    for duration, message in bad:
        with pytest.raises(ValueError, match=message):
            SlidingWindows(app, "e", windows=["1s"], retention=duration, aggregations=["count"])
    with pytest.raises(ConfigError, match=f"environment FIBA_RETENTION: .*{bad[0][1]}"):
        load_settings(environ={"FIBA_RETENTION": "5 minutes"})


def test_the_documented_faust_example_is_the_tested_example_file() -> None:
    """The library page's Faust example is ``examples/clicks.py`` verbatim (which
    ``tests/test_sliding_e2e.py`` runs as a worker)."""
    root = Path(__file__).resolve().parent.parent
    page = root / "docs" / "reference" / "library.md"
    section = page.read_text().split("## Sliding windows in your own Faust", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", section.split("\n## ", 1)[0], flags=re.DOTALL)
    assert blocks == [(root / "examples" / "clicks.py").read_text()]


def test_bench_sliding_api_replays_its_changelog_exactly() -> None:
    """``bench.sliding_api`` at a small size (it asserts the replayed state equals the state)."""
    from bench.sliding_api import run

    result = run(events=3_000, keys=20, disorder_ms=5_000)
    assert result["records_per_event"] == 1  # 30 s of events, 10 min retention: no eviction


def test_windows_declared_on_a_faust_app() -> None:
    """A ``SlidingWindows`` is a Faust table of the app with a ``SlidingStore``; its entries
    read through the table as ``(key, t) -> state``; ``add`` outside a stream is refused."""
    app = faust.App(f"sliding-{uuid.uuid4().hex[:8]}", broker="kafka://127.0.0.1:1")
    windows = SlidingWindows(
        app, "clicks", windows=["1m", 5_000], retention="1h", aggregations=["count", "sum"]
    )
    assert app.tables["clicks"] is windows.table
    assert windows.table.changelog_topic_name == f"{app.conf.id}-clicks-changelog"
    assert isinstance(windows.table.data, SlidingStore)
    with pytest.raises(RuntimeError, match="while iterating a stream"):
        windows.add("a", 1, 1)
    assert windows.get("a", "1m") == {"count": 0, "sum": 0}
    windows.state.add(0, "a", 60_000, 4)
    windows.state.add(0, "a", 1_000, 3)
    assert dict(windows.table.items()) == {("a", 1_000): [1, 3], ("a", 60_000): [1, 4]}
    assert windows.get("a", "5000ms") == {"count": 1, "sum": 4}
    assert windows.range("a", 0, 1_000) == {"count": 1, "sum": 3}
    assert windows.stream_time("a") == 60_000
    with pytest.raises(KeyError, match="no window '2m'"):
        windows.get("a", "2m")
    with pytest.raises(ValueError, match="already exists"):
        SlidingWindows(app, "clicks", windows=["1m"], retention="1h", aggregations=["count"])


def test_the_faust_api_takes_the_worker_aggregations() -> None:
    """Whatever the worker's ``aggregations`` setting accepts, ``SlidingWindows`` does: an
    import path (named by itself, its object partials stored through its ``to_state``), a
    built-in name, and a built-in monoid object with parameters (not spot-checked: ``argmax``
    lifts mappings)."""
    app = faust.App(f"sliding-{uuid.uuid4().hex[:8]}", broker="kafka://127.0.0.1:1")
    span = "tests.custom_monoids:SPAN"
    windows = SlidingWindows(
        app, "spans", windows=["1m"], retention="1h",
        aggregations=["count", span, argmax(value_field="v", arg_field="who")],
    )  # fmt: skip
    windows.state.add(0, "a", 2_000, {"v": 1, "who": "x"})
    windows.state.add(0, "a", 1_000, {"v": 5, "who": "y"})
    first, last = {"v": 5, "who": "y"}, {"v": 1, "who": "x"}
    assert windows.get("a", "1m") == {
        "count": 2, span: {"first": first, "last": last, "n": 2}, "argmax": "y",
    }  # fmt: skip
    assert dict(windows.table.items())[("a", 1_000)] == [1, [first, first, 1], [5, "y"]]


@pytest.mark.parametrize(
    ("aggregation", "message"),
    [
        ("tests.custom_monoids:NOT_ASSOCIATIVE", "'tests.custom_monoids:NOT_ASSOCIATIVE' is not"),
        (custom_monoids.NOT_ASSOCIATIVE, "is not associative: combine\\(combine\\(a, b\\), c\\)"),
        ({"mid": custom_monoids.WRONG_IDENTITY}, "'mid': identity 0 is not neutral"),
        ("tests.custom_monoids:MISSING", "no attribute 'MISSING'"),
    ],
)
def test_the_faust_api_refuses_a_bad_aggregation_as_the_worker_does(aggregation, message) -> None:
    app = faust.App(f"sliding-{uuid.uuid4().hex[:8]}", broker="kafka://127.0.0.1:1")
    aggregations = aggregation if isinstance(aggregation, dict) else ["count", aggregation]
    with pytest.raises(AggregationError, match=message):
        SlidingWindows(app, "bad", windows=["1m"], retention="1h", aggregations=aggregations)
    assert "bad" not in app.tables


MINUTE, DAY = 60_000, 86_400_000


@pytest.mark.parametrize("pause", [6 * MINUTE, DAY, 30 * DAY], ids=["6m", "1d", "30d"])
def test_a_pause_in_event_time_latches_nothing(pause) -> None:
    """Five events, a pause, five more: with no ``max_future_skew`` all ten count; with one
    (5m) only the first after the pause is ``FutureEvent``, the next confirms the jump and the
    rest count (before, every event after the pause was refused for good)."""
    times = [i * 1000 for i in range(5)] + [4000 + pause + i * 1000 for i in range(5)]
    composed = composed_monoid(["count", "sum"])
    free = SlidingState(composed, {"5m": 5 * MINUTE}, 60 * MINUTE)
    guarded = SlidingState(composed, {"5m": 5 * MINUTE}, 60 * MINUTE, 5 * MINUTE)
    refused = []
    for value, t in enumerate(times):
        free.add(0, "k", t, value)
        try:
            guarded.add(0, "k", t, value)
        except FutureEvent:
            refused.append(value)
    assert free.window("k", "5m") == {"count": 5, "sum": 5 + 6 + 7 + 8 + 9}
    assert refused == [5]
    assert guarded.window("k", "5m") == {"count": 4, "sum": 6 + 7 + 8 + 9}
    assert guarded.stream_time("k") == times[-1]
