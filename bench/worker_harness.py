"""The harness of the worker benchmarks: a backlog, a child process under test, its figures.

``backlogged_worker`` creates a scenario's topics (``scenario_settings``), pre-produces the
input (``event_stream``: ``KEYS`` keys, ``OOO_FRACTION`` of the events up to
``MAX_LATENESS_MS`` late) and runs a child of ``bench.worker_scenarios`` on it in a subprocess
(``child_process``); ``measure_run`` polls the child's ``GET /stats`` for events/s and CPU
per event (the broker's too: ``bench.broker_cpu``) over at least ``MIN_MEASURED_S``
(``long_enough`` runs a cell again on a longer stream when it passes faster),
``http_latencies`` and ``topic_latencies`` time range queries meanwhile. Used by
``bench.worker_pipeline``, ``bench.query_latency``, ``bench.peers``, ``bench.window_end``,
``bench.latency`` and ``bench.goals``. Methods: docs/bench-methods.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import os
import random
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from agents.batched_send import KeyPartitioner, send_records
from agents.clients import client_options
from app.brokers.process import free_port, stop_process
from app.demo import settings_environ
from app.settings import Settings, WindowSpec
from app.topics import create_topics
from bench.bench_broker import (
    BenchBroker,
)
from bench.broker_cpu import by_kind, thread_cpu, thread_names
from stores.durations import format_duration

T = TypeVar("T")

KEYS = 100


SPACING_MS = 100


OOO_FRACTION = 0.2


MAX_LATENESS_MS = 5_000


T0 = 1_700_000_000_000


AIOKAFKA_BATCHES = "aiokafka-"
"""Before a worker emit mode, ``emit-floor`` or ``batch-floor``: the scenario with aiokafka's
record batches (outputs queued in ``ListQueue``s, batches built by aiokafka's
``BatchBuilder``) instead of the native ones, for a comparison in one run."""

PYTHON_WINDOWS = "-python"
"""After a worker emit mode (``event-python``): the worker on the Python ``KeyWindows`` instead
of the native kernel (``stores.native_windows``), for a comparison in one run."""

EAGER_STATE = "-eager-state"
"""After ``event`` (``event-eager-state``): the worker handing its state changes over with
every hand-over (``agents.input_reader.STATE_WAIT_S`` = 0, the reader before it left them for
every 50 ms), for a comparison in one run."""

PER_CHUNK = "-per-chunk"
"""After ``event`` (``event-per-chunk``): the worker handing over after every fetched chunk
(``agents.input_reader.HANDOVER_RECORDS`` = 1 and ``STATE_WAIT_S`` = 0, the reader before it
paced its hand-overs),
for a comparison in one run."""


def worker_settings(
    broker: BenchBroker, prefix: str, retention: int, emit: str, **options: Any
) -> Settings:
    """A worker's settings on ``broker`` under a fresh app id ``<prefix>-<8 hex>`` that names
    its topics (``<app id>-events``, ``-aggregates``, ...; 4 partitions), with windows of a
    hundredth, a tenth and all of ``retention``, a free HTTP port, warnings only; ``options``
    set any other setting (or replace these)."""
    sizes = (retention // 100, retention // 10, retention)
    app_id = f"{prefix}-{uuid.uuid4().hex[:8]}"
    fields: dict[str, Any] = {
        "broker": broker.bootstrap,
        "broker_profile": broker.profile,
        "app_id": app_id,
        "input_topic": f"{app_id}-events",
        "aggregates_topic": f"{app_id}-aggregates",
        "queries_topic": f"{app_id}-queries",
        "answers_topic": f"{app_id}-answers",
        "dead_letter_topic": f"{app_id}-dlq",
        "partitions": 4,
        "retention": retention,
        "windows": tuple(WindowSpec(format_duration(s), s) for s in sizes),
        "emit": emit,
        "web_port": free_port(),
        "log_level": "warning",
    }
    return replace(Settings(), **{**fields, **options})


def scenario_settings(
    broker: BenchBroker,
    occupancy: int,
    emit: str,
    state_dir: Path,
    guarantee: str = "at_least_once",
) -> Settings:
    retention = occupancy * SPACING_MS
    return worker_settings(
        broker,
        "bench",
        retention,
        emit,
        max_future_skew=retention,
        processing_guarantee=guarantee,
        state_dir=state_dir,
        sweep_interval=30_000,
    )


def event_stream(
    n: int, max_lateness_ms: int = MAX_LATENESS_MS, seed: int = 1
) -> list[tuple[bytes, bytes]]:
    """``n`` input records: keys drawn uniformly from ``KEYS``, times ``T0 + i * SPACING /
    KEYS``, ``OOO_FRACTION`` of them moved back by 1 to ``max_lateness_ms`` - 1 ms."""
    rng = random.Random(seed)
    step = SPACING_MS / KEYS
    records = []
    for i in range(n):
        ts = T0 + int(i * step)
        if rng.random() < OOO_FRACTION:
            ts -= rng.randrange(1, max(2, max_lateness_ms))
        key = f"key-{rng.randrange(KEYS)}".encode()
        value = json.dumps({"ts": ts, "value": round(rng.uniform(-100, 100), 3)})
        records.append((key, value.encode()))
    return records


PRODUCE_CHUNK = 50_000
"""Input records ``produce`` splits by partition and hands over at a time."""


async def produce(settings: Settings, records: list[tuple[bytes, bytes]]) -> None:
    """Produce ``records`` (key, value) to ``settings.input_topic``, each to its key's
    partition under Kafka's default partitioner (of ``settings.partitions``, the topic's), in
    order per partition, as whole record batches (``agents.batched_send.send_records``: one
    delivery per batch, not per record: about 10x the rate of a ``send`` per record, which
    made producing a floor's millions of events take minutes); returns once every batch is
    acknowledged."""
    producer = AIOKafkaProducer(**client_options(settings), linger_ms=20, max_batch_size=1 << 20)
    await producer.start()
    try:
        partition_of = KeyPartitioner(settings.partitions)
        deliveries = []
        for lo in range(0, len(records), PRODUCE_CHUNK):
            chunks: dict[int, list[tuple[bytes, bytes]]] = {}
            for key, value in records[lo : lo + PRODUCE_CHUNK]:
                chunks.setdefault(partition_of(key), []).append((key, value))
            for partition, chunk in chunks.items():
                deliveries.append(
                    await send_records(producer, settings.input_topic, partition, chunk)
                )
        for delivery in deliveries:
            if delivery is not None:
                await delivery
    finally:
        await producer.stop()


def get_json(port: int, path: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as response:
        return json.loads(response.read())


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


MEASURED = (0.3, 0.9)
"""A stream's measured part: the rate is taken between the first poll at or past the first
share of it and the last poll at or before the second (the worker busy at both)."""
MIN_MEASURED_S = 1.0
"""The least time between those two polls (about eight polls, each timed to a few ms): a
shorter measured part raises ``StreamTooShort``."""
POLL_S = 0.1


class StreamTooShort(RuntimeError):
    """A stream's measured part passed in less than ``MIN_MEASURED_S``; ``events_per_s`` is
    the fastest rate seen between two polls (a lower bound of the true one, 0 when no two
    polls saw progress), for sizing a longer stream (``longer_stream``)."""

    def __init__(self, events_per_s: float) -> None:
        super().__init__(
            f"the stream's measured part took under {MIN_MEASURED_S} s (at least "
            f"{events_per_s:,.0f} events/s): make it longer"
        )
        self.events_per_s = events_per_s


@dataclass(frozen=True, slots=True)
class RunFigures:
    """What ``measure_run`` measured over a run's measured part (``MEASURED``)."""

    events_per_s: float
    cpu_us_per_event: float
    """The child's CPU (user + system) per event."""
    broker_cpu_us_per_event: float | None = None
    """The broker's CPU per event (None when its process is not known)."""
    broker_cpu_us_by_thread: dict[str, float] | None = None
    """The broker's CPU per event per kind of thread (``bench.broker_cpu.by_kind``)."""


def measure_run(
    port: int,
    total: int,
    worker: subprocess.Popen,
    log_path: Path,
    timeout: float,
    broker_pid: int | None = None,
) -> RunFigures:
    """Accepted events per wall second and CPU microseconds of the worker (and, with
    ``broker_pid``, of the broker, per kind of thread) per event over the measured part
    (``MEASURED``) of a stream of ``total`` events, polling ``GET /stats`` every ``POLL_S``.
    Each poll's count is paired with the middle of its request and the CPU times right after
    it. The CPU figures do not depend on how many other processes share the machine's cores;
    the wall-clock rate does. Raises ``StreamTooShort`` when that part lasts under
    ``MIN_MEASURED_S``."""
    samples: list[tuple[float, float, int]] = []
    brokers: list[dict[int, float]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            raise RuntimeError(f"the worker exited; see {log_path}")
        began = time.monotonic()
        try:
            accepted = get_json(port, "/stats")["counts"].get("accepted", 0)
        except OSError:
            time.sleep(0.2)
            continue
        samples.append(((began + time.monotonic()) / 2, cpu_seconds(worker.pid), accepted))
        brokers.append({} if broker_pid is None else thread_cpu(broker_pid))
        if accepted > MEASURED[1] * total:
            first, last = measured_span(samples, total)
            figures = RunFigures(*rate_of(samples[first], samples[last]))
            if broker_pid is None:
                return figures
            spent = by_kind(brokers[first], brokers[last], thread_names(broker_pid))
            events = samples[last][2] - samples[first][2]
            per_event = {kind: 1e6 * seconds / events for kind, seconds in spent.items()}
            return replace(
                figures,
                broker_cpu_us_per_event=per_event.pop("process"),
                broker_cpu_us_by_thread=per_event or None,
            )
        time.sleep(POLL_S)
    raise RuntimeError(f"timeout: the worker did not get through {total} events")


def measure_rate(
    port: int, total: int, worker: subprocess.Popen, log_path: Path, timeout: float
) -> tuple[float, float]:
    """``measure_run``'s events per wall second and worker CPU µs per event."""
    figures = measure_run(port, total, worker, log_path, timeout)
    return figures.events_per_s, figures.cpu_us_per_event


def measured_span(samples: list[tuple[float, float, int]], total: int) -> tuple[int, int]:
    """The indices of the first and the last of the polls ``samples`` (time, CPU seconds,
    accepted events; in order) inside the measured part of a stream of ``total`` events;
    ``StreamTooShort`` when those are under ``MIN_MEASURED_S`` apart."""
    low, high = (share * total for share in MEASURED)
    inside = [i for i, s in enumerate(samples) if low <= s[2] <= high]
    if len(inside) >= 2:
        (t1, _, a1), (t2, _, a2) = samples[inside[0]], samples[inside[-1]]
        if t2 - t1 >= MIN_MEASURED_S and a2 > a1:
            return inside[0], inside[-1]
    steps = [
        (a2 - a1) / (t2 - t1) for (t1, _, a1), (t2, _, a2) in itertools.pairwise(samples) if t2 > t1
    ]
    raise StreamTooShort(max(steps, default=0.0))


def rate_between(samples: list[tuple[float, float, int]], total: int) -> tuple[float, float]:
    """Events per second and CPU µs per event between the polls ``measured_span`` picks."""
    first, last = measured_span(samples, total)
    return rate_of(samples[first], samples[last])


def rate_of(first: tuple[float, float, int], last: tuple[float, float, int]) -> tuple[float, float]:
    """Events per second and CPU µs per event from poll ``first`` to poll ``last`` (time, CPU
    seconds, accepted events)."""
    (t1, c1, a1), (t2, c2, a2) = first, last
    return (a2 - a1) / (t2 - t1), 1e6 * (c2 - c1) / (a2 - a1)


GROWTH = 4
"""A stream measured again after ``StreamTooShort`` has at least this many times the events."""
ATTEMPTS = 4


def longer_stream(events: int, seen_rate: float) -> int:
    """The events of a stream whose measured part lasts twice ``MIN_MEASURED_S`` at
    ``seen_rate``, and at least ``GROWTH`` times ``events``."""
    share = MEASURED[1] - MEASURED[0]
    return max(GROWTH * events, math.ceil(2 * MIN_MEASURED_S * seen_rate / share))


def long_enough(run: Callable[[int], T], events: int) -> T:
    """``run(events)``: a measurement on a fresh stream of ``events``; after each
    ``StreamTooShort`` (up to ``ATTEMPTS`` runs) again on a ``longer_stream``. The input of a
    run sized so to the scenario's own rate, on any machine and build; each retry is
    printed."""
    for _ in range(ATTEMPTS - 1):
        try:
            return run(events)
        except StreamTooShort as short:
            events = longer_stream(events, short.events_per_s)
            print(f"{short}; measuring again on {events:,} events", file=sys.stderr, flush=True)
    return run(events)


def wait_until_assigned(port: int, worker: subprocess.Popen, timeout: float = 120) -> None:
    """Return once the worker serves ``GET /stats`` and owns input partitions (query latency
    is timed from then on, not across the worker's start and group join)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and worker.poll() is None:
        try:
            if get_json(port, "/stats").get("assigned"):
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError("the worker never got its partitions")


def http_latencies(port: int, window: str, stop: threading.Event, out: list[float]) -> None:
    """Sequential ``GET /windows/{key}?window=`` until ``stop``; seconds per request."""
    rng = random.Random(2)
    while not stop.is_set():
        key = f"key-{rng.randrange(KEYS)}"
        started = time.perf_counter()
        try:
            get_json(port, f"/windows/{key}?window={window}")
        except OSError:
            time.sleep(0.05)
            continue
        out.append(time.perf_counter() - started)
        time.sleep(0.01)


async def topic_latencies(settings: Settings, stop: threading.Event, out: list[float]) -> None:
    """Send queries one at a time until ``stop``; seconds from send until its answer is read."""
    producer = AIOKafkaProducer(**client_options(settings), linger_ms=0)
    consumer = AIOKafkaConsumer(
        **client_options(settings), enable_auto_commit=False, fetch_max_wait_ms=10
    )
    await producer.start()
    await consumer.start()
    try:
        tps = [TopicPartition(settings.answers_topic, p) for p in range(settings.partitions)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        rng = random.Random(3)
        i = 0
        while not stop.is_set():
            i += 1
            key = f"key-{rng.randrange(KEYS)}"
            query = {"query_id": f"q{i}", "key": key, "window": settings.windows[1].name}
            started = time.perf_counter()
            await producer.send_and_wait(
                settings.queries_topic, json.dumps(query).encode(), key=key.encode()
            )
            answered = False
            while not answered and not stop.is_set():
                batch = await consumer.getmany(timeout_ms=200)
                for records in batch.values():
                    answered |= any(json.loads(r.value)["query_id"] == f"q{i}" for r in records)
            if answered:
                out.append(time.perf_counter() - started)
            await asyncio.sleep(0.02)
    finally:
        await producer.stop()
        await consumer.stop()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@contextlib.contextmanager
def backlogged_worker(
    broker: BenchBroker,
    child: str,
    occupancy: int,
    events: int,
    workdir: Path,
    guarantee: str = "at_least_once",
) -> Iterator[tuple[Settings, subprocess.Popen, Path]]:
    """Create the scenario's topics, pre-produce ``events`` input records, and run the child
    ``child`` (a worker emit mode, ``-python`` after it for the Python windows or
    ``-per-chunk`` for a hand-over per chunk, ``-eager-state`` for the state with each, or
    ``floor``/``bare``/``bare-batch``; ``aiokafka-`` before a mode or floor) in a
    subprocess on
    them for the ``with`` block: yields its settings, process and log file; terminates it
    afterwards."""
    emit = {
        "bare": "event",
        "bare-batch": "batch",
        "floor": "batch",
        "emit-floor": "event",
        "batch-floor": "batch",
    }.get(
        child.removeprefix(AIOKAFKA_BATCHES),
        child.removesuffix(PYTHON_WINDOWS).removesuffix(PER_CHUNK).removesuffix(EAGER_STATE),
    )
    emit = emit.removeprefix(AIOKAFKA_BATCHES)
    settings = scenario_settings(broker, occupancy, emit, workdir / uuid.uuid4().hex[:6], guarantee)
    asyncio.run(create_topics(settings))
    asyncio.run(produce(settings, event_stream(events)))
    with child_process(settings, child, occupancy, workdir) as (worker, log_path):
        yield settings, worker, log_path


@contextlib.contextmanager
def child_process(
    settings: Settings, child: str, occupancy: int, workdir: Path
) -> Iterator[tuple[subprocess.Popen, Path]]:
    """The child ``child`` of ``bench.worker_scenarios`` (a worker emit mode, or a floor) run on
    ``settings`` (passed as ``FIBA_*`` variables) for the ``with`` block, its output in a log
    file in ``workdir``: yields the process and the log's path; terminates it afterwards."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIBA_")}
    env.update(settings_environ(settings))
    command = [sys.executable, "-m", "bench.worker_scenarios", child, str(occupancy)]
    log_path = workdir / f"{child}-{occupancy}-{settings.app_id}.log"
    with open(log_path, "wb") as log:
        worker = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield worker, log_path
    finally:
        stop_process(worker, 30)


def latency_figures(latencies: list[float]) -> dict[str, float]:
    """Milliseconds of a run's query latencies (seconds, in the order sent): the first query
    on its own (it pays the clients' and the worker's first-request set-up, 0.2-0.4 s, which as
    one of a few dozen queries would be the p99), then ``n``, p50 and p99 of the others."""
    steady = latencies[1:]
    return {
        "first": 1000 * latencies[0],
        "n": len(steady),
        "p50": 1000 * statistics.median(steady),
        "p99": 1000 * percentile(steady, 0.99),
    }


def serve_stats(port: int, stats: dict[str, Any]) -> ThreadingHTTPServer:
    """``GET /stats`` -> ``stats`` as JSON (as it is at each request: the caller updates its
    counts in place) on loopback ``port``, in a daemon thread, for ``measure_rate``; the
    worker-less scenarios' and peer jobs' stand-in for the worker's own endpoint."""

    class Stats(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(stats).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Stats)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
