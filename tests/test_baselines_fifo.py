"""ReCalc, TwoStacks, TwoStacksLite and DABA against the brute-force oracle, and their costs.

Correctness: hypothesis state machines drive each aggregator beside ``tests.oracle.OracleWindow``
with a non-commutative monoid (collect, first and last composed with max), checking every
observable and ``check_invariants()`` after every step. The FIFO ones get in-order inserts
(collisions at the youngest time included), oldest-first evictions, bulk operations, and the
requests FIFO forbids, which must fail with ValueError and leave the window unchanged; ReCalc
gets any order and range queries.

Complexity (combine calls counted, never wall-clock): the largest number of combines any single
DABA operation makes is a small constant, the same for n = 2^6 and n = 2^14, while Two-Stacks'
largest grows with n (its flip); on average both are O(1).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from stores.baselines import DABA, ReCalc, TwoStacks, TwoStacksLite
from stores.monoids import compose, monoid
from tests.oracle import OracleWindow

# non-commutative (collect, first, last) and non-invertible (max) at once
WINDOW_MONOID = compose(
    {
        "collect": monoid("collect"),
        "first": monoid("first"),
        "last": monoid("last"),
        "max": monoid("max"),
    }
)

FIFO_FACTORIES: dict[str, Callable[[Any], Any]] = {
    "TwoStacks": TwoStacks,
    "TwoStacksLite": TwoStacksLite,
    "DABA": DABA,
}

TIMES = st.integers(min_value=0, max_value=200)
STEPS = st.integers(min_value=0, max_value=3)
VALUES = st.integers(min_value=-50, max_value=50)


def window_machine(
    factory: Callable[[Any], Any], monoid_: Any, out_of_order: bool
) -> type[RuleBasedStateMachine]:
    """A state machine running ``factory(monoid_)`` beside the oracle.

    With ``out_of_order=False`` inserts go at or after the youngest time (``STEPS`` ahead, 0 being
    a collision), evictions at the oldest, and the out-of-order requests must be refused.
    """

    class WindowMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.window = factory(monoid_)
            self.oracle = OracleWindow(monoid_)
            self.has_entries = hasattr(self.window, "__iter__")

        def _young_end(self, step: int) -> int:
            youngest = self.oracle.youngest()
            return step if youngest is None else youngest + step

        def _snapshot(self) -> tuple:
            return (self.window.query(), len(self.window), self.window.oldest())

        @rule(t=TIMES, step=STEPS, x=VALUES)
        def insert(self, t: int, step: int, x: int) -> None:
            t = t if out_of_order else self._young_end(step)
            self.window.insert(t, x)
            self.oracle.insert(t, x)

        @rule(t=TIMES, steps=st.lists(STEPS, max_size=30), xs=st.lists(VALUES, max_size=30))
        def bulk_insert(self, t: int, steps: list[int], xs: list[int]) -> None:
            time = t if out_of_order else self._young_end(0)
            pairs = []
            for step, x in zip(steps, xs, strict=False):
                time += step
                pairs.append((time, x))
            self.window.bulk_insert(pairs)
            self.oracle.bulk_insert(pairs)

        @rule(t=TIMES)
        def evict(self, t: int) -> None:
            if not out_of_order and t in self.oracle and t != self.oracle.oldest():
                return  # refused: see evict_not_oldest_is_refused
            assert self.window.evict(t) == self.oracle.evict(t)

        @precondition(lambda self: len(self.oracle) > 0)
        @rule()
        def evict_oldest(self) -> None:
            assert self.window.evict(self.oracle.oldest()) is True
            self.oracle.evict(self.oracle.oldest())

        @rule(t=TIMES)
        def bulk_evict(self, t: int) -> None:
            assert self.window.bulk_evict(t) == self.oracle.bulk_evict(t)

        @precondition(lambda self: not out_of_order and len(self.oracle) > 0)
        @rule(back=st.integers(min_value=1, max_value=5), x=VALUES)
        def older_insert_is_refused(self, back: int, x: int) -> None:
            before = self._snapshot()
            with pytest.raises(ValueError, match="out-of-order"):
                self.window.insert(self.oracle.youngest() - back, x)
            with pytest.raises(ValueError, match="sorted by time"):
                self.window.bulk_insert([(self.oracle.youngest() + 1, x), (0, x)])
            assert self._snapshot() == before

        @precondition(lambda self: not out_of_order and len(self.oracle) > 1)
        @rule(data=st.data())
        def evict_not_oldest_is_refused(self, data: st.DataObject) -> None:
            t = data.draw(st.sampled_from(list(self.oracle.entries.keys())[1:]))
            before = self._snapshot()
            with pytest.raises(ValueError, match="FIFO"):
                self.window.evict(t)
            assert self._snapshot() == before

        @precondition(lambda self: out_of_order)
        @rule(t_from=TIMES, t_to=TIMES)
        def query_range(self, t_from: int, t_to: int) -> None:
            assert self.window.query_range(t_from, t_to) == self.oracle.query_range(t_from, t_to)

        @rule(t=TIMES)
        def lookup(self, t: int) -> None:
            assert (t in self.window) == (t in self.oracle)
            if self.has_entries:
                assert self.window.get(t) == self.oracle.get(t)

        @invariant()
        def agrees_with_oracle(self) -> None:
            window, oracle = self.window, self.oracle
            assert window.query() == oracle.query()
            assert len(window) == len(oracle)
            assert window.oldest() == oracle.oldest()
            assert window.youngest() == oracle.youngest()
            if self.has_entries:
                assert list(window) == list(oracle)
            window.check_invariants()

    return WindowMachine


MACHINE_SETTINGS = settings(
    max_examples=max(10, settings.default.max_examples // 2), stateful_step_count=40
)


@pytest.mark.parametrize("name", list(FIFO_FACTORIES))
def test_fifo_aggregator_matches_oracle(name: str) -> None:
    machine = window_machine(FIFO_FACTORIES[name], WINDOW_MONOID, out_of_order=False)
    run_state_machine_as_test(machine, settings=MACHINE_SETTINGS)


def test_recalc_matches_oracle_in_any_order() -> None:
    machine = window_machine(ReCalc, WINDOW_MONOID, out_of_order=True)
    run_state_machine_as_test(machine, settings=MACHINE_SETTINGS)


def test_two_stacks_lite_keeps_one_partial_per_entry() -> None:
    lite = TwoStacksLite(monoid("sum"))
    assert not hasattr(lite, "get") and not hasattr(lite, "__iter__")


# --- complexity: combines per operation ---------------------------------------------------------


class CountingMonoid:
    """Wraps a monoid and counts ``combine`` calls in ``combines``."""

    __slots__ = ("combines", "identity", "inner")

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.identity = inner.identity
        self.combines = 0

    def lift(self, x: Any) -> Any:
        return self.inner.lift(x)

    def combine(self, a: Any, b: Any) -> Any:
        self.combines += 1
        return self.inner.combine(a, b)

    def lower(self, a: Any) -> Any:
        return self.inner.lower(a)


def combine_profile(factory: Callable[[Any], Any], n: int, rounds: int) -> tuple[int, float]:
    """Fill a window to ``n`` entries, then slide it ``rounds`` times (insert, query, evict,
    query); return the most combines of any single operation and the mean per operation."""
    counting = CountingMonoid(monoid("sum"))
    window = factory(counting)
    worst = 0
    operations = 0

    def measure(operation: Callable[[], Any]) -> None:
        nonlocal worst, operations
        before = counting.combines
        operation()
        worst = max(worst, counting.combines - before)
        operations += 1

    for t in range(n):
        measure(lambda t=t: window.insert(t, t))
        measure(lambda t=t: window.insert(t, 1))  # collision
    for t in range(n, n + rounds):
        measure(lambda t=t: window.insert(t, t))
        measure(window.query)
        measure(lambda t=t: window.evict(t - n))
        measure(window.query)
    assert len(window) == n
    return worst, counting.combines / operations


@pytest.mark.parametrize("factory", [DABA, TwoStacks, TwoStacksLite], ids=lambda f: f.__name__)
def test_average_combines_per_operation_is_constant(factory: Callable[[Any], Any]) -> None:
    for n in (2**6, 2**12):
        _, mean = combine_profile(factory, n, rounds=3 * n)
        assert mean <= 2.0


def test_daba_worst_case_is_constant_while_two_stacks_grows_with_n() -> None:
    small, large = 2**6, 2**14
    daba_small, _ = combine_profile(DABA, small, rounds=3 * small)
    daba_large, _ = combine_profile(DABA, large, rounds=3 * large)
    assert daba_small == daba_large <= 3
    for factory in (TwoStacks, TwoStacksLite):
        two_stacks_small, _ = combine_profile(factory, small, rounds=3 * small)
        two_stacks_large, _ = combine_profile(factory, large, rounds=3 * large)
        assert two_stacks_small >= small // 2  # one evict flips the whole window
        assert two_stacks_large >= large // 2
