"""ReCalc, TwoStacks, TwoStacksLite and DABA against the brute-force oracle, and their costs.

Correctness: the shared state machine of ``tests.window_machine`` drives each aggregator beside
``tests.oracle.OracleWindow`` with a non-commutative monoid (collect, first and last composed
with max), checking every observable and ``check_invariants()`` after every step. The FIFO ones
get in-order inserts (collisions at the youngest time included), oldest-first evictions and bulk
operations, plus (rules added here) the requests FIFO forbids, which must fail with ValueError
and leave the window unchanged; ReCalc gets any order and range queries.

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

from bench.counting import CountingMonoid
from stores.baselines import DABA, ReCalc, TwoStacks, TwoStacksLite
from stores.monoids import compose, monoid
from tests.window_machine import window_machine

# non-commutative (collect, first, last) and non-invertible (max) at once
WINDOW_MONOID = compose(
    {
        "collect": monoid("collect"),
        "first": monoid("first"),
        "last": monoid("last"),
        "max": monoid("max"),
    }
)

PICKS = st.integers(0, 1 << 30)  # an index into the current keys, taken modulo their count


def machine(factory: Callable[[Any], Any], *, fifo: bool) -> type[RuleBasedStateMachine]:
    """``tests.window_machine`` for ``factory`` (FIFO or any order), plus rules for what it does
    not cover: lookups, the raw ``aggregate()``, and the requests a FIFO aggregator refuses
    (ValueError, window unchanged)."""
    base = window_machine(factory, WINDOW_MONOID, out_of_order=not fifo, range_query=not fifo)

    class Machine(base):
        def _snapshot(self) -> tuple:
            return (self.window.query(), len(self.window), self.window.oldest())

        @rule(t=st.integers(-10, 410))
        def lookup(self, t: int) -> None:
            assert (t in self.window) == (t in self.oracle)
            if hasattr(self.window, "get"):
                assert self.window.get(t) == self.oracle.get(t)
            assert WINDOW_MONOID.lower(self.window.aggregate()) == self.oracle.query()

        if fifo:

            @precondition(lambda self: len(self.oracle) > 0)
            @rule(back=st.integers(min_value=1, max_value=5))
            def older_insert_is_refused(self, back: int) -> None:
                before = self._snapshot()
                youngest = self.oracle.youngest()
                with pytest.raises(ValueError, match="out-of-order"):
                    self.window.insert(youngest - back, 0)
                with pytest.raises(ValueError, match="sorted by time"):
                    self.window.bulk_insert([(youngest + 1, 0), (youngest - back, 0)])
                assert self._snapshot() == before

            @precondition(lambda self: len(self.oracle) > 1)
            @rule(pick=PICKS)
            def evict_not_oldest_is_refused(self, pick: int) -> None:
                keys = self.oracle.entries.keys()
                before = self._snapshot()
                with pytest.raises(ValueError, match="FIFO"):
                    self.window.evict(keys[1 + pick % (len(keys) - 1)])
                assert self._snapshot() == before

            @rule(t=st.integers(-10, 410))
            def evict_absent_is_false(self, t: int) -> None:
                if t not in self.oracle:
                    assert self.window.evict(t) is False

    return Machine


class LiteMachine(machine(TwoStacksLite, fifo=True)):
    """TwoStacksLite keeps no per-entry partials (no iteration): every other observable."""

    @invariant()
    def same_window(self) -> None:
        self.window.check_invariants()
        assert len(self.window) == len(self.oracle)
        assert self.window.oldest() == self.oracle.oldest()
        assert self.window.youngest() == self.oracle.youngest()
        assert self.window.query() == self.oracle.query()


MACHINES: dict[str, type[RuleBasedStateMachine]] = {
    "TwoStacks": machine(TwoStacks, fifo=True),
    "TwoStacksLite": LiteMachine,
    "DABA": machine(DABA, fifo=True),
    "ReCalc": machine(ReCalc, fifo=False),
}

MACHINE_SETTINGS = settings(
    max_examples=max(10, settings.default.max_examples // 3), stateful_step_count=40
)


@pytest.mark.parametrize("name", list(MACHINES))
def test_matches_oracle(name: str) -> None:
    run_state_machine_as_test(MACHINES[name], settings=MACHINE_SETTINGS)


def test_two_stacks_lite_keeps_one_partial_per_entry() -> None:
    lite = TwoStacksLite(monoid("sum"))
    assert not hasattr(lite, "get") and not hasattr(lite, "__iter__")


# --- complexity: combines per operation ---------------------------------------------------------


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
    daba_small, _ = combine_profile(DABA, small, rounds=2 * small)
    daba_large, _ = combine_profile(DABA, large, rounds=2 * large)
    assert daba_small == daba_large <= 3
    for factory in (TwoStacks, TwoStacksLite):
        two_stacks_small, _ = combine_profile(factory, small, rounds=2 * small)
        two_stacks_large, _ = combine_profile(factory, large, rounds=2 * large)
        assert two_stacks_small >= small // 2  # one evict flips the whole window
        assert two_stacks_large >= large // 2
