"""``window_end``: each record's windows end at the stream time or at the event's own time.

Both modes are checked against the brute-force ``tests.oracle.OracleWindow`` (one per key, over
the composed monoid, folding every entry of a range from scratch) on random out-of-order
streams: a record of an event at window time ``t`` holds, per window of size ``w``, the events
with ``max(end - w, S - R) <= time <= end``, ``end`` being ``S`` (``stream_time``) or ``t``
(``event_time``). Acceptance (late, future, bad value) is decided by the independent
``tests.test_key_windows.Model``.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import replace
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agents.clients import read_to_end
from agents.records import AggregateRecord
from app.demo import start_worker, stop_worker
from app.settings import ConfigError, Settings, load_settings
from app.topics import create_topics
from stores.key_windows import KeyWindows, Rejected, WindowConfig
from stores.monoids import compose, monoid
from tests.oracle import OracleWindow
from tests.test_key_windows import SETTINGS, Model, events, same_aggregates
from tests.test_worker_e2e import BASE, KEYS, make_settings, produce, wait_for_stats

MODES = ("stream_time", "event_time")


class Oracle:
    """Accepted events per key in ``OracleWindow``s; the windows of a record recomputed."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.model = Model(settings)
        names = ("count", *settings.aggregations)
        self.monoid = compose({name: monoid(name) for name in names})
        self.keys: dict[str, OracleWindow] = {}

    def accept(self, key: str, ts: int, value: object) -> str | int:
        t = self.model.accept(key, ts, value)
        if not isinstance(t, str):
            self.keys.setdefault(key, OracleWindow(self.monoid)).insert(t, value)
        return t

    def windows(self, key: str, end: int) -> dict[str, tuple[int, int, int, dict]]:
        horizon = self.model.stream_time - self.settings.retention
        window = self.keys.get(key, OracleWindow(self.monoid))
        out = {}
        for spec in self.settings.windows:
            start = end - spec.size_ms
            lowered = window.query_range(max(start, horizon), end)
            aggregates = {name: lowered[name] for name in self.settings.aggregations}
            out[spec.name] = (start, end, lowered["count"], aggregates)
        return out

    def expected(self, key: str, t: int) -> dict[str, tuple[int, int, int, dict]]:
        """The windows of the record of ``key``'s event at window time ``t``."""
        s = self.model.stream_time
        return self.windows(key, t if self.settings.window_end == "event_time" else s)


def check_record(record, oracle: Oracle, key: str, t: int) -> None:
    assert record.key == key and record.stream_time == oracle.model.stream_time
    expected = oracle.expected(key, t)
    assert list(record.windows) == list(expected)
    for name, (start, end, count, aggregates) in expected.items():
        got = record.windows[name]
        assert (got.start, got.end, got.count) == (start, end, count), name
        assert same_aggregates(got.aggregates, aggregates), (name, got.aggregates, aggregates)


def settings_for(window_end: str, resolution: int | None) -> Settings:
    return replace(SETTINGS, window_end=window_end, resolution=resolution)


@pytest.mark.parametrize("window_end", MODES)
@given(stream=events, resolution=st.sampled_from([None, None, 7]))
def test_event_records_match_the_oracle(window_end, stream, resolution):
    settings = settings_for(window_end, resolution)
    windows = KeyWindows(WindowConfig.from_settings(settings), emit="event")
    oracle = Oracle(settings)
    for key, ts, value in stream:
        t = oracle.accept(key, ts, value)
        try:
            outcome = windows.accept(key, ts, value)
        except Rejected as rejected:
            assert rejected.reason == t
            continue
        check_record(outcome.record, oracle, key, t)


@pytest.mark.parametrize("window_end", MODES)
@given(stream=events, cuts=st.lists(st.integers(0, 60), max_size=4))
def test_batch_records_match_the_oracle(window_end, stream, cuts):
    """``emit=batch``: per touched key, the windows after the whole batch, ending at the
    stream time or at the key's last accepted event's window time."""
    settings = settings_for(window_end, None)
    windows = KeyWindows(WindowConfig.from_settings(settings), emit="batch")
    oracle = Oracle(settings)
    bounds = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    for lo, hi in pairwise(bounds):
        batch = stream[lo:hi]
        last: dict[str, int] = {}
        for key, ts, value in batch:
            t = oracle.accept(key, ts, value)
            if not isinstance(t, str):
                last[key] = t
        result = windows.accept_batch(batch)
        assert [r.key for r in result.records] == list(last)
        for record in result.records:
            check_record(record, oracle, record.key, last[record.key])


def test_a_late_event_reports_its_own_windows_with_the_entries_present_now():
    """The README's worked example: windows of 10 ms, events at 100, 105, 120, then 103."""
    settings = replace(
        SETTINGS, windows=SETTINGS.windows[:1], aggregations=("sum",), window_end="event_time"
    )
    windows = KeyWindows(WindowConfig.from_settings(settings), emit="event")
    got = []
    for ts, value in ((100, 1), (105, 2), (120, 4), (103, 8)):
        w = windows.accept("k", ts, value).record.windows["w10"]
        got.append((w.start, w.end, w.count, w.aggregates["sum"]))
    assert got == [(90, 100, 1, 1), (95, 105, 2, 3), (110, 120, 1, 4), (93, 103, 2, 9)]


def test_window_end_is_a_setting_with_two_values():
    assert load_settings(environ={}).window_end == "stream_time"
    assert load_settings(environ={"FIBA_WINDOW_END": "event_time"}).window_end == "event_time"
    with pytest.raises(ConfigError, match=r"FIBA_WINDOW_END.*not one of stream_time, event_time"):
        load_settings(environ={"FIBA_WINDOW_END": "wall_clock"})


def test_event_time_windows_never_reach_below_the_retention():
    """Entries older than ``S - R`` that are still stored (a batch ``apply``-ed, evicted
    later) are outside every window, as in ``stream_time`` mode."""
    settings = replace(SETTINGS, retention=50, max_future_skew=200, window_end="event_time")
    windows = KeyWindows(WindowConfig.from_settings(settings), emit="batch")
    windows.apply([("k", 100, 1), ("k", 200, 2), ("k", 160, 4)], range(3))
    assert [t for t, _ in windows.entries("k")] == [100, 160, 200]
    w80 = windows.record_of("k", 160).windows["w80"]
    assert (w80.start, w80.end, w80.count, w80.aggregates["sum"]) == (80, 160, 1, 4)


def late_stream(n: int, seed: int) -> list[tuple[bytes, bytes]]:
    """Keyed input records, out of order by up to 3 s, every 10th one 2-15 s late (inside the
    20 s retention: accepted), a few beyond it (dead letters)."""
    rng = random.Random(seed)
    records = []
    for i in range(n):
        ts = BASE + i * 100 - rng.choice([0, 0, rng.randrange(3_000)])
        if i % 10 == 5:
            ts -= rng.randrange(2_000, 15_000)
        if i % 97 == 50:
            ts -= 60_000
        value = json.dumps({"ts": ts, "value": rng.randrange(-100, 100)}).encode()
        records.append((rng.choice(KEYS).encode(), value))
    return records


def aggregates_by_partition(settings: Settings) -> dict[int, list[AggregateRecord]]:
    got: dict[int, list[AggregateRecord]] = {}
    for r in asyncio.run(read_to_end(settings, settings.aggregates_topic)):
        record = AggregateRecord.from_json(json.loads(r.value))
        got.setdefault(record.input_partition, []).append(record)
    return got


@pytest.mark.kafka
@pytest.mark.timeout(240)
@pytest.mark.parametrize("window_end", MODES)
def test_the_worker_reports_the_windows_of_its_mode(
    kafka_bootstrap, embedded_profile, tmp_path, window_end
):
    """A ``fiba worker``'s aggregate records, per input partition in order, equal the oracle's
    replay of that partition's records in offset order."""
    settings = make_settings(kafka_bootstrap, embedded_profile, tmp_path / "state", "event")
    settings = replace(settings, window_end=window_end)
    asyncio.run(create_topics(settings))
    records = late_stream(400, seed=5)
    placed = asyncio.run(produce(settings, settings.input_topic, records))
    oracles = {p: Oracle(settings) for p in range(settings.partitions)}
    expected: dict[int, list] = {}
    out_of_order = 0
    for (partition, _), (key, value) in sorted(zip(placed, records, strict=True)):
        obj = json.loads(value)
        t = oracles[partition].accept(key.decode(), obj["ts"], obj["value"])
        if not isinstance(t, str):
            oracle = oracles[partition]
            out_of_order += t < oracle.model.stream_time
            wanted = (key.decode(), oracle.model.stream_time, oracle.expected(key.decode(), t))
            expected.setdefault(partition, []).append(wanted)
    assert out_of_order > 40  # where the two modes differ
    worker = start_worker(settings, tmp_path / "worker.log")
    try:
        wait_for_stats(settings, worker, len(records))
        deadline = time.monotonic() + 60
        while True:  # "accepted" is counted before the record's aggregate is sent
            got = aggregates_by_partition(settings)
            if sum(map(len, got.values())) >= sum(map(len, expected.values())):
                break
            assert time.monotonic() < deadline, "aggregates missing"
            time.sleep(0.5)
    except BaseException:
        print((tmp_path / "worker.log").read_text(errors="replace")[-5000:])
        raise
    finally:
        stop_worker(worker)
    assert {p: len(rs) for p, rs in got.items()} == {p: len(w) for p, w in expected.items()}
    for partition, wanted in expected.items():
        for record, (key, stream_time, windows) in zip(got[partition], wanted, strict=True):
            assert (record.key, record.stream_time) == (key, stream_time)
            for name, (start, end, count, aggregates) in windows.items():
                w = record.windows[name]
                assert (w.start, w.end, w.count) == (start, end, count), (record, name)
                assert same_aggregates(w.aggregates, aggregates), (record, name)


def test_the_window_end_benchmark_runs(capsys):
    from bench.window_end import main

    main(["--events", "300", "--occupancies", "100", "--rounds", "1"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 100 |")]
    assert len(rows) == 1 and float(rows[0].split("|")[-2]) > 0
