"""``realistic``: a bursty out-of-order stream in a one-day time-based window (*Out-of-Order
Sliding-Window Aggregation with Efficient Bulk Evictions and Insertions*, §7.4).

The stream (``bench.bursty``) has daily cycles, bursts and heavy-tailed lateness, so the window
size n, the eviction bulk size m and the out-of-order distance d all vary within the run. The
first simulated day fills the window untimed; the rest is timed in segments, every variant
(FiBA with ``bulk_evict``, with single evicts, ...) on the same arrivals, the median segment
throughput reported. Details: docs/bench-methods.md.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from itertools import pairwise
from operator import itemgetter
from typing import Any

from bench.algorithms import algorithm, load_monoid
from bench.bursty import DAY_MS, BurstySpec, bursty_stream, window_statistics
from bench.config import BenchConfig
from bench.experiments.common import ratio, times
from bench.report import ExperimentResult, Finding, subplots
from bench.timing import gc_paused, percentile

POLL = 500
BEFORE_TIME = -(1 << 62)  # stream time before the first arrival


def per_arrival(bulk: bool) -> Callable[[Any, list[int], list[int], int, int, int], int]:
    """A processor of arrivals ``[start, stop)`` evicting by bulk_evict or single evicts."""

    def process(agg: Any, ts: list[int], xs: list[int], start: int, stop: int, now: int) -> int:
        insert, query, evict, oldest = agg.insert, agg.query, agg.evict, agg.oldest
        bulk_evict = agg.bulk_evict
        for i in range(start, stop):
            t = ts[i]
            if t <= now - DAY_MS:
                continue
            insert(t, xs[i])
            if t > now:
                now = t
                if bulk:
                    bulk_evict(now - DAY_MS)
                else:
                    boundary = now - DAY_MS
                    first = oldest()
                    while first <= boundary:
                        evict(first)
                        first = oldest()
            query()
        return now

    return process


def per_poll(agg: Any, ts: list[int], xs: list[int], start: int, stop: int, now: int) -> int:
    """Process arrivals ``[start, stop)`` in polls of :data:`POLL`: bulk insert, bulk evict."""
    by_time = itemgetter(0)
    for first in range(start, stop, POLL):
        last = min(stop, first + POLL)
        latest = max(now, max(ts[first:last]))
        low = latest - DAY_MS
        pairs = [(t, x) for t, x in zip(ts[first:last], xs[first:last], strict=True) if t > low]
        pairs.sort(key=by_time)  # stable: equal times keep arrival order
        agg.bulk_insert(pairs)
        if latest > now:
            agg.bulk_evict(low)
            now = latest
        agg.query()
    return now


VARIANTS: dict[str, tuple[str, Callable[..., int]]] = {
    "fiba4 bulk_evict": ("fiba4", per_arrival(bulk=True)),
    "fiba4 single": ("fiba4", per_arrival(bulk=False)),
    "fiba4 polls": ("fiba4", per_poll),
    "classic_btree4": ("classic_btree4", per_arrival(bulk=True)),
}


def run(config: BenchConfig) -> ExperimentResult:
    """Throughput of each variant on the bursty stream; histograms of n, m and d."""
    spec = BurstySpec(
        days=config.pick(2.0, 1.25), mean_rate=config.pick(0.5, 0.05), seed=config.seed
    )
    ts, xs = bursty_stream(spec)
    warm = next((i for i, t in enumerate(ts) if t >= DAY_MS), len(ts))
    segments = config.pick(5, 3)
    bounds = [warm + (len(ts) - warm) * k // segments for k in range(segments + 1)]
    stats = window_statistics(ts)
    result = ExperimentResult(
        "realistic",
        f"bursty out-of-order stream, one-day window, {len(ts):,} arrivals over {spec.days} days"
        f" ({len(ts) - warm:,} timed)",
        [
            "monoid",
            "variant",
            "events",
            "events_per_s",
            "ns_per_event",
            "min_segment",
            "max_segment",
        ],
        draw=lambda r: _draw(r, stats),
    )
    clock = config.clock_ns
    names = list(VARIANTS)
    for monoid_name in config.monoids:
        config.log(f"realistic: {monoid_name}")
        aggs = {v: algorithm(VARIANTS[v][0]).make(load_monoid(monoid_name)) for v in names}
        rates: dict[str, list[float]] = {v: [] for v in names}
        with gc_paused():
            nows = {v: VARIANTS[v][1](aggs[v], ts, xs, 0, warm, BEFORE_TIME) for v in names}
            for k, (low, high) in enumerate(pairwise(bounds)):
                for variant in names[k % len(names) :] + names[: k % len(names)]:
                    process = VARIANTS[variant][1]
                    start = clock()
                    nows[variant] = process(aggs[variant], ts, xs, low, high, nows[variant])
                    rates[variant].append((high - low) * 1e9 / max(1, clock() - start))
        for variant in names:
            median = statistics.median(rates[variant])
            result.add(
                monoid=monoid_name,
                variant=variant,
                events=len(ts) - warm,
                events_per_s=median,
                ns_per_event=1e9 / median,
                min_segment=min(rates[variant]),
                max_segment=max(rates[variant]),
            )
        del aggs
    _findings(result, config, stats)
    return result


def _findings(result: ExperimentResult, config: BenchConfig, stats) -> None:
    sizes, evicted, distances = (sorted(v) for v in (stats.sizes, stats.evicted, stats.distances))
    result.findings.append(
        Finding(
            "window size n (like the bulk paper's Fig. 15 left)",
            f"min {sizes[0]:,}, median {percentile(sizes, 50):,}, max {sizes[-1]:,}",
        )
    )
    bulk = sum(1 for m in evicted if m > 1)
    result.findings.append(
        Finding(
            "eviction bulk size m per arrival (Fig. 15 middle)",
            f"{bulk:,} of {len(evicted):,} arrivals evict more than one entry; p99 "
            f"{percentile(evicted, 99):,}, max {evicted[-1]:,}",
        )
    )
    late = sum(1 for d in distances if d > 0)
    result.findings.append(
        Finding(
            "out-of-order distance d (Fig. 15 right)",
            f"{late:,} of {len(distances):,} arrivals out of order; median "
            f"{percentile(distances, 50):,}, p99 {percentile(distances, 99):,}, max "
            f"{distances[-1]:,}; {stats.dropped:,} dropped as older than the window",
        )
    )
    for monoid_name in config.monoids:

        def rate(variant: str, monoid_name: str = monoid_name) -> float:
            return result.value("events_per_s", monoid=monoid_name, variant=variant)

        result.findings.append(
            Finding(
                f"FiBA with vs without bulk evict, {monoid_name} (bulk paper Fig. 16: bulk "
                "operations give FiBA an advantage on real data)",
                f"{times(ratio(rate('fiba4 bulk_evict'), rate('fiba4 single')))}; per poll of "
                f"{POLL}: {times(ratio(rate('fiba4 polls'), rate('fiba4 single')))}; "
                f"FiBA bulk_evict vs ClassicBTree "
                f"{times(ratio(rate('fiba4 bulk_evict'), rate('classic_btree4')))}",
            )
        )


def _draw(result: ExperimentResult, stats):
    figure, (size_axis, evict_axis, distance_axis, rate_axis) = subplots(
        4, title="bursty stream, one-day window (bulk paper Fig. 15-16)"
    )
    size_axis.hist(stats.sizes, bins=50)
    size_axis.set_xlabel("window size n")
    for axis, data, label in (
        (evict_axis, stats.evicted, "entries evicted per arrival m"),
        (distance_axis, stats.distances, "out-of-order distance d"),
    ):
        top = max(data)
        bins = [0, 1] + [2**k for k in range(1, max(2, top.bit_length() + 1))]
        axis.hist(data, bins=bins)
        axis.set_xscale("symlog", linthresh=1)
        axis.set_yscale("log")
        axis.set_xlabel(label)
    for axis in (size_axis, evict_axis, distance_axis):
        axis.set_ylabel("arrivals")
    labels = [f"{r['monoid']}\n{r['variant']}" for r in result.rows]
    rate_axis.bar(range(len(labels)), [float(r["events_per_s"]) for r in result.rows])
    rate_axis.set_xticks(range(len(labels)), labels, rotation=90, fontsize="x-small")
    rate_axis.set_ylabel("events per second (median segment)")
    return figure
