"""Counting combine calls: the machine-independent cost of an aggregator operation.

The papers state costs in combines (e.g. FiBA in order: amortized O(1); the classic B-tree:
O(log n)); counting them separates the algorithm's work from CPython's per-call overhead. The
benchmarks and the complexity tests share this one wrapper.

``CountingMonoid(inner)`` behaves exactly like ``inner`` and adds one to ``combines`` per
``combine`` call. Aggregators that bind ``monoid.combine`` once at construction still count,
since the bound method is the counting one. Reset with ``counting.combines = 0`` or measure a
difference.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CountingMonoid"]


class CountingMonoid:
    """``inner`` with a ``combines`` counter of the calls to ``combine``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.identity = inner.identity
        self.name = f"counting {getattr(inner, 'name', type(inner).__name__)}"
        self.combines = 0

    def lift(self, x: Any) -> Any:
        return self.inner.lift(x)

    def combine(self, a: Any, b: Any) -> Any:
        self.combines += 1
        return self.inner.combine(a, b)

    def lower(self, a: Any) -> Any:
        return self.inner.lower(a)
