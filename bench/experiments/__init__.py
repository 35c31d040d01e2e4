"""The experiments of the suite, by name, in the order ``all`` runs them."""

from __future__ import annotations

from collections.abc import Callable

from bench.config import BenchConfig
from bench.experiments import bulk, fifo, latency, ooo, realistic, rounds, sharing
from bench.report import ExperimentResult

EXPERIMENTS: dict[str, Callable[[BenchConfig], ExperimentResult]] = {
    "rounds": rounds.run,
    "fifo": fifo.run,
    "ooo": ooo.run,
    "latency": latency.run,
    "bulk": bulk.run,
    "sharing": sharing.run,
    "realistic": realistic.run,
}
