"""``sharing``: one FiBA answering a small window by range query vs two FiBAs.

As Fig. 14 of *Sub-O(log n) Out-of-Order Sliding-Window Aggregation*.

Two queries per round: a big window of fixed size and a small one of size ``s`` (the x axis);
inserts land ``d = s / 2`` entries from the young end (adversarial generator). *range*: one
FiBA over the big window; each round evicts its oldest entry, inserts, queries the whole window
and runs ``query_range`` over the youngest ``s`` entries. *twin*: two FiBAs, big and small,
each evicting its own oldest entry, inserting the same entry and querying.
"""

from __future__ import annotations

from bench.algorithms import algorithm, load_monoid
from bench.config import BenchConfig
from bench.experiments.common import build_window, log2_label, powers, ratio, times
from bench.report import ExperimentResult, Finding, subplots
from bench.timing import Workload, gc_paused
from bench.workloads import HIGH_BASE, AdversarialWindow

ALGORITHM = "fiba4"
YOUNGEST = HIGH_BASE * 2  # above every timestamp the generator produces


class RangeSharing:
    """One window of ``big.n`` entries whose youngest ``small`` are queried by range."""

    def __init__(self, big: AdversarialWindow, small: int) -> None:
        self.big = big
        self.small = small

    def rounds(self, count: int) -> None:
        big = self.big
        agg = big.agg
        evict, insert, query, query_range = agg.evict, agg.insert, agg.query, agg.query_range
        old, new = big.oldest_low, big.next_low
        lag = self.small - big.d - 1  # lows of the small window older than the new one
        for k in range(count):
            evict(old + k)
            t = new + k
            insert(t, 1 + t % 101)
            query()
            query_range(t - lag, YOUNGEST)
        big.oldest_low = old + count
        big.next_low = new + count


class TwinWindows:
    """Two windows, big and small, fed the same entries, each answering its own query."""

    def __init__(self, big: AdversarialWindow, small_agg: object, small: int) -> None:
        self.big = big
        with gc_paused():
            self.small = AdversarialWindow(
                small_agg,
                small,
                big.d,
                first_low=big.next_low - (small - big.d),
                first_high=big.next_high - big.d,
            )

    def rounds(self, count: int) -> None:
        self.big.rounds(count)
        self.small.rounds(count)


def run(config: BenchConfig) -> ExperimentResult:
    """Rounds/s of range vs twin for each small window size s, with d = s / 2."""
    n_big = config.pick(2**16, 2**8)
    smalls = powers(4, 4, n_big // 4)
    result = ExperimentResult(
        "sharing",
        f"window sharing: range query on one FiBA vs two FiBAs, big window {log2_label(n_big)}",
        ["monoid", "variant", "n_big", "n_small", "d", "rounds_per_s", "ns_per_round", "cpu_share"],
        draw=_draw,
    )
    algo = algorithm(ALGORITHM)
    for monoid_name in config.monoids:
        config.log(f"sharing: {monoid_name}")
        shared = build_window(algo, monoid_name, n_big)
        twin_big = build_window(algo, monoid_name, n_big)
        for small in smalls:
            d = small // 2
            with gc_paused():
                shared.widen(d)
                twin_big.widen(d)
            twin = TwinWindows(twin_big, algo.make(load_monoid(monoid_name)), small)
            if monoid_name == "sum":
                _check_alignment(twin)
            workloads = {
                "range": Workload(RangeSharing(shared, small).rounds, max_count=1_000_000),
                "twin": Workload(twin.rounds, max_count=1_000_000),
            }
            for variant, tp in config.throughputs(workloads).items():
                result.add(
                    monoid=monoid_name,
                    variant=variant,
                    n_big=n_big,
                    n_small=small,
                    d=d,
                    rounds_per_s=tp.ops_per_second,
                    ns_per_round=tp.ns_per_op,
                    cpu_share=tp.cpu_share,
                )
        del shared, twin_big
    for monoid_name in config.monoids:
        shares = [
            ratio(
                result.value("rounds_per_s", monoid=monoid_name, variant="range", n_small=s),
                result.value("rounds_per_s", monoid=monoid_name, variant="twin", n_small=s),
            )
            for s in smalls
        ]
        result.findings.append(
            Finding(
                f"range / twin throughput, {monoid_name} (paper: sharing does not consistently "
                "improve runtime, same ballpark)",
                f"from {times(min(shares))} to {times(max(shares))} over "
                f"n_small = {log2_label(smalls[0])}..{log2_label(smalls[-1])}",
            )
        )
    return result


def _check_alignment(twin: TwinWindows) -> None:
    """The twin's small window must hold exactly the big window's youngest entries."""
    oldest_small = twin.small.oldest_low
    expected = twin.big.agg.query_range(oldest_small, YOUNGEST)
    if twin.small.agg.query() != expected or len(twin.small.agg) != twin.small.n:
        raise RuntimeError("sharing workload misaligned: small window != youngest of big")


def _draw(result: ExperimentResult):
    monoids = list(dict.fromkeys(str(r["monoid"]) for r in result.rows))
    figure, axes = subplots(len(monoids), title="window sharing (Fig. 14), d = n_small / 2")
    for axis, monoid_name in zip(axes, monoids, strict=True):
        for variant in ("range", "twin"):
            rows = result.select(monoid=monoid_name, variant=variant)
            axis.plot(
                [r["n_small"] for r in rows],
                [r["rounds_per_s"] for r in rows],
                marker="o",
                label=variant,
            )
        axis.set_xscale("log", base=2)
        axis.set_xlabel("small window size")
        axis.set_ylabel("rounds per second")
        axis.set_title(monoid_name)
        axis.legend(fontsize="small")
    return figure
