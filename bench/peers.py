"""The worker against its peers in one run: Quix Streams' sliding windows, Kafka Streams'
``SlidingWindows`` and Flink SQL's ``OVER ... RANGE`` window, on the same input.

``python -m bench.peers run [--occupancies 10,100,1000] [--events N] [--warmup N]
[--jvm-peers kafka-streams,flink] [--check-limit N] [--broker-kind kafka|embedded] [--quick]``:
one pre-produced input topic (``--events``, default 10^5, over 100 keys, 20% late) read in
turn, per occupancy (events per key per window), by the worker with ``emit=event`` and with
``emit=batch``, the Quix job (``bench.quix_job``) and the JVM peers (``bench.jvm_peers``, one
JVM per system warmed up on ``--warmup`` events; Kafka Streams with its cache on and off), all
computing one sliding window from full windows. Each peer's output is checked against its
system's semantics (``bench.quix_semantics``, ``bench.jvm_semantics``) before its rate counts;
rates are events per wall second between 30% and 90% of the stream, with CPU µs per event.
Writes ``bench/results/peers_<kind>.json``, shown on docs/benchmarks.md; methods and the
semantics that differ: docs/bench-methods.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from app.brokers.process import free_port, stop_process
from app.settings import Settings, WindowSpec
from app.topics import TopicSpec, create_topics
from bench import jvm_peers
from bench.bench_broker import (
    BenchBroker,
    add_broker_kind_option,
    announce_run,
    bench_broker,
    write_results,
)
from bench.quix_job import AGGREGATIONS, OUTPUT_TOPIC_CONFIGS, PARTITIONS
from bench.worker_harness import (
    MAX_LATENESS_MS,
    SPACING_MS,
    child_process,
    event_stream,
    long_enough,
    measure_rate,
    scenario_settings,
)
from stores.durations import format_duration

RESULTS = Path(__file__).parent / "results" / "peers.json"
QUIX_WORK = 2_000_000
"""Quix reads ``QUIX_WORK // occupancy`` events (its cost per event is about linear in the
occupancy: about half a minute per cell on the project's machines), at least
``QUIX_MIN_EVENTS``; a quarter of that with ``--quick``."""
QUIX_MIN_EVENTS = 500
TIMEOUT_S = 900


def quix_events(occupancy: int, events: int, quick: bool) -> int:
    """How many of the ``events`` input records the Quix job reads at ``occupancy``."""
    work = QUIX_WORK // 4 if quick else QUIX_WORK
    return min(events, max(QUIX_MIN_EVENTS, work // occupancy))


def peer_settings(
    broker: BenchBroker, occupancy: int, emit: str, input_topic: str, workdir: Path
) -> Settings:
    """The worker's settings for a cell: one window of ``occupancy`` events per key, the
    Quix job's aggregations, windows ending at the event's time, retention = window +
    ``MAX_LATENESS_MS`` (nothing in the stream is late), reading ``input_topic``."""
    size = occupancy * SPACING_MS
    base = scenario_settings(broker, occupancy, emit, workdir / uuid.uuid4().hex[:6])
    return replace(
        base,
        input_topic=input_topic,
        windows=(WindowSpec(format_duration(size), size),),
        retention=size + MAX_LATENESS_MS,
        aggregations=AGGREGATIONS,
        window_end="event_time",
    )


@contextlib.contextmanager
def quix_process(
    broker: BenchBroker,
    input_topic: str,
    occupancy: int,
    prefill: int,
    workdir: Path,
) -> Iterator[tuple[subprocess.Popen, Path, int, str]]:
    """The Quix job (``bench.quix_job``) on ``input_topic`` for the ``with`` block: window
    ``occupancy * SPACING_MS``, grace ``MAX_LATENESS_MS``, ``prefill`` events per key; its
    output topic created first. Yields the process, its log's path, its ``/stats`` port and
    its output topic; terminates it afterwards."""
    output = f"{input_topic}-quix-{uuid.uuid4().hex[:6]}"
    spec = TopicSpec(output, PARTITIONS, 1, OUTPUT_TOPIC_CONFIGS)
    offline = replace(Settings(), broker=broker.bootstrap, broker_profile=broker.profile)
    asyncio.run(create_topics(offline, [spec]))
    port = free_port()
    state_dir = workdir / f"quix-{uuid.uuid4().hex[:6]}"
    command = [
        sys.executable,
        "-m",
        "bench.quix_job",
        broker.bootstrap,
        broker.profile,
        input_topic,
        output,
        str(occupancy * SPACING_MS),
        str(MAX_LATENESS_MS),
        str(prefill),
        str(port),
        str(state_dir),
    ]
    log_path = workdir / f"quix-{occupancy}-{output}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield proc, log_path, port, output
    finally:
        stop_process(proc, 30)


def produce_input(broker: BenchBroker, events: int) -> str:
    """A new input topic holding ``event_stream(events)``; its name."""
    input_topic = f"peers-{uuid.uuid4().hex[:8]}-events"
    jvm_peers.produce_topic(broker, input_topic, event_stream(events))
    return input_topic


def run_occupancy(
    broker: BenchBroker,
    occupancy: int,
    events: int,
    quix_n: int,
    workdir: Path,
    input_topic: str,
) -> list[dict[str, Any]]:
    """One occupancy on ``input_topic`` (``produce_input``): ``event``, ``batch`` and
    ``quix``; one result per process (Quix's with its ``output_topic``)."""
    results = []
    for emit in ("event", "batch"):
        read, rate, cpu = worker_rate(broker, occupancy, emit, events, workdir, input_topic)
        results.append(_result(broker, emit, occupancy, read, rate, cpu))
        print(json.dumps(results[-1]), flush=True)
    with quix_process(broker, input_topic, occupancy, occupancy, workdir) as (
        proc,
        log_path,
        port,
        output,
    ):
        rate, cpu = measure_rate(port, quix_n, proc, log_path, TIMEOUT_S)
    results.append(_result(broker, "quix", occupancy, quix_n, rate, cpu))
    results[-1]["output_topic"] = output
    print(json.dumps(results[-1]), flush=True)
    return results


def worker_rate(
    broker: BenchBroker,
    occupancy: int,
    emit: str,
    events: int,
    workdir: Path,
    input_topic: str,
) -> tuple[int, float, float]:
    """The worker in ``emit`` mode reading ``input_topic`` (``events`` events): the events
    read, events/s and CPU µs per event; when the stream passes too fast to measure at its
    rate, on a longer input whose first ``events`` records are the same (``long_enough``)."""

    def run(n: int) -> tuple[int, float, float]:
        topic = input_topic if n == events else produce_input(broker, n)
        settings = peer_settings(broker, occupancy, emit, topic, workdir)
        asyncio.run(create_topics(settings))
        with child_process(settings, emit, occupancy, workdir) as (worker, log_path):
            return n, *measure_rate(settings.web_port, n, worker, log_path, TIMEOUT_S)

    return long_enough(run, events)


def _result(
    broker: BenchBroker, scenario: str, occupancy: int, events: int, rate: float, cpu: float
) -> dict[str, Any]:
    return {
        "broker": broker.kind,
        "scenario": scenario,
        "occupancy": occupancy,
        "events": events,
        "events_per_s": rate,
        "cpu_us_per_event": cpu,
    }


PEERS = ("quix", *jvm_peers.SCENARIOS.values())
LABELS = {
    "event": "fiba `emit=event`",
    "batch": "fiba `emit=batch`",
    "quix": "Quix Streams",
    "kafka-streams-cache": "Kafka Streams, cache on",
    "kafka-streams-nocache": "Kafka Streams, cache off",
    "flink": "Flink SQL OVER RANGE",
}


def output_check(result: dict[str, Any]) -> str:
    """A JVM peer's output check in a few words; ``-`` for the others."""
    check = result.get("check")
    if check is None:
        return "-"
    if not check["checked"]:
        return f"not read back ({check['output_records']:,} records)"
    wrong = check["mismatches"]
    text = f"{'right' if not wrong else f'{wrong:,} WRONG'} ({check['compared']:,} compared)"
    if result["prefilled_at_30"] < result["prefilled"]:
        text += f"; prefill {result['prefilled_at_30']:,} of {result['prefilled']:,} at 30%"
    return text


def markdown(results: list[dict[str, Any]]) -> str:
    """One row per occupancy and process: events read, events/s, CPU µs per event, the
    worker's rate (each emit mode) over the process's, and (JVM peers) the output check."""
    cells = {(r["scenario"], r["occupancy"]): r for r in results}
    lines = [
        "| events/key in window | system | events read | events/s | CPU µs/event "
        "| fiba event / it | fiba batch / it | output |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for occupancy in sorted({r["occupancy"] for r in results}):
        for scenario in ("event", "batch", *PEERS):
            r = cells.get((scenario, occupancy))
            if r is None:
                continue
            ratios = []
            for mode in ("event", "batch"):
                mine = cells.get((mode, occupancy))
                ratio = mine and mine["events_per_s"] / r["events_per_s"]
                ratios.append(f"{ratio:,.1f}x" if ratio and scenario in PEERS else "-")
            lines.append(
                f"| {occupancy:,} | {LABELS[scenario]} | {r['events']:,} "
                f"| {r['events_per_s']:,.0f} | {r['cpu_us_per_event']:,.1f} "
                f"| {ratios[0]} | {ratios[1]} | {output_check(r)} |"
            )
    warmups = {
        r["scenario"]: r["warmup"] for r in results if "warmup" in r and r["scenario"] in PEERS
    }
    if warmups:
        lines.append(
            "\nJVM warm-up (before the measured jobs, same JVM): "
            + "; ".join(
                f"{LABELS[s]}: {w['events']:,} events at {w['events_per_s']:,.0f}/s"
                for s, w in warmups.items()
            )
            + "."
        )
    return "\n".join(lines)


def run(
    broker: BenchBroker,
    occupancies: list[int],
    events: int,
    warmup: int,
    workdir: Path,
    quick: bool = False,
    systems: tuple[str, ...] = tuple(jvm_peers.MAINS),
    check_limit: int = jvm_peers.CHECK_LIMIT,
) -> list[dict[str, Any]]:
    """The whole comparison on ``broker``: one input of ``events``, per occupancy the worker
    in both emit modes and Quix (``run_occupancy``), then the JVM ``systems`` warmed up on
    ``warmup`` events (``jvm_peers.run_peers``); the results, in that order."""
    results = []
    input_topic = produce_input(broker, events)
    for occupancy in occupancies:
        quix_n = quix_events(occupancy, events, quick)
        results += run_occupancy(broker, occupancy, events, quix_n, workdir, input_topic)
    if systems:
        results += jvm_peers.run_peers(
            broker, input_topic, events, occupancies, warmup, workdir, check_limit, systems
        )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run")
    run.add_argument("--quick", action="store_true", help="24,000 events, 50,000 to warm up")
    add_broker_kind_option(run, default="kafka")
    run.add_argument("--occupancies", default="10,100,1000")
    run.add_argument("--events", type=int, help="measured input events (default 10^5)")
    run.add_argument("--warmup", type=int, help="JVM warm-up events (default 10^6)")
    run.add_argument(
        "--jvm-peers",
        default=",".join(jvm_peers.MAINS),
        help="the JVM peers to run (comma-separated; empty: none)",
    )
    run.add_argument(
        "--check-limit",
        type=int,
        default=jvm_peers.CHECK_LIMIT,
        help="read back and check a JVM peer's output only up to this many records",
    )
    args = parser.parse_args(sys.argv[1:] or ["run"])
    facts = announce_run("bench.peers")
    events = args.events or (24_000 if args.quick else 100_000)
    warmup = args.warmup or (50_000 if args.quick else 1_000_000)
    occupancies = [int(x) for x in args.occupancies.split(",")]
    systems = tuple(s for s in args.jvm_peers.split(",") if s)
    with (
        bench_broker(args.broker_kind) as broker,
        tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp,
    ):
        results = run(
            broker, occupancies, events, warmup, Path(tmp), args.quick, systems, args.check_limit
        )
    write_results(results, RESULTS, args.broker_kind, facts)
    print(markdown(results))


if __name__ == "__main__":
    main()
