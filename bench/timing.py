"""Honest timing primitives: ``perf_counter_ns``, garbage collector paused, warm-up, medians.

Every timed section runs with the cyclic garbage collector disabled (a collection in the middle
of a measurement would be charged to whichever operation happened to trigger it) and re-enables
it afterwards, exactly as it was. Throughput is the median over several repetitions after an
untimed warm-up; the number of operations per repetition is calibrated so that a repetition
lasts about ``target_seconds`` (like ``timeit``'s autorange), bounded by a maximum count so that
slow algorithms cannot blow the time budget. On a shared machine a repetition can lose its core
to another process; the thread's CPU time tells, and such a repetition is retaken (see
:func:`undisturbed_timed_ns`) and the CPU share reported with the result.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from time import perf_counter, perf_counter_ns, thread_time, thread_time_ns
from typing import TypeVar

from stores.gc_pause import paused_gc as gc_paused

CLOCKS: dict[str, Callable[[], int]] = {"wall": perf_counter_ns, "cpu": thread_time_ns}
"""``wall``: ``perf_counter_ns``, the default and the papers' measure. ``cpu``: the thread's CPU
time, for a shared machine where other processes take the core away in the middle of a
measurement (it leaves out waits, so it suits CPU-bound code like the aggregators only)."""


def timed_ns(run: Callable[[int], object], count: int) -> tuple[int, int]:
    """Wall-clock and CPU nanoseconds of ``run(count)`` (call it with the collector paused).

    The CPU time of this thread shows whether the machine let the run have a core to itself:
    on a shared machine a CPU/wall share well below 1 marks a disturbed measurement.
    """
    cpu = thread_time_ns()
    start = perf_counter_ns()
    run(count)
    wall = perf_counter_ns() - start
    return wall, thread_time_ns() - cpu


def wall_and_cpu_s(run: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this thread) of one ``run()`` (the collector as it is)."""
    wall, cpu = perf_counter(), thread_time()
    run()
    return perf_counter() - wall, thread_time() - cpu


def median_rates(samples: Sequence[tuple[float, float]], units: float) -> dict[str, float]:
    """``units`` per wall and per CPU second, from the medians of ``(wall s, CPU s)`` samples
    (as :func:`wall_and_cpu_s` takes them): ``{"per_wall_s": ..., "per_cpu_s": ...}``."""
    wall = statistics.median(s[0] for s in samples)
    cpu = statistics.median(s[1] for s in samples)
    return {"per_wall_s": units / max(wall, 1e-9), "per_cpu_s": units / max(cpu, 1e-9)}


@dataclass(frozen=True)
class Throughput:
    """Median operations per second over ``repetitions`` of ``ops_per_repetition`` operations."""

    ops_per_second: float
    ops_per_repetition: int
    repetitions: int
    spread: float  # (max - min) / median of the per-repetition rates
    cpu_share: float  # median CPU time / wall time of the repetitions (1.0: undisturbed)

    @property
    def ns_per_op(self) -> float:
        return 1e9 / self.ops_per_second


UNDISTURBED_SHARE = 0.9
ATTEMPTS = 3


def undisturbed_timed_ns(run: Callable[[int], object], count: int) -> tuple[int, int]:
    """:func:`timed_ns` of ``run(count)``, retaken while another process took the core.

    A repetition whose thread CPU time is below :data:`UNDISTURBED_SHARE` of its wall time was
    preempted; it is retaken up to :data:`ATTEMPTS` times in all, and the least disturbed
    attempt kept. The wall time (``perf_counter_ns``) stays the measure.
    """
    best = timed_ns(run, count)
    for _ in range(ATTEMPTS - 1):
        if best[1] >= UNDISTURBED_SHARE * best[0]:
            break
        attempt = timed_ns(run, count)
        if attempt[1] * best[0] > best[1] * attempt[0]:
            best = attempt
    return best


def calibrated_count(
    run: Callable[[int], object], *, target_seconds: float, max_count: int, min_count: int = 1
) -> int:
    """Operations per repetition so that one repetition lasts about ``target_seconds``.

    Probes double in size until one takes at least a quarter of the target (the probes double
    as warm-up); the estimate uses the thread's CPU time, so a probe preempted by another
    process does not cut the calibration short. The result is clamped to
    ``[min_count, max_count]``; ``min_count`` lets a caller demand that every repetition cover
    a whole amortization period (e.g. a full window turnover for Two-Stacks).
    """
    probe = 1
    while True:
        _, elapsed = timed_ns(run, probe)
        if elapsed * 4 >= target_seconds * 1e9 or probe >= max_count:
            break
        probe = min(max_count, probe * 2)
    per_op = max(elapsed, 1) / probe
    return max(min_count, min(max_count, int(target_seconds * 1e9 / per_op)))


K = TypeVar("K")


@dataclass(frozen=True)
class Workload:
    """``run(count)`` performs ``count`` operations; bounds on the count per repetition."""

    run: Callable[[int], object]
    max_count: int
    min_count: int = 1


def interleaved_throughputs(
    workloads: Mapping[K, Workload],
    *,
    repetitions: int,
    target_seconds: float,
    clock: str = "wall",
) -> dict[K, Throughput]:
    """Median throughput of each workload, their repetitions interleaved.

    Each workload is calibrated (the probes double as warm-up), then repetition ``r`` times
    every workload once, in an order rotated by ``r``: a change in machine load during the
    measurement hits all of them alike, which keeps the ratios between them fair. Each ``run``
    must leave its structure in an equivalent state (e.g. a full window of the same size).
    The garbage collector is paused throughout. ``clock`` (see :data:`CLOCKS`) picks the time
    the rates are computed from; wall-clock repetitions that lost the core are retaken
    (:func:`undisturbed_timed_ns`).
    """
    take = undisturbed_timed_ns if clock == "wall" else timed_ns
    names = list(workloads)
    samples: dict[K, list[tuple[int, int]]] = {name: [] for name in names}
    with gc_paused():
        counts = {
            name: calibrated_count(
                w.run, target_seconds=target_seconds, max_count=w.max_count, min_count=w.min_count
            )
            for name, w in workloads.items()
        }
        for r in range(repetitions):
            shift = r % len(names)
            for name in names[shift:] + names[:shift]:
                samples[name].append(take(workloads[name].run, counts[name]))
    used = 0 if clock == "wall" else 1
    results = {}
    for name in names:
        rates = [counts[name] * 1e9 / max(sample[used], 1) for sample in samples[name]]
        median = statistics.median(rates)
        share = statistics.median(cpu / max(wall, 1) for wall, cpu in samples[name])
        spread = (max(rates) - min(rates)) / median
        results[name] = Throughput(median, counts[name], repetitions, spread, share)
    return results


def throughput(
    run: Callable[[int], object],
    *,
    repetitions: int,
    target_seconds: float,
    max_count: int,
    min_count: int = 1,
    clock: str = "wall",
) -> Throughput:
    """Median throughput of one workload (see :func:`interleaved_throughputs`)."""
    return interleaved_throughputs(
        {"": Workload(run, max_count, min_count)},
        repetitions=repetitions,
        target_seconds=target_seconds,
        clock=clock,
    )[""]


def percentile(sorted_samples: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of already sorted samples, nearest-rank method."""
    if not sorted_samples:
        raise ValueError("percentile of no samples")
    rank = max(1, -(-len(sorted_samples) * q // 100))  # ceil(n * q / 100), at least 1
    return sorted_samples[min(len(sorted_samples), int(rank)) - 1]


@dataclass(frozen=True)
class LatencySummary:
    """Distribution of per-operation latencies in nanoseconds."""

    count: int
    min: float
    median: float
    p99: float
    p999: float
    max: float
    mean: float

    @classmethod
    def of(cls, samples_ns: Sequence[int]) -> LatencySummary:
        ordered = sorted(samples_ns)
        return cls(
            count=len(ordered),
            min=ordered[0],
            median=percentile(ordered, 50),
            p99=percentile(ordered, 99),
            p999=percentile(ordered, 99.9),
            max=ordered[-1],
            mean=statistics.fmean(ordered),
        )
