"""End-to-end worker throughput and query latency on a broker it starts.

``python -m bench.worker_pipeline run [--quick] [--events N] [--occupancies ...]
[--scenarios ...] [--rounds N] [--broker-kind embedded|kafka]`` starts a broker and, per
scenario, a worker subprocess (``bench.worker_scenarios``: the real pipeline, window store
included) over a pre-produced input topic (100 keys, 20% of the events up to
``MAX_LATENESS_MS`` late, windows pre-filled to ``occupancy`` events per key), and measures
events/s and CPU per event (the worker's, and the broker's per kind of thread); the
``floor``, ``batch-floor``, ``emit-floor`` and ``bare`` scenarios are the bounds the worker is
compared with. Writes ``bench/results/worker_pipeline*.json`` (``docs/benchmarks.md`` shows
them). The harness is ``bench.worker_harness``. Scenarios, harness and profiler in detail:
docs/bench-methods.md.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

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
    event_stream,
    http_latencies,
    latency_figures,
    long_enough,
    measure_run,
    scenario_settings,
    topic_latencies,
    wait_until_assigned,
)
from bench.worker_scenarios import prefilled_pairs

RESULTS = Path(__file__).parent / "results" / "worker_pipeline.json"
FLOOR_STREAM_FACTOR = 10
"""The ``floor`` scenario streams this many times more events: it reads the others' stream in
a fraction of a second, less than two polls of its rate apart."""
QUERY_OCCUPANCY = 1000
"""The occupancy of the extra run of each emit mode that also times range queries."""


def run_scenario(
    broker: BenchBroker,
    name: str,
    occupancy: int,
    events: int,
    with_queries: bool,
    workdir: Path,
    guarantee: str = "at_least_once",
) -> dict[str, Any]:
    """One cell: scenario ``name`` at ``occupancy`` on a fresh backlog of ``events`` (more
    when that is too short to measure at the scenario's rate: ``long_enough``; the result's
    ``events`` says how many), with range queries timed meanwhile if ``with_queries``."""
    return long_enough(
        lambda n: _run_cell(broker, name, occupancy, n, with_queries, workdir, guarantee),
        events,
    )


def _run_cell(
    broker: BenchBroker,
    name: str,
    occupancy: int,
    events: int,
    with_queries: bool,
    workdir: Path,
    guarantee: str,
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
            figures = measure_run(settings.web_port, events, worker, log_path, 900, broker.pid)
            result["events_per_s"] = figures.events_per_s
            result["cpu_us_per_event"] = figures.cpu_us_per_event
            if figures.broker_cpu_us_per_event is not None:
                result["broker_cpu_us_per_event"] = figures.broker_cpu_us_per_event
                result["broker_cpu_us_by_thread"] = figures.broker_cpu_us_by_thread
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        for name, latencies in (("http_query_ms", http), ("topic_query_ms", topic)):
            if len(latencies) > 1:
                result[name] = latency_figures(latencies)
    return result


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
    events per batch), and the same on the native kernel (``native_...``), over windows
    pre-filled to each occupancy (events as in the end-to-end run, parsed already: no Kafka,
    JSON or store), and one partition's batch shares applied in
    slices of each of ``SHARE_SLICES`` (``_share_work``). Each state is built as the worker
    builds a restored partition (collector paused, the result frozen)."""
    import stores
    from stores.gc_pause import paused_gc
    from stores.key_windows import KeyWindows, WindowConfig
    from stores.native_windows import NativeKeyWindows

    kernels: dict[str, Any] = {"": KeyWindows}
    if stores.native() is not None:
        kernels["native_"] = NativeKeyWindows
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
        for kernel, emit in [(k, e) for k in kernels for e in ("event", "batch")]:
            windows = kernels[kernel](WindowConfig.from_settings(settings), emit=emit)
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
            figures[f"{kernel}{emit}_{occupancy}_us_per_event"] = (
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
        "--results",
        default=RESULTS.name,
        help="the results file in bench/results/ (_<kind> added for another broker than embedded)",
    )
    run.add_argument(
        "--events",
        type=int,
        help="input events per worker cell (default 90,000; 24,000 with --quick; the *floor "
        f"scenarios {FLOOR_STREAM_FACTOR} times as many)",
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
    facts = announce_run("bench.worker_pipeline")
    if args.command == "micro":
        figures = micro([int(x) for x in args.occupancies.split(",")])
        for name, value in figures.items():
            print(f"{name:32s} {value:8.2f}")
        return
    occupancies = [int(x) for x in args.occupancies.split(",")]
    events = args.events or (24_000 if args.quick else 90_000)
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
        for name in WORKER_MODES:
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
    write_results(results, RESULTS.with_name(args.results), args.broker_kind, facts)
    print(markdown(results))


def markdown(results: list[dict[str, Any]]) -> str:
    """The results as a Markdown table, one row per scenario, occupancy and query load (``+
    queries``: the same run with range queries timed meanwhile): the median over the
    rounds (with the range when there are several), the ratio columns against the median bare
    rate of the same run (``-`` without the ``bare`` scenario), the broker's CPU per event and
    the events per CPU second of worker and broker together (``-`` where the broker's CPU was
    not read); then each mode's flatness (the
    slowest occupancy's rate as a share of the fastest's, runs without queries: the query
    clients share the machine's two cores), from the medians and within each round; with the
    ``floor`` scenario, each emit mode's slowest and fastest median as a multiple of the
    floor's (``GOALS``; and per CPU second of worker and broker, where read); the query
    latencies."""
    cells: dict[tuple[str, int, bool], list[dict[str, Any]]] = {}
    for r in results:
        cells.setdefault((_scenario(r), r["occupancy"], r.get("queries", False)), []).append(r)
    rate = {cell: statistics.median(r["events_per_s"] for r in rs) for cell, rs in cells.items()}
    cpu = {cell: statistics.median(r["cpu_us_per_event"] for r in rs) for cell, rs in cells.items()}
    broker = {
        cell: statistics.median(r["broker_cpu_us_per_event"] for r in rs)
        for cell, rs in cells.items()
        if all("broker_cpu_us_per_event" in r for r in rs)
    }
    bare = next((cell for cell in cells if cell[0] == "bare"), None)
    bare_rate = bare and rate[bare]
    bare_cpu = bare and cpu[bare]
    rounds = max(len(rs) for rs in cells.values())
    lines = [
        "| scenario | events/key in largest window | events/s (wall"
        + (f", median of {rounds} [range]" if rounds > 1 else "")
        + ") | % of bare | worker CPU µs/event | bare CPU / worker CPU | broker CPU µs/event "
        "| events per CPU s (worker + broker) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
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
            f"{cpu[cell]:,.0f} | {_percent(bare_cpu, cpu[cell])} | "
            + (
                f"{broker[cell]:,.1f} | {1e6 / (cpu[cell] + broker[cell]):,.0f} |"
                if cell in broker
                else "- | - |"
            )
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
            f"(goal >= {goal}x)" + _per_cpu_ratio(mode, floor, cells, cpu, broker)
        )
    bound = next((cell for cell in cells if cell[0] == "emit-floor"), None)
    if floor is not None and bound is not None:
        lines.append(
            f"\nemit-floor (the floor plus encoding and producing one aggregate record per "
            f"event, no window work): {rate[bound] / rate[floor]:.3f}x the floor, "
            f"{cpu[bound]:,.1f} CPU µs/event: the most emit=event can reach"
            + _per_cpu_ratio("emit-floor", floor, cells, cpu, broker)
        )
    durable = next((cell for cell in cells if cell[0] == "batch-floor"), None)
    if floor is not None and durable is not None:
        lines.append(
            f"\nbatch-floor (the floor plus parsing, lifting, the window store's writes and "
            f"changelog records, one eviction per event and one aggregate record per key per "
            f"batch, no window work): {rate[durable] / rate[floor]:.3f}x the floor, "
            f"{cpu[durable]:,.1f} CPU µs/event: the most emit=batch can reach"
            + _per_cpu_ratio("batch-floor", floor, cells, cpu, broker)
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


WORKER_MODES = (
    "event",
    "batch",
    "event-python",
    "batch-python",
    "aiokafka-event",
    "aiokafka-batch",
    "event-per-chunk",
    "event-eager-state",
)
"""The worker scenarios: each emit mode on the kernel ``new_key_windows`` picks (the native
one where it loads), on the Python ``KeyWindows``, with aiokafka's record batches, and
``event`` handing over after every fetched chunk, and ``event`` handing its state changes over
with every hand-over."""

FLOORS = (
    "floor",
    "emit-floor",
    "batch-floor",
    "aiokafka-emit-floor",
    "aiokafka-batch-floor",
    "bare",
    "bare-batch",
)
"""The scenarios without a worker (no occupancy)."""

GOALS = {"batch": 0.5, "event": 0.25}
"""Issue 29's goals: each emit mode's rate as a multiple of the floor's, at every occupancy."""


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


def _per_cpu_ratio(
    mode: str,
    floor: tuple[str, int, bool],
    cells: dict[tuple[str, int, bool], list[dict[str, Any]]],
    cpu: dict[tuple[str, int, bool], float],
    broker: dict[tuple[str, int, bool], float],
) -> str:
    """``mode``'s events per CPU second of worker and broker together as a multiple of the
    floor's (the slowest and fastest occupancy, medians), or nothing without the broker's
    CPU."""
    if floor not in broker:
        return ""
    floor_per_cpu = 1 / (cpu[floor] + broker[floor])
    ratios = [
        1 / (cpu[cell] + broker[cell]) / floor_per_cpu
        for cell in cells
        if cell[0] == mode and not cell[2] and cell in broker
    ]
    if not ratios:
        return ""
    return f"; per CPU s of worker and broker {min(ratios):.3f}x-{max(ratios):.3f}x"


def _percent(part: float | None, whole: float | None) -> str:
    return "-" if part is None or whole is None else f"{100 * part / whole:.0f}%"


if __name__ == "__main__":
    main()
