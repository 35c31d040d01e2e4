"""FlatFAT and ClassicBTree against the brute-force oracle, and their cost by counting combines.

Correctness: hypothesis state machines drive each structure side by side with
``tests.oracle.OracleWindow`` on non-commutative monoids (collect, first, last) and a
non-invertible one (max), checking every observable and ``check_invariants()`` after every step;
ClassicBTree for every min_arity in 2..8. FlatFAT accepts only in-order inserts, so its machine
inserts at or after the youngest time and checks that older inserts are refused untouched.

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
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from stores.baselines.classic_btree import ClassicBTree
from stores.baselines.flatfat import FlatFAT
from tests.oracle import OracleWindow


class _Monoid:
    __slots__ = ("combine", "identity", "lift", "lower", "name")

    def __init__(
        self,
        name: str,
        identity: Any,
        lift: Callable[[Any], Any],
        combine: Callable[[Any, Any], Any],
        lower: Callable[[Any], Any],
    ) -> None:
        self.name = name
        self.identity = identity
        self.lift = lift
        self.combine = combine
        self.lower = lower


def _singleton(x: Any) -> tuple:
    return (x,)


def _max(a: Any, b: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    return b if b > a else a


_P = 2**61 - 1


def _affine_lift(x: int) -> tuple[int, int]:
    return (x % 7 + 2, x % _P)


def _affine_then(f: tuple[int, int], g: tuple[int, int]) -> tuple[int, int]:
    """``v -> g(f(v))`` for affine maps mod a prime: associative, not commutative, O(1)."""
    return (g[0] * f[0] % _P, (g[0] * f[1] + g[1]) % _P)


MONOIDS = {
    "collect": _Monoid("collect", (), _singleton, tuple.__add__, list),
    "first": _Monoid("first", (), _singleton, lambda a, b: a or b, lambda a: a[0] if a else None),
    "last": _Monoid("last", (), _singleton, lambda a, b: b or a, lambda a: a[0] if a else None),
    "max": _Monoid("max", None, lambda x: x, _max, lambda a: a),
    # Order-sensitive like collect but constant-size partials, for long random walks.
    "affine": _Monoid("affine", (1, 0), _affine_lift, _affine_then, lambda a: a),
}


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


# --- property tests against the oracle -------------------------------------------------------

TIMES = st.integers(min_value=0, max_value=300)
VALUES = st.integers(min_value=-50, max_value=50)


def _machine(
    factory: Callable[[Any], Any], monoid: Any, in_order: bool
) -> type[RuleBasedStateMachine]:
    """A state machine running ``factory(monoid)`` beside the oracle. With ``in_order`` the
    inserts go at or after the youngest time (FlatFAT's contract) and older ones must fail."""

    class WindowMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.window = factory(monoid)
            self.oracle = OracleWindow(monoid)

        def _young_end(self, offset: int) -> int:
            youngest = self.oracle.youngest()
            return offset if youngest is None else youngest + offset % 4

        @rule(offset=TIMES, x=VALUES)
        def insert(self, offset: int, x: int) -> None:
            t = self._young_end(offset) if in_order else offset
            self.window.insert(t, x)
            self.oracle.insert(t, x)

        @rule(offset=TIMES, xs=st.lists(VALUES, max_size=60))
        def bulk_insert(self, offset: int, xs: list[int]) -> None:
            start = self._young_end(offset) if in_order else offset
            rng = random.Random(offset)
            times = sorted(start + rng.randrange(3 * len(xs) + 1) for _ in xs)
            pairs = list(zip(times, xs, strict=True))
            self.window.bulk_insert(pairs)
            self.oracle.bulk_insert(pairs)

        @precondition(lambda self: in_order and len(self.oracle) > 0)
        @rule(back=st.integers(min_value=1, max_value=20), x=VALUES)
        def older_insert_is_refused(self, back: int, x: int) -> None:
            before = list(self.window)
            with pytest.raises(ValueError, match="in-order"):
                self.window.insert(self.oracle.youngest() - back, x)
            assert list(self.window) == before

        @precondition(lambda self: len(self.oracle) > 1)
        @rule()
        def unsorted_bulk_insert_is_refused(self) -> None:
            before = list(self.window)
            young = self.oracle.youngest()
            with pytest.raises(ValueError, match="sorted"):
                self.window.bulk_insert([(young + 5, 1), (young + 2, 2)])
            assert list(self.window) == before

        @rule(t=TIMES)
        def evict(self, t: int) -> None:
            assert self.window.evict(t) == self.oracle.evict(t)

        @precondition(lambda self: len(self.oracle) > 0)
        @rule(data=st.data())
        def evict_present(self, data: st.DataObject) -> None:
            t = data.draw(st.sampled_from(list(self.oracle.entries.keys())))
            assert self.window.evict(t) is True
            self.oracle.evict(t)

        @rule(t=TIMES)
        def bulk_evict(self, t: int) -> None:
            assert self.window.bulk_evict(t) == self.oracle.bulk_evict(t)

        @rule(t_from=TIMES, t_to=TIMES)
        def query_range(self, t_from: int, t_to: int) -> None:
            assert self.window.query_range(t_from, t_to) == self.oracle.query_range(t_from, t_to)

        @rule(t=TIMES)
        def lookup(self, t: int) -> None:
            assert (t in self.window) == (t in self.oracle)
            assert self.window.get(t) == self.oracle.get(t)

        @invariant()
        def agrees_with_oracle(self) -> None:
            window, oracle = self.window, self.oracle
            assert window.query() == oracle.query()
            assert len(window) == len(oracle)
            assert window.oldest() == oracle.oldest()
            assert window.youngest() == oracle.youngest()
            assert list(window) == list(oracle)
            window.check_invariants()

    return WindowMachine


_MACHINE_SETTINGS = settings(max_examples=25, stateful_step_count=40, deadline=None)


@pytest.mark.parametrize("min_arity", range(2, 9))
def test_classic_btree_matches_oracle_for_every_arity(min_arity: int) -> None:
    machine = _machine(lambda m: ClassicBTree(m, min_arity=min_arity), MONOIDS["collect"], False)
    run_state_machine_as_test(machine, settings=_MACHINE_SETTINGS)


@pytest.mark.parametrize("name", ["first", "last", "max"])
def test_classic_btree_matches_oracle_for_monoid(name: str) -> None:
    machine = _machine(lambda m: ClassicBTree(m, min_arity=2), MONOIDS[name], False)
    run_state_machine_as_test(machine, settings=_MACHINE_SETTINGS)


@pytest.mark.parametrize("name", ["collect", "first", "last", "max"])
@pytest.mark.parametrize("capacity", [1, 8])
def test_flatfat_matches_oracle(name: str, capacity: int) -> None:
    machine = _machine(lambda m: FlatFAT(m, capacity=capacity), MONOIDS[name], True)
    run_state_machine_as_test(machine, settings=_MACHINE_SETTINGS)


def _random_walk(window: Any, in_order: bool, steps: int, seed: int) -> None:
    """Thousands of mixed operations beside the oracle: deep trees, many resizes and wraps."""
    oracle = OracleWindow(MONOIDS["affine"])
    rng = random.Random(seed)
    for step in range(steps):
        youngest = oracle.youngest()
        young = 0 if youngest is None else youngest
        r = rng.random()
        if r < 0.55:
            t = young + rng.randrange(3) if in_order else rng.randrange(5000)
            window.insert(t, step)
            oracle.insert(t, step)
        elif r < 0.9:
            t = young - rng.randrange(400) if in_order else rng.randrange(5000)
            assert window.evict(t) == oracle.evict(t)
        elif r < 0.91:
            t = young - rng.randrange(200, 400) if in_order else rng.randrange(400)
            assert window.bulk_evict(t) == oracle.bulk_evict(t)
        else:
            a, b = sorted(young - rng.randrange(500) for _ in range(2))
            assert window.query_range(a, b) == oracle.query_range(a, b)
        if step % 3 == 0:
            assert window.query() == oracle.query()
        if step % 500 == 0:
            window.check_invariants()
    assert list(window) == list(oracle)
    window.check_invariants()


@pytest.mark.parametrize("min_arity", [2, 3, 8])
def test_classic_btree_long_random_walk(min_arity: int) -> None:
    _random_walk(ClassicBTree(MONOIDS["affine"], min_arity=min_arity), False, 6000, min_arity)


def test_flatfat_long_random_walk() -> None:
    _random_walk(FlatFAT(MONOIDS["affine"], capacity=4), True, 6000, 7)


def test_flatfat_fifo_window_wraps_around_without_resizing() -> None:
    counting = CountingMonoid(MONOIDS["collect"])
    window = FlatFAT(counting, capacity=16)
    oracle = OracleWindow(MONOIDS["collect"])
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
    counting = CountingMonoid(MONOIDS["max"])
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
    counting = CountingMonoid(MONOIDS["max"])
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


def test_flatfat_resizing_is_amortized_constant() -> None:
    counting = CountingMonoid(MONOIDS["max"])
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
