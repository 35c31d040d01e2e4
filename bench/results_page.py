"""The current results page, ``docs/benchmarks.md``, generated from the files in ``bench/results/``.

``python -m bench.results_page`` reads the results the benchmarks wrote (``*.json`` of the
broker benchmarks, the aggregator experiments' ``*.csv`` with their run's header in
``report-*.txt``, and ``paper_claims.json``, the papers' statements quoted) and writes one table
per question, each with the machine, command, date and load its data records ("not recorded"
where a file holds none), the plots under ``docs/img/``, and the README's peers table (between
its ``jvm-peers-table`` markers, from the Apache Kafka run). ``--check`` writes nothing and
exits 1 when the committed page or README table differs from what the data gives
(``tests/test_results_page.py`` checks the same). Nothing is measured here;
``bench/RESULTS.md`` stays the dated journal of every run.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from bench.goal_table import HEADER, goal_rows

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PAGE = ROOT / "docs" / "benchmarks.md"
IMAGES = ROOT / "docs" / "img"
README = ROOT / "README.md"
NOT_RECORDED = "not recorded"
NONE = "-"
"""A cell without a value."""


# --- reading ---------------------------------------------------------------------------------


def load_json(name: str) -> Any:
    return json.loads((RESULTS / name).read_text())


def rows_of(name: str) -> list[dict[str, Any]]:
    """A results file's rows: a list, ``{"results": [...], ...}`` (``bench_broker.write_results``)
    or one object."""
    data = load_json(name)
    if isinstance(data, dict) and isinstance(data.get("results"), list):
        return data["results"]
    return data if isinstance(data, list) else [data]


def run_facts(name: str) -> dict[str, str]:
    """The run's facts a ``bench_broker.write_results`` file records (none for older files), in
    the shape of a report header (``report_header``): the machine's facts with the command."""
    data = load_json(name)
    if not (isinstance(data, dict) and "results" in data):
        return {}
    facts = {**(data.get("machine") or {}), "command": data.get("command")}
    return {k: v for k, v in {**facts, "date": data.get("date") or facts.get("date")}.items() if v}


def load_csv(name: str) -> list[dict[str, str]]:
    with (RESULTS / name).open(newline="") as handle:
        return list(csv.DictReader(handle))


def report_header(name: str) -> dict[str, str]:
    """The ``key: value`` lines at the top of a ``report-*.txt`` (command, machine, date...)."""
    header = {}
    for line in (RESULTS / name).read_text().splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(": ")
        header[key] = value
    return header


# --- formatting ------------------------------------------------------------------------------


def number(value: Any, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits, with thousands separators."""
    if value is None or value == "":
        return NONE
    x = float(value)
    if x == 0:
        return "0"
    magnitude = len(str(int(abs(x)))) if abs(x) >= 1 else 0
    decimals = max(0, digits - magnitude) if abs(x) >= 1 else digits
    text = f"{x:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def rate(value: Any) -> str:
    """An events/s or rounds/s figure: a whole number with thousands separators."""
    return f"{round(float(value)):,}"


def ratio(a: float, b: float) -> str:
    value = a / b
    return f"{value:.2g}x" if value < 10 else f"{value:.0f}x"


def table(header: list[str], rows: Iterable[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return [*lines, ""]


def provenance(
    *,
    machine: str | None = None,
    command: str | None = None,
    date: str | None = None,
    load: str | None = None,
    code: str | None = None,
    files: Iterable[str] = (),
) -> list[str]:
    """The run's facts as the data records them; the missing ones named on one line, ``not
    recorded``."""
    facts = [
        ("machine", machine),
        ("command", f"`{command}`" if command else None),
        ("date", date),
        ("load average", load),
        ("code", f"`{code}`" if code else None),
    ]
    lines = [f"- data: {', '.join(f'`bench/results/{f}`' for f in files)}"]
    lines += [f"- {name}: {value}" for name, value in facts if value]
    missing = [name for name, value in facts[:4] if not value]
    if missing:
        lines.append(f"- {', '.join(missing)}: {NOT_RECORDED}")
    return [*lines, ""]


def run_provenance(run: dict[str, str], files: Iterable[str]) -> list[str]:
    """``provenance`` of a run whose facts are a report header or ``run_facts``."""
    return provenance(
        machine=machine_of(run),
        command=run.get("command"),
        date=run.get("date"),
        load=run.get("load average (1, 5, 15 min)"),
        code=run.get("code"),
        files=files,
    )


def machine_of(facts: dict[str, str]) -> str | None:
    parts = [facts.get("cpu"), f"{facts['cores']} cores" if "cores" in facts else None]
    parts += [facts.get("python"), facts.get("platform")]
    present = [p for p in parts if p]
    return ", ".join(present) or None


# --- the aggregator --------------------------------------------------------------------------


def fiba_section(plots: list[Callable[[], None]]) -> list[str]:
    run = report_header("report-all.txt")
    lines = [
        "## FiBA against the baselines and the papers",
        "",
        "One run of `python -m bench all`: rounds of evict oldest + insert + query over a window",
        "of n entries, with inserts d entries from the young end (`fiba4` = `FiBA(min_arity=4)`).",
        "Median of interleaved repetitions; CPU time per repetition. Compare ratios within the",
        "run: absolute rates move with the machine's load.",
        "",
        *run_provenance(
            run,
            files=["rounds.csv", "fifo.csv", "ooo.csv", "sharing.csv", "report-all.txt"],
        ),
        "### Rounds (sum)",
        "",
    ]
    rounds = load_csv("rounds.csv")
    lines += table(
        ["operation", "algorithm", "n", "d", "per second", "ns each", "combines"],
        (
            [
                r["operation"],
                r["algorithm"],
                number(r["n"], 7),
                number(r["d"], 7),
                number(r["per_second"]),
                number(r["ns_each"]),
                number(r["combines"] or None),
            ]
            for r in rounds
        ),
    )
    lines += ["### Against the papers' statements", ""]
    measured = paper_measures(rounds)
    claims = load_json("paper_claims.json")
    lines += table(
        ["experiment", "the paper says", "measured here"],
        (
            [
                f"`{c['experiment']}`",
                f"*{c['paper']}*, {c['figure']}: “{c['claim']}”",
                measured[c["experiment"]],
            ]
            for c in claims
        ),
    )
    lines += ["![throughput against out-of-order distance](img/ooo.png)", ""]
    lines += ["![in-order throughput against window size](img/fifo.png)", ""]
    plots += [plot_ooo, plot_fifo]
    lines += mypyc_section()
    return lines


def paper_measures(rounds: list[dict[str, str]]) -> dict[str, str]:
    ooo = [r for r in load_csv("ooo.csv") if r["sweep"] == "d" and r["monoid"] == "sum"]
    n_max = max(int(r["n"]) for r in ooo)

    def ooo_rate(algorithm: str, d: int) -> float:
        (row,) = [
            r
            for r in ooo
            if r["algorithm"] == algorithm and int(r["n"]) == n_max and int(r["d"]) == d
        ]
        return float(row["rounds_per_s"])

    distances = sorted({int(r["d"]) for r in ooo if int(r["n"]) == n_max and int(r["d"]) < n_max})
    d_low, d_high = distances[0], distances[-1]
    fifo = [r for r in load_csv("fifo.csv") if r["monoid"] == "sum"]
    n_fifo = max(int(r["n"]) for r in fifo if r["algorithm"] == "fiba4")
    fifo_rate = {
        (r["algorithm"], int(r["n"])): float(r["rounds_per_s"]) for r in fifo
    }  # (algorithm, n) -> rounds/s
    fiba_ns = [v for (a, _), v in fifo_rate.items() if a == "fiba4"]
    sharing = [r for r in load_csv("sharing.csv") if r["monoid"] == "sum"]
    by_variant: dict[str, list[float]] = defaultdict(list)
    for r in sharing:
        by_variant[r["variant"]].append(float(r["rounds_per_s"]))
    evicts = {
        (r["operation"], r["algorithm"], int(r["n"])): float(r["ns_each"])
        for r in rounds
        if "evict" in r["operation"]
    }
    n_bulk = max(n for _, _, n in evicts)
    fiba_low, fiba_high = ooo_rate("fiba4", d_low), ooo_rate("fiba4", d_high)
    tree_low, tree_high = ooo_rate("classic_btree4", d_low), ooo_rate("classic_btree4", d_high)
    fiba_fifo = fifo_rate["fiba4", n_fifo]
    sharing_ratio = statistics.median(by_variant["range"]) / statistics.median(by_variant["twin"])
    fiba_bulk = evicts["1024x evict", "fiba4", n_bulk] / evicts["bulk_evict(1024)", "fiba4", n_bulk]
    tree_bulk = (
        evicts["1024x evict", "classic_btree4", n_bulk]
        / evicts["bulk_evict(1024)", "classic_btree4", n_bulk]
    )
    return {
        "ooo": (
            f"n = {n_max:,}, sum: `fiba4` is {ratio(fiba_low, tree_low)} `classic_btree4` at"
            f" d = {d_low} and {ratio(fiba_high, tree_high)} at d = {d_high:,}; `fiba4` keeps"
            f" {ratio(fiba_high, fiba_low)} of its d = {d_low} rate, `classic_btree4`"
            f" {ratio(tree_high, tree_low)}"
        ),
        "fifo": (
            f"sum, n = {n_fifo:,}: `fiba4` at"
            f" {ratio(fiba_fifo, fifo_rate['two_stacks_lite', n_fifo])} of `two_stacks_lite`,"
            f" {ratio(fiba_fifo, fifo_rate['daba', n_fifo])} of `daba`; `fiba4` from"
            f" {rate(min(fiba_ns))} to {rate(max(fiba_ns))} rounds/s over every n"
        ),
        "sharing": (
            f"sum: one tree with range queries at {ratio(sharing_ratio, 1)} of two trees"
            " (median over the small windows)"
        ),
        "bulk": (
            f"n = {n_bulk:,}: `bulk_evict(1024)` {ratio(fiba_bulk, 1)} faster than 1,024 single"
            f" evicts in `fiba4`; `classic_btree4`'s loop {ratio(tree_bulk, 1)}"
        ),
    }


MYPYC = "mypyc_python_path_kafka.json"


def mypyc_section() -> list[str]:
    """What the mypyc build gave where its modules still ran (the Python windows path), and
    what it cost: the data behind retiring it (docs/native-core.md)."""
    data = load_json(MYPYC)
    lines = [
        "### mypyc on the Python windows path (retired)",
        "",
        "The worker on the Python `KeyWindows` (`event-python`, `batch-python`: what a custom",
        "monoid runs) with the retired build's modules (monoids, FiBA, window suffixes, key",
        "windows) compiled by mypyc and as pure Python, both beside the native core, alternated",
        "over two rounds on Apache Kafka; worker CPU µs per event per round (the load moved the",
        "events/s too much to compare them). The decision: docs/native-core.md.",
        "",
        *run_provenance(run_facts(MYPYC), files=[MYPYC]),
    ]
    cells: dict[tuple[str, int, str], list[float]] = defaultdict(list)
    for r in data["results"]:
        cells[r["scenario"], r["occupancy"], r["build"]].append(r["cpu_us_per_event"])
    body = []
    for scenario, occupancy in sorted({(s, o) for s, o, _ in cells}):
        compiled = cells[scenario, occupancy, "compiled+native"]
        pure = cells[scenario, occupancy, "pure+native"]
        body.append(
            [
                f"`{scenario}`",
                number(occupancy, 7),
                " / ".join(number(v) for v in compiled),
                " / ".join(number(v) for v in pure),
                f"{statistics.median(pure) / statistics.median(compiled):.2f}x",
            ]
        )
    lines += table(
        ["scenario", "events/key", "compiled (rounds)", "pure (rounds)", "pure / compiled"], body
    )
    micro = data["micro"]
    lines += [
        f"The window work alone, offline ({micro['command']}; load {micro['load_before']}):",
        "",
    ]
    lines += table(
        [
            "events/key",
            "emit",
            "aggregations",
            "compiled µs/event",
            "pure µs/event",
            "pure / compiled",
        ],
        (
            [
                number(r["occupancy"], 7),
                r["emit"],
                r["aggregations"],
                number(r["compiled_cpu_us_per_event"]),
                number(r["pure_cpu_us_per_event"]),
                f"{r['pure_over_compiled']:.2f}x",
            ]
            for r in micro["results"]
        ),
    )
    install = data["install"]
    lines += [
        f"Its cost at install: {number(install['mypyc_cpu_s'])} s of CPU "
        f"({number(install['mypyc_wall_s'])} s wall at load {install['load']}) for mypyc and the",
        f"C compiler, of a `make install` of {number(install['make_install_cpu_s'])} s of CPU "
        f"({number(install['make_install_without_mypyc_cpu_s'])} s without it).",
        "",
    ]
    return lines


# --- the worker ------------------------------------------------------------------------------

SCENARIOS = {
    "floor": "a bare aiokafka consumer that only reads the topic",
    "batch-floor": "everything `emit = batch` does but the window work",
    "emit-floor": "encoding and producing one aggregate record per event",
    "bare": "a Faust agent that only consumes the topic",
    "event": "the worker, `emit = event`",
    "batch": "the worker, `emit = batch`",
    "quix": "Quix Streams 3.28, sliding window",
}


def worker_section() -> list[str]:
    rows = rows_of("worker_pipeline.json")
    floor = statistics.median(r["events_per_s"] for r in rows if r["scenario"] == "floor")
    lines = [
        "## The worker against its floors",
        "",
        "`bench.worker_pipeline`: one worker reading an input backlog on a broker of its own;",
        "occupancy = events per key in the window. Floors are what the worker cannot beat: the",
        "fraction is events/s over the `floor`'s.",
        "",
        *provenance(files=["worker_pipeline.json"], machine=None),
    ]
    lines += table(
        [
            "scenario",
            "what it runs",
            "broker",
            "occupancy",
            "events/s",
            "CPU µs/event",
            "of the floor",
        ],
        (
            [
                f"`{r['scenario']}`",
                SCENARIOS.get(r["scenario"], ""),
                r.get("broker", NOT_RECORDED),
                number(r["occupancy"], 7),
                rate(r["events_per_s"]),
                number(r["cpu_us_per_event"]),
                f"{r['events_per_s'] / floor:.3f}x",
            ]
            for r in rows
            if not r.get("queries")
        ),
    )
    return lines


NATIVE_K = "worker_pipeline_native_k_kafka.json"
"""The one run of issue 29's ratios: the floors and both emit modes on each kernel, per k."""
NATIVE_K_LONG = "worker_pipeline_native_k_long_kafka.json"
"""The same on the native kernel only, with longer cells (``--events``)."""

EVENT_CHUNK_BEFORE = "worker_pipeline_event_chunk_before_kafka.json"
"""``emit=event`` one record at a time (main f0b381e): the base of the next one."""
EVENT_CHUNK_AFTER = "worker_pipeline_event_chunk_after_kafka.json"
"""``emit=event`` with one ``apply_events`` call per slice (the same command)."""
EVENT_KERNEL_BEFORE = "worker_pipeline_event_kernel_before_kafka.json"
"""``emit=event`` on main 418145f: the base of the next one."""
EVENT_KERNEL_AFTER = "worker_pipeline_event_kernel_after_kafka.json"
"""``emit=event`` with records written from the native partials and cheaper range queries."""

NATIVE_K_GOALS = {"batch": 0.5, "event": 0.25}
"""Issue 29's goals: each emit mode's rate on the native kernel as a multiple of the floor's."""


def native_k_section(name: str, heading: str) -> list[str]:
    """The floors and every worker mode of one ``bench.worker_pipeline`` run on Apache Kafka,
    per events per key in the window (k): wall rate, CPU per event, events per CPU second and
    both as a multiple of the same run's ``floor``; then each mode's range of ratios over k,
    its flatness (slowest k's rate over the fastest's) and issue 29's goal."""
    if not (RESULTS / name).exists():
        return []
    data = load_json(name)
    rows = [r for r in rows_of(name) if not r.get("queries")]
    floor = next(r for r in rows if r["scenario"] == "floor")
    per_cpu = {id(r): 1e6 / r["cpu_us_per_event"] for r in rows}
    floor_per_cpu = per_cpu[id(floor)]
    body = [
        [
            f"`{r['scenario']}`",
            NONE if r["scenario"].endswith("floor") else number(r["occupancy"], 7),
            rate(r["events_per_s"]),
            number(r["cpu_us_per_event"]),
            rate(per_cpu[id(r)]),
            f"{r['events_per_s'] / floor['events_per_s']:.3f}x",
            f"{per_cpu[id(r)] / floor_per_cpu:.3f}x",
        ]
        for r in rows
    ]
    summary = []
    for mode in dict.fromkeys(r["scenario"] for r in rows if not r["scenario"].endswith("floor")):
        cells = [r for r in rows if r["scenario"] == mode]
        walls = [r["events_per_s"] / floor["events_per_s"] for r in cells]
        cpus = [per_cpu[id(r)] / floor_per_cpu for r in cells]
        goal = NATIVE_K_GOALS.get(mode)
        summary.append(
            [
                f"`{mode}`",
                ", ".join(number(r["occupancy"], 7) for r in cells),
                f"{min(walls):.3f}x-{max(walls):.3f}x",
                f"{min(cpus):.3f}x-{max(cpus):.3f}x",
                f"{100 * min(walls) / max(walls):.0f}%",
                f"{100 * min(cpus) / max(cpus):.0f}%",
                f">= {goal}x" if goal else NONE,
            ]
        )
    return [
        f"## {heading}",
        "",
        "`bench.worker_pipeline` on Apache Kafka, one run: the bare-consumer `floor`, the",
        "`batch-floor` and `emit-floor` bounds, and each emit mode on the native kernel",
        "(`batch`, `event`) and, where run, on the Python `KeyWindows` (`-python`) at k events",
        "per key in the largest window. The machine is shared: beside the wall rates, events",
        "per CPU second of the measured process, and both as a multiple of this run's `floor`.",
        "",
        *run_provenance(run_facts(name), files=[name]),
        f"Load average after the run: {data.get('load_after', NOT_RECORDED)}.",
        "",
        *table(
            ["scenario", "k", "events/s (wall)", "CPU µs/event", "events per CPU s",
             "of the floor (wall)", "of the floor (per CPU s)"],
            body,
        ),
        *table(
            ["mode", "k", "of the floor (wall)", "of the floor (per CPU s)",
             "slowest k / fastest k (wall)", "(per CPU s)", "issue 29's goal"],
            summary,
        ),
    ]  # fmt: skip


def peers_rows() -> list[list[str]]:
    rows = rows_of("peers.json")
    by: dict[tuple[int, str], dict[str, Any]] = {(r["occupancy"], r["scenario"]): r for r in rows}
    table_rows = []
    for occupancy in sorted({r["occupancy"] for r in rows}):
        event, batch, quix = (by[occupancy, s] for s in ("event", "batch", "quix"))

        def cell(r: dict[str, Any]) -> str:
            return f"{rate(r['events_per_s'])} ({number(r['cpu_us_per_event'], 2)} µs)"

        ahead = (
            f"{ratio(event['events_per_s'], quix['events_per_s'])} / "
            f"{ratio(batch['events_per_s'], quix['events_per_s'])}"
        )
        table_rows.append([number(occupancy, 7), cell(event), cell(batch), cell(quix), ahead])
    return table_rows


PEERS_HEADER = [
    "events per key in the window",
    'worker, `emit = "event"`',
    'worker, `emit = "batch"`',
    "Quix Streams",
    "worker ahead (event / batch)",
]


def peers_section(plots: list[Callable[[], None]]) -> list[str]:
    plots.append(plot_peers)
    return [
        "## The worker against its peer",
        "",
        "`python -m bench.peers run`: the same input through the worker and through Quix Streams'",
        "sliding windows (one window with count, sum, max and mean, every key's window full from",
        "the start). Events per second, CPU per event in brackets.",
        "",
        *provenance(files=["peers.json"]),
        *table(PEERS_HEADER, peers_rows()),
        "![events per second against events per key in the window](img/peers.png)",
        "",
    ]


JVM_PEERS = {
    "quix": "Quix Streams",
    "kafka-streams-cache": "Kafka Streams, cache on",
    "kafka-streams-nocache": "Kafka Streams, cache off",
    "flink": "Flink SQL OVER RANGE",
}


def jvm_peers_section(name: str = "peers_kafka.json") -> list[str]:
    """Every peer of ``bench.peers`` on Apache Kafka, with the worker's ratios over each."""
    if not (RESULTS / name).exists():
        return []
    rows = rows_of(name)
    by = {(r["occupancy"], r["scenario"]): r for r in rows}
    body = []
    for occupancy in sorted({r["occupancy"] for r in rows}):
        event, batch = by.get((occupancy, "event")), by.get((occupancy, "batch"))
        for scenario, label in [
            ("event", 'worker, `emit = "event"`'),
            ("batch", 'worker, `emit = "batch"`'),
            *JVM_PEERS.items(),
        ]:
            r = by.get((occupancy, scenario))
            if r is None:
                continue
            check = r.get("check") or {}
            ahead = NONE
            if scenario in JVM_PEERS and event and batch:
                ahead = (
                    f"{ratio(event['events_per_s'], r['events_per_s'])} / "
                    f"{ratio(batch['events_per_s'], r['events_per_s'])}"
                )
            checked = NONE
            if check.get("checked"):
                wrong, compared = number(check["mismatches"], 7), number(check["compared"], 7)
                checked = f"{wrong} wrong of {compared}"
            elif scenario == "quix":
                checked = "checked (bench.quix_semantics)"
            body.append(
                [
                    number(occupancy, 7),
                    label,
                    rate(r["events_per_s"]),
                    number(r["cpu_us_per_event"], 3),
                    ahead,
                    checked,
                ]
            )
    return [
        "## The worker against every peer on Apache Kafka",
        "",
        "`python -m bench.peers run` on Apache Kafka: one pre-produced input read by the worker,",
        "Quix Streams, Kafka Streams' `SlidingWindows` (cache on and off) and Flink SQL's",
        "`OVER ... RANGE` window, each JVM warmed up first, each output checked against its",
        "system's semantics. Events per second between 30% and 90% of the stream.",
        "",
        *run_provenance(run_facts(name), files=[name]),
        *table(
            ["events per key in the window", "system", "events/s", "CPU µs/event",
             "worker ahead (event / batch)", "output"],
            body,
        ),
    ]  # fmt: skip


LATENCY_MODES = {
    "emit-floor": "`emit-floor` (no window work)",
    "event": '`emit = "event"`',
    "batch": '`emit = "batch"`',
}


def latency_section(plots: list[Callable[[], None]], name: str = "latency_kafka.json") -> list[str]:
    """``bench.latency``: each mode's maximum rate, then the event-to-aggregate latency at
    each load, and issue 29's goal."""
    if not (RESULTS / name).exists():
        return []
    rows = rows_of(name)
    plots.append(plot_latency)
    top = {r["emit"]: r for r in rows if r["kind"] == "max_rate"}
    body = []
    for r in (r for r in rows if r["kind"] == "paced"):
        event, answer, metric = r["per_event"], r["per_aggregate"], r.get("metric")
        body.append(
            [
                LATENCY_MODES.get(r["emit"], r["emit"]),
                f"{r['load']:.0%}",
                f"{rate(r['target_rate'])} / {rate(r['input_rate'])}",
                f"{r['worker_cpu_share']:.0%}",
                number(r["behind_at_end"], 7),
                number(event["n"], 7),
                " / ".join(number(event[q]) for q in ("p50", "p99", "p999", "max")),
                f"{number(answer['p50'])} / {number(answer['p99'])} ({number(answer['mean'])})",
                NONE
                if metric is None
                else f"{number(metric['count'], 7)}, {number(metric['mean_ms'])}",
                number(r["load_1m"], 2),
            ]
        )
    from bench.latency import goal_verdict

    return [
        "## Event-to-aggregate latency",
        "",
        "`python -m bench.latency` on Apache Kafka: per mode its maximum rate (a backlog, as",
        "`bench.worker_pipeline` measures), then a fresh worker fed at a steady fraction of it by",
        "a producer process of its own, input and aggregates topics with `LogAppendTime`. Per",
        "input record after the warm-up: the append time of the first aggregate record including",
        "it minus its own (ms, the broker's clock, whole ms). The machine is shared: see the load.",
        "",
        *run_provenance(run_facts(name), files=[name]),
        *table(
            ["mode", "maximum events/s", "CPU µs/event", "events per CPU second", "1-min load"],
            (
                [
                    LATENCY_MODES.get(emit, emit),
                    rate(r["events_per_s"]),
                    number(r.get("cpu_us_per_event")),
                    rate(r["events_per_cpu_s"]) if "events_per_cpu_s" in r else NONE,
                    number(r.get("load_1m"), 2),
                ]
                for emit, r in top.items()
            ),
        ),
        *table(
            ["mode", "load", "events/s (target / appended)", "worker CPU (of one core)",
             "behind at end",
             "events timed", "per event p50 / p99 / p99.9 / max",
             "per aggregate record p50 / p99 (mean)", "`/metrics` histogram: count, mean",
             "1-min load"],
            body,
        ),
        goal_verdict(rows),
        "",
        "![event-to-aggregate latency against load](img/latency.png)",
        "",
    ]  # fmt: skip


def queries_section() -> list[str]:
    lines = [
        "## Range queries under load",
        "",
        "Milliseconds from sending a query to reading its answer while the worker consumes a",
        "backlog at full speed (`bench.query_latency`), and the same measured inside",
        "`bench.worker_pipeline`'s runs with queries (the first query of a run, set-up included,",
        "apart).",
        "",
        *provenance(files=["query_latency.json", "worker_pipeline.json"]),
    ]
    header = ["scenario", "emit", "occupancy", "backlog", "HTTP p50", "HTTP p99"]
    header += ["HTTP p99, new connection", "topic p50", "topic p99"]
    header += ["events/s meanwhile (HTTP / topic)"]
    lines += table(header, map(latency_row, rows_of("query_latency.json")))
    in_pipeline = [r for r in rows_of("worker_pipeline.json") if r.get("queries")]
    lines += table(
        ["scenario", "occupancy", "events/s", "HTTP p50 / p99 (first)", "topic p50 / p99 (first)"],
        (
            [
                f"`{r['scenario']}`",
                number(r["occupancy"], 7),
                rate(r["events_per_s"]),
                *(
                    f"{number(q['p50'])} / {number(q['p99'])} ({number(q['first'])})"
                    for q in (r["http_query_ms"], r["topic_query_ms"])
                ),
            ]
            for r in in_pipeline
        ),
    )
    return lines


def latency_row(r: dict[str, Any]) -> list[str]:
    """One row of ``query_latency.json``: milliseconds, and the worker's rate meanwhile."""
    http, topic = r["http_keep_alive"], r["topic"]
    during = f"{rate(r['http_phase']['events_per_s'])} / {rate(r['topic_phase']['events_per_s'])}"
    return [
        f"`{r['scenario']}`",
        f"`{r['emit']}`",
        number(r["occupancy"], 7),
        number(r["backlog_events"], 7),
        number(http["p50"]),
        number(http["p99"]),
        number(r["http_new_connection"]["p99"]),
        number(topic["p50"]),
        number(topic["p99"]),
        during,
    ]


def restore_row(name: str, row: dict[str, Any]) -> list[str]:
    """One row of a ``worker_restore_*.json``: seconds (CPU in brackets where recorded), and
    bytes per retained entry."""

    def seconds(key: str) -> str:
        if key not in row:
            return NONE
        cpu = row.get(key.replace("_s", "_cpu_s"))
        return number(row[key]) + (f" ({number(cpu)})" if cpu is not None else "")

    memory = NONE
    if "windows_bytes_per_entry" in row:
        memory = (
            f"{number(row['windows_bytes_per_entry'])} + {number(row['index_bytes_per_entry'])}"
        )
    return [
        f"`{name}`",
        row.get("broker", NONE),
        f"`{row['codec']}`",
        row.get("impl", NONE),
        number(row["entries"], 7),
        number(row["keys"], 7),
        seconds("restore_changelog_s"),
        seconds("ready_from_changelog_s"),
        seconds("restore_local_s"),
        seconds("ready_from_local_s"),
        memory,
        number(row["load_average_1m"][0], 2) if "load_average_1m" in row else NONE,
    ]


def restore_phase_rows(rows: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """The phases of the restores that recorded them: one column per phase, wall (CPU) s."""
    timed = [(name, row) for name, row in rows if "phases" in row]
    if not timed:
        return []
    order = ["fetch", "record decode", "replay", "sort", "group", "partial decode", "windows"]
    found = dict.fromkeys(phase for _, row in timed for phase in row["phases"])
    phases = sorted(found, key=lambda p: order.index(p) if p in order else len(order))
    body = []
    for name, row in timed:
        cells = [
            f"{number(row['phases'][p][0])} ({number(row['phases'][p][1])})"
            if p in row["phases"]
            else NONE
            for p in phases
        ]
        body.append([f"`{name}`", row["impl"], *cells])
    return [
        "Each phase of a restore from the changelog alone on its own, wall (CPU) seconds "
        "(`fetch`: Fetch responses and CRC; native `replay` includes the record decode, "
        "`windows` the sort, grouping and partial decode; `load`: the index, `KeyWindows.load` "
        "per key):",
        "",
        *table(["file", "impl", *phases], body),
    ]


def restore_section() -> list[str]:
    files = sorted(p.name for p in RESULTS.glob("worker_restore_*.json"))
    rows = [(name, row) for name in files for row in rows_of(name)]
    lines = [
        "## Restore",
        "",
        "`bench.worker_restore`: a partition of 10^6 retained entries made ready again, from the",
        "changelog alone or from the local RocksDB copy (seconds; CPU seconds in brackets), and",
        "the memory per entry. One file per partial codec (`marshal` is today's) and broker; per",
        "restore implementation (`native`: `stores._native.RestoredEntries`, `python`:",
        "`PyEntries`) one row. Target: ready from the changelog in at most 3 s.",
        "",
    ]
    for name in files:
        facts = run_facts(name)
        if facts:
            lines += [f"`{name}`:", "", *run_provenance(facts, [name])]
    legacy = [name for name in files if not run_facts(name)]
    if legacy:
        loads = [
            f"{name}: {' → '.join(number(x, 2) for x in row['load_average_1m'])}"
            for name, row in rows
            if name in legacy and "load_average_1m" in row
        ]
        lines += provenance(files=legacy, load="; ".join(loads) or None)
    header = ["file", "broker", "codec", "impl", "entries", "keys", "changelog read"]
    header += ["ready from changelog", "local read", "ready from local"]
    header += ["bytes/entry (windows + index)", "load"]
    lines += table(header, (restore_row(name, row) for name, row in rows))
    lines += restore_phase_rows(rows)
    return lines


def scale_out_section() -> list[str]:
    name = "scale_out.json"
    if not (RESULTS / name).exists():
        return []
    document = rows_of(name)[0]
    lines = [
        "## Scale-out: two workers against one",
        "",
        "`bench.scale_out`: one pre-produced input over 4 partitions, read by a fresh group of",
        "one `fiba worker` (all 4 partitions), then of two (2 each), per emit mode. Times from",
        "starting the processes; the steady rate between 10% and 90% of the input once every",
        "worker owns partitions. What N machines give: [bench-methods.md](bench-methods.md#"
        "scale-out-one-fiba-worker-against-two-in-one-group).",
        "",
        *run_provenance(run_facts(name), [name]),
        f"- build: `{document['build']}`; broker: {document['broker']}; "
        f"{document['events']:,} events over {document['keys']:,} keys "
        f"({' / '.join(f'{n:,}' for n in document['events_per_partition'])} per partition), "
        f"{document['occupancy']} events per key in the largest window, "
        f"{', '.join(document['aggregations'])}",
        "",
    ]
    header = ["emit", "workers", "round", "all own partitions (s)", "all applied (s)"]
    header += ["changelog through (s)", "events/s overall", "events/s steady", "CPU µs/event"]
    header += ["CPU s per process", "partitions per process", "broker CPU s (µs/event)"]
    header += ["load (1 min, before → after)"]
    lines += table(
        header,
        (
            [
                f"`{r['emit']}`",
                str(r["workers"]),
                str(r["round"]),
                number(r["owning_s"]),
                number(r["applied_s"]),
                number(r["through_changelog_s"]),
                rate(r["events_per_s_overall"]),
                NONE if r["events_per_s_steady"] is None else rate(r["events_per_s_steady"]),
                number(r["cpu_us_per_event_steady"]),
                ", ".join(number(c) for c in r["cpu_s_per_process"]),
                " / ".join(",".join(map(str, p)) for p in r["partitions_per_process"] or []),
                broker_cpu(r),
                " → ".join(number(x, 2) for x in r["load_average_1m"]),
            ]
            for r in document["runs"]
        ),
    )
    lines += [
        f"- `{emit}`: two workers / one: "
        + ", ".join(f"{kind} {value:.2f}x" for kind, value in figures.items())
        for emit, figures in document["ratio_two_over_one"].items()
    ]
    return [*lines, ""]


def broker_cpu(run: dict[str, Any]) -> str:
    """A scale-out run's broker CPU seconds, and per event in µs (``-`` when not recorded)."""
    seconds = run.get("broker_cpu_s")
    if seconds is None:
        return NONE
    return f"{number(seconds)} ({number(1e6 * seconds / run['events'])})"


def soak_section(plots: list[Callable[[], None]]) -> list[str]:
    name = "soak.json"
    if not (RESULTS / name).exists():
        return []
    lines = [
        "## Soak: resident memory over a long stream",
        "",
        "`bench.soak`: one `fiba worker` reading a long keyed stream while it is produced; its",
        "resident memory and window entries sampled every few seconds. Slope: least squares of",
        "resident MB against events after the warm-up (the state full, evictions keeping up).",
        "",
        *run_provenance(run_facts(name), [name]),
    ]
    header = ["events", "keys", "emit", "build", "retention", "warm-up events"]
    header += ["slope (MB per 10^6 events)", "resident MB after warm-up", "peak MB"]
    header += ["entries after warm-up", "events/s", "CPU µs/event"]
    rows = rows_of(name)

    def span(pair: list[float] | None, digits: int = 3) -> str:
        return NONE if pair is None else " - ".join(number(x, digits) for x in pair)

    lines += table(
        header,
        (
            [
                number(r["events"], 9),
                number(r["keys"], 7),
                f"`{r['emit']}`",
                f"`{r['build']}`",
                f"{r['retention_ms'] // 1000:,} s ({r['retained_per_key']} events per key)",
                number(r["warmup_events"], 9),
                NONE
                if r["slope_mb_per_million_events"] is None
                else f"{r['slope_mb_per_million_events']:+.2f}",
                span(r["rss_mb_after_warmup"]),
                number(r["peak_rss_mb"]),
                span(r["entries_after_warmup"], 9),
                rate(r.get("events_per_s", 0)),
                number(r.get("cpu_us_per_event")),
            ]
            for r in rows
        ),
    )
    plots.append(plot_soak)
    return [*lines, "![soak](img/soak.png)", ""]


def memory_section() -> list[str]:
    files = sorted(p.name for p in RESULTS.glob("memory_per_entry_*.json"))
    if not files:
        return []
    lines = [
        "## Memory per retained window entry",
        "",
        "`bench.memory_per_entry`: one partition's windows (count, sum, max) filled with 10^6",
        "entries over 10^3 keys (or 10-1,000 entries per key) in a fresh interpreter, along the",
        "worker's two paths (events in batches; a restore's bulk builds); resident bytes per",
        "entry (growth from empty to full, and of the second half alone) and per key, and the",
        "Python heap's share (tracemalloc). Issue 29's goal: at most 64 bytes per entry.",
        "",
    ]
    for name in files:
        lines += run_provenance(run_facts(name), [name])
    header = ["path", "kernel", "MIN_ARITY", "build", "entries", "keys", "bytes/entry"]
    header += ["marginal bytes/entry", "bytes/key", "Python heap bytes/entry", "goal <= 64"]
    lines += table(
        header,
        (
            [
                f"`{r['path']}`",
                r.get("kernel", "python"),
                str(r.get("min_arity") or ""),
                f"`{r['build']}`",
                number(r["entries"], 9),
                number(r["keys"], 7),
                number(r["bytes_per_entry"]),
                number(r["marginal_bytes_per_entry"]),
                number(r["bytes_per_entry"] * r["entries"] / r["keys"]),
                number(r["python_heap_bytes_per_entry"]),
                "met" if r["bytes_per_entry"] <= 64 else "not met",
            ]
            for name in files
            for r in rows_of(name)
        ),
    )
    return lines


def spark_section() -> list[str]:
    lines = [
        "## Spark",
        "",
        "`bench.spark_bench`: aggregates produced to a topic, read into Spark (the Python data",
        "source and Spark's own connector, `jvm`), and the as-of join of a batch dataset with them",
        "(seconds).",
        "",
    ]
    for name in sorted(p.name for p in RESULTS.glob("spark_bench*.json")):
        data = load_json(name)
        facts = data.get("machine", {})
        lines += [f"### `{name}`", ""]
        lines += provenance(
            machine=machine_of(facts),
            date=facts.get("date"),
            load=f"{data['load_before']} before, {data['load_after']} after (1, 5, 15 min)"
            if "load_before" in data
            else None,
            code=facts.get("code"),
            files=[name],
        )
        timings = [(k.removesuffix("_s"), v) for k, v in data.items() if k.endswith("_s")]
        sizes = [
            (k, v) for k, v in data.items() if isinstance(v, int | str) and not k.startswith("load")
        ]
        lines += table(
            ["setting", "value"], ([f"`{k}`", str(v)] for k, v in sizes if k != "machine")
        )
        lines += table(["step", "seconds"], ([f"`{k}`", number(v)] for k, v in timings))
    return lines


def exactly_once_section() -> list[str]:
    rows = rows_of("worker_pipeline_kafka.json")
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in rows:
        groups[r["scenario"], r["guarantee"]].append(r["events_per_s"])
    lines = [
        "## Exactly-once: its price",
        "",
        "`bench.worker_pipeline --broker-kind kafka`: the worker on Apache Kafka under each",
        "processing guarantee, rounds interleaved; median events/s of the rounds.",
        "",
        *provenance(files=["worker_pipeline_kafka.json"]),
    ]
    medians = {group: statistics.median(rates) for group, rates in groups.items()}
    lines += table(
        ["emit", "at_least_once", "exactly_once", "exactly_once / at_least_once", "rounds"],
        (
            [
                f"`{scenario}`",
                rate(medians[scenario, "at_least_once"]),
                rate(medians[scenario, "exactly_once"]),
                f"{medians[scenario, 'exactly_once'] / medians[scenario, 'at_least_once']:.2f}x",
                str(len(groups[scenario, "exactly_once"])),
            ]
            for scenario in sorted({s for s, _ in groups})
        ),
    )
    return lines


GOALS = "goals_kafka.json"
"""Issue 29's one run of every goal (``bench.goals``)."""
GOALS_QUICK = "goals_quick_kafka.json"
"""The last ``bench.goals --quick``: shown while there is no full run."""


def goals_section() -> list[str]:
    """Issue 29's goal table from the ``bench.goals`` run (``bench.goal_table``): the full run
    where there is one, else the quick one, said so; then each part's start, duration and load."""
    name = GOALS if (RESULTS / GOALS).exists() else GOALS_QUICK
    if not (RESULTS / name).exists():
        return []
    data = load_json(name)
    parts = [p for p in data["results"] if p["part"] != "plan"]
    lines = [
        "## Issue 29's goals in one run",
        "",
        "`python -m bench.goals` on Apache Kafka: the floor, both emit modes at k = 10^2 to",
        "10^5 events per key per window, the peers (warmed up), latency, scale-out and memory",
        "per entry, one after the other on one broker (methods:",
        "[bench-methods.md](bench-methods.md#issue-29s-goals-in-one-run-benchgoals)).",
        "",
    ]
    if name != GOALS:
        lines += [
            "**A `--quick` run**: every part, small (short cells, JVMs warmed on 5·10^4",
            "events), proving the wiring; not the goals' figures. The full run writes",
            f"`bench/results/{GOALS}`.",
            "",
        ]
    elif (RESULTS / GOALS_QUICK).exists():
        quick = run_facts(GOALS_QUICK)
        lines += [
            f"The last `--quick` run (`bench/results/{GOALS_QUICK}`, "
            f"{quick.get('date', NOT_RECORDED)}) proves the wiring only: its figures are not "
            "the goals'.",
            "",
        ]
    lines += [
        *run_provenance(run_facts(name), [name]),
        f"Load average after the run: {data.get('load_after', NOT_RECORDED)}.",
        "",
        *table(HEADER, goal_rows(data["results"])),
        *table(
            ["part", "started", "minutes", "load (1 min, before → after)"],
            (
                [
                    p["part"],
                    p["started"],
                    number(p["seconds"] / 60, 2),
                    f"{p['load_before']:.2f} → {p['load_after']:.2f}",
                ]
                for p in parts
            ),
        ),
    ]
    return lines


def other_files_section(used: set[str]) -> list[str]:
    """Every results JSON no section above reads, as a plain table of its rows; the runs of one
    series (``series_of``) in one table, a ``run`` column naming each file."""
    series: dict[str, list[str]] = defaultdict(list)
    for path in sorted(RESULTS.glob("*.json")):
        if path.name not in used:
            series[series_of(path.name)].append(path.name)
    lines = []
    for files in series.values():
        rows = [{"run": run_of(f), **r} if len(files) > 1 else r for f in files for r in rows_of(f)]
        keys = list(
            dict.fromkeys(k for r in rows for k, v in r.items() if not isinstance(v, dict | list))
        )
        lines += [f"### `{files[0] if len(files) == 1 else series_name(files)}`", ""]
        if len(files) == 1:
            lines += run_provenance(run_facts(files[0]), files)
        else:
            for f in files:
                lines += [f"`{run_of(f)}`:", "", *run_provenance(run_facts(f), [f])]
        lines += table(
            [f"`{k}`" for k in keys],
            (
                [number(r[k]) if isinstance(r.get(k), float) else str(r.get(k, NONE)) for k in keys]
                for r in rows
            ),
        )
    if lines:
        lines = [
            "## Other results files",
            "",
            "Earlier or partial runs kept in `bench/results/`; the numbered runs of one A/B in"
            " one table.",
            "",
            *lines,
        ]
    return lines


SERIES = re.compile(r"^(?P<stem>.*?)_?(?P<run>[a-z]*\d+)(?P<suffix>(_kafka)?\.json)$")
"""A numbered run's file name: ``<stem>_<run><suffix>``, ``run`` a word ending in its number
(``worker_pipeline_batchcpu_main2_kafka.json``: stem ``worker_pipeline_batchcpu``, run
``main2``)."""


def series_of(name: str) -> str:
    """The series a results file belongs to: its name with the numbered run part replaced by
    ``*`` (``worker_pipeline_batchcpu_*_kafka.json``), or the name itself."""
    match = SERIES.match(name)
    return f"{match['stem']}_*{match['suffix']}" if match else name


def series_name(files: list[str]) -> str:
    """A series' files in one name: ``worker_pipeline_batchcpu_{main1, main2}_kafka.json``."""
    match = SERIES.match(files[0])
    assert match is not None
    return f"{match['stem']}_{{{', '.join(map(run_of, files))}}}{match['suffix']}"


def run_of(name: str) -> str:
    """The run part of a numbered run's file name (``main2``), or the name itself."""
    match = SERIES.match(name)
    return match["run"] if match else name


USED = {
    GOALS,
    GOALS_QUICK,
    MYPYC,
    "peers.json",
    "peers_kafka.json",
    "worker_pipeline.json",
    "query_latency.json",
    "worker_pipeline_kafka.json",
    NATIVE_K,
    NATIVE_K_LONG,
    EVENT_CHUNK_BEFORE,
    EVENT_CHUNK_AFTER,
    EVENT_KERNEL_BEFORE,
    EVENT_KERNEL_AFTER,
    "latency_kafka.json",
    "paper_claims.json",
    "spark_bench.json",
    "spark_bench_quick.json",
    "worker_restore_batch.json",
    "worker_restore_marshal.json",
    "worker_restore_worker.json",
    "scale_out.json",
    "soak.json",
}


# --- the page --------------------------------------------------------------------------------


def render() -> tuple[str, list[Callable[[], None]]]:
    """The page's text, and the functions that draw its plots."""
    plots: list[Callable[[], None]] = []
    used = USED | {p.name for p in RESULTS.glob("worker_restore_*.json")}
    used |= {p.name for p in RESULTS.glob("spark_bench*.json")}
    used |= {p.name for p in RESULTS.glob("memory_per_entry_*.json")}
    lines = [
        "# Benchmarks: the current figures",
        "",
        "Generated by `python -m bench.results_page` from `bench/results/`: do not edit by hand;",
        "rerun a benchmark, then the script. `tests/test_results_page.py` checks that this page",
        "is what the committed data gives. How each benchmark measures:",
        "[bench-methods.md](bench-methods.md); the dated journal of every run, with the",
        "discussion of each: `bench/RESULTS.md`.",
        "",
        "Contents: [issue 29's goals](#issue-29s-goals-in-one-run) ·",
        "[FiBA](#fiba-against-the-baselines-and-the-papers) ·",
        "[the worker](#the-worker-against-its-floors) ·",
        "[the native worker per k](#the-native-worker-per-window-size-apache-kafka)",
        "([longer cells](#the-native-worker-per-window-size-longer-cells)) ·",
        "[its peer](#the-worker-against-its-peer) ·",
        "[latency](#event-to-aggregate-latency) · [range queries](#range-queries-under-load) ·",
        "[restore](#restore) · [memory per entry](#memory-per-retained-window-entry) ·",
        "[soak](#soak-resident-memory-over-a-long-stream) ·",
        "[scale-out](#scale-out-two-workers-against-one) · [Spark](#spark) ·",
        "[exactly-once](#exactly-once-its-price)",
        "",
        *goals_section(),
        *fiba_section(plots),
        *worker_section(),
        *native_k_section(NATIVE_K, "The native worker per window size (Apache Kafka)"),
        *native_k_section(NATIVE_K_LONG, "The native worker per window size, longer cells"),
        *native_k_section(EVENT_CHUNK_BEFORE, "`emit=event` one record at a time (before)"),
        *native_k_section(EVENT_CHUNK_AFTER, "`emit=event` one kernel call per slice (after)"),
        *native_k_section(EVENT_KERNEL_BEFORE, "`emit=event`'s kernel call (before)"),
        *native_k_section(EVENT_KERNEL_AFTER, "`emit=event`'s kernel call, records native (after)"),
        *peers_section(plots),
        *jvm_peers_section(),
        *latency_section(plots),
        *queries_section(),
        *restore_section(),
        *memory_section(),
        *soak_section(plots),
        *scale_out_section(),
        *spark_section(),
        *exactly_once_section(),
        *other_files_section(used),
    ]
    return "\n".join(lines).rstrip("\n") + "\n", plots


def readme_with_peers(readme: str) -> str:
    """``readme`` with its generated table, between the JVM peers markers: the peers part of
    the last full ``bench.goals`` run (``GOALS``; the worker ahead of each peer)."""
    pattern = re.compile(
        re.escape(JVM_PEERS_START) + r"\n.*?" + re.escape(JVM_PEERS_END), re.DOTALL
    )
    if not pattern.search(readme):
        raise SystemExit(f"README.md has no {JVM_PEERS_START!r} ... {JVM_PEERS_END!r} markers")
    body = "\n".join(table(JVM_README_HEADER, jvm_readme_rows())).rstrip("\n")
    return pattern.sub(lambda _: f"{JVM_PEERS_START}\n{body}\n{JVM_PEERS_END}", readme)


JVM_PEERS_START = (
    "<!-- jvm-peers-table: generated by `python -m bench.results_page` from the peers part "
    "of bench/results/goals_kafka.json -->"
)
JVM_PEERS_END = "<!-- end jvm-peers-table -->"

JVM_README_HEADER = [
    "events per key in the window",
    'worker, `emit = "event"` / `"batch"`',
    *JVM_PEERS.values(),
]


def jvm_readme_rows() -> list[list[str]]:
    """Per window occupancy of the peers part of ``GOALS`` (every system on one input, the
    JVMs warmed as the issue asks): the worker's two rates, then each peer's rate with the
    worker's lead over it (event / batch)."""
    parts = [p for p in rows_of(GOALS) if p.get("part") == "peers"]
    if not parts:
        raise SystemExit(f"bench/results/{GOALS} has no peers part: run `python -m bench.goals`")
    rows = parts[0]["rows"]
    by = {(r["occupancy"], r["scenario"]): r for r in rows}
    body = []
    for occupancy in sorted({r["occupancy"] for r in rows}):
        event, batch = by[occupancy, "event"], by[occupancy, "batch"]
        cells = [
            number(occupancy, 7),
            f"{rate(event['events_per_s'])} / {rate(batch['events_per_s'])}",
        ]
        for scenario in JVM_PEERS:
            r = by.get((occupancy, scenario))
            cells.append(
                NONE
                if r is None
                else f"{rate(r['events_per_s'])} ({ratio(event['events_per_s'], r['events_per_s'])}"
                f" / {ratio(batch['events_per_s'], r['events_per_s'])})"
            )
        body.append(cells)
    return body


# --- plots -----------------------------------------------------------------------------------


def _figure() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4), dpi=100)
    return plt, figure, axes


def _save(plt: Any, figure: Any, axes: Any, name: str) -> None:
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    IMAGES.mkdir(parents=True, exist_ok=True)
    figure.savefig(IMAGES / name, metadata={"Software": None})
    plt.close(figure)


def plot_ooo() -> None:
    rows = [r for r in load_csv("ooo.csv") if r["sweep"] == "d" and r["monoid"] == "sum"]
    n = max(int(r["n"]) for r in rows)
    plt, figure, axes = _figure()
    for algorithm in sorted({r["algorithm"] for r in rows}):
        points = sorted(
            (int(r["d"]), float(r["rounds_per_s"]))
            for r in rows
            if r["algorithm"] == algorithm and int(r["n"]) == n
        )
        axes.plot(
            [max(d, 0.5) for d, _ in points], [v for _, v in points], marker="o", label=algorithm
        )
    axes.set_xscale("log", base=2)
    axes.set_xlabel("out-of-order distance d (d = 0 drawn at 0.5)")
    axes.set_ylabel("rounds per second")
    axes.set_title(f"sum, n = {n:,}: throughput against d (cf. the FiBA paper, Fig. 11)")
    _save(plt, figure, axes, "ooo.png")


def plot_fifo() -> None:
    rows = [r for r in load_csv("fifo.csv") if r["monoid"] == "sum"]
    plt, figure, axes = _figure()
    for algorithm in sorted({r["algorithm"] for r in rows}):
        points = sorted(
            (int(r["n"]), float(r["rounds_per_s"])) for r in rows if r["algorithm"] == algorithm
        )
        axes.plot([n for n, _ in points], [v for _, v in points], marker="o", label=algorithm)
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xlabel("window size n")
    axes.set_ylabel("rounds per second")
    axes.set_title("sum, in order: throughput against n (cf. the FiBA paper, Fig. 13)")
    _save(plt, figure, axes, "fifo.png")


def plot_peers() -> None:
    rows = rows_of("peers.json")
    plt, figure, axes = _figure()
    for scenario in ("batch", "event", "quix"):
        points = sorted(
            (r["occupancy"], r["events_per_s"]) for r in rows if r["scenario"] == scenario
        )
        axes.plot(
            [o for o, _ in points],
            [v for _, v in points],
            marker="o",
            label=SCENARIOS[scenario].replace("`", ""),
        )
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("events per key in the window")
    axes.set_ylabel("events per second")
    axes.set_title("the worker and Quix Streams on the same input")
    _save(plt, figure, axes, "peers.png")


def plot_soak() -> None:
    rows = rows_of("soak.json")
    plt, figure, axes = _figure()
    entries_axes = axes.twinx()
    for r in rows:
        samples = r["samples"]
        events = [s["events"] / 1e6 for s in samples]
        axes.plot(
            events,
            [s["rss_bytes"] / 1e6 for s in samples],
            label=f"resident MB ({r['emit']}, {r['build']})",
        )
        entries_axes.plot(
            events, [s["entries"] / 1e6 for s in samples], linestyle="--", color="grey"
        )
        axes.axvline(r["warmup_events"] / 1e6, color="black", linewidth=0.8, linestyle=":")
    axes.set_xlabel("events applied (10^6); dotted: end of the warm-up")
    axes.set_ylabel("worker resident memory (MB)")
    entries_axes.set_ylabel("window entries held (10^6, dashed)")
    axes.set_ylim(bottom=0)
    entries_axes.set_ylim(bottom=0)
    axes.set_title("soak: one worker's resident memory and entries held")
    _save(plt, figure, axes, "soak.png")


def plot_latency() -> None:
    rows = [r for r in rows_of("latency_kafka.json") if r["kind"] == "paced"]
    plt, figure, axes = _figure()
    modes = [m for m in LATENCY_MODES if any(r["emit"] == m for r in rows)]
    for color, emit in enumerate(modes):
        points = sorted((r["load"], r["per_event"]) for r in rows if r["emit"] == emit)
        label = LATENCY_MODES[emit].replace("`", "")
        for q, style in (("p50", "o--"), ("p99", "o-")):
            axes.plot(
                [100 * load for load, _ in points],
                [max(0.5, e[q]) for _, e in points],
                style,
                color=f"C{color}",
                label=f"{label} {q}",
            )
    axes.axhline(20, color="grey", linewidth=0.8, label="goal: p99 <= 20 ms at 50% (event)")
    axes.set_yscale("log")
    axes.set_xlabel("load: % of the mode's maximum rate")
    axes.set_ylabel("ms, input appended to aggregate appended")
    axes.set_title("event-to-aggregate latency (Apache Kafka, shared machine)")
    _save(plt, figure, axes, "latency.png")


# --- command line ----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.results_page", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is not current")
    args = parser.parse_args(argv)
    page, plots = render()
    readme = readme_with_peers(README.read_text())
    if args.check:
        stale = [
            str(path.relative_to(ROOT))
            for path, text in ((PAGE, page), (README, readme))
            if not path.exists() or path.read_text() != text
        ]
        print("not current: " + ", ".join(stale) if stale else "current")
        return 1 if stale else 0
    PAGE.write_text(page)
    README.write_text(readme)
    for plot in plots:
        plot()
    print(f"wrote {PAGE.relative_to(ROOT)}, the README's peers table and {len(plots)} plots")
    return 0


if __name__ == "__main__":
    sys.exit(main())
