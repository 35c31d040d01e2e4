"""Scale-out: one ``fiba worker`` owning 4 input partitions against two in one group, one input.

``python -m bench.scale_out [--events 400000] [--keys 1000] [--emits batch,event] [--rounds 1]
[--broker-kind kafka|embedded]`` starts a broker, pre-produces one input over 4 partitions
(keys spread over them by the producer's partitioner) and, per emit mode and round, runs on it
a fresh group (own app id, state and outputs) of one worker, then of two (order alternating
by round). Each run is timed from starting the processes until every partition's applied
offset is its end offset (the workers' ``GET /stats``) and until the changelog says so too
(``fiba status``'s reading, ``app.status.read_status``); the steady rate is the applied events
per wall second between 10% and 90% of the input; CPU seconds per process from ``/proc``.
Writes ``bench/results/scale_out.json`` (``quick/`` below 10^5 events) with the ratio two/one
per mode. Methods and what N machines give: docs/bench-methods.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import urllib.error
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from app.brokers.process import free_port
from app.demo import start_worker, stop_worker
from app.settings import Settings
from app.status import read_status
from app.topics import create_topics
from bench.bench_broker import BenchBroker, add_broker_kind_option, announce_run, bench_broker
from bench.bench_broker import write_results as write_run
from bench.worker_harness import cpu_seconds, worker_settings
from bench.worker_process import applied_events, keyed_records, produce_records, worker_environ
from stores import build

RESULTS = Path(__file__).parent / "results"
SPACING_MS = 100
"""Event time between two events of one key, on average."""
OCCUPANCY = 100
"""Events per key in the largest window."""
MAX_LATENESS_MS = 5_000
AGGREGATIONS = ("count", "sum", "max")
PARTITIONS = 4
MARKS = (0.1, 0.9)
"""The steady rate is measured between these shares of the input applied."""
FULL_RUN = 100_000


def group_settings(broker: BenchBroker, input_topic: str, emit: str, root: Path) -> Settings:
    """A fresh group's settings on the shared ``input_topic``: own app id, outputs and state;
    windows of ``OCCUPANCY`` events per key and a tenth and hundredth of that."""
    settings = worker_settings(
        broker,
        "scale",
        OCCUPANCY * SPACING_MS,
        emit,
        input_topic=input_topic,
        partitions=PARTITIONS,
        aggregations=AGGREGATIONS,
    )
    return replace(settings, state_dir=root / settings.app_id)


@contextmanager
def workers(settings: Settings, count: int, root: Path) -> Iterator[list[Any]]:
    """``count`` ``fiba worker`` processes of one group (own state dirs and HTTP ports) for
    the ``with`` block, as ``(settings, process)`` pairs; stopped afterwards."""
    started = []
    try:
        for i in range(count):
            own = replace(settings, state_dir=settings.state_dir / f"w{i}", web_port=free_port())
            log = root / f"{settings.app_id}-w{i}.log"
            started.append((own, start_worker(own, log, extra_env=worker_environ()), log))
        yield started
    finally:
        for _, process, _ in started:
            stop_worker(process)


def progress(running: list[Any]) -> tuple[dict[int, int], list[list[int]]]:
    """Per partition, the most records applied any answering worker reports (its owner's),
    and the partitions each worker owns (empty while it does not answer)."""
    applied: dict[int, int] = {}
    owned: list[list[int]] = []
    for own, process, log in running:
        if process.poll() is not None:
            raise RuntimeError(f"a worker exited; see {log}: {log.read_text()[-2000:]}")
        try:
            mine = applied_events(own.web_port)
        except (OSError, urllib.error.URLError, ValueError, KeyError):
            mine = {}
        owned.append(sorted(mine))
        for partition, count in mine.items():
            applied[partition] = max(applied.get(partition, 0), count)
    return applied, owned


def timed_run(
    settings: Settings,
    count: int,
    ends: dict[int, int],
    root: Path,
    timeout: float,
    broker_pid: int | None = None,
) -> dict[str, Any]:
    """One group of ``count`` workers through the input: seconds from their start until
    every worker owns partitions, until all is applied (their ``/stats``) and until the
    changelog agrees; the steady rate between ``MARKS`` (from when every worker owns
    partitions, if later); CPU per process, and the broker's (``broker_pid``) over the run;
    the partitions each owned then."""
    total = sum(ends.values())
    broker_cpu = None if broker_pid is None else cpu_seconds(broker_pid)
    load_before = os.getloadavg()[0]
    marks: dict[float, tuple[float, int, float]] = {}
    balanced: tuple[float, list[list[int]]] | None = None
    with workers(settings, count, root) as running:
        started = time.monotonic()
        deadline = started + timeout
        while True:
            applied, owned = progress(running)
            now = time.monotonic()
            done = sum(applied.values())
            if balanced is None and all(owned) and len(set().union(*owned)) == len(ends):
                balanced = (now - started, owned)
            cpu = sum(cpu_seconds(p.pid) for _, p, _ in running)
            for share in MARKS:
                if share not in marks and done >= share * total and balanced is not None:
                    marks[share] = (now, done, cpu)
            if all(applied.get(p, 0) >= end for p, end in ends.items()):
                applied_s = now - started
                break
            if now > deadline:
                raise RuntimeError(f"timeout: {done} of {total} events applied")
            time.sleep(0.1)
        urls = [f"http://127.0.0.1:{o.web_port}" for o, _, _ in running]
        status = asyncio.run(read_status(settings, urls))
        while any(
            (row.applied.get("changelog") or -1) < row.end_offset - 1 for row in status.partitions
        ):
            if time.monotonic() > deadline:
                raise RuntimeError("timeout: the changelog never marked every offset applied")
            time.sleep(0.2)
            status = asyncio.run(read_status(settings, urls))
        through_s = time.monotonic() - started
        cpus = [cpu_seconds(p.pid) for _, p, _ in running]
        if broker_pid is not None and broker_cpu is not None:
            broker_cpu = cpu_seconds(broker_pid) - broker_cpu
    steady = None
    cpu_us = None
    if len(marks) == len(MARKS):
        (t1, a1, c1), (t2, a2, c2) = marks[MARKS[0]], marks[MARKS[1]]
        if t2 > t1 and a2 > a1:
            steady = (a2 - a1) / (t2 - t1)
            # no CPU tick between the marks (a short run): not measured, rather than 0
            cpu_us = 1e6 * (c2 - c1) / (a2 - a1) if c2 > c1 else None
    return {
        "emit": settings.emit,
        "workers": count,
        "events": total,
        "owning_s": None if balanced is None else balanced[0],
        "partitions_per_process": None if balanced is None else balanced[1],
        "applied_s": applied_s,
        "through_changelog_s": through_s,
        "events_per_s_overall": total / applied_s,
        "events_per_s_steady": steady,
        "cpu_us_per_event_steady": cpu_us,
        "cpu_s_per_process": cpus,
        "broker_cpu_s": broker_cpu,
        "load_average_1m": [load_before, os.getloadavg()[0]],
    }


def ratios(results: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per emit mode, two workers' figure over one's (medians over the rounds): the rates
    ``steady`` and ``overall`` (from the start, group join and rebalance included), and
    ``cpu_per_event`` (steady CPU per event of the group: 1.0 when splitting the partitions
    costs no extra CPU, so that on free cores the rate would double)."""
    out: dict[str, dict[str, float]] = {}
    fields = {
        "steady": "events_per_s_steady",
        "overall": "events_per_s_overall",
        "cpu_per_event": "cpu_us_per_event_steady",
    }
    for emit in dict.fromkeys(r["emit"] for r in results):
        figures = {}
        for kind, name in fields.items():
            rates = {
                n: [r[name] for r in results if r["emit"] == emit and r["workers"] == n]
                for n in (1, 2)
            }
            if all(rates[n] and None not in rates[n] for n in (1, 2)) and statistics.median(
                rates[1]
            ):
                figures[kind] = statistics.median(rates[2]) / statistics.median(rates[1])
        out[emit] = figures
    return out


def run(args: argparse.Namespace, broker: BenchBroker) -> dict[str, Any]:
    """The whole run (see the module doc) on ``broker``: the input, then every group."""
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        root = Path(tmp)
        input_topic = f"scale-{uuid.uuid4().hex[:8]}-events"
        step = SPACING_MS / args.keys
        base = group_settings(broker, input_topic, "batch", root)
        asyncio.run(create_topics(base))
        records = keyed_records(args.events, args.keys, step, MAX_LATENESS_MS)
        asyncio.run(produce_records(base, records))
        ends = {p.partition: p.end_offset for p in asyncio.run(read_status(base)).partitions}
        results = []
        for round_ in range(1, args.rounds + 1):
            for emit in args.emits.split(","):
                counts = (1, 2) if round_ % 2 else (2, 1)
                for count in counts:
                    settings = group_settings(broker, input_topic, emit, root)
                    asyncio.run(create_topics(settings))
                    result = timed_run(settings, count, ends, root, args.timeout, broker.pid)
                    result["round"] = round_
                    print(result, flush=True)
                    results.append(result)
    keys_per_partition = Counter(
        _partition_of(key, PARTITIONS) for key in (f"key-{k}" for k in range(args.keys))
    )
    return {
        "broker": broker.kind,
        "build": build(),
        "events": args.events,
        "keys": args.keys,
        "events_per_partition": [ends[p] for p in sorted(ends)],
        "keys_per_partition": [keys_per_partition[p] for p in range(PARTITIONS)],
        "aggregations": list(AGGREGATIONS),
        "occupancy": OCCUPANCY,
        "runs": results,
        "ratio_two_over_one": ratios(results),
    }


def _partition_of(key: str, partitions: int) -> int:
    """The partition the Java-compatible default partitioner (murmur2) gives ``key``."""
    from aiokafka.partitioner import murmur2

    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


def report(document: dict[str, Any]) -> str:
    """The runs as a Markdown table, then the ratios."""
    lines = [
        "| emit | workers | round | all own partitions after (s) | applied after (s) "
        "| changelog through after (s) "
        "| events/s overall | events/s steady | CPU µs/event | CPU s per process "
        "| partitions per process | broker CPU s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in document["runs"]:
        lines.append(
            f"| {r['emit']} | {r['workers']} | {r['round']} | {_figure(r['owning_s'], '.1f')} "
            f"| {r['applied_s']:.1f} "
            f"| {r['through_changelog_s']:.1f} | {r['events_per_s_overall']:,.0f} "
            f"| {_figure(r['events_per_s_steady'], ',.0f')} "
            f"| {_figure(r['cpu_us_per_event_steady'], '.1f')} "
            f"| {', '.join(f'{c:.1f}' for c in r['cpu_s_per_process'])} "
            f"| {' / '.join(','.join(map(str, p)) for p in r['partitions_per_process'] or [])} "
            f"| {_figure(r['broker_cpu_s'], '.1f')} |"
        )
    for emit, figures in document["ratio_two_over_one"].items():
        lines.append(
            f"\n{emit}: two workers / one: "
            + ", ".join(f"{kind} {value:.2f}x" for kind, value in figures.items())
        )
    return "\n".join(lines)


def _figure(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def options() -> argparse.ArgumentParser:
    """The command line's options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=400_000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--emits", default="batch,event")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--out", type=Path, default=None, help="results file")
    add_broker_kind_option(parser, default="kafka")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = options().parse_args(argv)
    facts = announce_run("bench.scale_out")
    with bench_broker(args.broker_kind) as broker:
        document = run(args, broker)
    out = args.out or (RESULTS / ("quick" if args.events < FULL_RUN else "") / "scale_out.json")
    write_run([document], out, "embedded", facts)  # the file name does not change with the kind
    print(report(document))


if __name__ == "__main__":
    main()
