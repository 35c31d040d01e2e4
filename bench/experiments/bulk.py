"""``bulk``: bulk evict and bulk insert against bulk size m.

As Fig. 7-9 and 11-13 of *Out-of-Order Sliding-Window Aggregation with Efficient Bulk
Evictions and Insertions*.

A batch round evicts the ``m`` oldest entries, inserts ``m`` new ones and queries once, on a
window of ``n`` entries. The new entries are in order (d = 0) or land ``d = m`` entries from the
young end. Variants: FiBA with its bulk operations (``bulk_evict`` + ``bulk_insert``, "b_fiba"
in the paper), FiBA looping single ``evict``/``insert`` calls ("nb_fiba"), and the baselines
through the shared interface (their ``bulk_*`` methods). Per point the table gives the
throughput in entries per second (median of repetitions of whole batch rounds) and, from a
separate pass that times each phase, the median and p99 latency of the eviction and of the
insertion of one batch. The variants' throughput repetitions are interleaved.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from bench.algorithms import algorithm
from bench.config import BenchConfig
from bench.experiments.common import build_window, log2_label, ratio, times
from bench.report import ExperimentResult, Finding, subplots
from bench.timing import Workload, gc_paused, percentile
from bench.workloads import AdversarialWindow


@dataclass(frozen=True)
class Variant:
    """An algorithm and whether its batches go through the bulk methods or single calls."""

    label: str
    algorithm: str
    bulk: bool


VARIANTS = (
    Variant("fiba4 bulk", "fiba4", True),
    Variant("fiba4 single", "fiba4", False),
    Variant("classic_btree4", "classic_btree4", True),
    Variant("two_stacks_lite", "two_stacks_lite", True),
    Variant("flatfat", "flatfat", True),
)
PAPER_M = 1024


def run(config: BenchConfig) -> ExperimentResult:
    """Throughput and per-phase latency of batch rounds against m, at d = 0 and d = m."""
    n = config.pick(2**16, 2**9)
    bulk_sizes = config.pick([1, 16, 256, 1024, 4096], [1, 4, 16])
    result = ExperimentResult(
        "bulk",
        f"batch rounds (evict m oldest, insert m, query), n={log2_label(n)}",
        [
            "monoid",
            "placement",
            "variant",
            "m",
            "d",
            "entries_per_s",
            "evict_median_us",
            "evict_p99_us",
            "insert_median_us",
            "insert_p99_us",
        ],
        draw=_draw,
    )
    result.notes.append(
        "two_stacks_lite and flatfat take part at d = 0 only: they accept in-order inserts only"
    )
    for monoid_name in config.monoids:
        config.log(f"bulk: {monoid_name}")
        windows = {v: build_window(algorithm(v.algorithm), monoid_name, n) for v in VARIANTS}
        for placement in ("d=0", "d=m"):
            if placement == "d=m":
                windows = {v: w for v, w in windows.items() if algorithm(v.algorithm).out_of_order}
            for m in bulk_sizes:
                if placement == "d=m":
                    with gc_paused():
                        for window in windows.values():
                            window.widen(m)
                _measure(config, result, windows, monoid_name, placement, m)
        del windows
    _findings(result, config, bulk_sizes)
    return result


def _measure(
    config: BenchConfig,
    result: ExperimentResult,
    windows: dict[Variant, AdversarialWindow],
    monoid_name: str,
    placement: str,
    m: int,
) -> None:
    """Interleaved throughput of every variant's batch rounds, then each one's latencies."""

    def batch_rounds(variant: Variant, window: AdversarialWindow) -> Callable[[int], None]:
        def run(count: int) -> None:
            window.batch_rounds(count, m, bulk_evict=variant.bulk, bulk_insert=variant.bulk)

        return run

    throughputs = config.throughputs(
        {
            variant.label: Workload(
                batch_rounds(variant, window),
                max_count=1_000_000,
                min_count=-(-algorithm(variant.algorithm).rounds_per_repetition(window.n) // m),
            )
            for variant, window in windows.items()
        }
    )
    batches = max(7, config.pick(2**14, 2**8) // m)  # about the same entries at every m
    for variant, window in windows.items():
        with gc_paused():
            evictions, insertions = window.batch_latencies(
                batches, m, bulk_evict=variant.bulk, bulk_insert=variant.bulk, clock=config.clock_ns
            )
        evictions.sort()
        insertions.sort()
        result.add(
            monoid=monoid_name,
            placement=placement,
            variant=variant.label,
            m=m,
            d=window.d,
            entries_per_s=throughputs[variant.label].ops_per_second * m,
            evict_median_us=statistics.median(evictions) / 1000,
            evict_p99_us=percentile(evictions, 99) / 1000,
            insert_median_us=statistics.median(insertions) / 1000,
            insert_p99_us=percentile(insertions, 99) / 1000,
        )


def _findings(result: ExperimentResult, config: BenchConfig, bulk_sizes: list[int]) -> None:
    m = max(size for size in bulk_sizes if size <= PAPER_M)
    for monoid_name in config.monoids:

        def value(column: str, variant: str, placement: str, name: str = monoid_name) -> float:
            return result.value(column, monoid=name, variant=variant, placement=placement, m=m)

        single = value("evict_median_us", "fiba4 single", "d=0")
        bulk = value("evict_median_us", "fiba4 bulk", "d=0")
        result.findings.append(
            Finding(
                f"evicting {m} oldest: FiBA bulk_evict vs single evicts, {monoid_name} "
                "(bulk paper Fig. 7: O(log m) vs O(m))",
                f"{bulk:,.1f} us vs {single:,.1f} us = {times(ratio(single, bulk))} faster",
            )
        )
        for placement in ("d=0", "d=m"):
            single = value("insert_median_us", "fiba4 single", placement)
            bulk = value("insert_median_us", "fiba4 bulk", placement)
            result.findings.append(
                Finding(
                    f"inserting {m} at {placement}: FiBA bulk_insert vs single inserts, "
                    f"{monoid_name} (bulk paper Fig. {8 if placement == 'd=0' else 9})",
                    f"{bulk:,.1f} us vs {single:,.1f} us = {times(ratio(single, bulk))} faster",
                )
            )
        fiba = value("entries_per_s", "fiba4 bulk", "d=0")
        lite = value("entries_per_s", "two_stacks_lite", "d=0")
        result.findings.append(
            Finding(
                f"batch-round throughput at m={m}, d=0: FiBA bulk vs TwoStacksLite, {monoid_name} "
                "(bulk paper Fig. 12: TwoStacksLite best in order)",
                f"{fiba:,.0f} vs {lite:,.0f} entries/s = {times(ratio(fiba, lite))}",
            )
        )


def _draw(result: ExperimentResult):
    monoids = list(dict.fromkeys(str(r["monoid"]) for r in result.rows))
    panels = [
        ("entries_per_s", "d=0", "throughput, in order", "entries per second"),
        ("evict_median_us", "d=0", "bulk evict latency (median)", "microseconds"),
        ("insert_median_us", "d=0", "insert latency, in order (median)", "microseconds"),
        ("insert_median_us", "d=m", "insert latency at d=m (median)", "microseconds"),
        ("entries_per_s", "d=m", "throughput, d=m", "entries per second"),
    ]
    figure, axes = subplots(
        len(monoids) * len(panels), title="bulk operations against bulk size m (bulk paper)"
    )
    axis_iter = iter(axes)
    for monoid_name in monoids:
        for column, placement, title, unit in panels:
            axis = next(axis_iter)
            for variant in VARIANTS:
                rows = result.select(monoid=monoid_name, variant=variant.label, placement=placement)
                if rows:
                    axis.plot(
                        [r["m"] for r in rows],
                        [r[column] for r in rows],
                        marker=".",
                        label=variant.label,
                    )
            axis.set_xscale("log", base=2)
            axis.set_yscale("log")
            axis.set_xlabel("bulk size m")
            axis.set_ylabel(unit)
            axis.set_title(f"{monoid_name}: {title}", fontsize="small")
            axis.legend(fontsize="xx-small")
    return figure
