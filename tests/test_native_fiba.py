"""The native FiBA (``stores._native``) against the Python FiBA and the brute-force oracle.

Hypothesis drives the three with the same random interleavings of in-order and out-of-order
inserts (some at existing times), evicts (present, absent, oldest), bulk inserts, bulk evicts
and range queries, for every native monoid (``first``, ``last`` and ``maxcount`` are not
commutative, or break ties by order) and for composes of them, and compares every outcome,
``query()``, ``aggregate()``, ``len``, the ends and the entries after every step, with both
trees' invariants checked after every step (when no float is in the window: the checkers
recompute every fold in one order). Values are ints and halves, so sums are exact and every
result is bit-identical whatever the combine order; the stddevs and geomean divide or take
logarithms, which round differently in another combine order, so they are compared to 1e-9
relative. Then the native combine counts show the costs: O(1) per in-order round,
O(log d) out of order, far fewer than m combines for a bulk evict of m.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stores
from stores.fiba import FiBA
from stores.monoids import compose, monoid
from stores.native_fiba import NATIVE_NAMES, NativeFiBA, native_kinds
from tests.oracle import OracleWindow

pytestmark = pytest.mark.skipif(
    stores.native() is None, reason=f"no native core in this build ({stores.build()})"
)

INEXACT = {"geomean", "sample_stddev", "pop_stddev"}
COMPOSES = {
    "sum,mean,max,count,last": ("sum", "mean", "max", "count", "last"),
    "first,maxcount,min,mincount,pop_stddev": (
        "first",
        "maxcount",
        "min",
        "mincount",
        "pop_stddev",
    ),
    "last,geomean,sample_stddev,first": ("last", "geomean", "sample_stddev", "first"),
}
NAMES = [*NATIVE_NAMES, *COMPOSES]

_VALUES = st.one_of(st.integers(-6, 6), st.sampled_from([0.5, -1.5, 2.0, 3.5, -0.0]))
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), _VALUES),
        st.tuples(st.just("insert"), st.integers(-30, 2), _VALUES),
        st.tuples(st.just("evict_oldest")),
        st.tuples(st.just("evict"), st.integers(-40, 2)),
        st.tuples(
            st.just("bulk_insert"), st.lists(st.tuples(st.integers(-30, 6), _VALUES), max_size=14)
        ),
        st.tuples(st.just("bulk_evict"), st.integers(-45, 0)),
        st.tuples(st.just("query_range"), st.integers(-40, 4), st.integers(-40, 4)),
    ),
    max_size=70,
)


def _monoids(name: str) -> tuple[Any, Any]:
    """(what NativeFiBA takes, the Python monoid): a built-in, or a compose's parts."""
    if name in COMPOSES:
        parts = {f"p{i}": monoid(part) for i, part in enumerate(COMPOSES[name])}
        return parts, compose(parts)
    return monoid(name), monoid(name)


def _positive(name: str, x: Any) -> Any:
    """geomean takes positive inputs only."""
    return abs(x) + 1 if "geomean" in name else x


def _same(name: str, a: Any, b: Any, *, signed_zeros: bool = True) -> bool:
    """Equal results: the same values and types, floats to the bit (the sign of a zero too,
    unless ``signed_zeros`` is False: the oracle folds from the identity, ``0 + -0.0``)."""
    if not any(part in name for part in INEXACT) and signed_zeros:
        return repr(a) == repr(b)

    def same(x: Any, y: Any) -> bool:
        return _same(name, x, y, signed_zeros=signed_zeros)

    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, tuple | list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, int | float) and isinstance(b, int | float) and not signed_zeros:
        return a == b
    return repr(a) == repr(b)


@settings(max_examples=max(20, settings.default.max_examples // 2), deadline=None)
@given(name=st.sampled_from(NAMES), min_arity=st.integers(2, 5), ops=_OPS)
def test_native_python_and_oracle_agree_on_random_interleavings(
    name: str, min_arity: int, ops: list
) -> None:
    native_monoid, python_monoid = _monoids(name)
    native = NativeFiBA(native_monoid, min_arity)
    python = FiBA(python_monoid, min_arity)
    oracle = OracleWindow(python_monoid)
    clock = 100
    for op, *args in ops:
        clock += 2
        if op == "append":
            t = (python.youngest() or clock) + 1
            x = _positive(name, args[0])
            outcomes = [w.insert(t, x) for w in (native, python, oracle)]
        elif op == "insert":
            x = _positive(name, args[1])
            outcomes = [w.insert(clock + args[0], x) for w in (native, python, oracle)]
        elif op == "evict_oldest":
            t = python.oldest() if len(python) else clock
            outcomes = [w.evict(t) for w in (native, python, oracle)]
        elif op == "evict":
            outcomes = [w.evict(clock + args[0]) for w in (native, python, oracle)]
        elif op == "bulk_insert":
            pairs = sorted((clock + dt, _positive(name, x)) for dt, x in args[0])
            outcomes = [w.bulk_insert(pairs) for w in (native, python, oracle)]
        elif op == "bulk_evict":
            outcomes = [w.bulk_evict(clock + args[0]) for w in (native, python, oracle)]
        else:
            lo, hi = clock + args[0], clock + args[1]
            outcomes = [w.query_range(lo, hi) for w in (native, python, oracle)]
            assert _same(name, native.aggregate_range(lo, hi), python.aggregate_range(lo, hi))
        assert _same(name, outcomes[0], outcomes[1]), (op, args, outcomes)
        assert _same(name, outcomes[0], outcomes[2], signed_zeros=False), (op, args, outcomes)
        assert _same(name, native.query(), python.query()), op
        assert _same(name, native.query(), oracle.query(), signed_zeros=False), op
        assert _same(name, native.aggregate(), python.aggregate()), op
        assert len(native) == len(python) == len(oracle)
        assert native.oldest() == python.oldest() and native.youngest() == python.youngest()
        assert _same(name, native.items(), list(python))
        assert _same(name, list(native), native.items())
        if not any(part in name for part in INEXACT) and not any(
            isinstance(x, float) for _, x in python
        ):
            # (the checkers recompute every cached fold in one order: on floats, which are not
            # associative, a fold the tree extended in another order may differ in its last
            # bit, so they run on exact workloads)
            native.check_invariants()
            python.check_invariants()


def test_native_kinds_names_the_builtins_and_composes_of_them() -> None:
    assert native_kinds(monoid("mean")) == ["mean"]
    assert native_kinds({"a": monoid("sum"), "b": monoid("first")}) == ["sum", "first"]
    assert native_kinds(monoid("collect")) is None
    assert native_kinds({"a": monoid("sum"), "b": monoid("collect")}) is None
    with pytest.raises(ValueError, match="no native twin"):
        NativeFiBA(monoid("argmax"))


def test_inputs_the_native_monoids_cannot_hold_are_refused_before_any_change() -> None:
    fiba = NativeFiBA(monoid("sum"))
    fiba.insert(1, 2)
    with pytest.raises(TypeError, match="int \\(int64\\), float or None"):
        fiba.insert(2, "3")
    with pytest.raises(OverflowError):
        fiba.insert(2, 1 << 70)
    with pytest.raises(ValueError, match="out of order"):
        fiba.bulk_insert([(5, 1), (4, 1)])
    with pytest.raises(ValueError, match="geomean is defined for positive inputs only, got -1"):
        NativeFiBA(monoid("geomean")).insert(1, -1)
    assert fiba.items() == [(1, 2)] and fiba.query() == 2
    fiba.insert(3, (1 << 63) - 1)  # the window's sum leaves int64: reading it says so
    with pytest.raises(OverflowError, match="beyond int64"):
        fiba.query()
    fiba.evict(1)
    assert fiba.query() == (1 << 63) - 1
    assert NativeFiBA(monoid("count")).query() == 0  # lowered identities, as in Python
    assert NativeFiBA(monoid("mean")).query() is None
    assert NativeFiBA(monoid("first")).aggregate() == ()


def test_a_tree_of_partials_refuses_partials_whose_sums_might_leave_int64():
    """``partials=True`` (the Faust API's trees): ``OverflowError`` before any change, so the
    caller moves the key to a Python FiBA; a tree's own count (here ``mean``'s n) or the
    partials it took decide, and an emptied tree starts afresh."""
    parts = {"sum": monoid("sum"), "mean": monoid("mean")}
    lift = compose(parts).lift
    fiba = NativeFiBA(parts, partials=True)
    for t, x in ((1, 2**61), (2, 2**61), (3, 1)):  # 3 partials within 2**61: fits
        fiba.insert(t, lift(x))
    with pytest.raises(OverflowError, match="might leave int64"):
        fiba.insert(4, lift(2**62))  # 4 partials within 2**62 might not
    with pytest.raises(OverflowError, match="might leave int64"):
        fiba.bulk_insert([(4, lift(2**62))])
    assert [t for t, _ in fiba.items()] == [1, 2, 3]
    fiba.bulk_evict(2)
    fiba.insert(4, lift(2**61))  # 4 taken, but the tree counts 2: fits
    assert fiba.aggregate()[0] == 2**61 + 1
    fiba.bulk_evict(4)
    fiba.insert(5, lift(2**63 - 1))  # an emptied tree starts afresh
    assert fiba.aggregate()[0] == 2**63 - 1
    sums = NativeFiBA({"sum": monoid("sum")}, partials=True)  # no count: the partials taken
    sums.insert(1, (2**62,))
    with pytest.raises(OverflowError, match="might leave int64"):
        sums.insert(1, (2**62,))


# --- costs, by counting combines (deterministic; no wall clock) ---------------------------------

SMALL, LARGE, ROUNDS = 2**8, 2**16, 2048


def _sum_tree(min_arity: int = 4) -> Any:
    return NativeFiBA(monoid("sum"), min_arity)


def _in_order_round_cost(n: int, min_arity: int) -> float:
    fiba = _sum_tree(min_arity)
    fiba.bulk_insert([(t, 1) for t in range(n)])
    t = n
    for _phase in ("warm up", "measure"):
        fiba.reset_combines()
        for _ in range(ROUNDS):
            fiba.evict(t - n)
            fiba.insert(t, 1)
            assert fiba.query() == n
            t += 1
    return fiba.combines / ROUNDS


def _out_of_order_round_cost(n: int, d: int) -> float:
    """Each insert has exactly ``d`` younger entries (the generator of test_fiba_complexity)."""
    fiba = _sum_tree()
    high = 10**9
    fiba.bulk_insert([*((t, 1) for t in range(n - d)), *((high + j, 1) for j in range(d))])
    low = n - d
    for _phase in ("warm up", "measure"):
        fiba.reset_combines()
        for _ in range(ROUNDS):
            fiba.evict(fiba.oldest())
            fiba.insert(low, 1)
            fiba.query()
            low += 1
    return fiba.combines / ROUNDS


@pytest.mark.parametrize("min_arity", [2, 4])
def test_in_order_round_cost_does_not_grow_with_n(min_arity: int) -> None:
    small = _in_order_round_cost(SMALL, min_arity)
    large = _in_order_round_cost(LARGE, min_arity)
    assert large <= 1.3 * small and small <= 1.3 * large, (small, large)


def test_out_of_order_round_cost_depends_on_distance_not_n() -> None:
    small = _out_of_order_round_cost(SMALL, 32)
    large = _out_of_order_round_cost(LARGE, 32)
    assert large <= 1.3 * small and small <= 1.3 * large, (small, large)
    assert _out_of_order_round_cost(LARGE, 4096) > 1.3 * large  # log d: it is out of order


def test_bulk_evict_costs_far_fewer_combines_than_entries() -> None:
    m, n = 1024, 2**14
    fiba = _sum_tree()
    fiba.bulk_insert([(t, 1) for t in range(n)])
    spent = 0
    for _ in range(16):
        oldest = fiba.oldest()
        fiba.reset_combines()
        assert fiba.bulk_evict(oldest + m - 1) == m
        spent += fiba.combines
        fiba.bulk_insert([(t, 1) for t in range(oldest + n, oldest + n + m)])
        fiba.check_invariants()
    assert spent / 16 < m / 8, spent / 16
    oldest = fiba.oldest()
    fiba.reset_combines()
    for t in range(oldest, oldest + m):
        fiba.evict(t)
    assert fiba.combines > m  # one by one: combines for each entry


@pytest.mark.parametrize(("m", "d"), [(256, 1024), (1024, 1024)])
def test_bulk_insert_costs_fewer_combines_than_single_inserts(m: int, d: int) -> None:
    """m entries spread over the youngest d >= m: O(m (1 + log(d/m))) against O(m log d)."""
    n = 2**12
    old = [(2 * t, 1) for t in range(n)]  # even times; the bulk goes to odd ones
    start, step = 2 * (n - d), d // m
    bulk = [(start + 2 * step * j + 1, 1) for j in range(m)]
    single, batched = _sum_tree(), _sum_tree()
    single.bulk_insert(old)
    batched.bulk_insert(old)
    single.reset_combines()
    batched.reset_combines()
    for t, x in bulk:
        single.insert(t, x)
    batched.bulk_insert(bulk)
    assert batched.items() == single.items()
    batched.check_invariants()
    assert 2 * batched.combines < single.combines, (batched.combines, single.combines)


def _edge_range_costs(n: int, d: int) -> tuple[float, float]:
    """Average combines of a suffix and of a prefix range of d .. d + 15 entries."""
    fiba = _sum_tree()
    fiba.bulk_insert([(2 * t, 1) for t in range(n)])
    suffix = prefix = 0
    for extra in range(16):
        size = d + extra
        fiba.reset_combines()
        assert fiba.aggregate_range(2 * (n - size), 2 * n + 5) == size
        suffix += fiba.combines
        fiba.reset_combines()
        assert fiba.aggregate_range(-5, 2 * (size - 1)) == size
        prefix += fiba.combines
    return suffix / 16, prefix / 16


def test_suffix_and_prefix_range_cost_depends_on_size_not_n() -> None:
    """A suffix (what per-event windows ask: ``[S - w, S]``) or a prefix starts at a finger's
    spine: O(log d) combines for d entries, whatever the window size."""
    for d in (100, 1000):
        small = _edge_range_costs(2 * d, d)
        large = _edge_range_costs(2**16, d)
        assert large[0] <= 1.3 * small[0] + 4 and large[1] <= 1.3 * small[1] + 4, (small, large)
