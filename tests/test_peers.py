"""``bench.peers`` in miniature: one occupancy, a few hundred events, on the session broker.

The JVM peers stay out (their Maven build would download Flink and Kafka Streams; their output
checks are tested on hand-made records in ``tests/test_jvm_semantics.py``). The worker in both
emit modes and the Quix job run on one pre-produced input as in the
benchmark; each process's rate is taken once it has read the whole (tiny) stream, since the
benchmark's 30%-90% marks would fall between two polls. Checked: the shape of the results, and
every record the Quix job emitted against ``bench.quix_semantics`` (pre-filled windows
included). Nothing about speed.
"""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest

from agents.clients import read_to_end
from app.settings import Settings
from bench import peers
from bench.bench_broker import BenchBroker
from bench.quix_job import prefill_events
from bench.quix_semantics import expected_outputs
from bench.worker_harness import MAX_LATENESS_MS, SPACING_MS, cpu_seconds, event_stream, get_json

pytestmark = pytest.mark.kafka

EVENTS = 300
OCCUPANCY = 10


def whole_stream_rate(
    port: int, total: int, proc: subprocess.Popen, log_path: Path, timeout: float
) -> tuple[float, float]:
    """``measure_rate`` for a tiny stream: events/s and CPU µs/event from the first poll
    that sees an event until every one is accepted."""
    deadline = time.monotonic() + 60
    start: tuple[float, float, int] | None = None
    while time.monotonic() < deadline:
        assert proc.poll() is None, log_path.read_text()
        try:
            accepted = get_json(port, "/stats")["counts"].get("accepted", 0)
        except OSError:
            time.sleep(0.1)
            continue
        now, cpu = time.monotonic(), cpu_seconds(proc.pid)
        if start is None and accepted:
            start = (now, cpu, accepted)
        if accepted >= total:
            t0, c0, _ = start or (now, cpu, 0)
            return total / max(now - t0, 1e-3), 1e6 * (cpu - c0) / total
        time.sleep(0.05)
    raise AssertionError(f"{total} events not accepted in time; see {log_path}")


def test_peers_measure_the_worker_and_a_quix_job_that_computes_its_windows(
    kafka_bootstrap: str,
    broker_kind: str,
    broker_profile: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(peers, "measure_rate", whole_stream_rate)
    broker = BenchBroker(kafka_bootstrap, broker_profile, broker_kind)
    input_topic = peers.produce_input(broker, EVENTS)
    results = peers.run_occupancy(broker, OCCUPANCY, EVENTS, EVENTS, tmp_path, input_topic)

    assert [(r["scenario"], r["occupancy"]) for r in results] == [
        ("event", OCCUPANCY),
        ("batch", OCCUPANCY),
        ("quix", OCCUPANCY),
    ]
    for r in results:
        assert r["broker"] == broker_kind
        assert r["events"] == EVENTS
        assert r["events_per_s"] > 0 and r["cpu_us_per_event"] >= 0
    table = peers.markdown(results)
    assert table.count("\n| 10 | ") == 3 and "| Quix Streams | 300 |" in table
    assert "x | -" in table  # the worker over Quix, then no output check

    quix = results[-1]
    offline = replace(Settings(), broker=kafka_bootstrap, broker_profile=broker_profile)
    emitted: dict[bytes, list[dict]] = {}
    for record in asyncio.run(read_to_end(offline, quix["output_topic"])):
        emitted.setdefault(record.key, []).append(json.loads(record.value))
    expected = expected_outputs(
        event_stream(EVENTS), OCCUPANCY * SPACING_MS, MAX_LATENESS_MS, prefill_events(OCCUPANCY)
    )
    assert emitted.keys() == expected.keys()
    for key, windows in expected.items():
        got = emitted[key]
        assert [(w["start"], w["end"], w["count"], w["max"]) for w in got] == [
            (w["start"], w["end"], w["count"], w["max"]) for w in windows
        ], key
        for g, w in zip(got, windows, strict=True):
            assert math.isclose(g["sum"], w["sum"], abs_tol=1e-9), key
            assert math.isclose(g["mean"], w["mean"], abs_tol=1e-9), key
    late = sum(len(windows) for windows in expected.values()) - EVENTS
    assert late > 0  # late events made Quix emit more than one window each
