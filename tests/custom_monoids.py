"""Custom monoids of a user's module, named in the ``aggregations`` setting by import path
(``tests.custom_monoids:SPAN``) in the tests of ``stores.aggregations`` and the worker.

``SPAN`` is a well-formed, non-commutative monoid whose partial is an object (``Span``) stored
through ``to_state``/``from_state`` and whose lowered value is a JSON object; the others each
break one law or rule that ``stores.aggregations.check_monoid`` must catch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Span:
    """The oldest and youngest input of a window and their number (``None``: empty)."""

    first: Any
    last: Any
    n: int


class SpanMonoid:
    """``{"first": oldest, "last": youngest, "n": count}`` of a window (``None`` if empty)."""

    identity = None

    def lift(self, x: Any) -> Span:
        return Span(x, x, 1)

    def combine(self, a: Span | None, b: Span | None) -> Span | None:
        if a is None:
            return b
        if b is None:
            return a
        return Span(a.first, b.last, a.n + b.n)

    def lower(self, a: Span | None) -> dict[str, Any] | None:
        return None if a is None else {"first": a.first, "last": a.last, "n": a.n}

    def to_state(self, a: Span | None) -> list[Any] | None:
        return None if a is None else [a.first, a.last, a.n]

    def from_state(self, state: list[Any] | None) -> Span | None:
        return None if state is None else Span(*state)


SPAN = SpanMonoid()


class _Midpoint(SpanMonoid):
    """The midpoint of two partials, ``None`` neutral: a right identity, but
    ``mid(mid(a, b), c) != mid(a, mid(b, c))``."""

    def lift(self, x: Any) -> Any:
        return x

    def combine(self, a: Any, b: Any) -> Any:
        return b if a is None else a if b is None else (a + b) / 2

    def lower(self, a: Any) -> Any:
        return a


NOT_ASSOCIATIVE = _Midpoint()


class _LeftOnly(_Midpoint):
    """``combine(a, b) = a`` with identity ``0``: associative, but ``0`` is not neutral."""

    identity = 0

    def combine(self, a: Any, b: Any) -> Any:
        return a


WRONG_IDENTITY = _LeftOnly()


class _NoState(SpanMonoid):
    """``SPAN`` without the state round trip: its object partials cannot be stored."""

    to_state = None
    from_state = None


NO_STATE = _NoState()


class _Opaque(SpanMonoid):
    """Lowered values that are objects without a JSON form."""

    def lower(self, a: Span | None) -> Any:
        return a


OPAQUE = _Opaque()

NOT_A_MONOID = 42
