"""Settings of one benchmark run, shared by every experiment."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from bench.timing import CLOCKS, Throughput, Workload, interleaved_throughputs, throughput

DEFAULT_MONOIDS = ("sum", "geomean", "bloom")

T = TypeVar("T")
K = TypeVar("K")


@dataclass(frozen=True)
class BenchConfig:
    """How big and how long: ``quick`` picks small sizes and few repetitions.

    ``seconds`` is the target duration of one timed repetition, ``repetitions`` how many are
    taken (the median is reported), ``seed`` drives the realistic generator, ``clock`` names
    the clock of :data:`bench.timing.CLOCKS` every measurement reads.
    """

    out: Path
    quick: bool = False
    monoids: tuple[str, ...] = DEFAULT_MONOIDS
    repetitions: int = 5
    seconds: float = 0.05
    seed: int = 2026
    clock: str = "wall"
    log: Callable[[str], None] = field(default=print, compare=False)

    def pick(self, full: T, quick: T) -> T:
        """``quick`` in quick mode, else ``full``."""
        return quick if self.quick else full

    def throughput(
        self, run: Callable[[int], object], *, max_count: int, min_count: int = 1
    ) -> Throughput:
        """Median throughput of ``run(count)`` with this run's repetitions and duration."""
        return throughput(
            run,
            repetitions=self.repetitions,
            target_seconds=self.seconds,
            max_count=max(max_count, min_count),
            min_count=min_count,
            clock=self.clock,
        )

    def throughputs(self, workloads: Mapping[K, Workload]) -> dict[K, Throughput]:
        """Median throughputs of several workloads measured interleaved, for fair ratios."""
        return interleaved_throughputs(
            workloads,
            repetitions=self.repetitions,
            target_seconds=self.seconds,
            clock=self.clock,
        )

    @property
    def clock_ns(self) -> Callable[[], int]:
        """The clock function (nanoseconds) of this run."""
        return CLOCKS[self.clock]
