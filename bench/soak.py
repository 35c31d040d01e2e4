"""Soak: a long keyed stream through one ``fiba worker``, its resident memory sampled throughout.

``python -m bench.soak [--events 10000000] [--keys 100000] [--emit batch|event]
[--retained-per-key 10] [--broker-kind kafka|embedded]`` starts a broker, one worker owning
every input partition, and produces the input while the worker reads it; every
``--sample-seconds`` it records the events applied, the worker's resident memory, its window
entries and CPU. The retention holds about ``retained-per-key`` events per key, so the state
is full after ``keys * retained-per-key`` events; after the warm-up memory must be flat: the
result gives the slope (MB per 10^6 events, least squares over the samples after it) and the
peak. Writes ``bench/results/soak.json`` (``bench/results/quick/`` with ``--events`` below
10^6), plotted on docs/benchmarks.md. Methods: docs/bench-methods.md.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import threading
import time
import urllib.error
from pathlib import Path
from typing import Any

from app.demo import start_worker, stop_worker
from app.settings import Settings
from app.topics import create_topics
from bench.bench_broker import BenchBroker, add_broker_kind_option, announce_run, bench_broker
from bench.bench_broker import write_results as write_run
from bench.worker_harness import cpu_seconds, worker_settings
from bench.worker_process import (
    applied_events,
    keyed_records,
    peak_resident_bytes,
    produce_records,
    resident_bytes,
    window_entries,
    worker_environ,
)
from stores import build

RESULTS = Path(__file__).parent / "results"
STEP_MS = 1
"""Event time between consecutive input events."""
MAX_LATENESS_MS = 5_000
AGGREGATIONS = ("count", "sum", "max")
FULL_RUN = 1_000_000
"""Runs of fewer events are smoke runs: written under ``bench/results/quick/``."""


def soak_settings(
    broker: BenchBroker, keys: int, retained_per_key: int, emit: str, state_dir: Path
) -> Settings:
    """The worker's settings: retention of ``retained_per_key * keys`` events of input, the
    windows a hundredth, a tenth and all of it, count/sum/max, 4 partitions."""
    return worker_settings(
        broker,
        "soak",
        retained_per_key * keys * STEP_MS,
        emit,
        aggregations=AGGREGATIONS,
        state_dir=state_dir,
    )


def sample(pid: int, port: int, started: float) -> dict[str, Any] | None:
    """One sample of the worker: seconds since ``started``, events applied, resident bytes,
    window entries, CPU seconds; None while it does not answer yet."""
    try:
        applied = sum(applied_events(port).values())
        entries = window_entries(port)
    except (OSError, urllib.error.URLError, ValueError, KeyError):
        return None
    return {
        "seconds": round(time.monotonic() - started, 2),
        "events": applied,
        "rss_bytes": resident_bytes(pid),
        "entries": entries,
        "cpu_s": round(cpu_seconds(pid), 2),
    }


def slope_mb_per_million(samples: list[dict[str, Any]]) -> float | None:
    """Least-squares slope of resident MB against 10^6 events over ``samples`` (None for
    fewer than 3 samples or no spread in events)."""
    if len(samples) < 3:
        return None
    xs = [s["events"] / 1e6 for s in samples]
    ys = [s["rss_bytes"] / 1e6 for s in samples]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx


def summarize(
    samples: list[dict[str, Any]], warmup_events: int, events: int, peak: int
) -> dict[str, Any]:
    """The run's figures from its samples: slope and resident MB after the warm-up, the
    peak, the entries held after it, events/s and worker CPU µs per event overall."""
    after = [s for s in samples if s["events"] >= warmup_events]
    moving = [s for s in samples if s["events"] > 0]
    first, last = (moving[0], moving[-1]) if moving else (None, None)
    summary: dict[str, Any] = {
        "warmup_events": warmup_events,
        "samples_after_warmup": len(after),
        "slope_mb_per_million_events": slope_mb_per_million(after),
        "peak_rss_mb": peak / 1e6,
        "rss_mb_after_warmup": [
            min(s["rss_bytes"] for s in after) / 1e6,
            max(s["rss_bytes"] for s in after) / 1e6,
        ]
        if after
        else None,
        "entries_after_warmup": [min(s["entries"] for s in after), max(s["entries"] for s in after)]
        if after
        else None,
    }
    if first is not None and last is not None and last["seconds"] > first["seconds"]:
        span = last["events"] - first["events"]
        summary["events_per_s"] = span / (last["seconds"] - first["seconds"])
        summary["cpu_us_per_event"] = 1e6 * (last["cpu_s"] - first["cpu_s"]) / max(1, span)
    summary["events"] = events
    return summary


def run(args: argparse.Namespace, broker: BenchBroker) -> dict[str, Any]:
    """One soak run on ``broker`` (see the module doc); its settings, samples and summary."""
    fill = args.keys * args.retained_per_key
    warmup = (
        args.warmup_events if args.warmup_events is not None else min(2 * fill, args.events // 2)
    )
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp:
        settings = soak_settings(
            broker, args.keys, args.retained_per_key, args.emit, Path(tmp) / "state"
        )
        asyncio.run(create_topics(settings))
        records = keyed_records(args.events, args.keys, STEP_MS, MAX_LATENESS_MS)
        producer = threading.Thread(
            target=lambda: asyncio.run(produce_records(settings, records)), daemon=True
        )
        started = time.monotonic()
        worker = start_worker(settings, Path(tmp) / "worker.log", extra_env=worker_environ())
        samples: list[dict[str, Any]] = []
        try:
            producer.start()
            deadline = started + args.timeout
            while True:
                if worker.poll() is not None:
                    raise RuntimeError(
                        "the worker exited: " + (Path(tmp) / "worker.log").read_text()[-3000:]
                    )
                if time.monotonic() > deadline:
                    raise RuntimeError(f"timeout: {samples[-1:]} of {args.events} events")
                point = sample(worker.pid, settings.web_port, started)
                if point is not None:
                    samples.append(point)
                    print(
                        f"{point['seconds']:8.1f} s  {point['events']:>11,} events  "
                        f"{point['rss_bytes'] / 1e6:8.1f} MB  {point['entries']:>10,} entries",
                        flush=True,
                    )
                    if point["events"] >= args.events:
                        break
                time.sleep(args.sample_seconds if point is not None else 0.5)
            peak = peak_resident_bytes(worker.pid)
        finally:
            stop_worker(worker)
            producer.join(60)
    return {
        "broker": broker.kind,
        "build": build(),
        "emit": args.emit,
        "keys": args.keys,
        "retained_per_key": args.retained_per_key,
        "retention_ms": settings.retention,
        "windows": [w.name for w in settings.windows],
        "aggregations": list(AGGREGATIONS),
        "step_ms": STEP_MS,
        "max_lateness_ms": MAX_LATENESS_MS,
        **summarize(samples, warmup, args.events, peak),
        "samples": samples,
    }


def options() -> argparse.ArgumentParser:
    """The command line's options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--retained-per-key", type=int, default=10)
    parser.add_argument("--emit", choices=("batch", "event"), default="batch")
    parser.add_argument(
        "--warmup-events",
        type=int,
        default=None,
        help="events before the flatness is judged (default: twice the retention's fill, at "
        "most half the run)",
    )
    parser.add_argument("--sample-seconds", type=float, default=5.0)
    parser.add_argument("--timeout", type=float, default=4 * 3600)
    parser.add_argument("--out", type=Path, default=None, help="results file")
    add_broker_kind_option(parser, default="kafka")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = options().parse_args(argv)
    facts = announce_run("bench.soak")
    with bench_broker(args.broker_kind) as broker:
        result = run(args, broker)
    out = args.out or (RESULTS / ("quick" if args.events < FULL_RUN else "") / "soak.json")
    write_run([result], out, "embedded", facts)  # the file name does not change with the kind
    print(report(result))


def report(r: dict[str, Any]) -> str:
    """The run's figures in a few lines."""
    slope = r["slope_mb_per_million_events"]
    return "\n".join(
        [
            f"soak: {r['events']:,} events over {r['keys']:,} keys, emit={r['emit']}, "
            f"build {r['build']}, broker {r['broker']}",
            f"after the warm-up ({r['warmup_events']:,} events, {r['samples_after_warmup']} "
            f"samples): resident memory slope "
            + ("-" if slope is None else f"{slope:+.2f} MB per 10^6 events"),
            f"peak resident {r['peak_rss_mb']:.0f} MB; entries held after the warm-up "
            f"{r['entries_after_warmup']}",
            f"{r.get('events_per_s', 0):,.0f} events/s, {r.get('cpu_us_per_event', 0):.1f} "
            "worker CPU µs/event",
        ]
    )


if __name__ == "__main__":
    main()
