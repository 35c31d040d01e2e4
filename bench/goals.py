"""Issue 29's goals in one run on Apache Kafka: one command, one results file, one goal table.

``python -m bench.goals [--quick] [--estimate] [--jvm-peers kafka-streams,flink]`` prints the
plan (``bench.goals_plan``) and its estimated duration, starts one Apache Kafka broker and runs
on it in turn, each part on inputs, topics and workers of its own: the pipeline
(``bench.worker_pipeline``: ``floor``, ``batch-floor``, ``emit-floor``, then ``batch`` and
``event`` at k = 10^2..10^5 events per key per window), the peers (``bench.peers``: both emit
modes, Quix, Kafka Streams and Flink warmed up on 10^6 events, at k = 10 and 100), latency
(``bench.latency``: both modes paced at 25/50/90 % of the rates the pipeline measured at k =
10^3), scale-out (``bench.scale_out``: one worker against two) and memory per entry
(``bench.memory_per_entry``, no broker). Each part records its start, duration and the load
average before and after it. Then it prints the goal table (``bench.goal_table``) and writes
``bench/results/goals_kafka.json``; ``--quick`` (minutes: every part, small) writes
``bench/results/goals_quick_kafka.json``, a smoke of the wiring, not the goals' figures.
``--estimate`` prints the plan and stops. The page: ``python -m bench.results_page``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from bench import jvm_peers, latency, memory_per_entry, peers, scale_out, worker_pipeline
from bench.bench_broker import BenchBroker, announce_run, bench_broker, write_results
from bench.goal_table import HEADER, goal_rows
from bench.goals_plan import FULL, MODES, QUICK, Plan, describe, estimate_s
from bench.results_page import table

RESULTS = Path(__file__).parent / "results" / "goals.json"
QUICK_RESULTS = RESULTS.with_name("goals_quick.json")
BROKER_KIND = "kafka"


def pipeline(broker: BenchBroker, plan: Plan, workdir: Path) -> dict[str, Any]:
    """The floors, then each emit mode at each k (``worker_pipeline.run_scenario``)."""
    cells = [(f, plan.occupancies[0], plan.floor_events) for f in plan.floors]
    cells += [(m, k, plan.pipeline_events) for m in MODES for k in plan.occupancies]
    rows = []
    for name, k, events in cells:
        rows.append(worker_pipeline.run_scenario(broker, name, k, events, False, workdir))
        print(json.dumps(rows[-1]), flush=True)
    return {"rows": rows}


def peer_part(broker: BenchBroker, plan: Plan, workdir: Path) -> dict[str, Any]:
    rows = peers.run(
        broker,
        list(plan.peer_occupancies),
        plan.peer_events,
        plan.warmup,
        workdir,
        plan.quick,
        plan.jvm_peers,
    )
    return {"rows": rows}


def latency_part(
    broker: BenchBroker, plan: Plan, workdir: Path, measured: dict[str, Any]
) -> dict[str, Any]:
    """Both modes paced at the plan's loads of the maximum rates the pipeline part measured at
    the plan's latency k (no backlog runs of their own)."""
    rates = {
        r["scenario"]: r["events_per_s"]
        for r in measured["rows"]
        if r["scenario"] in MODES and r["occupancy"] == plan.latency_occupancy
    }
    rows = latency.run(
        broker,
        MODES,
        plan.latency_loads,
        plan.latency_occupancy,
        0,
        plan.latency_seconds,
        workdir,
        rates,
    )
    return {"rows": rows}


def scale_part(broker: BenchBroker, plan: Plan, workdir: Path) -> dict[str, Any]:
    options = ["--events", str(plan.scale_events), "--keys", str(plan.scale_keys)]
    return {"document": scale_out.run(scale_out.options().parse_args(options), broker)}


def memory_part(plan: Plan) -> dict[str, Any]:
    rows = [
        memory_per_entry.run_child(plan.memory_entries, plan.memory_entries // k, "stream")
        for k in plan.memory_per_key
    ]
    return {"rows": rows}


def timed(name: str, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``run()``'s part with its name, start (UTC), seconds and 1-min load before and after."""
    print(f"== {name}", flush=True)
    started, load = time.monotonic(), os.getloadavg()[0]
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    part = run()
    seconds = time.monotonic() - started
    print(f"== {name}: {seconds / 60:.1f} min", flush=True)
    return {
        "part": name,
        "started": date,
        "seconds": seconds,
        "load_before": load,
        "load_after": os.getloadavg()[0],
        **part,
    }


def run(broker: BenchBroker, plan: Plan, workdir: Path) -> list[dict[str, Any]]:
    """Every part of ``plan`` on ``broker`` (see the module doc), the plan first."""
    parts = [{"part": "plan", "plan": asdict(plan), "estimate_s": estimate_s(plan)}]
    measured = timed("pipeline", lambda: pipeline(broker, plan, workdir))
    parts.append(measured)
    parts.append(timed("peers", lambda: peer_part(broker, plan, workdir)))
    parts.append(timed("latency", lambda: latency_part(broker, plan, workdir, measured)))
    parts.append(timed("scale_out", lambda: scale_part(broker, plan, workdir)))
    parts.append(timed("memory", lambda: memory_part(plan)))
    return parts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="every part, small: minutes")
    parser.add_argument("--estimate", action="store_true", help="print the plan, run nothing")
    parser.add_argument(
        "--jvm-peers",
        default=",".join(jvm_peers.MAINS),
        help="the JVM peers to run (comma-separated; empty: none)",
    )
    args = parser.parse_args(argv)
    plan = replace(
        QUICK if args.quick else FULL,
        jvm_peers=tuple(s for s in args.jvm_peers.split(",") if s),
    )
    facts = announce_run("bench.goals")
    print("\n".join(describe(plan)), flush=True)
    if args.estimate:
        return
    with (
        bench_broker(BROKER_KIND) as broker,
        tempfile.TemporaryDirectory(prefix="bench-goals-") as tmp,
    ):
        parts = run(broker, plan, Path(tmp))
    write_results(parts, QUICK_RESULTS if args.quick else RESULTS, BROKER_KIND, facts)
    print("\n".join(table(HEADER, goal_rows(parts))))


if __name__ == "__main__":
    main()
