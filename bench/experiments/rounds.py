"""``rounds``: rounds per second with sum, in order and out of order; bulk vs single evicts.

Issue 2 item 5. A round is evict-oldest + insert + query on a window of ``n`` entries (the
authors' ``benchmark``/``ooo_benchmark`` loop); out-of-order rounds insert exactly ``d`` entries
from the young end (:class:`~bench.workloads.AdversarialWindow`). Beside FiBA (min_arity 4)
the run measures ClassicBTree, TwoStacksLite (in order only) and the *loop floor*: the same
round loop calling three methods that do nothing, i.e. the most any pure-Python aggregator
could reach on this interpreter. The second part times ``bulk_evict`` of the 1,024 oldest
entries against 1,024 single ``evict`` calls on the same window (refilled untimed). For the
smaller n, an untimed pass over a twin window whose monoid counts its calls gives the
combines per round: the algorithm's work, apart from CPython's overhead.
"""

from __future__ import annotations

import statistics
from time import perf_counter_ns, thread_time_ns

from bench.algorithms import Algorithm, algorithm, exclusion_reason, load_monoid
from bench.config import BenchConfig
from bench.counting import CountingMonoid
from bench.experiments.common import build_window, log2_label, ratio, round_throughputs, times
from bench.report import ExperimentResult, Finding, subplots
from bench.timing import gc_paused
from bench.workloads import AdversarialWindow

TARGET_ROUNDS_PER_SECOND = 1_000_000
BULK_M = 1024
BULK_TARGET = 20.0
ALGORITHMS = ("fiba4", "classic_btree4", "two_stacks_lite")
FLOOR = "loop floor"
COUNTED_ROUNDS = 2000


class _NoOpWindow:
    """Methods that do nothing: what is left of a round is the loop and three calls."""

    def insert(self, t: int, x: int) -> None:
        """Accept and drop ``(t, x)``."""

    def evict(self, t: int) -> bool:
        """Report success without storing anything."""
        return True

    def query(self) -> int:
        """The empty answer."""
        return 0


def run(config: BenchConfig) -> ExperimentResult:
    """Measure rounds/s for each algorithm, n and d, then bulk vs single evict latency."""
    sizes = config.pick([2**16, 2**20], [2**10, 2**12])
    distances = config.pick([0, 16, 256, 4096], [0, 16, 256])
    batches = config.pick(41, 5)
    result = ExperimentResult(
        "rounds",
        "rounds/s (evict oldest + insert + query), sum; bulk_evict(1024) vs 1024 evicts",
        [
            "operation",
            "algorithm",
            "n",
            "d",
            "per_second",
            "ns_each",
            "spread",
            "cpu_share",
            "combines",
        ],
        draw=_draw,
    )
    floor = config.throughput(
        AdversarialWindow(_NoOpWindow(), sizes[0]).rounds, max_count=10_000_000
    )
    result.add(
        operation="round",
        algorithm=FLOOR,
        n=sizes[0],
        d=0,
        per_second=floor.ops_per_second,
        ns_each=floor.ns_per_op,
        spread=floor.spread,
        cpu_share=floor.cpu_share,
        combines=0,
    )
    algos = {name: algorithm(name) for name in ALGORITHMS}
    counts = {name: _combines_per_round(algo, sizes[0], distances) for name, algo in algos.items()}
    result.notes += [
        exclusion_reason(algo) + "; measured at d = 0 only"
        for algo in algos.values()
        if not algo.out_of_order
    ]
    for n in sizes:
        config.log(f"rounds: n={log2_label(n)}")
        windows = {name: build_window(algo, "sum", n) for name, algo in algos.items()}
        for d in distances:
            active = {name: w for name, w in windows.items() if algos[name].out_of_order or not d}
            with gc_paused():
                for window in active.values():
                    window.widen(d)
            for name, tp in round_throughputs(config, active).items():
                result.add(
                    operation="round",
                    algorithm=name,
                    n=n,
                    d=d,
                    per_second=tp.ops_per_second,
                    ns_each=tp.ns_per_op,
                    spread=tp.spread,
                    cpu_share=tp.cpu_share,
                    combines=counts[name].get(d, "") if n == sizes[0] else "",
                )
            if d == 0:
                for name in ("fiba4", "classic_btree4"):
                    _bulk_rows(config, result, windows[name], name, batches)
        del windows
    _findings(result, sizes, distances)
    return result


def _combines_per_round(algo: Algorithm, n: int, distances: list[int]) -> dict[int, float]:
    """Mean combine calls per round at each distance (sum, untimed, after 1,000 warm rounds)."""
    counter = CountingMonoid(load_monoid("sum"))
    with gc_paused():
        window = AdversarialWindow(algo.make(counter), n)
        counts = {}
        for d in distances:
            if d and not algo.out_of_order:
                break
            window.widen(d)
            window.rounds(COUNTED_ROUNDS // 2)
            counter.combines = 0
            window.rounds(COUNTED_ROUNDS)
            counts[d] = counter.combines / COUNTED_ROUNDS
    return counts


def _bulk_rows(
    config: BenchConfig,
    result: ExperimentResult,
    window: AdversarialWindow,
    name: str,
    batches: int,
) -> None:
    """Median latency of evicting the 1,024 oldest: one bulk_evict vs 1,024 evicts."""
    for bulk, operation in ((False, f"{BULK_M}x evict"), (True, f"bulk_evict({BULK_M})")):
        with gc_paused():
            wall, cpu = perf_counter_ns(), thread_time_ns()
            samples, _ = window.batch_latencies(
                batches, BULK_M, bulk_evict=bulk, bulk_insert=False, clock=config.clock_ns
            )
            wall, cpu = perf_counter_ns() - wall, thread_time_ns() - cpu
        median = statistics.median(samples)
        result.add(
            operation=operation,
            algorithm=name,
            n=window.n,
            d=0,
            per_second=1e9 / median,
            ns_each=median,
            spread=(max(samples) - min(samples)) / median,
            cpu_share=cpu / wall,
            combines="",
        )


def _findings(result: ExperimentResult, sizes: list[int], distances: list[int]) -> None:
    big = sizes[-1]
    fiba = result.value("per_second", operation="round", algorithm="fiba4", n=big, d=0)
    floor = result.value("per_second", operation="round", algorithm=FLOOR)
    result.findings.append(
        Finding(
            f"FiBA in order with sum at n={log2_label(big)} >= {TARGET_ROUNDS_PER_SECOND:,} "
            "rounds/s (authors' C++: ~20 M/s, their classic B-tree ~5 M/s)",
            f"{fiba:,.0f} rounds/s = {fiba / TARGET_ROUNDS_PER_SECOND:.2f}x the target; "
            f"the empty round loop itself runs {floor:,.0f}/s",
            fiba >= TARGET_ROUNDS_PER_SECOND,
        )
    )
    small = sizes[0]
    for d in distances:
        counts = {
            r["algorithm"]: r["combines"]
            for r in result.select(operation="round", n=small, d=d)
            if r["algorithm"] != FLOOR
        }
        result.findings.append(
            Finding(
                f"combines per round, n={log2_label(small)}, d={d} (FiBA: O(1) in order, "
                "O(log d) out of order; ClassicBTree: O(log n))",
                ", ".join(f"{name} {count:.1f}" for name, count in counts.items()),
            )
        )
    for n in sizes:
        for d in distances:
            fiba = result.value("per_second", operation="round", algorithm="fiba4", n=n, d=d)
            classic = result.value(
                "per_second", operation="round", algorithm="classic_btree4", n=n, d=d
            )
            result.findings.append(
                Finding(
                    f"FiBA vs ClassicBTree, n={log2_label(n)}, d={d}",
                    f"{fiba:,.0f} vs {classic:,.0f} rounds/s = {times(ratio(fiba, classic))}",
                )
            )
        fiba = result.value("per_second", operation="round", algorithm="fiba4", n=n, d=0)
        lite = result.value("per_second", operation="round", algorithm="two_stacks_lite", n=n, d=0)
        result.findings.append(
            Finding(
                f"FiBA vs TwoStacksLite in order, n={log2_label(n)}",
                f"{fiba:,.0f} vs {lite:,.0f} rounds/s = {times(ratio(fiba, lite))}",
            )
        )
    for n in sizes:
        single = result.value("ns_each", operation=f"{BULK_M}x evict", algorithm="fiba4", n=n)
        bulk = result.value("ns_each", operation=f"bulk_evict({BULK_M})", algorithm="fiba4", n=n)
        speedup = ratio(single, bulk)
        result.findings.append(
            Finding(
                f"FiBA bulk_evict of {BULK_M} entries >= {BULK_TARGET:.0f}x faster than "
                f"{BULK_M} single evicts, n={log2_label(n)} (C++: ~30x)",
                f"{bulk / 1000:,.1f} us vs {single / 1000:,.1f} us = {times(speedup)}",
                speedup >= BULK_TARGET,
            )
        )


def _draw(result: ExperimentResult):
    figure, (left, right) = subplots(2, title="rounds: sum, evict oldest + insert + query")
    rounds = result.select(operation="round")
    floor = next(r for r in rounds if r["algorithm"] == FLOOR)
    distances = sorted({int(r["d"]) for r in rounds})
    positions = {d: i for i, d in enumerate(distances)}
    for name in ALGORITHMS:
        for n in sorted({int(r["n"]) for r in rounds if r["algorithm"] == name}):
            rows = [r for r in rounds if r["algorithm"] == name and r["n"] == n]
            left.plot(
                [positions[int(r["d"])] for r in rows],
                [r["per_second"] for r in rows],
                marker="o",
                label=f"{name} n={log2_label(n)}",
            )
    left.axhline(TARGET_ROUNDS_PER_SECOND, color="red", linestyle="--", label="target 1 M/s")
    left.axhline(float(floor["per_second"]), color="grey", linestyle=":", label=FLOOR)
    left.set_xticks(range(len(distances)), [str(d) for d in distances])
    left.set_xlabel("out-of-order distance d")
    left.set_ylabel("rounds per second")
    left.set_yscale("log")
    left.legend(fontsize="small")
    bulk_rows = [r for r in result.rows if r["operation"] != "round"]
    labels = [f"{r['algorithm']}\n{r['operation']}\nn={log2_label(int(r['n']))}" for r in bulk_rows]
    right.bar(range(len(bulk_rows)), [float(r["ns_each"]) / 1000 for r in bulk_rows])
    right.set_xticks(range(len(bulk_rows)), labels, fontsize="x-small")
    right.set_ylabel(f"median latency of evicting {BULK_M} oldest (us)")
    right.set_yscale("log")
    return figure
