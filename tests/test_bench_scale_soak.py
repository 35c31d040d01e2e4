"""The scale-out, soak and memory benchmarks: quick runs produce complete, consistent figures.

Nothing here judges a speed or a size: the figures are only ever read in ``bench/results/``.
"""

from __future__ import annotations

import json

import pytest

import stores
from bench import memory_per_entry, scale_out, soak
from bench.bench_broker import BenchBroker


def test_the_memory_bench_counts_every_entry_it_retains_and_records_the_build() -> None:
    restored = memory_per_entry.run_child(3000, 30, "restore")
    assert restored["entries"] == 3000
    assert restored["build"] == stores.build()
    assert restored["aggregations"] == ["count", "sum", "max"]
    assert restored["bytes_per_entry"] > 0 and restored["rss_full_mb"] > restored["rss_empty_mb"]
    streamed = memory_per_entry.run_child(3000, 30, "stream")
    # distinct times: nearly every event is an entry of its own, none evicted
    assert 0.95 * 3000 <= streamed["entries"] <= 3000


def test_the_memory_bench_measures_each_load_of_entries_per_key(tmp_path) -> None:
    out = tmp_path / "memory.json"
    kernel = memory_per_entry.resolved_kernel(None)
    options = ["--entries", "2000", "--entries-per-key", "10,100", "--paths", "restore"]
    memory_per_entry.main([*options, "--kernels", kernel, "--out", str(out)])
    rows = json.loads(out.read_text())["results"]
    assert [(r["keys"], r["entries_per_key"]) for r in rows] == [(200, 10.0), (20, 100.0)]
    for r in rows:
        assert r["bytes_per_key"] == pytest.approx(r["bytes_per_entry"] * r["entries_per_key"])


def test_the_soak_slope_is_the_least_squares_slope_in_mb_per_million_events() -> None:
    def point(events: int, mb: float) -> dict:
        return {"events": events, "rss_bytes": mb * 1e6}

    rising = [point(1_000_000 * i, 100 + 3 * i) for i in range(5)]
    assert soak.slope_mb_per_million(rising) == pytest.approx(3.0)
    flat = [point(10**6, 100), point(2 * 10**6, 101), point(3 * 10**6, 100)]
    assert soak.slope_mb_per_million(flat) == pytest.approx(0.0)
    assert soak.slope_mb_per_million(flat[:2]) is None


def test_a_quick_soak_samples_the_worker_until_every_event_is_applied(
    kafka_bootstrap: str, broker_kind: str, broker_profile: str
) -> None:
    broker = BenchBroker(kafka_bootstrap, broker_profile, broker_kind)
    args = soak.options().parse_args(
        ["--events", "6000", "--keys", "300", "--retained-per-key", "5", "--sample-seconds", "0.3"]
    )
    result = soak.run(args, broker)
    samples = result["samples"]
    assert samples[-1]["events"] == 6000
    assert [s["events"] for s in samples] == sorted(s["events"] for s in samples)
    assert all(s["rss_bytes"] > 0 and s["cpu_s"] >= 0 for s in samples)
    fill = 300 * 5
    assert result["warmup_events"] == 2 * fill
    # eviction keeps up: the retained entries stay near the retention's fill
    assert 0 < samples[-1]["entries"] <= 2 * fill
    assert result["build"] == stores.build()
    assert result["peak_rss_mb"] >= max(s["rss_bytes"] for s in samples) / 1e6


def test_a_quick_scale_out_runs_one_and_two_workers_through_the_same_input(
    kafka_bootstrap: str, broker_kind: str, broker_profile: str
) -> None:
    broker = BenchBroker(kafka_bootstrap, broker_profile, broker_kind)
    args = scale_out.options().parse_args(["--events", "3000", "--keys", "100", "--emits", "batch"])
    document = scale_out.run(args, broker)
    assert sum(document["events_per_partition"]) == 3000
    assert all(n > 0 for n in document["events_per_partition"])
    assert sorted(r["workers"] for r in document["runs"]) == [1, 2]
    for r in document["runs"]:
        assert r["events"] == 3000
        assert 0 < r["applied_s"] <= r["through_changelog_s"]
        assert len(r["cpu_s_per_process"]) == r["workers"]
    assert document["build"] == stores.build()
    assert "batch" in document["ratio_two_over_one"]
    assert "two workers / one" in scale_out.report(document)


def test_scale_out_ratios_are_two_workers_over_one_per_mode_from_medians() -> None:
    def run(emit: str, workers: int, steady: float | None, overall: float, cpu: float) -> dict:
        return {
            "emit": emit,
            "workers": workers,
            "events_per_s_steady": steady,
            "events_per_s_overall": overall,
            "cpu_us_per_event_steady": cpu,
        }

    runs = [
        run("batch", 1, 100, 50, 10),
        run("batch", 2, 150, 60, 11),
        run("batch", 1, 120, 70, 12),
        run("batch", 2, 210, 80, 13),
        run("event", 1, 40, 20, 30),
        run("event", 2, None, 30, 30),  # never balanced: no steady figure
        run("changes", 1, 40, 20, 0),  # no CPU tick measured: no ratio of it (no ZeroDivision)
        run("changes", 2, 60, 30, 5),
    ]
    figures = scale_out.ratios(runs)
    assert figures["batch"] == pytest.approx(
        {"steady": 180 / 110, "overall": 70 / 60, "cpu_per_event": 12 / 11}
    )
    assert figures["event"] == pytest.approx({"overall": 1.5, "cpu_per_event": 1.0})
    assert figures["changes"] == pytest.approx({"steady": 1.5, "overall": 1.5})
