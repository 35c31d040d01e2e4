"""A reusable hypothesis state machine: any sliding-window aggregator against ``OracleWindow``.

``window_machine(make, monoid)`` builds a ``RuleBasedStateMachine`` that drives an aggregator
and ``tests.oracle.OracleWindow`` side by side with random mixes of operations, and after every
step compares every observable (``len``, iteration, ``oldest``, ``youngest``, ``query``) and
calls ``check_invariants()``. The ADT an aggregator must offer, the options and a runnable
example: docs/testing.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tests.oracle import OracleWindow

__all__ = ["window_machine"]


def window_machine(
    make_aggregator: Callable[[Any], Any],
    monoid: Any,
    *,
    out_of_order: bool = True,
    range_query: bool = True,
    check_invariants: bool = True,
    values: st.SearchStrategy[Any] | None = None,
    time_span: int = 400,
) -> type[RuleBasedStateMachine]:
    """A state machine class checking ``make_aggregator(monoid)`` against the oracle."""
    inputs = st.integers(-50, 50) if values is None else values
    times = st.integers(-10, time_span + 10)
    picks = st.integers(0, 1 << 30)  # an index into the current keys, taken modulo their count
    gaps = st.integers(0, 3)

    class WindowMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.window = make_aggregator(monoid)
            self.oracle = OracleWindow(monoid)

        def _key(self, pick: int) -> Any:
            keys = self.oracle.entries.keys()
            return keys[pick % len(keys)]

        def _nonempty(self) -> bool:
            return len(self.oracle) > 0

        # --- in order (every aggregator) ----------------------------------------------------

        @rule(gap=gaps, x=inputs)
        def insert_youngest(self, gap: int, x: Any) -> None:
            youngest = self.oracle.youngest()
            t = gap if youngest is None else youngest + gap
            self.window.insert(t, x)
            self.oracle.insert(t, x)

        @rule()
        def evict_oldest(self) -> None:
            oldest = self.oracle.oldest()
            if oldest is None:
                return
            assert self.window.evict(oldest) is True
            self.oracle.evict(oldest)

        @rule(t=times)
        def bulk_evict(self, t: int) -> None:
            assert self.window.bulk_evict(t) == self.oracle.bulk_evict(t)

        @precondition(_nonempty)
        @rule(pick=picks, shift=st.integers(-1, 1))
        def bulk_evict_near_key(self, pick: int, shift: int) -> None:
            t = self._key(pick) + shift
            assert self.window.bulk_evict(t) == self.oracle.bulk_evict(t)

        @rule(steps=st.lists(st.tuples(gaps, inputs), max_size=40))
        def bulk_insert_young(self, steps: list[tuple[int, Any]]) -> None:
            youngest = self.oracle.youngest()
            t = 0 if youngest is None else youngest
            pairs = []
            for gap, x in steps:
                t += gap
                pairs.append((t, x))
            self.window.bulk_insert(pairs)
            self.oracle.bulk_insert(pairs)

        @rule()
        def query(self) -> None:
            assert self.window.query() == self.oracle.query()

        # --- out of order ---------------------------------------------------------------------

        if out_of_order:

            @rule(t=times, x=inputs)
            def insert_anywhere(self, t: int, x: Any) -> None:
                self.window.insert(t, x)
                self.oracle.insert(t, x)

            @precondition(_nonempty)
            @rule(pick=picks, x=inputs)
            def insert_existing(self, pick: int, x: Any) -> None:
                t = self._key(pick)
                self.window.insert(t, x)
                self.oracle.insert(t, x)

            @precondition(_nonempty)
            @rule(pick=picks)
            def evict_existing(self, pick: int) -> None:
                t = self._key(pick)
                assert self.window.evict(t) is True
                self.oracle.evict(t)

            @rule(t=times)
            def evict_anywhere(self, t: int) -> None:
                assert self.window.evict(t) == self.oracle.evict(t)

            @rule(pairs=st.lists(st.tuples(times, inputs), max_size=40))
            def bulk_insert_anywhere(self, pairs: list[tuple[int, Any]]) -> None:
                pairs.sort(key=lambda pair: pair[0])
                self.window.bulk_insert(pairs)
                self.oracle.bulk_insert(pairs)

            @precondition(_nonempty)
            @rule(picks_=st.lists(st.tuples(picks, st.integers(-2, 2), inputs), max_size=20))
            def bulk_insert_near_keys(self, picks_: list[tuple[int, int, Any]]) -> None:
                pairs = sorted(
                    ((self._key(pick) + shift, x) for pick, shift, x in picks_),
                    key=lambda pair: pair[0],
                )
                self.window.bulk_insert(pairs)
                self.oracle.bulk_insert(pairs)

        # --- range queries --------------------------------------------------------------------

        if range_query:

            @rule(t_from=times, t_to=times)
            def query_range(self, t_from: int, t_to: int) -> None:
                expected = self.oracle.query_range(t_from, t_to)
                assert self.window.query_range(t_from, t_to) == expected

            @precondition(_nonempty)
            @rule(first=picks, last=picks, shift=st.integers(-1, 1))
            def query_range_keys(self, first: int, last: int, shift: int) -> None:
                t_from = self._key(first) + shift
                t_to = self._key(last)
                expected = self.oracle.query_range(t_from, t_to)
                assert self.window.query_range(t_from, t_to) == expected

        # --- after every step -----------------------------------------------------------------

        @invariant()
        def same_window(self) -> None:
            if check_invariants:
                self.window.check_invariants()
            assert len(self.window) == len(self.oracle)
            assert list(self.window) == list(self.oracle)
            assert self.window.oldest() == self.oracle.oldest()
            assert self.window.youngest() == self.oracle.youngest()
            assert self.window.query() == self.oracle.query()

    WindowMachine.__name__ = WindowMachine.__qualname__ = (
        f"WindowMachine_{getattr(monoid, 'name', type(monoid).__name__)}"
    )
    return WindowMachine
