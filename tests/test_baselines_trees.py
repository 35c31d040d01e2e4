"""FlatFAT and ClassicBTree against the brute-force oracle, and their cost by counting combines.

Correctness: the shared state machine of ``tests.window_machine`` drives each structure beside
``tests.oracle.OracleWindow`` with a monoid that is non-commutative (collect, first, last) and
non-invertible (max) at once, checking every observable and ``check_invariants()`` after every
step; ClassicBTree for every min_arity in 2..8, in any order. FlatFAT accepts only in-order
inserts but evicts anywhere: its machine adds evictions of any present or absent time and checks
that older inserts are refused with the window untouched. Long seeded random walks with an
order-sensitive constant-size monoid reach deep trees and many resizes.

Complexity (combine calls counted, never wall-clock): ClassicBTree's in-order round cost grows
with log n (what FiBA removes); FlatFAT's batched update of m leaves stays within Theorem 4.2's
``m (1 + ceil(log2(n/m)))`` and far below m single updates; resizing costs amortized O(1).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule, run_state_machine_as_test

from bench.counting import CountingMonoid
from stores.baselines.classic_btree import ClassicBTree
from stores.baselines.flatfat import FlatFAT
from stores.monoids import compose, make_monoid, monoid
from tests.oracle import OracleWindow
from tests.window_machine import window_machine

pytestmark = pytest.mark.once  # pure Python on either build, no broker

# non-commutative (collect, first, last) and non-invertible (max) at once
WINDOW_MONOID = compose(
    {
        "collect": monoid("collect"),
        "first": monoid("first"),
        "last": monoid("last"),
        "max": monoid("max"),
    }
)

_P = 2**61 - 1


def _affine_then(f: tuple[int, int], g: tuple[int, int]) -> tuple[int, int]:
    """``v -> g(f(v))`` for affine maps mod a prime: associative, not commutative, O(1)."""
    return (g[0] * f[0] % _P, (g[0] * f[1] + g[1]) % _P)


# Order-sensitive like collect but with constant-size partials, for long random walks.
AFFINE = make_monoid((1, 0), lambda x: (x % 7 + 2, x % _P), _affine_then, name="affine")


# --- property tests against the oracle -------------------------------------------------------

TIMES = st.integers(-10, 410)  # the harness's time range
PICKS = st.integers(0, 1 << 30)  # an index into the current keys, taken modulo their count


def machine(factory: Callable[[Any], Any], *, in_order: bool) -> type[RuleBasedStateMachine]:
    """``tests.window_machine`` for ``factory`` plus lookups and the raw ``aggregate()``; with
    ``in_order`` (FlatFAT) the harness's in-order inserts, plus evictions anywhere and the
    refusal of older inserts (ValueError, window unchanged)."""
    base = window_machine(factory, WINDOW_MONOID, out_of_order=not in_order)

    class Machine(base):
        @rule(t=TIMES)
        def lookup(self, t: int) -> None:
            assert (t in self.window) == (t in self.oracle)
            assert self.window.get(t) == self.oracle.get(t)
            assert WINDOW_MONOID.lower(self.window.aggregate()) == self.oracle.query()

        @precondition(lambda self: len(self.oracle) > 1)
        @rule(back=st.integers(1, 5))
        def unsorted_bulk_insert_is_refused(self, back: int) -> None:
            before = list(self.window)
            youngest = self.oracle.youngest()
            with pytest.raises(ValueError, match="sorted by time"):
                self.window.bulk_insert([(youngest + back + 1, 0), (youngest + 1, 0)])
            assert list(self.window) == before

        if in_order:

            @precondition(lambda self: len(self.oracle) > 0)
            @rule(pick=PICKS)
            def evict_existing(self, pick: int) -> None:
                keys = self.oracle.entries.keys()
                t = keys[pick % len(keys)]
                assert self.window.evict(t) is True
                self.oracle.evict(t)

            @rule(t=TIMES)
            def evict_anywhere(self, t: int) -> None:
                assert self.window.evict(t) == self.oracle.evict(t)

            @precondition(lambda self: len(self.oracle) > 0)
            @rule(back=st.integers(1, 5))
            def older_insert_is_refused(self, back: int) -> None:
                before = list(self.window)
                youngest = self.oracle.youngest()
                with pytest.raises(ValueError, match="out-of-order"):
                    self.window.insert(youngest - back, 0)
                with pytest.raises(ValueError, match="out-of-order"):
                    self.window.bulk_insert([(youngest - back, 0), (youngest + 1, 0)])
                assert list(self.window) == before

    return Machine


MACHINE_SETTINGS = settings(
    max_examples=max(10, settings.default.max_examples // 3), stateful_step_count=40
)


@pytest.mark.parametrize("min_arity", range(2, 9))
def test_classic_btree_matches_oracle(min_arity: int) -> None:
    factory = machine(lambda m: ClassicBTree(m, min_arity=min_arity), in_order=False)
    run_state_machine_as_test(factory, settings=MACHINE_SETTINGS)


@pytest.mark.parametrize("capacity", [1, 8])
def test_flatfat_matches_oracle(capacity: int) -> None:
    factory = machine(lambda m: FlatFAT(m, capacity=capacity), in_order=True)
    run_state_machine_as_test(factory, settings=MACHINE_SETTINGS)


def _random_walk(
    window: Any, in_order: bool, steps: int, seed: int, oldest_bias: float = 0.0
) -> None:
    """Thousands of seeded operations beside the oracle in phases of growth, steady state and
    shrinkage, so deep trees split, borrow and merge at every level and FlatFAT wraps,
    compacts, grows and shrinks many times. With probability ``oldest_bias`` an eviction
    picks one of the 4 oldest entries (a sliding window with some out-of-order evictions)."""
    oracle = OracleWindow(AFFINE)
    rng = random.Random(seed)
    phase = steps // 8
    insert_odds = (0.75, 0.5, 0.2, 0.5)  # grow, steady, shrink, steady, and again
    for step in range(steps):
        youngest = oracle.youngest()
        young = 0 if youngest is None else youngest
        r = rng.random()
        if r < insert_odds[(step // phase) % 4]:
            t = young + rng.randrange(3) if in_order else rng.randrange(20000)
            window.insert(t, step)
            oracle.insert(t, step)
        elif r < 0.92 and len(oracle):
            keys = oracle.entries.keys()
            near_front = rng.random() < oldest_bias
            t = keys[rng.randrange(min(len(keys), 4) if near_front else len(keys))]
            assert window.evict(t) is True
            oracle.evict(t)
        elif r < 0.96:
            t = young - rng.randrange(3000) if in_order else rng.randrange(20000)
            assert window.evict(t) == oracle.evict(t)
        elif r < 0.965:
            t = oracle.oldest() if len(oracle) else 0
            t += rng.randrange(3) if in_order else rng.randrange(60)
            assert window.bulk_evict(t) == oracle.bulk_evict(t)
        else:
            a, b = sorted(young - rng.randrange(3000) for _ in range(2))
            assert window.query_range(a, b) == oracle.query_range(a, b)
        if step % 25 == 0:
            assert window.query() == oracle.query()
            assert len(window) == len(oracle)
        if step % 1000 == 0:
            window.check_invariants()
            assert list(window) == list(oracle)
    assert list(window) == list(oracle)
    window.check_invariants()


@pytest.mark.parametrize("min_arity", range(2, 9))
def test_classic_btree_long_random_walk(min_arity: int) -> None:
    _random_walk(ClassicBTree(AFFINE, min_arity=min_arity), False, 12000, min_arity)


def test_flatfat_long_random_walk() -> None:
    _random_walk(FlatFAT(AFFINE, capacity=4), True, 12000, 7, oldest_bias=0.8)


def test_flatfat_fifo_window_wraps_around_without_resizing() -> None:
    counting = CountingMonoid(monoid("collect"))
    window = FlatFAT(counting, capacity=16)
    oracle = OracleWindow(monoid("collect"))
    for t in range(16):
        window.insert(t, t)
        oracle.insert(t, t)
    counting.combines = 0
    for t in range(16, 100):
        window.evict(t - 16)
        window.insert(t, t)
        oracle.evict(t - 16)
        oracle.insert(t, t)
        assert window.query() == oracle.query()
        assert window.query_range(t - 10, t - 3) == oracle.query_range(t - 10, t - 3)
    window.check_invariants()
    assert window.capacity == 16
    # Each round repairs two leaf-to-root paths (4 levels) and folds suffix ⊕ prefix.
    assert counting.combines <= 84 * (2 * 4 + 2 * 4 + 1)


# --- complexity by counting combines -------------------------------------------------------


def _classic_round_cost(n: int, rounds: int = 256) -> float:
    """Mean combines per in-order round (evict oldest, insert youngest, query) at size n."""
    counting = CountingMonoid(monoid("max"))
    tree = ClassicBTree(counting, min_arity=4)
    tree.bulk_insert((t, t) for t in range(n))
    counting.combines = 0
    for t in range(n, n + rounds):
        tree.evict(t - n)
        tree.insert(t, t)
        tree.query()
    return counting.combines / rounds


def test_classic_btree_in_order_round_cost_grows_with_log_n() -> None:
    small, large = _classic_round_cost(2**8), _classic_round_cost(2**16)
    # log2 n doubles from 8 to 16; the classic tree repairs every level on every operation.
    assert large > 1.5 * small
    # ... and stays O(log n): at most ~2 * MAX_ARITY combines per level for each of 2 updates.
    height_bound = math.log(2**16, 4) + 1
    assert large <= 2 * (2 * 8) * height_bound


def test_flatfat_batched_update_cost() -> None:
    n, m = 2**13, 2**9
    counting = CountingMonoid(monoid("max"))
    batched = FlatFAT(counting, capacity=n)
    single = FlatFAT(counting, capacity=n)
    batched.bulk_insert((t, t) for t in range(n))
    single.bulk_insert((t, t) for t in range(n))
    batched.query()
    single.query()
    doomed = random.Random(3).sample(range(1, n - 1), m)

    counting.combines = 0
    for t in doomed:
        batched.evict(t)
    batched.query()
    batch_cost = counting.combines

    counting.combines = 0
    for t in doomed:
        single.evict(t)
        single.query()
    single_cost = counting.combines

    assert batched.query() == single.query()
    assert batch_cost <= m * (1 + math.ceil(math.log2(n / m)))  # Theorem 4.2 (ii)
    assert single_cost >= m * (math.log2(n) - 2)
    assert 2 * batch_cost < single_cost

    # A bulk eviction changes a contiguous run of k leaves: about k + log n repairs.
    counting.combines = 0
    removed = batched.bulk_evict(n // 2)
    batched.query()
    assert removed == n // 2 + 1 - sum(1 for t in doomed if t <= n // 2)
    assert counting.combines <= removed + 2 * math.log2(batched.capacity)


def test_flatfat_resizing_is_amortized_constant() -> None:
    counting = CountingMonoid(monoid("max"))
    window = FlatFAT(counting, capacity=2)
    n = 2**12
    # Growth by doubling: without queries the only combines are the rebuilds (Algorithm 1).
    for t in range(n):
        window.insert(t, t)
    assert window.capacity == n
    assert counting.combines <= 2 * n
    # Out-of-order evictions leave holes, in-order inserts then compact, evictions shrink.
    counting.combines = 0
    rng = random.Random(5)
    next_t = n
    operations = 0
    for _ in range(4):
        for t in rng.sample(sorted(t for t, _ in window), len(window) * 7 // 8):
            window.evict(t)
            operations += 1
        for _ in range(n):
            window.insert(next_t, next_t)
            next_t += 1
            operations += 1
    assert counting.combines <= 8 * operations
    window.check_invariants()


def test_flatfat_compacts_only_when_it_frees_a_quarter() -> None:
    # A full window whose middle entries leave one by one while new ones arrive: compacting
    # every time the span hits the array end would cost O(capacity) per round; §5.1.1 grows
    # instead unless a quarter of the slots are holes, so a round costs O(1) amortized.
    counting = CountingMonoid(monoid("max"))
    window = FlatFAT(counting, capacity=64)
    for t in range(64):
        window.insert(t, t)
    counting.combines = 0
    rng = random.Random(11)
    rounds = 2000
    for t in range(64, 64 + rounds):
        keys = [key for key, _ in window]
        window.evict(keys[rng.randrange(1, len(keys) - 1)])
        window.insert(t, t)
    assert window.capacity == 128
    assert counting.combines <= 4 * rounds
    window.check_invariants()
