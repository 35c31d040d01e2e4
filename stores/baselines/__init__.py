"""Baseline sliding-window aggregators that FiBA is tested and benchmarked against.

All share FiBA's window interface (``insert(t, x)``, ``evict(t)``, ``bulk_evict(t)``,
``bulk_insert(pairs)``, ``query()``, ``aggregate()`` (un-lowered), ``__len__``,
``__contains__``, ``oldest()``, ``youngest()``, ``check_invariants()``, and, where the algorithm
keeps entries' partials, ``get`` and ``__iter__``; ``query_range`` where it is natural):

* :class:`ReCalc` — recalculate from scratch on every query; any order; O(n) query.
* :class:`TwoStacks`, :class:`TwoStacksLite` — FIFO only; amortized O(1), O(n) flips.
* :class:`DABA` — FIFO only; worst-case O(1) (de-amortized banker's aggregator).
* :class:`FlatFAT` — flat fixed-size aggregator tree (Reactive Aggregator), in-order inserts.
* :class:`ClassicBTree` — aggregate-augmented B-tree; any order; O(log n).
"""

from stores.baselines.classic_btree import ClassicBTree
from stores.baselines.daba import DABA
from stores.baselines.flatfat import FlatFAT
from stores.baselines.recalc import ReCalc
from stores.baselines.two_stacks import TwoStacks, TwoStacksLite

__all__ = ["DABA", "ClassicBTree", "FlatFAT", "ReCalc", "TwoStacks", "TwoStacksLite"]
