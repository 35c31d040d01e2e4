"""Helpers the experiments share: building windows untimed, measuring rounds, ratios."""

from __future__ import annotations

import math
from collections.abc import Mapping

from bench.algorithms import Algorithm, algorithm, load_monoid
from bench.config import BenchConfig
from bench.timing import Throughput, Workload, gc_paused
from bench.workloads import AdversarialWindow


def build_window(algo: Algorithm, monoid_name: str, n: int, d: int = 0) -> AdversarialWindow:
    """A fresh ``algo`` window of ``n`` entries at distance ``d`` (filled with the GC paused)."""
    with gc_paused():
        return AdversarialWindow(algo.make(load_monoid(monoid_name)), n, d)


def round_throughputs(
    config: BenchConfig, windows: Mapping[str, AdversarialWindow]
) -> dict[str, Throughput]:
    """Rounds/s of each algorithm's window (keyed by algorithm name), measured interleaved.

    A Two-Stacks repetition covers at least n rounds (see
    :meth:`~bench.algorithms.Algorithm.rounds_per_repetition`).
    """
    return config.throughputs(
        {
            name: Workload(
                window.rounds,
                max_count=max(2_000_000, window.n),
                min_count=algorithm(name).rounds_per_repetition(window.n),
            )
            for name, window in windows.items()
        }
    )


def round_rate_columns(tp: Throughput) -> dict[str, float]:
    """The columns of a rounds/s measurement in the ``fifo`` and ``ooo`` tables."""
    return {
        "rounds_per_s": tp.ops_per_second,
        "ns_per_round": tp.ns_per_op,
        "spread": tp.spread,
        "cpu_share": tp.cpu_share,
    }


def powers(base: int, low: int, high: int) -> list[int]:
    """``base**k`` for ``k`` such that ``low <= base**k <= high``."""
    out = []
    value = 1
    while value <= high:
        if value >= low:
            out.append(value)
        value *= base
    return out


def log2_label(n: int) -> str:
    """``2^k`` when ``n`` is a power of two, else the plain number."""
    if n > 0 and n & (n - 1) == 0:
        return f"2^{n.bit_length() - 1}"
    return str(n)


def ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator``, NaN when the denominator is zero."""
    return numerator / denominator if denominator else math.nan


def times(value: float) -> str:
    """A ratio as ``1.23x``."""
    return f"{value:.2f}x"
