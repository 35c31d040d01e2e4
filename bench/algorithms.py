"""The aggregators the suite measures, and what each of them can do.

All of them share one interface (``insert(t, x)``, ``evict(t)``, ``bulk_evict(t)``,
``bulk_insert(pairs)``, ``query()``, ``query_range(t_from, t_to)``, ``__len__``, ``oldest()``,
``youngest()``), but not the same contract: the FIFO baselines accept only in-order inserts and
evictions of the oldest entry, FlatFAT only in-order inserts. Experiments ask
:attr:`Algorithm.out_of_order` before running an algorithm out of order and print
:func:`exclusion_reason` when it is left out, so an algorithm is never silently measured on
a workload it would answer wrongly.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Algorithm:
    """A named aggregator configuration and its capabilities."""

    name: str
    module: str
    cls: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    out_of_order: bool = True  # inserts anywhere, not only at the young end
    amortized_over_window: bool = False  # O(n) steps every n evictions (Two-Stacks flips)
    label: str = ""
    complexity: str = ""  # per-operation cost, as the literature states it

    def rounds_per_repetition(self, n: int) -> int:
        """The fewest rounds a throughput repetition on an ``n``-entry window must cover.

        Two-Stacks pays an O(n) flip once every n evictions: a repetition shorter than n rounds
        may miss it and overstate the amortized throughput, so it covers n rounds.
        """
        return n if self.amortized_over_window else 1

    def make(self, monoid: Any) -> Any:
        """A new, empty aggregator of this kind over ``monoid``."""
        factory = getattr(importlib.import_module(self.module), self.cls)
        return factory(monoid, **self.kwargs)

    @property
    def display(self) -> str:
        return self.label or self.name


def _fiba(min_arity: int) -> Algorithm:
    return Algorithm(
        f"fiba{min_arity}",
        "stores.fiba",
        "FiBA",
        {"min_arity": min_arity},
        label=f"FiBA (min_arity {min_arity})",
        complexity="amortized O(log d)",
    )


ALGORITHMS: dict[str, Algorithm] = {
    a.name: a
    for a in [
        _fiba(2),
        _fiba(4),
        _fiba(8),
        Algorithm(
            "classic_btree4",
            "stores.baselines.classic_btree",
            "ClassicBTree",
            {"min_arity": 4},
            label="ClassicBTree (min_arity 4)",
            complexity="O(log n)",
        ),
        Algorithm(
            "two_stacks",
            "stores.baselines.two_stacks",
            "TwoStacks",
            out_of_order=False,
            amortized_over_window=True,
            label="TwoStacks",
            complexity="amortized O(1), FIFO only",
        ),
        Algorithm(
            "two_stacks_lite",
            "stores.baselines.two_stacks",
            "TwoStacksLite",
            out_of_order=False,
            amortized_over_window=True,
            label="TwoStacksLite",
            complexity="amortized O(1), FIFO only",
        ),
        Algorithm(
            "daba",
            "stores.baselines.daba",
            "DABA",
            out_of_order=False,
            label="DABA",
            complexity="worst-case O(1), FIFO only",
        ),
        Algorithm(
            "flatfat",
            "stores.baselines.flatfat",
            "FlatFAT",
            out_of_order=False,
            label="FlatFAT",
            complexity="O(log n), in-order insert",
        ),
        Algorithm(
            "recalc",
            "stores.baselines.recalc",
            "ReCalc",
            label="ReCalc",
            complexity="O(n) per query",
        ),
    ]
}


def algorithm(name: str) -> Algorithm:
    """The registered algorithm called ``name`` (KeyError lists the known names)."""
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise KeyError(f"unknown algorithm {name!r}; known: {', '.join(ALGORITHMS)}") from None


def exclusion_reason(algo: Algorithm) -> str:
    """Why ``algo`` is left out of an out-of-order experiment."""
    return (
        f"{algo.display} excluded from out-of-order runs: it accepts only in-order inserts "
        f"({algo.complexity})"
    )


def load_monoid(name: str) -> Any:
    """The aggregation monoid called ``name`` from ``stores.monoids``."""
    return importlib.import_module("stores.monoids").monoid(name)
