"""Event-to-aggregate latency of the worker at a steady fraction of its maximum rate.

``python -m bench.latency [--quick] [--modes event,batch] [--loads 0.25,0.5,0.9]
[--broker-kind kafka|embedded] [--rates MODE=N,...] [--results FILE]`` starts a broker
(default Apache Kafka) and per emit mode first measures the worker's maximum sustained rate (a
pre-produced backlog, as ``bench.worker_pipeline`` does, unless ``--rates`` gives it), then
per load runs a fresh worker (windows pre-filled to
``--occupancy`` events per key) while ``bench.paced_producer`` feeds that fraction of the rate
from its own process into an input topic with ``LogAppendTime``. Then it reads the input and
aggregates topics back (both ``LogAppendTime``: one clock, the broker's) and, per input record
appended after the warm-up, takes the append time of the first aggregate record that includes
it (same key, ``input_partition``, ``input_offset`` at or after it) minus its own: p50, p99,
p99.9 and max; also per aggregate record from the record it answers (the definition of the
worker's ``fiba_aggregate_latency_seconds``, whose count and mean it reads beside). Writes
``bench/results/latency_<kind>.json``. Methods: docs/bench-methods.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import orjson
from prometheus_client.parser import text_string_to_metric_families

from agents.clients import read_to_end
from app.demo import settings_environ
from app.settings import Settings
from app.topics import TopicSpec, create_topics, topic_specs
from bench.bench_broker import (
    BenchBroker,
    add_broker_kind_option,
    announce_run,
    bench_broker,
    write_results,
)
from bench.timing import percentile
from bench.worker_harness import (
    EAGER_STATE,
    PER_CHUNK,
    backlogged_worker,
    child_process,
    cpu_seconds,
    get_json,
    long_enough,
    measure_rate,
    scenario_settings,
    wait_until_assigned,
)

RESULTS = Path(__file__).parent / "results" / "latency.json"
LOG_APPEND_TIME = 1
"""A record's ``timestamp_type`` when its topic has ``message.timestamp.type=LogAppendTime``."""
GOAL_MS = 20.0
"""Issue 29's goal: p99 at most this at half the maximum rate, ``emit=event``."""
GOAL_LOAD = 0.5
EMIT_OF = {"emit-floor": "event"}
"""The scenarios without a worker (``bench.worker_scenarios``) and the emit mode they mimic."""
DRAIN_TIMEOUT_S = 300.0
"""How long a worker may take to apply the records still queued when the producer stops."""


class Record(Protocol):
    """What the analysis reads of a consumed record (``aiokafka.ConsumerRecord``)."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    timestamp_type: int


def latency_topic_specs(settings: Settings) -> list[TopicSpec]:
    """The worker's topics, the input and aggregates topics with ``LogAppendTime``."""
    stamped = {settings.input_topic, settings.aggregates_topic}
    return [
        replace(spec, configs={**spec.configs, "message.timestamp.type": "LogAppendTime"})
        if spec.name in stamped
        else spec
        for spec in topic_specs(settings)
    ]


def summary(latencies_ms: Sequence[float]) -> dict[str, float]:
    """``n``, ``p50``, ``p99``, ``p999``, ``max`` and ``mean`` (ms, nearest rank)."""
    ordered = sorted(latencies_ms)
    if not ordered:
        return {"n": 0}
    return {
        "n": len(ordered),
        "p50": percentile(ordered, 50),
        "p99": percentile(ordered, 99),
        "p999": percentile(ordered, 99.9),
        "max": ordered[-1],
        "mean": sum(ordered) / len(ordered),
    }


def analyse(inputs: Sequence[Record], aggregates: Sequence[Record], warmup_ms: int) -> dict:
    """The latencies of one run from its topics read back: per input record appended at least
    ``warmup_ms`` after the first one, to the first aggregate record including it
    (``per_event``; ``unmatched``: those without one), and per aggregate record answering
    such an input, from it (``per_aggregate``); ``input_rate``: those inputs per second of
    their append times. Raises ``ValueError`` unless both topics carry ``LogAppendTime``. O(n
    log n)."""
    for name, records in (("input", inputs), ("aggregates", aggregates)):
        if any(r.timestamp_type != LOG_APPEND_TIME for r in records):
            raise ValueError(f"the {name} topic does not stamp LogAppendTime on this broker")
    if not inputs:
        raise ValueError("no input records")
    start = min(r.timestamp for r in inputs) + warmup_ms
    appended = {(r.partition, r.offset): r.timestamp for r in inputs}
    by_key: dict[tuple[int, bytes | None], list[tuple[int, int]]] = {}
    per_aggregate = []
    for record in aggregates:
        obj = orjson.loads(record.value or b"{}")
        source = (obj["input_partition"], obj["input_offset"])
        by_key.setdefault((source[0], record.key), []).append((source[1], record.timestamp))
        if appended.get(source, -1) >= start:
            per_aggregate.append(record.timestamp - appended[source])
    answers = {}
    for group, answered in by_key.items():
        answered.sort()  # input order; a key's records are appended in it
        answers[group] = ([offset for offset, _ in answered], [ts for _, ts in answered])
    per_event, unmatched = [], 0
    measured = [r for r in inputs if r.timestamp >= start]
    for record in measured:
        offsets, times = answers.get((record.partition, record.key), ((), ()))
        at = bisect_left(offsets, record.offset)
        if at == len(offsets):
            unmatched += 1
            continue
        per_event.append(times[at] - record.timestamp)
    span_s = (max(r.timestamp for r in measured) - start) / 1000 if measured else 0.0
    return {
        "per_event": summary(per_event),
        "per_aggregate": summary(per_aggregate),
        "unmatched": unmatched,
        "input_rate": len(measured) / span_s if span_s > 0 else 0.0,
        "aggregates_read": len(aggregates),
    }


def max_rate(
    broker: BenchBroker, emit: str, occupancy: int, events: int, workdir: Path
) -> dict[str, Any]:
    """The worker's maximum sustained rate in ``emit`` mode: events/s consuming a backlog of
    ``events`` (between 30% and 90% of it, ``measure_rate``; a longer one when that is too
    short at its rate, ``long_enough``), and its CPU µs per event."""

    def measured(n: int) -> tuple[int, float, float]:
        with backlogged_worker(broker, emit, occupancy, n, workdir) as (settings, worker, log):
            return n, *measure_rate(settings.web_port, n, worker, log, 900)

    events, rate, cpu = long_enough(measured, events)
    return {
        "kind": "max_rate",
        "emit": emit,
        "occupancy": occupancy,
        "events": events,
        "events_per_s": rate,
        "cpu_us_per_event": cpu,
        "events_per_cpu_s": 1e6 / cpu,
        "load_1m": os.getloadavg()[0],
    }


def paced_run(
    broker: BenchBroker,
    emit: str,
    occupancy: int,
    rate: float,
    seconds: tuple[float, float],
    workdir: Path,
) -> dict[str, Any]:
    """One worker in ``emit`` mode (or the ``emit-floor`` scenario: one aggregate record per
    event produced as ``emit=event`` does, no window work) fed at ``rate`` events/s for
    ``seconds`` = (warm-up, measured) by ``bench.paced_producer``; its latencies
    (``analyse``), its CPU while fed, the input records not yet applied when the producer
    stopped, and its latency histogram's count and mean from ``/metrics`` (a worker's)."""
    warmup_s, measure_s = seconds
    settings = scenario_settings(
        broker,
        occupancy,
        EMIT_OF.get(emit, emit.removesuffix(PER_CHUNK).removesuffix(EAGER_STATE)),
        workdir / f"paced-{time.time_ns()}",
    )
    asyncio.run(create_topics(settings, latency_topic_specs(settings)))
    events = int(rate * (warmup_s + measure_s))
    with child_process(settings, emit, occupancy, workdir) as (worker, log):
        wait_until_assigned(settings.web_port, worker)
        env = {k: v for k, v in os.environ.items() if not k.startswith("FIBA_")}
        env.update(settings_environ(settings))
        command = [sys.executable, "-m", "bench.paced_producer", f"{rate:.3f}", str(events)]
        cpu_before, began = cpu_seconds(worker.pid), time.monotonic()
        done = subprocess.run(command, env=env, capture_output=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"the paced producer failed: {done.stderr.decode()[-2000:]}")
        cpu_fed, fed_s = cpu_seconds(worker.pid) - cpu_before, time.monotonic() - began
        accepted = get_json(settings.web_port, "/stats")["counts"].get("accepted", 0)
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while get_json(settings.web_port, "/stats")["counts"].get("accepted", 0) < events:
            if worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the worker did not apply every record; see {log}")
            time.sleep(0.2)
        histogram = None if emit in EMIT_OF else worker_histogram(settings.web_port)
    inputs = asyncio.run(read_to_end(settings, settings.input_topic))
    outputs = asyncio.run(read_to_end(settings, settings.aggregates_topic))
    return {
        "kind": "paced",
        "emit": emit,
        "occupancy": occupancy,
        "target_rate": rate,
        "events": events,
        "warmup_s": warmup_s,
        "producer": json.loads(done.stdout.decode().strip().splitlines()[-1]),
        "worker_cpu_share": cpu_fed / fed_s,
        "cpu_us_per_event": 1e6 * cpu_fed / max(1, accepted),
        "behind_at_end": events - accepted,
        "metric": histogram,
        "load_1m": os.getloadavg()[0],
        **analyse(inputs, outputs, int(1000 * warmup_s)),
    }


def worker_histogram(port: int) -> dict[str, float]:
    """The count and mean (ms) of ``fiba_aggregate_latency_seconds`` on the worker's
    ``/metrics``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        body = response.read().decode()
    values = {
        sample.name: sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
        if family.name == "fiba_aggregate_latency_seconds"
    }
    count = values["fiba_aggregate_latency_seconds_count"]
    mean = 1000 * values["fiba_aggregate_latency_seconds_sum"] / count if count else 0.0
    return {"count": count, "mean_ms": mean}


def run(
    broker: BenchBroker,
    modes: Sequence[str],
    loads: Sequence[float],
    occupancy: int,
    backlog: int,
    seconds: tuple[float, float],
    workdir: Path,
    rates: dict[str, float] | None = None,
) -> list[dict[str, Any]]:
    """Per emit mode its maximum rate (``max_rate`` over a ``backlog``, unless ``rates``
    gives it), then a ``paced_run`` at each fraction in ``loads`` of it; the rows, printed as
    they come."""
    results = []
    for emit in modes:
        if rates and emit in rates:
            top = {"kind": "max_rate", "emit": emit, "events_per_s": rates[emit], "given": True}
        else:
            top = max_rate(broker, emit, occupancy, backlog, workdir)
        print(json.dumps(top), flush=True)
        results.append(top)
        for load in loads:
            row = paced_run(broker, emit, occupancy, load * top["events_per_s"], seconds, workdir)
            row["load"] = load
            print(json.dumps(row), flush=True)
            results.append(row)
    return results


def markdown(results: Sequence[dict[str, Any]]) -> str:
    """The rows as a Markdown table (ms), and the goal's verdict."""
    lines = [
        "| emit | load | events/s (target / appended) | worker CPU | behind at end | "
        "per event: n, p50 / p99 / p99.9 / max ms | per aggregate: p50 / p99 ms |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        if r["kind"] == "max_rate":
            cpu = r.get("events_per_cpu_s")
            lines.append(
                f"| {r['emit']} | max | {r['events_per_s']:,.0f}"
                + (f" ({cpu:,.0f} per CPU s)" if cpu else " (given)")
                + " | | | | |"
            )
            continue
        e, a = r["per_event"], r["per_aggregate"]
        lines.append(
            f"| {r['emit']} | {r['load']:.0%} | {r['target_rate']:,.0f} / {r['input_rate']:,.0f} "
            f"| {r['worker_cpu_share']:.0%} | {r['behind_at_end']:,} | {e['n']:,}: "
            f"{e['p50']:.0f} / {e['p99']:.0f} / {e['p999']:.0f} / {e['max']:.0f} | "
            f"{a['p50']:.0f} / {a['p99']:.0f} |"
        )
    lines += ["", goal_verdict(results)]
    return "\n".join(lines)


def goal_row(results: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The run's ``emit=event`` row at half the maximum rate (issue 29's latency goal's), if
    any."""
    return next(
        (
            r
            for r in results
            if r["kind"] == "paced" and r["emit"] == "event" and r["load"] == GOAL_LOAD
        ),
        None,
    )


def goal_verdict(results: Sequence[dict[str, Any]]) -> str:
    """Issue 29's latency goal against the run's ``emit=event`` row at half the maximum
    rate."""
    row = goal_row(results)
    goal = f"goal (p99 <= {GOAL_MS:.0f} ms at {GOAL_LOAD:.0%} of the maximum rate, emit=event)"
    if row is None:
        return f"{goal}: not measured"
    p99 = row["per_event"]["p99"]
    return f"{goal}: {p99:.0f} ms, {'met' if p99 <= GOAL_MS else 'not met'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_broker_kind_option(parser, default="kafka")
    parser.add_argument("--quick", action="store_true", help="seconds, not minutes: a smoke run")
    parser.add_argument(
        "--modes",
        default="emit-floor,event,batch",
        help="emit modes, and emit-floor: reading and producing one aggregate record per event "
        "as emit=event does, without window work (the least latency emit=event can have), "
        "event-per-chunk: emit=event handing over after every fetched chunk, and "
        "event-eager-state: emit=event handing its state changes over with every hand-over",
    )
    parser.add_argument("--loads", default="0.25,0.5,0.9")
    parser.add_argument("--occupancy", type=int, default=1000)
    parser.add_argument(
        "--rates",
        default="",
        help="given maximum rates, MODE=EVENTS_PER_S,... (no backlog run for those modes: "
        "the loads are fractions of it, e.g. to pace two modes at the same rate)",
    )
    parser.add_argument(
        "--results",
        help="the results file in bench/results/ (_<kind> added for another broker than "
        "embedded; default latency.json, latency_quick.json with --quick)",
    )
    args = parser.parse_args()
    facts = announce_run("bench.latency")
    backlog, seconds = (20_000, (1.0, 3.0)) if args.quick else (90_000, (5.0, 20.0))
    with (
        bench_broker(args.broker_kind) as broker,
        tempfile.TemporaryDirectory(prefix="bench-latency-") as tmp,
    ):
        if broker.profile == "embedded":
            raise SystemExit("bench.latency: the embedded broker stamps no LogAppendTime")
        results = run(
            broker,
            args.modes.split(","),
            [float(x) for x in args.loads.split(",")],
            args.occupancy,
            backlog,
            seconds,
            Path(tmp),
            {m: float(r) for m, r in (x.split("=") for x in args.rates.split(",") if x)},
        )
    path = RESULTS.with_name(args.results or ("latency_quick.json" if args.quick else RESULTS.name))
    write_results(results, path, args.broker_kind, facts)
    print(markdown(results))


if __name__ == "__main__":
    main()
