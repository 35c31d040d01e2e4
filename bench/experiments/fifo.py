"""``fifo``: in-order throughput against window size n for every algorithm.

As Fig. 13 of *Sub-O(log n) Out-of-Order Sliding-Window Aggregation*.

Rounds of evict-oldest + insert + query on a FIFO window. Each algorithm's window is built
once at the smallest n and then grown in place (in-order inserts without evictions) to the
next size, so the sweep costs one fill of the largest window, not one per size; at each size
the algorithms' repetitions are interleaved. ReCalc, whose
query folds the whole window (O(n)), stops at a smaller n, and the non-sum monoids stop at a
smaller largest n to keep the full run within its time budget; both are printed as notes.
"""

from __future__ import annotations

from bench.algorithms import algorithm
from bench.config import BenchConfig
from bench.experiments.common import (
    build_window,
    log2_label,
    powers,
    ratio,
    round_rate_columns,
    round_throughputs,
    times,
)
from bench.report import ExperimentResult, Finding, subplots
from bench.timing import gc_paused

ALGORITHMS = (
    "fiba2",
    "fiba4",
    "fiba8",
    "classic_btree4",
    "two_stacks",
    "two_stacks_lite",
    "daba",
    "flatfat",
    "recalc",
)
LITE_TARGET = 0.5


def run(config: BenchConfig) -> ExperimentResult:
    """Rounds/s of every algorithm at n = 2^4, 2^6, ... for every monoid."""
    largest = {"sum": config.pick(2**20, 2**10)}
    other_largest = config.pick(2**16, 2**8)
    recalc_largest = config.pick(2**12, 2**6)
    result = ExperimentResult(
        "fifo",
        "FIFO rounds/s (evict oldest + insert + query) against window size n",
        ["monoid", "algorithm", "n", "rounds_per_s", "ns_per_round", "spread", "cpu_share"],
        draw=_draw,
    )
    for monoid_name in config.monoids:
        top = largest.get(monoid_name, other_largest)
        if top < largest["sum"] and monoid_name != "sum":
            result.notes.append(
                f"{monoid_name}: n up to {log2_label(top)} only, to keep the run in its time "
                "budget (filling a 2^20 window with this monoid takes minutes in CPython)"
            )
        sizes = powers(4, 2**4, top)
        config.log(f"fifo: {monoid_name}")
        windows = {
            name: build_window(algorithm(name), monoid_name, sizes[0]) for name in ALGORITHMS
        }
        for n in sizes:
            if n > recalc_largest:
                windows.pop("recalc", None)
            with gc_paused():
                for window in windows.values():
                    window.grow(n)
            for name, tp in round_throughputs(config, windows).items():
                result.add(
                    monoid=monoid_name,
                    algorithm=name,
                    n=n,
                    **round_rate_columns(tp),
                )
        del windows
    result.notes.append(
        f"recalc: n up to {log2_label(recalc_largest)} only, its query is O(n) "
        "(a fold over the whole window each round)"
    )
    _findings(result, config)
    return result


def _findings(result: ExperimentResult, config: BenchConfig) -> None:
    for monoid_name in config.monoids:
        n = max(int(r["n"]) for r in result.select(monoid=monoid_name))

        def rate(name: str, n: int = n, monoid_name: str = monoid_name) -> float:
            return result.value("rounds_per_s", monoid=monoid_name, algorithm=name, n=n)

        fiba, lite = rate("fiba4"), rate("two_stacks_lite")
        share = ratio(fiba, lite)
        result.findings.append(
            Finding(
                f"FiBA in order >= {LITE_TARGET}x TwoStacksLite, {monoid_name}, "
                f"n={log2_label(n)} (authors' C++: about 0.4x)",
                f"{fiba:,.0f} vs {lite:,.0f} rounds/s = {times(share)}",
                share >= LITE_TARGET,
            )
        )
        best = max(("fiba2", "fiba4", "fiba8"), key=rate)
        result.findings.append(
            Finding(
                f"best FiBA ({best}) vs DABA and ClassicBTree, {monoid_name}, n={log2_label(n)}",
                f"{times(ratio(rate(best), rate('daba')))} DABA, "
                f"{times(ratio(rate(best), rate('classic_btree4')))} ClassicBTree",
            )
        )
        small = min(int(r["n"]) for r in result.select(monoid=monoid_name))
        for name in ("fiba4", "classic_btree4"):
            result.findings.append(
                Finding(
                    f"{name} throughput at n={log2_label(n)} relative to n={log2_label(small)}, "
                    f"{monoid_name} (FiBA: O(1) amortized in order, ClassicBTree: O(log n))",
                    times(ratio(rate(name), rate(name, small))),
                )
            )


def _draw(result: ExperimentResult):
    monoids = list(dict.fromkeys(str(r["monoid"]) for r in result.rows))
    figure, axes = subplots(len(monoids), title="FIFO throughput against window size (Fig. 13)")
    for axis, monoid_name in zip(axes, monoids, strict=True):
        for name in ALGORITHMS:
            rows = result.select(monoid=monoid_name, algorithm=name)
            axis.plot(
                [r["n"] for r in rows], [r["rounds_per_s"] for r in rows], marker=".", label=name
            )
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("window size n")
        axis.set_ylabel("rounds per second")
        axis.set_title(monoid_name)
    axes[0].legend(fontsize="x-small")
    return figure
