"""Counting combine calls: the machine-independent cost of an aggregator operation.

The papers state costs in combines (e.g. FiBA in order: amortized O(1); the classic B-tree:
O(log n)); counting them separates the algorithm's work from CPython's per-call overhead.
"""

from __future__ import annotations

from typing import Any

from stores.monoids import make_monoid


class CombineCounter:
    """A monoid that behaves like ``inner`` and counts its ``combine`` calls in ``count``."""

    def __init__(self, inner: Any) -> None:
        self.count = 0
        inner_combine = inner.combine

        def combine(a: Any, b: Any) -> Any:
            self.count += 1
            return inner_combine(a, b)

        self.monoid = make_monoid(
            inner.identity, inner.lift, combine, inner.lower, name=f"counting {inner!r}"
        )
