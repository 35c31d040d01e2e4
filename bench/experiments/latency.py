"""``latency``: distribution of per-round latency, in order and out of order.

As Fig. 12 of *Sub-O(log n) Out-of-Order Sliding-Window Aggregation*.

Each round (evict oldest + insert + query) is timed on its own with the run's clock, the
garbage collector paused, after an untimed warm-up, for 2n rounds (so that a Two-Stacks flip,
which happens once every n evictions, is among the samples); the table gives min, median,
p99, p99.9, max and mean, the plot one violin per algorithm on a log scale. In order, every
algorithm but ReCalc (O(n) per query) takes part; out of order, only those accepting
out-of-order inserts.
"""

from __future__ import annotations

import math
from functools import partial

from bench.algorithms import ALGORITHMS as REGISTRY
from bench.algorithms import algorithm, exclusion_reason
from bench.config import BenchConfig
from bench.experiments.common import build_window, log2_label, ratio, times
from bench.report import ExperimentResult, Finding, subplots
from bench.timing import LatencySummary, gc_paused, percentile

IN_ORDER = (
    "fiba2",
    "fiba4",
    "fiba8",
    "classic_btree4",
    "two_stacks",
    "two_stacks_lite",
    "daba",
    "flatfat",
)
OUT_OF_ORDER = ("fiba2", "fiba4", "fiba8", "classic_btree4")


def run(config: BenchConfig) -> ExperimentResult:
    """Per-round latency samples of each algorithm at d = 0 and at a large d."""
    n = config.pick(2**14, 2**8)
    distances = (0, config.pick(4096, 16))
    count = 2 * n  # so that every FIFO algorithm's O(n) step (a Two-Stacks flip) is sampled
    warmup = count // 10
    samples: dict[tuple[str, int, str], list[int]] = {}
    result = ExperimentResult(
        "latency",
        f"per-round latency (ns), n={log2_label(n)}, {count:,} rounds per point",
        ["monoid", "d", "algorithm", "rounds", "min", "median", "p99", "p999", "max", "mean"],
    )
    result.draw = partial(_draw, samples)
    result.notes.append("recalc excluded: O(n) per query, one point would take minutes")
    result.notes += [
        exclusion_reason(a) + f" (out-of-order point d={distances[1]})"
        for a in REGISTRY.values()
        if not a.out_of_order
    ]
    for monoid_name in config.monoids:
        for name in IN_ORDER:
            config.log(f"latency: {monoid_name} {name}")
            window = build_window(algorithm(name), monoid_name, n)
            for d in distances:
                if d and name not in OUT_OF_ORDER:
                    break
                with gc_paused():
                    window.widen(d)
                    window.rounds(warmup)
                    taken = window.round_latencies(count, config.clock_ns)
                samples[monoid_name, d, name] = taken
                summary = LatencySummary.of(taken)
                result.add(
                    monoid=monoid_name,
                    d=d,
                    algorithm=name,
                    rounds=summary.count,
                    min=summary.min,
                    median=summary.median,
                    p99=summary.p99,
                    p999=summary.p999,
                    max=summary.max,
                    mean=summary.mean,
                )
            del window
    _findings(result, config, distances)
    return result


def _findings(result: ExperimentResult, config: BenchConfig, distances: tuple[int, int]) -> None:
    for monoid_name in config.monoids:

        def stat(column: str, name: str, d: int = 0, monoid_name: str = monoid_name) -> float:
            return result.value(column, monoid=monoid_name, algorithm=name, d=d)

        for d in distances:
            median = ratio(stat("median", "classic_btree4", d), stat("median", "fiba4", d))
            tail = ratio(stat("p999", "classic_btree4", d), stat("p999", "fiba4", d))
            result.findings.append(
                Finding(
                    f"FiBA vs ClassicBTree latency, {monoid_name}, d={d} (paper: FiBA's median "
                    "orders of magnitude lower in order, similar at large d)",
                    f"ClassicBTree / FiBA: median {times(median)}, p99.9 {times(tail)}",
                )
            )
        two_stacks, daba = stat("max", "two_stacks"), stat("max", "daba")
        result.findings.append(
            Finding(
                f"worst case: DABA (O(1)) below TwoStacks (O(n) on a flip), {monoid_name}",
                f"max {daba / 1000:,.1f} us vs {two_stacks / 1000:,.1f} us: "
                + ("confirmed" if daba < two_stacks else "not confirmed"),
            )
        )


def _draw(samples: dict[tuple[str, int, str], list[int]], result: ExperimentResult):
    panels = list(dict.fromkeys((monoid_name, d) for monoid_name, d, _ in samples))
    figure, axes = subplots(
        len(panels),
        title="per-round latency (Fig. 12): min, median, max bars; p99 -, p99.9 x",
        width=6.0,
    )
    for axis, (monoid_name, d) in zip(axes, panels, strict=True):
        names = [name for m, dd, name in samples if (m, dd) == (monoid_name, d)]
        data = [[math.log10(max(s, 1)) for s in samples[monoid_name, d, name]] for name in names]
        axis.violinplot(data, showmedians=True, showextrema=True)
        positions = range(1, len(names) + 1)
        for q, marker, label in ((99, "_", "p99"), (99.9, "x", "p99.9")):
            tails = [percentile(sorted(values), q) for values in data]
            axis.scatter(positions, tails, marker=marker, color="black", s=30, label=label)
        axis.set_xticks(range(1, len(names) + 1), names, rotation=45, fontsize="x-small")
        axis.set_ylabel("log10(latency in ns)")
        axis.set_title(f"{monoid_name}, d={d}")
    axes[0].legend(fontsize="x-small")
    return figure
