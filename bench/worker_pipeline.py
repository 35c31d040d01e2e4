"""End-to-end worker throughput and query latency on a broker it starts.

``python -m bench.worker_pipeline run [--quick] [--occupancies ...] [--scenarios ...]
[--rounds N] [--broker-kind embedded|kafka]`` starts a broker and, per scenario, a worker
subprocess (``child`` mode: the real pipeline, window store included) over a pre-produced input
topic (100 keys, 20% of the events up to ``MAX_LATENESS_MS`` late, windows pre-filled to
``occupancy`` events per key), and measures events/s and CPU per event; the ``floor``,
``batch-floor``, ``emit-floor`` and ``bare`` scenarios are the bounds the worker is compared
with. Writes ``bench/results/worker_pipeline*.json`` (``docs/benchmarks.md`` shows them).
Scenarios, harness and profiler in detail: docs/bench-methods.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from agents.clients import client_options
from app.brokers.process import free_port, stop_process
from app.demo import settings_environ
from app.settings import Settings, WindowSpec, load_settings
from app.topics import create_topics
from bench.bench_broker import (
    BenchBroker,
    add_broker_kind_option,
    bench_broker,
    write_results,
)
from bench.machine import describe_machine
from stores.durations import format_duration

KEYS = 100
SPACING_MS = 100
OOO_FRACTION = 0.2
MAX_LATENESS_MS = 5_000
T0 = 1_700_000_000_000
RESULTS = Path(__file__).parent / "results" / "worker_pipeline.json"
FLOOR_STREAM_FACTOR = 10
"""The ``floor`` scenario streams this many times more events: it reads the others' stream in
a fraction of a second, less than two polls of its rate apart."""
QUERY_OCCUPANCY = 1000
"""The occupancy of the extra run of each emit mode that also times range queries."""


def scenario_settings(
    broker: BenchBroker,
    occupancy: int,
    emit: str,
    state_dir: Path,
    guarantee: str = "at_least_once",
) -> Settings:
    retention = occupancy * SPACING_MS
    sizes = (retention // 100, retention // 10, retention)
    suffix = uuid.uuid4().hex[:8]
    return replace(
        Settings(),
        broker=broker.bootstrap,
        broker_profile=broker.profile,
        app_id=f"bench-{suffix}",
        input_topic=f"bench-{suffix}-events",
        aggregates_topic=f"bench-{suffix}-aggregates",
        queries_topic=f"bench-{suffix}-queries",
        answers_topic=f"bench-{suffix}-answers",
        dead_letter_topic=f"bench-{suffix}-dlq",
        partitions=4,
        retention=retention,
        windows=tuple(WindowSpec(format_duration(s), s) for s in sizes),
        max_future_skew=retention,
        emit=emit,
        processing_guarantee=guarantee,
        state_dir=state_dir,
        web_port=free_port(),
        sweep_interval=30_000,
        log_level="warning",
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


async def produce(settings: Settings, records: list[tuple[bytes, bytes]]) -> None:
    producer = AIOKafkaProducer(**client_options(settings), linger_ms=20)
    await producer.start()
    try:
        for key, value in records:
            await producer.send(settings.input_topic, value=value, key=key)
        await producer.flush()
    finally:
        await producer.stop()


def get_json(port: int, path: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as response:
        return json.loads(response.read())


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure_rate(
    port: int, total: int, worker: subprocess.Popen, log_path: Path, timeout: float
) -> tuple[float, float]:
    """Accepted events per wall second and CPU microseconds of the worker per event, between
    30% and 90% of ``total`` (polling ``GET /stats``). The CPU figure does not depend on how
    many other processes share the machine's cores; the wall-clock rate does."""
    marks: dict[float, tuple[float, float, int]] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            raise RuntimeError(f"the worker exited; see {log_path}")
        try:
            accepted = get_json(port, "/stats")["counts"].get("accepted", 0)
        except OSError:
            time.sleep(0.2)
            continue
        now, cpu = time.monotonic(), cpu_seconds(worker.pid)
        for fraction in (0.3, 0.9):
            if fraction not in marks and accepted >= fraction * total:
                marks[fraction] = (now, cpu, accepted)
        if 0.9 in marks:
            (t1, c1, a1), (t2, c2, a2) = marks[0.3], marks[0.9]
            if t2 == t1:
                raise RuntimeError("the stream was consumed between two polls: make it longer")
            return (a2 - a1) / (t2 - t1), 1e6 * (c2 - c1) / (a2 - a1)
        time.sleep(0.1)
    raise RuntimeError(f"timeout: the worker did not get through {total} events")


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
    ``child`` (a worker emit mode, or ``floor``/``bare``/``bare-batch``) in a subprocess on
    them for the ``with`` block: yields its settings, process and log file; terminates it
    afterwards."""
    emit = {
        "bare": "event",
        "bare-batch": "batch",
        "floor": "batch",
        "emit-floor": "event",
        "batch-floor": "batch",
    }.get(child, child)
    settings = scenario_settings(broker, occupancy, emit, workdir / uuid.uuid4().hex[:6], guarantee)
    asyncio.run(create_topics(settings))
    asyncio.run(produce(settings, event_stream(events)))
    with child_process(settings, child, occupancy, workdir) as (worker, log_path):
        yield settings, worker, log_path


@contextlib.contextmanager
def child_process(
    settings: Settings, child: str, occupancy: int, workdir: Path
) -> Iterator[tuple[subprocess.Popen, Path]]:
    """The ``child`` mode of this module (a scenario: a worker emit mode, or a floor) run on
    ``settings`` (passed as ``FIBA_*`` variables) for the ``with`` block, its output in a log
    file in ``workdir``: yields the process and the log's path; terminates it afterwards."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIBA_")}
    env.update(settings_environ(settings))
    command = [sys.executable, "-m", "bench.worker_pipeline", "child", child, str(occupancy)]
    log_path = workdir / f"{child}-{occupancy}-{settings.app_id}.log"
    with open(log_path, "wb") as log:
        worker = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield worker, log_path
    finally:
        stop_process(worker, 30)


def run_scenario(
    broker: BenchBroker,
    name: str,
    occupancy: int,
    events: int,
    with_queries: bool,
    workdir: Path,
    guarantee: str = "at_least_once",
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "broker": broker.kind,
        "scenario": name,
        "occupancy": occupancy,
        "events": events,
        "queries": with_queries,
        "guarantee": guarantee,
    }
    with backlogged_worker(broker, name, occupancy, events, workdir, guarantee) as (
        settings,
        worker,
        log_path,
    ):
        http: list[float] = []
        topic: list[float] = []
        stop = threading.Event()
        threads = []
        if with_queries:
            threads = [
                threading.Thread(
                    target=http_latencies,
                    args=(settings.web_port, settings.windows[1].name, stop, http),
                ),
                threading.Thread(
                    target=lambda: asyncio.run(topic_latencies(settings, stop, topic))
                ),
            ]
        if threads:
            wait_until_assigned(settings.web_port, worker)
        for thread in threads:
            thread.start()
        try:
            rate, cpu = measure_rate(settings.web_port, events, worker, log_path, 900)
            result["events_per_s"], result["cpu_us_per_event"] = rate, cpu
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        for name, latencies in (("http_query_ms", http), ("topic_query_ms", topic)):
            if len(latencies) > 1:
                result[name] = latency_figures(latencies)
    return result


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


# --- child: the worker (or the bare agent) under test -------------------------------------------


def run_bare(settings: Settings, batched: bool) -> None:
    """A Faust agent that only consumes the input topic (the framework's floor): one event at a
    time (``stream.events()``), or in batches like ``emit=batch`` (``stream.take_events``)."""
    import faust

    from app.faust_app import create_app

    fiba = create_app(settings)
    counts = {"accepted": 0}

    @fiba.app.agent(fiba.input_topic, name="bare")
    async def consume(stream: faust.StreamT) -> None:
        if batched:
            within = settings.batch_max_wait / 1000
            async for events in stream.take_events(settings.batch_max_records, within):
                counts["accepted"] += len(events)
        else:
            async for _ in stream.events():
                counts["accepted"] += 1

    @fiba.app.page("/stats")
    async def stats(web: Any, request: Any) -> Any:
        return web.json({"counts": counts})

    faust.Worker(fiba.app, loglevel=settings.log_level, quiet=True).execute_from_commandline()


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


def run_floor(settings: Settings, produce: bool = False, durable: bool = False) -> None:
    """A bare aiokafka consumer that reads every partition of the input topic from its start
    and only counts the records, fetching as ``agents.input_reader.InputReader`` does; serves
    the count as ``GET /stats`` (``{"counts": {"accepted": n}}``) on ``web_port`` until
    SIGTERM. ``produce`` (the ``emit-floor`` scenario): also, per record, one aggregate record
    as ``emit=event`` writes it (``emit_floor_record``), queued as the worker queues it
    (``KeyedOutputs``) and, after each chunk, produced with the worker's producer settings
    and its acknowledgement awaited: the least ``emit=event`` can cost. ``durable`` (the
    ``batch-floor`` scenario): everything ``emit=batch`` does but the window work
    (``DurableFloor``): the least ``emit=batch`` can cost while every accepted event is
    durable."""
    import signal

    from agents.batched_send import KeyedOutputs
    from agents.input_reader import FETCH_CHUNK, FETCH_PARTITION_BYTES, FETCH_WAIT_MS
    from app.faust_app import PRODUCER_MAX_BATCH_BYTES

    counts = {"accepted": 0}
    server = serve_stats(settings.web_port, {"counts": counts, "assigned": [0]})

    async def consume() -> None:
        consumer = AIOKafkaConsumer(
            **client_options(settings),
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=FETCH_WAIT_MS,
            max_partition_fetch_bytes=FETCH_PARTITION_BYTES,
        )
        producer = AIOKafkaProducer(
            **client_options(settings), acks="all", max_batch_size=PRODUCER_MAX_BATCH_BYTES
        )
        await consumer.start()
        await producer.start()
        try:
            tps = [TopicPartition(settings.input_topic, p) for p in range(settings.partitions)]
            consumer.assign(tps)
            for tp in tps:
                consumer.seek(tp, 0)
            outputs = KeyedOutputs(lambda: producer, settings.aggregates_topic)
            await outputs.start()
            encode = emit_floor_encoder(settings)
            stop = asyncio.Event()
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
            if durable:
                async with DurableFloor(settings, outputs, encode) as floor:
                    while not stop.is_set():
                        counts["accepted"] += await floor.next_batch(consumer)
                return
            while not stop.is_set():
                chunk = await consumer.getmany(timeout_ms=FETCH_WAIT_MS, max_records=FETCH_CHUNK)
                if produce:
                    for tp, records in chunk.items():
                        for record in records:
                            value = encode(record.key.decode(), record.timestamp, record.offset)
                            outputs.add(record.key, value, record.timestamp, source=tp.partition)
                    for delivery in await outputs.send():
                        await delivery
                counts["accepted"] += sum(map(len, chunk.values()))
        finally:
            await producer.stop()
            await consumer.stop()
            server.shutdown()

    asyncio.run(consume())


class DurableFloor:
    """The ``batch-floor`` scenario's work: ``emit=batch`` without the windows. Batches
    gathered as the input reader gathers them (chunks of ``FETCH_CHUNK`` records up to
    ``batch_max_records``), parsed (``EventParser.parse_many``) and lifted; per event the
    window store's upsert (``WindowStore.record_many``: local write and changelog record) and
    one eviction (``WindowStore.evict``: the entry one retention older, as a full window
    evicts one entry per event); per key of a batch one aggregate record of the worker's
    shape (``emit_floor_encoder``); then, as ``WindowsPipeline.hand_over`` does, the outputs'
    acknowledgement awaited and the store's changes handed over."""

    def __init__(self, settings: Settings, outputs: Any, encode: Any) -> None:
        from agents.events import BadEvent, EventParser
        from agents.kafka_changelog import KafkaChangelog
        from stores.key_windows import WindowConfig
        from stores.window_store import MarshalStateCodec, WindowStore

        config = WindowConfig.from_settings(settings)
        self.settings = settings
        self.outputs = outputs
        self.encode = encode
        self.parser = EventParser(settings)
        self.lift = config.lift
        self.bad_event = BadEvent
        self.store = WindowStore(
            settings, MarshalStateCodec(config.composed), KafkaChangelog(settings)
        )

    async def __aenter__(self) -> DurableFloor:
        await self.store.start()
        for partition in range(self.settings.partitions):
            await self.store.restore(partition)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.store.stop()

    async def next_batch(self, consumer: AIOKafkaConsumer) -> int:
        """Fetch, apply and hand over one batch; the number of events it accepted."""
        from agents.input_reader import FETCH_CHUNK, FETCH_WAIT_MS

        batch: dict[int, list[Any]] = {}
        gathered = 0
        while gathered < self.settings.batch_max_records:
            chunk = await consumer.getmany(
                timeout_ms=0 if gathered else FETCH_WAIT_MS, max_records=FETCH_CHUNK
            )
            if not chunk:
                break
            for tp, records in chunk.items():
                batch.setdefault(tp.partition, []).extend(records)
                gathered += len(records)
        accepted = 0
        retention = self.settings.retention
        for partition, records in batch.items():
            effects = []
            last: dict[str, tuple[int, int]] = {}
            expired: dict[str, list[int]] = {}
            for record, event in zip(records, self.parser.parse_many(records), strict=True):
                if isinstance(event, self.bad_event):
                    continue
                key, ts, value = event
                effects.append((record.offset, key, ts, self.lift(value)))
                last[key] = (record.offset, ts)
                expired.setdefault(key, []).append(ts - retention)
            self.store.record_many(partition, effects)
            for key, times in expired.items():
                self.store.evict(partition, key, times)
            for key, (offset, ts) in last.items():
                self.outputs.add(key.encode(), self.encode(key, ts, offset), ts, source=partition)
            accepted += len(effects)
        for delivery in await self.outputs.send():
            await delivery
        for partition in batch:
            await self.store.send_changes(partition)
        return accepted


def emit_floor_encoder(settings: Settings) -> Any:
    """``encode(key, event_ts, offset) -> bytes``: an aggregate record of the worker's shape
    and size under ``settings`` (every window, every aggregation, values of a full window),
    written by ``emit=event``'s own encoder (``agents.records.AggregateEncoder``), without any
    window work: what ``emit-floor`` produces per event."""
    from agents.records import AggregateEncoder
    from stores.key_windows import WindowConfig

    config = WindowConfig.from_settings(settings)
    composed = config.composed
    full = composed.identity
    for j in range(1000):
        full = composed.combine(full, composed.lift(round(j * 0.731 % 200 - 100, 3)))
    lowered = composed.lower(full)
    encoder = AggregateEncoder(config.aggregations, config.lowered_is_aggregates)
    spans = [(spec.name, spec.size_ms) for spec in config.windows]

    def encode(key: str, event_ts: int, offset: int) -> bytes:
        windows = [(name, event_ts - size, event_ts, lowered) for name, size in spans]
        return encoder.encode(key, event_ts, event_ts, windows, 0, offset)

    return encode


def prefilled_pairs(lift: Any, n: int) -> list[tuple[int, Any]]:
    """What every key's windows are pre-filled with (end to end and in ``micro``): ``n``
    sorted ``(time, partial)`` pairs, one every ``SPACING_MS`` up to just before the stream
    starts, values 0-6 lifted by ``lift``."""
    start = T0 - n * SPACING_MS
    return [(start + j * SPACING_MS, lift(float(j % 7))) for j in range(n)]


def run_prefilled_worker(settings: Settings, occupancy: int) -> None:
    """The real worker; every assigned partition's windows pre-filled with ``occupancy`` events
    per key (times just before the stream starts) when the first record arrives."""
    from agents.windows import PartitionState
    from app.faust_app import FibaApp
    from app.worker import build_worker, serve
    from stores.gc_pause import paused_gc

    worker = build_worker(settings)
    pipeline = worker.pipeline
    restore = pipeline.state
    filled: set[int] = set()
    prefilling = asyncio.Lock()

    async def state_with_prefill(partition: int) -> PartitionState:
        # the first restore pre-fills every owned partition, so that no pre-filling happens
        # while records are applied (the measured part of the run)
        fiba = worker.fiba
        owned = fiba.owned_partitions(fiba.app.consumer.assignment())
        async with prefilling:  # the reader restores its partitions concurrently
            for p in sorted((owned | {partition}) - filled):
                filled.add(p)
                state = await restore(p)
                windows = state.windows
                windows.clear()
                with paused_gc(freeze=True):  # as a restore builds (agents.windows)
                    for key, pairs in prefill(fiba, p, occupancy):
                        windows.load(key, pairs)
                        # 10^5 events per key take ~0.3 s to build: keep heartbeats going
                        await asyncio.sleep(0)
                windows.sweep()
        return await restore(partition)

    pipeline.state = state_with_prefill  # type: ignore[method-assign]

    def prefill(fiba: FibaApp, partition: int, n: int) -> Iterator[tuple[str, list]]:
        """``(key, n sorted (time, partial) pairs)`` for each key of ``partition``, one key
        at a time (10^5 events per key and 100 keys take ~5 GB)."""
        for k in range(KEYS):
            key = f"key-{k}"
            if fiba.key_partition(key.encode()) == partition:
                yield key, prefilled_pairs(pipeline.config.lift, n)

    serve(worker)


# --- micro: the window work of one event, offline ----------------------------------------------


def cpu_us_per_call(fn: Any, calls: int) -> float:
    """CPU microseconds (``time.process_time``) per call of ``fn()`` over ``calls`` calls."""
    started = time.process_time()
    for _ in range(calls):
        fn()
    return 1e6 * (time.process_time() - started) / calls


def micro(occupancies: list[int], events: int = 20_000) -> dict[str, float]:
    """Offline CPU costs of the worker's window work with the default aggregations: one
    composed ``combine`` against the sum of its parts' combines, one composed ``lower``, and
    per event ``KeyWindows.accept`` (``emit=event``) and ``accept_batch`` (``emit=batch``, 1000
    events per batch) over windows pre-filled to each occupancy (events as in the end-to-end
    run, parsed already: no Kafka, JSON or store), and one partition's batch shares applied in
    slices of each of ``SHARE_SLICES`` (``_share_work``). Each state is built as the worker
    builds a restored partition (collector paused, the result frozen)."""
    from stores.gc_pause import paused_gc
    from stores.key_windows import KeyWindows, WindowConfig

    figures: dict[str, float] = {}
    base = Settings()
    config = WindowConfig.from_settings(base)
    composed = config.composed
    a, b = composed.lift(1.5), composed.lift(-2.25)
    parts = _parts(base)
    figures["compose_combine_us"] = min(
        cpu_us_per_call(lambda: composed.combine(a, b), 200_000) for _ in range(3)
    )
    figures["parts_combine_us"] = min(
        sum(
            cpu_us_per_call(lambda m=m, x=x, y=y: m.combine(x, y), 200_000)
            for m, x, y in ((m, m.lift(1.5), m.lift(-2.25)) for m in parts)
        )
        for _ in range(3)
    )
    figures["compose_lower_us"] = min(
        cpu_us_per_call(lambda: composed.lower(a), 200_000) for _ in range(3)
    )
    for occupancy in occupancies:
        offline = BenchBroker("127.0.0.1:1", "kafka", "none")  # no broker: settings only
        settings = scenario_settings(offline, occupancy, "event", Path("unused"))
        stream = []
        for key, value in event_stream(events):
            obj = json.loads(value)
            stream.append((key.decode(), obj["ts"], obj["value"]))
        for emit in ("event", "batch"):
            windows = KeyWindows(WindowConfig.from_settings(settings), emit=emit)
            lift = windows.config.lift
            with paused_gc(freeze=True):  # as the worker builds a restored partition
                windows.restore({f"key-{k}": prefilled_pairs(lift, occupancy) for k in range(KEYS)})
            started = time.process_time()
            if emit == "event":
                for key, ts, value in stream:
                    windows.accept(key, ts, value)
            else:
                for lo in range(0, len(stream), 1000):
                    windows.accept_batch(stream[lo : lo + 1000])
            figures[f"{emit}_{occupancy}_us_per_event"] = (
                1e6 * (time.process_time() - started) / len(stream)
            )
            windows.clear()  # unlinks the trees: frozen, they would never be freed otherwise
            gc.unfreeze()
        for size in SHARE_SLICES:
            figures[f"share_{occupancy}_slice{size}_us_per_event"] = _share_work(
                settings, occupancy, stream, size
            )
    return figures


SHARE_SLICES = (64, 1000)
"""Slice sizes ``micro`` applies a partition's batch shares in (the 0.25 ms slices of the
input reader's shares held 32-128 records; 5 ms ones hold a share)."""


def _share_work(settings: Settings, occupancy: int, stream: list, size: int) -> float:
    """CPU µs per event of one partition's ``emit=batch`` window work as the worker does it
    (``agents.windows``): the events of a quarter of the keys (one of 4 partitions) in shares
    of 1000, each applied (``KeyWindows.apply``) in slices of ``size``, then ``evict_expired``
    and ``record_of`` per touched key."""
    from stores.gc_pause import paused_gc
    from stores.key_windows import KeyWindows, WindowConfig

    keys = {f"key-{k}" for k in range(0, KEYS, 4)}
    events = [event for event in stream if event[0] in keys]
    windows = KeyWindows(WindowConfig.from_settings(settings), emit="batch")
    with paused_gc(freeze=True):
        windows.restore({key: prefilled_pairs(windows.config.lift, occupancy) for key in keys})
    started = time.process_time()
    for lo in range(0, len(events), 1000):
        share = events[lo : lo + 1000]
        last: dict[str, tuple[int, int]] = {}
        for at in range(0, len(share), size):
            piece = share[at : at + size]
            last.update(windows.apply(piece, range(len(piece))).last)
        for key, (_, ts) in last.items():
            windows.evict_expired(key)
            windows.record_of(key, ts)
    elapsed = time.process_time() - started
    windows.clear()
    gc.unfreeze()
    return 1e6 * elapsed / max(1, len(events))


def _parts(settings: Settings) -> list[Any]:
    from stores.key_windows import COUNT
    from stores.monoids import monoid

    names = list(settings.aggregations)
    if COUNT not in names:
        names.append(COUNT)
    return [monoid(name) for name in names]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    child = sub.add_parser("child")
    child.add_argument("scenario")
    child.add_argument("occupancy", type=int)
    run = sub.add_parser("run")
    run.add_argument("--quick", action="store_true")
    add_broker_kind_option(run)
    run.add_argument("--occupancies", default="100,1000,10000")
    run.add_argument("--scenarios", default="floor,bare,bare-batch,event,batch")
    run.add_argument(
        "--guarantees",
        default="at_least_once",
        help="comma-separated processing guarantees to run every worker scenario with "
        "(exactly_once needs --broker-kind kafka)",
    )
    run.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run every cell this many times, in alternating order (this VM drifts)",
    )
    micro_parser = sub.add_parser("micro", help="offline CPU cost of the window work")
    micro_parser.add_argument("--occupancies", default="100,1000,10000")
    args = parser.parse_args(sys.argv[1:] or ["run"])
    if args.command != "child":
        print("command:", " ".join(["python -m bench.worker_pipeline", *sys.argv[1:]]))
        for name, value in describe_machine().items():
            print(f"{name}: {value}")
    if args.command == "micro":
        figures = micro([int(x) for x in args.occupancies.split(",")])
        for name, value in figures.items():
            print(f"{name:32s} {value:8.2f}")
        return
    if args.command == "child":
        settings = load_settings()
        if args.scenario in ("floor", "emit-floor", "batch-floor"):
            run_floor(
                settings,
                produce=args.scenario == "emit-floor",
                durable=args.scenario == "batch-floor",
            )
        elif args.scenario.startswith("bare"):
            run_bare(settings, batched=args.scenario == "bare-batch")
        else:
            run_prefilled_worker(settings, args.occupancy)
        return
    occupancies = [int(x) for x in args.occupancies.split(",")]
    events = 24_000 if args.quick else 90_000
    results = []
    with (
        bench_broker(args.broker_kind) as broker,
        tempfile.TemporaryDirectory(prefix="bench-worker-") as tmp,
    ):
        workdir = Path(tmp)
        scenarios = args.scenarios.split(",")
        plan = [
            (
                name,
                occupancies[0],
                events * (FLOOR_STREAM_FACTOR if name.endswith("floor") else 1),
                False,
                "at_least_once",
            )
            for name in FLOORS
            if name in scenarios
        ]
        for name in ("event", "batch"):
            if name not in scenarios:
                continue
            for guarantee in args.guarantees.split(","):
                plan += [(name, occ, events, False, guarantee) for occ in occupancies]
                if QUERY_OCCUPANCY in occupancies:
                    plan.append((name, QUERY_OCCUPANCY, events, True, guarantee))
        for round_ in range(1, args.rounds + 1):
            # alternate the order, so that a drift of the machine's speed over the run
            # weighs on every cell alike
            for name, occ, n, queries, guarantee in plan if round_ % 2 else plan[::-1]:
                result = run_scenario(broker, name, occ, n, queries, workdir, guarantee)
                result["round"] = round_
                print(json.dumps(result), flush=True)
                results.append(result)
    write_results(results, RESULTS, args.broker_kind)
    print(markdown(results))


def markdown(results: list[dict[str, Any]]) -> str:
    """The results as a Markdown table, one row per scenario, occupancy and query load (``+
    queries``: the same run with range queries timed meanwhile): the median over the
    rounds (with the range when there are several), the ratio columns against the median bare
    rate of the same run (``-`` without the ``bare`` scenario); then each mode's flatness (the
    slowest occupancy's rate as a share of the fastest's, runs without queries: the query
    clients share the machine's two cores), from the medians and within each round; with the
    ``floor`` scenario, each emit mode's slowest and fastest median as a multiple of the
    floor's (``GOALS``); the query latencies."""
    cells: dict[tuple[str, int, bool], list[dict[str, Any]]] = {}
    for r in results:
        cells.setdefault((_scenario(r), r["occupancy"], r.get("queries", False)), []).append(r)
    rate = {cell: statistics.median(r["events_per_s"] for r in rs) for cell, rs in cells.items()}
    cpu = {cell: statistics.median(r["cpu_us_per_event"] for r in rs) for cell, rs in cells.items()}
    bare = next((cell for cell in cells if cell[0] == "bare"), None)
    bare_rate = bare and rate[bare]
    bare_cpu = bare and cpu[bare]
    rounds = max(len(rs) for rs in cells.values())
    lines = [
        "| scenario | events/key in largest window | events/s (wall"
        + (f", median of {rounds} [range]" if rounds > 1 else "")
        + ") | % of bare | worker CPU µs/event | bare CPU / worker CPU |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for cell, rs in cells.items():
        name, occupancy, queries = cell
        spread = ""
        if len(rs) > 1:
            low, high = (f(r["events_per_s"] for r in rs) for f in (min, max))
            spread = f" [{low:,.0f}-{high:,.0f}]"
        lines.append(
            f"| {name}{' + queries' if queries else ''} | "
            f"{'-' if name in FLOORS else f'{occupancy:,}'} | "
            f"{rate[cell]:,.0f}{spread} | {_percent(rate[cell], bare_rate)} | "
            f"{cpu[cell]:,.0f} | {_percent(bare_cpu, cpu[cell])} |"
        )
    modes = sorted({_scenario(r) for r in results if not r["scenario"].startswith("bare")})
    for mode in modes:
        medians = [rate[cell] for cell in cells if cell[0] == mode and not cell[2]]
        if len(medians) < 2:
            continue
        per_round = []
        for round_ in sorted({r.get("round", 1) for r in results}):
            rates = [
                r["events_per_s"]
                for r in results
                if _scenario(r) == mode
                and r.get("round", 1) == round_
                and not r.get("queries", False)
            ]
            per_round.append(_percent(min(rates), max(rates)))
        lines.append(
            f"\n{mode}: slowest occupancy at {_percent(min(medians), max(medians))} of the "
            f"fastest (medians, runs without queries); per round {', '.join(per_round)}"
        )
    floor = next((cell for cell in cells if cell[0] == "floor"), None)
    for mode, goal in GOALS.items():
        medians = [rate[cell] for cell in cells if cell[0] == mode and not cell[2]]
        if floor is None or not medians:
            continue
        lines.append(
            f"\n{mode} against the floor (a bare aiokafka consumer, {rate[floor]:,.0f} "
            f"events/s): {min(medians) / rate[floor]:.3f}x-{max(medians) / rate[floor]:.3f}x "
            f"(goal >= {goal}x)"
        )
    bound = next((cell for cell in cells if cell[0] == "emit-floor"), None)
    if floor is not None and bound is not None:
        lines.append(
            f"\nemit-floor (the floor plus encoding and producing one aggregate record per "
            f"event, no window work): {rate[bound] / rate[floor]:.3f}x the floor, "
            f"{cpu[bound]:,.1f} CPU µs/event: the most emit=event can reach"
        )
    durable = next((cell for cell in cells if cell[0] == "batch-floor"), None)
    if floor is not None and durable is not None:
        lines.append(
            f"\nbatch-floor (the floor plus parsing, lifting, the window store's writes and "
            f"changelog records, one eviction per event and one aggregate record per key per "
            f"batch, no window work): {rate[durable] / rate[floor]:.3f}x the floor, "
            f"{cpu[durable]:,.1f} CPU µs/event: the most emit=batch can reach"
        )
    lines += _guarantee_ratios(cells, rate, cpu)
    for r in results:
        for kind in ("http_query_ms", "topic_query_ms"):
            if kind in r:
                q = r[kind]
                lines.append(
                    f"\n{kind.split('_')[0]} range queries under load ({r['scenario']}, "
                    f"{r['occupancy']:,}/key, round {r.get('round', 1)}): n={q['n']}, "
                    f"p50 {q['p50']:.1f} ms, p99 {q['p99']:.1f} ms "
                    f"(first query {q.get('first', float('nan')):.1f} ms, not in n)"
                )
    return "\n".join(lines)


FLOORS = ("floor", "emit-floor", "batch-floor", "bare", "bare-batch")
"""The scenarios without a worker (no occupancy)."""

GOALS = {"batch": 1.0, "event": 0.5}
"""Issue 20's goals: each emit mode's rate as a multiple of the floor's, at every occupancy."""


def _scenario(result: dict[str, Any]) -> str:
    """A result's scenario name, ``+ exactly_once`` for a worker run with that guarantee."""
    eos = result.get("guarantee", "at_least_once") == "exactly_once"
    return result["scenario"] + (" + exactly_once" if eos else "")


def _guarantee_ratios(
    cells: dict[tuple[str, int, bool], list[dict[str, Any]]],
    rate: dict[tuple[str, int, bool], float],
    cpu: dict[tuple[str, int, bool], float],
) -> list[str]:
    """Per emit mode and occupancy run under both guarantees: exactly-once's throughput and
    CPU per event as a share of at-least-once's (medians)."""
    lines = []
    for name, occupancy, queries in cells:
        twin = (f"{name} + exactly_once", occupancy, queries)
        if twin in cells and not name.startswith("bare"):
            cell = (name, occupancy, queries)
            lines.append(
                f"\n{name}{' + queries' if queries else ''}, {occupancy:,}/key: exactly_once at "
                f"{_percent(rate[twin], rate[cell])} of at_least_once's events/s "
                f"(CPU/event {_percent(cpu[twin], cpu[cell])})"
            )
    return lines


def _percent(part: float | None, whole: float | None) -> str:
    return "-" if part is None or whole is None else f"{100 * part / whole:.0f}%"


if __name__ == "__main__":
    main()
