"""Range-query latency while a worker consumes an input backlog.

``python -m bench.query_latency [--seconds S] [--scenarios event,batch,idle] [--broker-kind
embedded|kafka]``: per scenario, the load of ``bench.worker_pipeline`` at occupancy 1,000 (a
pre-produced backlog, one worker subprocess); while the worker consumes it a client times HTTP
range queries (keep-alive and new connections), then another query-topic round trips; ``idle``
is the floor of both paths. Writes ``bench/results/query_latency.json`` (shown on
docs/benchmarks.md); the clients and what each time includes: docs/bench-methods.md.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import multiprocessing
import random
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from agents.clients import client_options
from app.settings import Settings
from bench.bench_broker import (
    BenchBroker,
    add_broker_kind_option,
    announce_run,
    bench_broker,
    write_results,
)
from bench.worker_harness import (
    KEYS,
    backlogged_worker,
    cpu_seconds,
    get_json,
    percentile,
    wait_until_assigned,
)

OCCUPANCY = 1000
WARM_FRACTION = 0.05
RESULTS = Path(__file__).parent / "results" / "query_latency.json"
EVENTS_PER_SECOND = {"event": 6500, "batch": 18000}
IDLE_BACKLOG = 2000
"""Backlog size per measured second: above the fastest rate seen for each mode (worker_pipeline
runs), so that the backlog outlasts the measurement."""
SERIES = (
    "http_keep_alive",
    "http_new_connection",
    "topic",
    "topic_until_answered",
    "topic_answer_delivery",
)


# --- the clients (each in its own process) ---------------------------------------------------


def http_client(port: int, window: str, stop: Any, results: Any) -> None:
    """Sequential HTTP range queries until ``stop`` is set; puts ``(series, seconds)`` lists."""
    rng = random.Random(2)
    kept = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    samples: dict[str, list[float]] = {"http_keep_alive": [], "http_new_connection": []}
    errors = 0
    i = 0
    while not stop.is_set():
        i += 1
        fresh = i % 2 == 0
        path = f"/windows/key-{rng.randrange(KEYS)}?window={window}"
        started = time.perf_counter()
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10) if fresh else kept
            conn.request("GET", path)
            response = conn.getresponse()
            body = response.read()
            if fresh:
                conn.close()
        except (OSError, http.client.HTTPException):
            errors += 1
            kept.close()
            time.sleep(0.05)
            continue
        elapsed = time.perf_counter() - started
        if response.status != 200 or "count" not in json.loads(body):
            errors += 1
        else:
            samples["http_new_connection" if fresh else "http_keep_alive"].append(elapsed)
        time.sleep(0.01)
    kept.close()
    results.put({"errors_http": errors, **samples})


async def _topic_queries(settings: Settings, stop: Any) -> dict[str, Any]:
    producer = AIOKafkaProducer(**client_options(settings), linger_ms=0)
    consumer = AIOKafkaConsumer(
        **client_options(settings), enable_auto_commit=False, fetch_max_wait_ms=1
    )
    await producer.start()
    await consumer.start()
    samples: dict[str, list[float]] = {
        "topic": [],
        "topic_until_answered": [],
        "topic_answer_delivery": [],
    }
    lost = 0
    try:
        tps = [TopicPartition(settings.answers_topic, p) for p in range(settings.partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        rng = random.Random(3)
        i = 0
        while not stop.is_set():
            i += 1
            key = f"key-{rng.randrange(KEYS)}"
            query_id = f"q{i}"
            query = {"query_id": query_id, "key": key, "window": settings.windows[1].name}
            started, sent_at = time.perf_counter(), time.time()
            await producer.send_and_wait(
                settings.queries_topic, json.dumps(query).encode(), key=key.encode()
            )
            answered_at: float | None = None
            deadline = started + 10
            while answered_at is None and time.perf_counter() < deadline:
                batch = await consumer.getmany(timeout_ms=100)
                for records in batch.values():
                    for record in records:
                        if json.loads(record.value)["query_id"] == query_id:
                            answered_at = record.timestamp / 1000
            if answered_at is None:
                lost += 1
            else:
                samples["topic"].append(time.perf_counter() - started)
                samples["topic_until_answered"].append(answered_at - sent_at)
                samples["topic_answer_delivery"].append(time.time() - answered_at)
            await asyncio.sleep(0.02)
    finally:
        await producer.stop()
        await consumer.stop()
    return {"errors_topic": lost, **samples}


def topic_client(settings: Settings, stop: Any, results: Any) -> None:
    """Query-topic round trips until ``stop`` is set; puts the ``topic*`` seconds lists."""
    results.put(asyncio.run(_topic_queries(settings, stop)))


# --- one scenario ------------------------------------------------------------------------------


def wait_accepted(port: int, at_least: int, worker: subprocess.Popen, timeout: float) -> int:
    """Poll ``GET /stats`` until the worker has accepted ``at_least`` events; returns the count."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            raise RuntimeError("the worker exited")
        try:
            accepted = get_json(port, "/stats")["counts"].get("accepted", 0)
        except OSError:
            accepted = 0
        if accepted >= at_least:
            return int(accepted)
        time.sleep(0.1)
    raise RuntimeError(f"the worker did not accept {at_least} events in {timeout:g} s")


def summary(samples: list[float]) -> dict[str, float]:
    """Count and p50/p95/p99/max in milliseconds of ``samples`` (seconds)."""
    if not samples:
        return {"n": 0}
    return {
        "n": len(samples),
        **{f"p{round(100 * q)}": 1000 * percentile(samples, q) for q in (0.5, 0.95, 0.99)},
        "max": 1000 * max(samples),
    }


def measure_phase(
    client: multiprocessing.process.BaseProcess,
    stop: Any,
    results: Any,
    port: int,
    worker: subprocess.Popen,
    seconds: float,
) -> dict[str, Any]:
    """Run one client process for ``seconds`` (after a second to start and connect); its
    samples plus the worker's accepted events, CPU seconds and wall seconds meanwhile."""
    client.start()
    try:
        time.sleep(1.0)
        accepted_0, cpu_0, wall_0 = (
            wait_accepted(port, 0, worker, 10),
            cpu_seconds(worker.pid),
            time.monotonic(),
        )
        time.sleep(seconds)
        accepted_1, cpu_1, wall_1 = (
            wait_accepted(port, 0, worker, 10),
            cpu_seconds(worker.pid),
            time.monotonic(),
        )
        stop.set()
        samples = results.get(timeout=60)
        client.join(30)
    finally:
        stop.set()
        if client.is_alive():
            client.terminate()
    return {
        "samples": samples,
        "accepted": (accepted_0, accepted_1),
        "cpu_s": cpu_1 - cpu_0,
        "wall_s": wall_1 - wall_0,
    }


def run_scenario(
    broker: BenchBroker, scenario: str, seconds: float, workdir: Path
) -> dict[str, Any]:
    """Time HTTP queries, then query-topic round trips, ``seconds`` each, on one worker
    consuming a backlog (scenario = emit mode) or idle after it (``idle``)."""
    idle = scenario == "idle"
    emit = "event" if idle else scenario
    events = IDLE_BACKLOG if idle else int(EVENTS_PER_SECOND[emit] * (2 * seconds + 15))
    context = multiprocessing.get_context("spawn")
    phases = {}
    with backlogged_worker(broker, emit, OCCUPANCY, events, workdir) as (settings, worker, _):
        port = settings.web_port
        wait_until_assigned(port, worker)
        warm = events if idle else int(WARM_FRACTION * events)
        wait_accepted(port, warm, worker, 300)
        for phase, target, args in (
            ("http", http_client, (port, settings.windows[1].name)),
            ("topic", topic_client, (settings,)),
        ):
            stop, results = context.Event(), context.Queue()
            client = context.Process(target=target, args=(*args, stop, results))
            phases[phase] = measure_phase(client, stop, results, port, worker, seconds)
    if not idle and phases["topic"]["accepted"][1] >= events:
        raise RuntimeError("the backlog ran out during the measurement: raise EVENTS_PER_SECOND")
    result: dict[str, Any] = {
        "scenario": scenario,
        "emit": emit,
        "occupancy": OCCUPANCY,
        "backlog_events": events,
    }
    for phase, measured in phases.items():
        (a0, a1), cpu, wall = measured["accepted"], measured["cpu_s"], measured["wall_s"]
        samples = measured["samples"]
        result[f"{phase}_phase"] = {
            "measured_s": wall,
            "events_per_s": (a1 - a0) / wall,
            "cpu_us_per_event": 1e6 * cpu / (a1 - a0) if a1 > a0 else None,
            "worker_cpu_share": cpu / wall,
            "errors": samples.pop(f"errors_{phase}"),
        }
        result.update({series: summary(values) for series, values in samples.items()})
    return result


# --- report ------------------------------------------------------------------------------------


def markdown(results: list[dict[str, Any]]) -> str:
    """A Markdown table of the latency series of every scenario."""
    lines = [
        "| scenario | series | n | p50 ms | p95 ms | p99 ms | max ms |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        for series in SERIES:
            s = r[series]
            if not s["n"]:
                lines.append(f"| {r['scenario']} | {series} | 0 | - | - | - | - |")
                continue
            lines.append(
                f"| {r['scenario']} | {series} | {s['n']} | {s['p50']:.1f} | {s['p95']:.1f} | "
                f"{s['p99']:.1f} | {s['max']:.1f} |"
            )
    lines.append("")
    for r in results:
        for phase in ("http", "topic"):
            m = r[f"{phase}_phase"]
            per_event = m["cpu_us_per_event"]
            lines.append(
                f"- {r['scenario']}, {phase} phase ({m['measured_s']:.0f} s): "
                f"{m['events_per_s']:,.0f} events/s, worker CPU "
                f"{'-' if per_event is None else f'{per_event:,.0f}'} µs/event, "
                f"worker CPU share {m['worker_cpu_share']:.2f} of a core, "
                f"errors/lost queries {m['errors']}"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="measured seconds per mode")
    parser.add_argument(
        "--scenarios", default="event,batch,idle", help="event, batch, idle (comma-separated)"
    )
    add_broker_kind_option(parser)
    args = parser.parse_args()
    facts = announce_run("bench.query_latency")
    results = []
    with (
        bench_broker(args.broker_kind) as broker,
        tempfile.TemporaryDirectory(prefix="bench-query-") as tmp,
    ):
        for scenario in args.scenarios.split(","):
            result = run_scenario(broker, scenario, args.seconds, Path(tmp))
            print(json.dumps(result), flush=True)
            results.append(result)
    write_results(results, RESULTS, args.broker_kind, facts)
    print(markdown(results))


if __name__ == "__main__":
    main()
