"""How the worker benchmarks take a rate (``bench.worker_harness.measure_rate``): from polls
inside the stream's measured part, on a stream long enough for it at the scenario's own rate.

The end-to-end case runs ``bench.worker_pipeline``'s cell on a stand-in worker (a ``/stats``
endpoint whose count grows at a set rate; no broker): a stream that passes between two polls is
measured again on a longer one instead of failing.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from app.brokers.process import free_port, stop_process
from bench import worker_harness, worker_pipeline
from bench.bench_broker import BenchBroker
from bench.worker_harness import (
    MIN_MEASURED_S,
    StreamTooShort,
    longer_stream,
    rate_between,
    serve_stats,
)


def test_the_rate_is_taken_between_the_first_and_last_polls_inside_the_measured_part() -> None:
    # (time s, CPU s, accepted) of a stream of 1,000 events at 100 events/s and 2 ms CPU each
    samples = [(t / 10, t / 50, min(1000, 10 * t)) for t in range(0, 120)]
    rate, cpu_us = rate_between(samples, 1000)
    assert rate == pytest.approx(100.0)
    assert cpu_us == pytest.approx(2000.0)


def test_a_stream_ending_before_a_poll_past_its_measured_part_is_not_underestimated() -> None:
    # 1,000 events at 100/s, then idle: the poll past 90% sees the stream over for 5 s
    samples = [(t / 10, 0.0, 10 * t) for t in range(0, 90)] + [(14.5, 0.0, 1000)]
    assert rate_between(samples, 1000)[0] == pytest.approx(100.0)


def test_a_measured_part_shorter_than_the_minimum_raises_with_the_rate_seen() -> None:
    samples = [(0.0, 0.0, 0), (0.1, 0.0, 500), (0.2, 0.0, 1000)]
    with pytest.raises(StreamTooShort) as raised:
        rate_between(samples, 1000)
    assert raised.value.events_per_s == pytest.approx(5000.0)
    with pytest.raises(StreamTooShort) as raised:
        rate_between([(0.0, 0.0, 0), (0.1, 0.0, 1000)], 1000)  # consumed between two polls
    assert raised.value.events_per_s == pytest.approx(10_000.0)


def test_a_longer_stream_lasts_twice_the_minimum_at_the_rate_seen_and_grows_anyway() -> None:
    assert longer_stream(1000, 60_000.0) == round(2 * MIN_MEASURED_S * 60_000 / 0.6)
    assert longer_stream(1000, 0.0) == 4000


RATE = 1_000_000.0
"""The stand-in worker's rate: about a floor's on this machine."""


@contextlib.contextmanager
def stand_in_worker(
    broker: BenchBroker,
    child: str,
    occupancy: int,
    events: int,
    workdir: Path,
    guarantee: str = "at_least_once",
) -> Iterator[tuple[SimpleNamespace, subprocess.Popen, Path]]:
    """``backlogged_worker``'s stand-in: ``GET /stats`` counting ``events`` accepted at
    ``RATE`` from its start, and an idle process as the worker."""
    port = free_port()
    stats = {"counts": {"accepted": 0}}
    server = serve_stats(port, stats)
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    stop = threading.Event()

    def count() -> None:
        started = time.monotonic()
        while not stop.is_set():
            stats["counts"]["accepted"] = min(events, int(RATE * (time.monotonic() - started)))
            time.sleep(0.002)

    counter = threading.Thread(target=count, daemon=True)
    counter.start()
    try:
        yield SimpleNamespace(web_port=port), worker, workdir / "stand-in.log"
    finally:
        stop.set()
        counter.join()
        server.shutdown()
        stop_process(worker, 10)


@pytest.mark.timeout(120)
def test_a_cell_too_short_for_its_rate_is_measured_again_on_a_longer_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker_pipeline, "backlogged_worker", stand_in_worker)
    broker = BenchBroker("127.0.0.1:1", "kafka", "kafka")  # not contacted
    # 24,000 events (--quick) pass in 24 ms at RATE: between two polls
    result = worker_pipeline.run_scenario(broker, "batch", 100, 24_000, False, tmp_path)
    assert result["events"] >= worker_harness.GROWTH * 24_000
    measured_s = 0.6 * result["events"] / RATE
    assert measured_s >= MIN_MEASURED_S
    assert result["events_per_s"] == pytest.approx(RATE, rel=0.3)
    assert result["cpu_us_per_event"] >= 0
