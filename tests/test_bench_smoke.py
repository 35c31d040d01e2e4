"""The benchmark suite: its generators do what they claim, and a quick run produces sane output.

The smoke test runs every experiment of ``python -m bench all --quick`` (sum only, one timed
repetition of 1 ms per point: what is checked is the shape of the results, not their precision)
in-process and checks the printed report and the CSV and PNG files. It asserts nothing about
speed: timings are only ever judged in ``bench/RESULTS.md``.
"""

from __future__ import annotations

import asyncio
import csv
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

import stores
from bench.bursty import BurstySpec, bursty_stream, window_statistics
from bench.cli import bench
from bench.experiments import EXPERIMENTS
from bench.timing import LatencySummary, median_rates, percentile, wall_and_cpu_s
from bench.workloads import AdversarialWindow
from stores.monoids import monoid
from tests.oracle import OracleWindow


class RecordingWindow(OracleWindow):
    """The oracle window, recording the distance from the young end of every insert."""

    def __init__(self) -> None:
        super().__init__(monoid("sum"))
        self.distances: list[int] = []

    def insert(self, t, x) -> None:
        self.distances.append(len(self.entries) - self.entries.bisect_right(t))
        super().insert(t, x)


@pytest.mark.parametrize(("n", "d"), [(8, 0), (8, 3), (20, 7), (20, 19)])
def test_adversarial_rounds_insert_exactly_d_from_the_young_end(n: int, d: int) -> None:
    window = AdversarialWindow(RecordingWindow(), n, d)
    window.agg.distances.clear()
    window.rounds(50)
    assert window.agg.distances == [d] * 50
    assert len(window.agg) == n
    assert window.agg.oldest() == window.oldest_low


def test_widen_and_grow_move_the_window_without_a_rebuild() -> None:
    window = AdversarialWindow(RecordingWindow(), 16, 0)
    window.widen(5)
    assert (len(window.agg), window.d) == (16, 5)
    window.grow(40)
    assert len(window.agg) == 40
    window.agg.distances.clear()
    window.rounds(10)
    window.batch_rounds(3, 4, bulk_evict=True, bulk_insert=True)
    assert window.agg.distances == [5] * 22
    assert len(window.agg) == 40
    with pytest.raises(ValueError):
        window.widen(40)


def test_batch_rounds_keep_the_window_and_match_a_fresh_sum() -> None:
    window = AdversarialWindow(OracleWindow(monoid("sum")), 64, 8)
    window.batch_rounds(5, 16, bulk_evict=True, bulk_insert=False)
    evictions, insertions = window.batch_latencies(3, 16, bulk_evict=False, bulk_insert=True)
    assert len(evictions) == len(insertions) == 3
    assert min(evictions + insertions) >= 0
    expected = sum(1 + t % 101 for t, _ in window.agg)
    assert window.agg.query() == expected
    assert len(window.agg) == 64


def test_window_statistics_match_brute_force() -> None:
    times, values = bursty_stream(BurstySpec(days=0.02, mean_rate=2.0, seed=7))
    assert len(times) == len(values) > 100
    assert all(1 <= v <= 100 for v in values)
    width = 60_000
    stats = window_statistics(times, width)
    window: set[int] = set()
    now = None
    sizes, evicted, distances, dropped = [], [], [], 0
    for t in times:
        if now is not None and t <= now - width:
            dropped += 1
            continue
        distances.append(sum(1 for u in window if u > t))
        window.add(t)
        now = t if now is None else max(now, t)
        old = {u for u in window if u <= now - width}
        window -= old
        evicted.append(len(old))
        sizes.append(len(window))
    assert (stats.sizes, stats.evicted, stats.distances, stats.dropped) == (
        sizes,
        evicted,
        distances,
        dropped,
    )
    assert max(distances) > 0  # the stream really is out of order


def test_percentiles_use_the_nearest_rank() -> None:
    samples = list(range(1, 1001))
    assert percentile(samples, 50) == 500
    assert percentile(samples, 99) == 990
    assert percentile(samples, 99.9) == 999
    assert percentile(samples, 100) == 1000
    summary = LatencySummary.of([5, 1, 3])
    assert (summary.min, summary.median, summary.max, summary.mean) == (1, 3, 5, 3)


RATE_COLUMNS = {"per_second", "rounds_per_s", "entries_per_s", "events_per_s"}


def test_median_rates_divide_the_units_by_the_median_wall_and_cpu_times() -> None:
    """bench.native's and bench.native_io's rates: medians of (wall, CPU) samples, not means."""
    samples = [(2.0, 1.0), (4.0, 8.0), (1.0, 2.0)]
    assert median_rates(samples, 100) == {"per_wall_s": 50.0, "per_cpu_s": 50.0}
    wall, cpu = wall_and_cpu_s(lambda: sum(range(100_000)))
    assert wall > 0 and cpu >= 0


def test_quick_run_of_every_experiment_writes_sane_results(tmp_path) -> None:
    outcome = CliRunner().invoke(
        bench,
        [
            *("all", "--quick", "--monoids", "sum", "--repetitions", "1", "--seconds", "0.001"),
            *("--out", str(tmp_path)),
        ],
    )
    assert outcome.exit_code == 0, outcome.output
    report = outcome.output
    assert report.startswith("command: python -m bench all --quick --monoids sum")
    for fact in ("cpu:", "cores:", "python:", "date:"):
        assert f"\n{fact} " in report
    for name in EXPERIMENTS:
        assert f"== {name}: " in report
        rows = _csv_rows(tmp_path / f"{name}.csv")
        assert rows, name
        for row in rows:
            for column, cell in row.items():
                number = _number(cell)
                if number is not None:
                    assert number >= 0 and math.isfinite(number), (name, column, cell)
                if column in RATE_COLUMNS:
                    assert number is not None and number > 0, (name, column, cell)
        png = (tmp_path / f"{name}.png").read_bytes()
        assert png.startswith(b"\x89PNG") and len(png) > 10_000, name
    saved = (tmp_path / "report-all.txt").read_text()
    assert saved.startswith("command: python -m bench all --quick") and "\n== targets\n" in saved
    targets = report.split("\n== targets\n", 1)[1]
    for claim in ("TwoStacksLite", "ClassicBTree", "bulk_evict of 1024", "flat within"):
        assert claim in targets
    assert "[MET]" in targets or "[NOT MET]" in targets
    ooo_algorithms = {r["algorithm"] for r in _csv_rows(tmp_path / "ooo.csv")}
    assert ooo_algorithms == {"fiba2", "fiba4", "fiba8", "classic_btree4"}
    assert "DABA excluded from out-of-order runs" in report


def _csv_rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(path.read_text().splitlines()))


def _number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None


def test_worker_pipeline_report_takes_medians_over_rounds_and_reports_flatness() -> None:
    from bench.worker_pipeline import markdown

    def row(scenario: str, occupancy: int, rate: float, round_: int) -> dict:
        return {
            "scenario": scenario,
            "occupancy": occupancy,
            "events_per_s": rate,
            "cpu_us_per_event": 1e6 / rate,
            "round": round_,
        }

    results = [
        row("bare", 100, 1000, 1),
        row("event", 100, 900, 1),
        row("event", 10000, 600, 1),
        row("bare", 100, 3000, 2),
        row("event", 100, 1100, 2),
        row("event", 10000, 1000, 2),
        row("bare", 100, 2000, 3),
        row("event", 100, 1000, 3),
        row("event", 10000, 800, 3),
        {**row("event", 1000, 100, 1), "queries": True},  # own row, not in the flatness
        row("floor", 100, 4000, 1),
        row("emit-floor", 100, 400, 1),
        row("batch-floor", 100, 800, 1),
    ]
    report = markdown(results)
    assert "| bare | - | 2,000 [1,000-3,000] | 100% | 500 | 100% |" in report
    assert "| event | 100 | 1,000 [900-1,100] | 50% | 1,000 | 50% |" in report
    assert "| event | 10,000 | 800 [600-1,000] | 40% | 1,250 | 40% |" in report
    assert "| event + queries | 1,000 | 100 | 5% | 10,000 | 5% |" in report
    assert (
        "event: slowest occupancy at 80% of the fastest (medians, runs without queries); "
        "per round 67%, 91%, 80%"
    ) in report
    assert "| floor | - | 4,000 | 200% | 250 | 200% |" in report
    assert (
        "event against the floor (a bare aiokafka consumer, 4,000 events/s): 0.200x-0.250x "
        "(goal >= 0.25x)"
    ) in report
    assert "| emit-floor | - | 400 | 20% | 2,500 | 20% |" in report
    assert (
        "emit-floor (the floor plus encoding and producing one aggregate record per event, no "
        "window work): 0.100x the floor, 2,500.0 CPU µs/event: the most emit=event can reach"
    ) in report
    assert "| batch-floor | - | 800 | 40% | 1,250 | 40% |" in report
    assert (
        "batch-floor (the floor plus parsing, lifting, the window store's writes and changelog "
        "records, one eviction per event and one aggregate record per key per batch, no window "
        "work): 0.200x the floor, 1,250.0 CPU µs/event: the most emit=batch can reach"
    ) in report


def test_worker_pipeline_keeps_the_first_query_out_of_the_latency_percentiles() -> None:
    """The first query of a run pays the set-up (0.2-0.4 s): reported on its own, so that with a
    few dozen queries it is not the p99."""
    from bench.worker_harness import latency_figures

    latencies = [0.35] + [0.010] * 50 + [0.030]
    figures = latency_figures(latencies)
    assert figures["first"] == pytest.approx(350)
    assert figures["n"] == 51
    assert figures["p50"] == pytest.approx(10)
    assert figures["p99"] == pytest.approx(30)


def test_the_emit_floor_writes_aggregate_records_of_the_workers_shape(tmp_path) -> None:
    """What ``emit-floor`` produces per event is a valid aggregate record with every window
    and aggregation of the scenario's settings, answering that event."""
    from bench.bench_broker import BenchBroker
    from bench.worker_harness import T0, scenario_settings
    from bench.worker_scenarios import emit_floor_encoder
    from tests.test_output_schemas import validate

    settings = scenario_settings(
        BenchBroker("127.0.0.1:9", "embedded", "embedded"), 100, "event", tmp_path
    )
    obj = json.loads(emit_floor_encoder(settings)("key-3", T0, 41, 2))
    validate("aggregate", obj)
    answered = (obj["input_partition"], obj["input_offset"])
    assert (obj["key"], obj["event_ts"], answered) == ("key-3", T0, (2, 41))
    assert list(obj["windows"]) == [w.name for w in settings.windows]
    for w in settings.windows:
        window = obj["windows"][w.name]
        assert (window["start"], window["end"], window["count"]) == (T0 - w.size_ms, T0, 1000)
        assert list(window["aggregates"]) == list(settings.aggregations)


@pytest.mark.parametrize("bulk", [True, False], ids=["add_many", "add"])
def test_the_emit_floor_answers_every_input_record(
    kafka_bootstrap: str, broker_kind: str, broker_profile: str, tmp_path, bulk: bool
) -> None:
    """``emit-floor``'s work per fetched chunk (``emit_chunk``) leaves one aggregate record per
    input record, with its key and timestamp, answering its partition and offset, whether a
    chunk is queued in one ``add_many`` or a record at a time (``aiokafka-emit-floor``)."""

    from agents.clients import read_to_end
    from app.topics import create_topics
    from bench.bench_broker import BenchBroker
    from bench.worker_harness import event_stream, produce, scenario_settings
    from bench.worker_scenarios import emit_chunk, emit_floor_encoder, floor_clients

    broker = BenchBroker(kafka_bootstrap, broker_profile, broker_kind)
    settings = scenario_settings(broker, 100, "event", tmp_path / "floor")
    asyncio.run(create_topics(settings))
    asyncio.run(produce(settings, event_stream(500)))

    async def run_floor() -> None:
        async with floor_clients(settings) as (consumer, outputs):
            encode, done = emit_floor_encoder(settings), 0
            while done < 500:
                chunk = await consumer.getmany(timeout_ms=1000, max_records=100)
                await emit_chunk(outputs, encode, chunk, bulk)
                done += sum(map(len, chunk.values()))

    asyncio.run(run_floor())
    inputs = asyncio.run(read_to_end(settings, settings.input_topic))
    answers = asyncio.run(read_to_end(settings, settings.aggregates_topic))
    answered = {
        (json.loads(r.value)["input_partition"], json.loads(r.value)["input_offset"]): r
        for r in answers
    }
    assert len(answers) == len(answered) == len(inputs) == 500
    for record in inputs:
        answer = answered[record.partition, record.offset]
        assert (answer.key, answer.timestamp) == (record.key, record.timestamp)


@pytest.mark.parametrize("bulk", [True, False], ids=["add_many", "add"])
def test_the_batch_floor_makes_every_event_durable_and_answers_every_key(
    kafka_bootstrap: str, broker_kind: str, broker_profile: str, tmp_path, bulk: bool
) -> None:
    """``batch-floor`` does the durable part of ``emit=batch``: after its batches, a store
    restored from the changelog alone (no local copy) holds every event's entry at the last
    offset of each partition, and the aggregates topic has a record per key of each batch
    (queued a batch at a time, or a record at a time as ``aiokafka-batch-floor`` does)."""

    from agents.clients import read_to_end
    from agents.kafka_changelog import KafkaChangelog
    from app.topics import create_topics
    from bench.bench_broker import BenchBroker
    from bench.worker_harness import event_stream, produce, scenario_settings
    from bench.worker_scenarios import DurableFloor, emit_floor_encoder, floor_clients
    from stores.key_windows import WindowConfig
    from stores.window_store import MarshalStateCodec, WindowStore

    broker = BenchBroker(kafka_bootstrap, broker_profile, broker_kind)
    settings = scenario_settings(broker, 100, "batch", tmp_path / "floor")
    records = event_stream(600)
    asyncio.run(create_topics(settings))
    asyncio.run(produce(settings, records))

    async def run_floor() -> int:
        async with floor_clients(settings) as (consumer, outputs):
            accepted = batches = 0
            encode = emit_floor_encoder(settings)
            async with DurableFloor(settings, outputs, encode, bulk) as floor:
                while accepted < len(records):
                    accepted += await floor.next_batch(consumer)
                    batches += 1
            return batches

    batches = asyncio.run(run_floor())

    async def restored() -> dict[int, tuple[int, dict[str, list]]]:
        fresh = replace(settings, state_dir=tmp_path / "restored")
        codec = MarshalStateCodec(WindowConfig.from_settings(fresh).composed)
        store = WindowStore(fresh, codec, KafkaChangelog(fresh))
        await store.start()
        try:
            states = [await store.restore(p) for p in range(settings.partitions)]
        finally:
            await store.stop()
        return {s.partition: (s.applied_offset, s.windows) for s in states}

    states = asyncio.run(restored())
    entries: dict[int, set[tuple[str, int]]] = {}
    last_offset: dict[int, int] = {}
    for record in asyncio.run(read_to_end(settings, settings.input_topic)):
        ts = json.loads(record.value)["ts"]
        entries.setdefault(record.partition, set()).add((record.key.decode(), ts))
        last_offset[record.partition] = max(last_offset.get(record.partition, -1), record.offset)
    for partition, (applied, windows) in states.items():
        assert applied == last_offset[partition]
        assert {(key, t) for key, pairs in windows.items() for t, _ in pairs} == entries[partition]
    keys = {key for key, _ in records}
    aggregates = asyncio.run(read_to_end(settings, settings.aggregates_topic))
    assert {r.key for r in aggregates} == keys
    assert len(keys) <= len(aggregates) <= len(keys) * batches


def test_worker_pipeline_report_gives_exactly_once_share_of_at_least_once() -> None:
    from bench.worker_pipeline import markdown

    def row(scenario: str, guarantee: str, rate: float, round_: int) -> dict:
        return {
            "scenario": scenario,
            "occupancy": 100,
            "events_per_s": rate,
            "cpu_us_per_event": 1e6 / rate,
            "round": round_,
            "guarantee": guarantee,
        }

    results = [
        row("batch", "at_least_once", 4000, 1),
        row("batch", "exactly_once", 3000, 1),
        row("batch", "at_least_once", 5000, 2),
        row("batch", "exactly_once", 4500, 2),
    ]
    report = markdown(results)
    assert "| batch + exactly_once | 100 | 3,750 [3,000-4,500] |" in report
    assert "batch, 100/key: exactly_once at 83% of at_least_once's events/s" in report


def test_the_worker_benchmarks_use_the_profile_of_the_broker_kind(tmp_path) -> None:
    from bench.bench_broker import BenchBroker, results_path
    from bench.worker_harness import scenario_settings

    for kind, profile in (("embedded", "embedded"), ("kafka", "kafka")):
        settings = scenario_settings(
            BenchBroker("127.0.0.1:9", profile, kind), 100, "event", tmp_path
        )
        assert (settings.broker_profile, settings.bootstrap_servers) == (profile, ("127.0.0.1:9",))
    results = tmp_path / "query_latency.json"
    assert results_path(results, "embedded") == results
    assert results_path(results, "kafka") == tmp_path / "query_latency_kafka.json"


def test_broker_benchmark_results_record_the_command_machine_and_date(
    tmp_path, monkeypatch
) -> None:
    from bench.bench_broker import announce_run, write_results

    monkeypatch.setattr(sys, "argv", ["peers.py", "run", "--quick"])
    facts = announce_run("bench.peers")
    write_results([{"scenario": "event"}], tmp_path / "peers.json", "kafka", facts)
    document = json.loads((tmp_path / "peers_kafka.json").read_text())
    assert document["command"] == "python -m bench.peers run --quick"
    machine = document["machine"]
    assert machine["cores"] and machine["cpu"] and machine["code"]
    assert document["date"] == machine["date"] and document["date"].endswith("UTC")
    assert len(document["load_after"].split()) == 3
    assert document["results"] == [{"scenario": "event"}]


@pytest.mark.skipif(stores.native() is None, reason="bench.batch_share prices native calls")
async def test_batch_share_prices_each_call_on_a_store_without_kafka(tmp_path) -> None:
    """``bench.batch_share`` runs the store's calls offline (``stores.null_changelog``): every
    call is priced and the store restores its partitions from the empty changelog."""
    from bench.batch_share import run_once

    figures = await run_once(occupancy=10, events=400, batch=100, state_dir=tmp_path)
    calls = {"apply_encoded", "lowered_windows", "encode_many", "record_many", "send_changes"}
    assert calls <= set(figures) and all(figures[name] > 0 for name in calls)


async def test_batch_share_says_in_one_line_that_it_needs_the_native_core(
    tmp_path, monkeypatch
) -> None:
    """Under the pure-Python build ``bench.batch_share`` stops with one line (it failed with an
    ``AttributeError`` on the Python windows, which have no ``apply_encoded``)."""
    from bench import batch_share

    monkeypatch.setattr(batch_share.stores, "native", lambda: None)
    with pytest.raises(SystemExit, match="prices the native kernel's calls: this build has none"):
        await batch_share.run_once(occupancy=10, events=40, batch=10, state_dir=tmp_path)


def test_worker_pipeline_micro_measures_the_window_work_offline() -> None:
    """``python -m bench.worker_pipeline micro`` needs no broker: per-event CPU of both emit
    modes and of a partition's batch shares in small and whole slices at each occupancy, and
    the composed monoid's per-call costs."""
    from bench.worker_pipeline import micro

    figures = micro([100], events=300)
    assert {
        "event_100_us_per_event",
        "batch_100_us_per_event",
        "share_100_slice64_us_per_event",
        "share_100_slice1000_us_per_event",
        "compose_combine_us",
    } <= set(figures)
    assert all(value > 0 for value in figures.values())


@pytest.mark.parametrize("factor", [2.0, 4.0])
def test_changelog_chunks_prices_formats_that_hold_the_same_state(factor: float) -> None:
    """``bench.changelog_chunks`` compares like with like: its chunked records (snapshots and
    their tombstones included) replay to the entries today's per-entry records replay to, and
    its snapshots keep the compacted chunks within ``factor`` times the retained bytes."""
    from bench.changelog_chunks import (
        ChunkWriter,
        Rec,
        Workload,
        compacted_bytes,
        per_entry_records,
        replay_chunks,
    )
    from stores.changelog import encode_upsert, entry_id
    from stores.window_store import replay_changelog

    work = Workload(occupancy=30, batches=40)
    writer = ChunkWriter(work.prefill(), snapshots=True, factor=factor)
    chunked = writer.initial_records()
    for b in range(40):
        chunked += writer.batch_records(work, b)
    per_entry = [
        (entry_id(key, t), encode_upsert(-1, (), data))
        for key, entries in work.prefill().items()
        for t, data in entries.items()
    ]
    for b in range(40):
        per_entry += per_entry_records(work, b)
    expected: dict[bytes, bytes] = {}
    replay_changelog(
        [Rec(i, k, v) for i, (k, v) in enumerate(per_entry)],
        -1,
        expected.__setitem__,
        lambda key: expected.pop(key, None),
    )
    expected.pop(b"\x00applied", None)
    got: dict[bytes, bytes] = {}
    replay_chunks([Rec(i, k, v) for i, (k, v) in enumerate(chunked)], got)
    assert got == expected and len(got) == 100 * 30
    retained = sum(writer.size.values())
    assert compacted_bytes(chunked) <= factor * retained * 1.1  # plus record framing
    assert len(chunked) < len(per_entry) / 5


def test_worker_restore_times_every_phase_of_each_implementation(
    kafka_bootstrap: str, broker_kind: str, broker_profile: str, monkeypatch
) -> None:
    """``bench.worker_restore`` on a small changelog with history to drop: per implementation
    the phases of its own path, both restores (changelog alone, local copy) of every retained
    entry (asserted inside the run), memory for the first one."""
    import contextlib

    from bench import worker_restore
    from bench.bench_broker import BenchBroker
    from stores import native

    @contextlib.contextmanager
    def this_broker(kind: str):
        yield BenchBroker(kafka_bootstrap, broker_profile, broker_kind)

    monkeypatch.setattr(worker_restore, "broker_bootstrap", this_broker)
    impls = ["native", "python"] if native() is not None else ["python"]
    rows = asyncio.run(
        worker_restore.run(3000, 30, ("sum", "count", "max"), 0.5, 1, "marshal", impls, "x")
    )
    assert [r["impl"] for r in rows] == impls
    assert rows[0]["changelog_records"] == 3000 + 2 * 1500
    phases = {r["impl"]: list(r["phases"]) for r in rows}
    assert phases["python"] == [
        "fetch",
        "record decode",
        "replay",
        "sort",
        "group",
        "partial decode",
        "load",
    ]
    if "native" in phases:
        assert phases["native"] == ["fetch", "replay", "windows", "load"]
    assert "windows_bytes_per_entry" in rows[0]  # measured for the first implementation only
    assert all("windows_bytes_per_entry" not in r for r in rows[1:])
    for r in rows:
        assert all(wall >= 0 and cpu >= 0 for wall, cpu in r["phases"].values())
        assert r["ready_from_changelog_s"] >= r["restore_changelog_s"] > 0


@pytest.mark.parametrize(("kernel", "min_arity"), [("python", 4), ("native", 4), ("native", 2)])
def test_the_memory_bench_measures_the_kernel_and_min_arity_it_is_asked(
    kernel: str, min_arity: int
) -> None:
    """``bench.memory_per_entry`` builds the partition it measures on the asked kernel."""
    import stores
    from bench.memory_per_entry import filled_windows

    if kernel == "native" and stores.native() is None:
        pytest.skip("no native core in this build")
    windows = filled_windows(600, 3, "restore", lambda _filled: None, kernel, min_arity)
    expected = "NativeKeyWindows" if kernel == "native" else "KeyWindows"
    assert (type(windows).__name__, windows.entry_count(), len(windows)) == (expected, 600, 3)
