"""The worker against a peer in one run: Quix Streams' sliding windows on the same input.

``python -m bench.peers run [--occupancies 10,100,1000] [--broker-kind embedded|kafka]
[--quick]``: per occupancy, one pre-produced input topic read in turn by the worker with
``emit=event``, with ``emit=batch`` and by the Quix job (``bench.quix_job``), all computing one
sliding window with count, sum, max and mean from full windows; each peer's output is checked
(``bench.quix_semantics``) before its rate counts. Writes ``bench/results/peers.json``, shown
on docs/benchmarks.md and in the README; the semantics that differ: docs/bench-methods.md.
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
from bench.bench_broker import BenchBroker, add_broker_kind_option, bench_broker, write_results
from bench.machine import describe_machine
from bench.quix_job import AGGREGATIONS, OUTPUT_TOPIC_CONFIGS, PARTITIONS
from bench.worker_harness import (
    MAX_LATENESS_MS,
    SPACING_MS,
    child_process,
    event_stream,
    measure_rate,
    produce,
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


def run_occupancy(
    broker: BenchBroker, occupancy: int, events: int, quix_n: int, workdir: Path
) -> list[dict[str, Any]]:
    """One occupancy: the input produced once, then ``event``, ``batch`` and ``quix`` on it;
    one result per process (Quix's with its ``output_topic``)."""
    input_topic = f"peers-{uuid.uuid4().hex[:8]}-events"
    results = []
    for emit in ("event", "batch"):
        settings = peer_settings(broker, occupancy, emit, input_topic, workdir)
        asyncio.run(create_topics(settings))
        if emit == "event":
            asyncio.run(produce(settings, event_stream(events)))
        with child_process(settings, emit, occupancy, workdir) as (worker, log_path):
            rate, cpu = measure_rate(settings.web_port, events, worker, log_path, TIMEOUT_S)
        results.append(_result(broker, emit, occupancy, events, rate, cpu))
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


def markdown(results: list[dict[str, Any]]) -> str:
    """One row per occupancy: each process's events/s and CPU µs per event, and the worker's
    rate (each emit mode) over Quix's; then the events each process read."""
    cells = {(r["scenario"], r["occupancy"]): r for r in results}
    occupancies = sorted({r["occupancy"] for r in results})
    lines = [
        "| events/key in window | fiba event: events/s (CPU µs/event) | fiba batch: events/s "
        "(CPU µs/event) | Quix: events/s (CPU µs/event) | event / Quix | batch / Quix |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for occupancy in occupancies:
        row = [f"{occupancy:,}"]
        for scenario in ("event", "batch", "quix"):
            r = cells.get((scenario, occupancy))
            row.append(
                "-" if r is None else f"{r['events_per_s']:,.0f} ({r['cpu_us_per_event']:,.1f})"
            )
        quix = cells.get(("quix", occupancy))
        for scenario in ("event", "batch"):
            r = cells.get((scenario, occupancy))
            ratio = r and quix and r["events_per_s"] / quix["events_per_s"]
            row.append(f"{ratio:,.1f}x" if ratio else "-")
        lines.append("| " + " | ".join(row) + " |")
    read = ", ".join(
        f"{occupancy:,}: {cells[('quix', occupancy)]['events']:,}"
        for occupancy in occupancies
        if ("quix", occupancy) in cells
    )
    events = max(r["events"] for r in results)
    lines.append(
        f"\nEvents read: the worker {events:,} per emit mode; Quix (per occupancy) {read}."
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run")
    run.add_argument("--quick", action="store_true")
    add_broker_kind_option(run)
    run.add_argument("--occupancies", default="10,100,1000")
    args = parser.parse_args(sys.argv[1:] or ["run"])
    print("command:", " ".join(["python -m bench.peers", *sys.argv[1:]]))
    for name, value in describe_machine().items():
        print(f"{name}: {value}")
    events = 24_000 if args.quick else 90_000
    results = []
    with (
        bench_broker(args.broker_kind) as broker,
        tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp,
    ):
        for occupancy in (int(x) for x in args.occupancies.split(",")):
            quix_n = quix_events(occupancy, events, args.quick)
            results += run_occupancy(broker, occupancy, events, quix_n, Path(tmp))
    write_results(results, RESULTS, args.broker_kind)
    print(markdown(results))


if __name__ == "__main__":
    main()
