"""DABA, the De-Amortized Banker's Aggregator: FIFO sliding-window aggregation in worst-case O(1)
combines per operation (*Low-Latency Sliding-Window Aggregation in Worst-Case Constant Time*).

The window is one queue of ``(value, aggregate)`` slots cut into five lists by six positions;
each operation does a bounded step of the flip that Two-Stacks does at once, so no single
evict costs O(n). In order only (a FIFO aggregator, see ``stores.baselines.fifo``). The lists,
their invariants and the step: docs/design/fiba.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from stores.baselines.fifo import FifoEntries, prefix_aggregates, suffix_aggregates

__all__ = ["DABA"]

_SHIFT = 9
_CHUNK = 1 << _SHIFT
_MASK = _CHUNK - 1


class DABA(FifoEntries):
    """De-Amortized Banker's Aggregator (see the module docstring): FIFO, O(1) worst case.

    Slot ``p`` lives in chunk ``_chunks[p >> 9]``, a triple of lists (times, values, aggregates)
    at index ``p & 511``; ``_f``, ``_l``, ``_r``, ``_a``, ``_b``, ``_e`` are the positions F, L,
    R, A, B, E; ``_ra`` is ``Σ_R ⊕ Σ_A`` as of the last flip.
    """

    __slots__ = ("_a", "_b", "_chunks", "_e", "_f", "_l", "_r", "_ra")

    def __init__(self, monoid: Any) -> None:
        super().__init__(monoid)
        self._chunks: dict[int, tuple[list[Any], list[Any], list[Any]]] = {}
        self._f = self._l = self._r = self._a = self._b = self._e = 0
        self._ra = self._identity

    # --- slots --------------------------------------------------------------------------------

    def _time(self, p: int) -> Any:
        return self._chunks[p >> _SHIFT][0][p & _MASK]

    def _value(self, p: int) -> Any:
        return self._chunks[p >> _SHIFT][1][p & _MASK]

    def _agg(self, p: int) -> Any:
        return self._chunks[p >> _SHIFT][2][p & _MASK]

    # --- the algorithm ------------------------------------------------------------------------

    def _push(self, t: Any, partial: Any) -> None:
        E = self._e
        chunks = self._chunks
        chunk = chunks.get(E >> _SHIFT)
        if chunk is None:
            chunk = chunks[E >> _SHIFT] = ([None] * _CHUNK, [None] * _CHUNK, [None] * _CHUNK)
        i = E & _MASK
        chunk[0][i] = t
        chunk[1][i] = partial
        if self._b == E:  # the back was empty
            chunk[2][i] = partial
        else:  # agg = Σ_B ⊕ v
            last = E - 1
            chunk[2][i] = self._combine(chunks[last >> _SHIFT][2][last & _MASK], partial)
        self._e = E + 1
        self._fixup()

    def _pop(self) -> None:
        F = self._f
        i = F & _MASK
        if i == _MASK:
            del self._chunks[F >> _SHIFT]
        else:
            chunk = self._chunks[F >> _SHIFT]
            chunk[0][i] = chunk[1][i] = chunk[2][i] = None  # release the partials now
        self._f = F + 1
        self._fixup()

    def _fixup(self) -> None:
        """One step of the de-amortized flip: flip if due, then shrink or shift. <= 2 combines."""
        chunks = self._chunks
        L = self._l
        B = self._b
        if L == B:  # flip
            E = self._e
            if E == B:
                self._ra = self._identity
            else:
                last = E - 1
                self._ra = chunks[last >> _SHIFT][2][last & _MASK]
            L = self._l = self._f
            self._r = B
            B = self._a = self._b = E
        if self._f == B:
            return
        R = self._r
        A = self._a
        if A != R:  # A moves left: agg[A-1] <- v[A-1] ⊕ Σ_A
            old = A
            A -= 1
            chunk = chunks[A >> _SHIFT]
            value = chunk[1][A & _MASK]
            if old == B:
                chunk[2][A & _MASK] = value
            else:
                chunk[2][A & _MASK] = self._combine(value, chunks[old >> _SHIFT][2][old & _MASK])
            self._a = A
        if L != R:  # shrink: agg[L] <- Σ_L ⊕ Σ_R ⊕ Σ_A; L joins l_F
            aggs = chunks[L >> _SHIFT][2]
            i = L & _MASK
            aggs[i] = self._combine(aggs[i], self._ra)
            self._l = L + 1
        else:  # shift: l_L and l_R are empty, the first slot of l_A joins l_F as it is
            self._l = L + 1
            self._r = R + 1
            self._a = A + 1

    def _aggregate(self) -> Any:
        F, B, E = self._f, self._b, self._e
        chunks = self._chunks
        if F == B:
            if B == E:
                return self._identity
            last = E - 1
            return chunks[last >> _SHIFT][2][last & _MASK]
        front = chunks[F >> _SHIFT][2][F & _MASK]
        if B == E:
            return front
        last = E - 1
        return self._combine(front, chunks[last >> _SHIFT][2][last & _MASK])

    # --- bookkeeping --------------------------------------------------------------------------

    def _size(self) -> int:
        return self._e - self._f

    def _oldest_time(self) -> Any:
        return self._time(self._f)

    def _times(self) -> Iterator[Any]:
        for p in range(self._f, self._e):
            yield self._time(p)

    def _items(self) -> Iterator[tuple[Any, Any]]:
        for p in range(self._f, self._e):
            yield self._time(p), self._value(p)

    def _position(self, t: Any) -> int:
        """Slot holding time ``t``, or -1: binary search over ``[F, E)``. O(log n)."""
        lo, hi = self._f, self._e
        while lo < hi:
            mid = (lo + hi) >> 1
            if self._time(mid) < t:
                lo = mid + 1
            else:
                hi = mid
        return lo if lo < self._e and self._time(lo) == t else -1

    def _holds(self, t: Any) -> bool:
        return self._position(t) >= 0

    def _lookup(self, t: Any) -> Any:
        p = self._position(t)
        return self._value(p) if p >= 0 else None

    def _check_structure(self) -> None:
        F, L, R, A, B, E = self._f, self._l, self._r, self._a, self._b, self._e
        _require(F <= L <= R <= A <= B <= E, f"positions out of order: {(F, L, R, A, B, E)}")
        needed = set(range(F >> _SHIFT, ((E - 1) >> _SHIFT) + 1)) if E > F else set()
        _require(needed <= self._chunks.keys(), "a slot's chunk is missing")
        combine = self._combine
        values = [self._value(p) for p in range(F, E)]
        front_suffixes = suffix_aggregates(values[: B - F], combine)  # v[p] ⊕ ... ⊕ v[B-1]
        regions = (
            ("l_F", F, L, front_suffixes[: L - F]),
            ("l_L", L, R, suffix_aggregates(values[L - F : R - F], combine)),
            ("l_R", R, A, prefix_aggregates(values[R - F : A - F], combine)),
            ("l_A", A, B, front_suffixes[A - F :]),
            ("l_B", B, E, prefix_aggregates(values[B - F :], combine)),
        )
        for name, start, stop, expected in regions:
            stored = [self._agg(p) for p in range(start, stop)]
            _require(stored == expected, f"aggregation invariant of {name}")
        if E > F:
            _require(R - L == A - R, "size invariant: |l_L| != |l_R|")
            _require(
                (R - L) + (A - R) + (B - A) + 1 == (B - F) - (E - B),
                "size invariant: |l_L| + |l_R| + |l_A| + 1 != |front| - |back|",
            )


def _require(condition: bool, invariant: str) -> None:
    if not condition:
        raise AssertionError(f"DABA: {invariant}")
