"""Laws and semantics of the built-in aggregation monoids (``stores.monoids``).

Every built-in is checked for the identity laws, associativity, a JSON round trip of its
partials and ``lower`` against a direct computation (``statistics``, brute force) on random
data; the sketches for their documented guarantees.
"""

from __future__ import annotations

import gc
import json
import math
import operator
import os
import random
import statistics
import subprocess
import sys
from collections.abc import Callable
from functools import reduce
from typing import Any, NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stores.monoids import Monoid, compose, make_monoid, monoid, monoid_names, premap

pytestmark = pytest.mark.once  # pure Python on either build, no broker


def fold(m: Any, xs: list) -> Any:
    """Partial aggregate of ``xs`` folded left to right (the naive reference order)."""
    return reduce(m.combine, map(m.lift, xs), m.identity)


def close(a: Any, b: Any, rel: float = 1e-9, abs_: float = 1e-9) -> bool:
    """Structural equality, floats compared with a tolerance."""
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        return len(a) == len(b) and all(close(x, y, rel, abs_) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k], rel, abs_) for k in a)
    return a == b


def _arg_reference(better: Callable[[Any, Any], bool]) -> Callable[[list], Any]:
    def reference(xs: list) -> Any:
        best = None
        for value, arg in xs:
            if best is None or better(value, best[0]):
                best = (value, arg)
        return None if best is None else best[1]

    return reference


def _approx(result: Any, expected: Any) -> bool:
    return close(result, expected, rel=1e-7, abs_=1e-6)


def _bloom_holds_all(result: Any, xs: list) -> bool:
    return all(x in result for x in xs)


def _hll_close(result: int, expected: int) -> bool:
    # at most 30 inputs (the lists drawn) in 4096 registers: linear counting, std error ~0.3
    return abs(result - expected) <= 2


class Case(NamedTuple):
    """A built-in under test: its inputs, a direct computation of its result, how the two must
    agree, and whether combine is exactly associative on these inputs (floats are not)."""

    inputs: st.SearchStrategy
    reference: Callable[[list], Any]
    agree: Callable[[Any, Any], bool] = operator.eq
    exact: bool = True


small_ints = st.integers(-5, 5)
floats = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)
numbers = st.one_of(st.integers(-(10**6), 10**6), floats)
positives = st.floats(1e-3, 1e6, allow_nan=False)
pairs = st.tuples(small_ints, st.text(max_size=3))

CASES: dict[str, Case] = {
    "count": Case(st.integers(), len),
    "sum": Case(st.integers(), sum),
    "min": Case(small_ints, lambda xs: min(xs) if xs else None),
    "max": Case(small_ints, lambda xs: max(xs) if xs else None),
    "mean": Case(numbers, lambda xs: math.fsum(xs) / len(xs) if xs else None, _approx, False),
    "geomean": Case(
        positives, lambda xs: statistics.geometric_mean(xs) if xs else None, _approx, False
    ),
    "sample_stddev": Case(
        numbers, lambda xs: statistics.stdev(xs) if len(xs) > 1 else None, _approx, False
    ),
    "pop_stddev": Case(numbers, lambda xs: statistics.pstdev(xs) if xs else None, _approx, False),
    "maxcount": Case(small_ints, lambda xs: xs.count(max(xs)) if xs else 0),
    "mincount": Case(small_ints, lambda xs: xs.count(min(xs)) if xs else 0),
    "argmax": Case(pairs, _arg_reference(lambda v, best: v > best)),
    "argmin": Case(pairs, _arg_reference(lambda v, best: v < best)),
    "first": Case(st.one_of(st.none(), small_ints), lambda xs: xs[0] if xs else None),
    "last": Case(st.one_of(st.none(), small_ints), lambda xs: xs[-1] if xs else None),
    "collect": Case(st.one_of(st.none(), small_ints, st.text()), list),
    "bloom": Case(st.integers(), list, _bloom_holds_all),
    "distinct_count": Case(st.integers(0, 200), lambda xs: len(set(xs)), _hll_close),
}

# the per-monoid properties run once per built-in: a third of the profile's examples each keeps
# the module fast while the profile (ci / dev) still scales them
PER_MONOID = settings(max_examples=max(10, settings.default.max_examples // 3))


def test_every_builtin_is_covered_and_a_monoid() -> None:
    assert set(CASES) == set(monoid_names())
    for name in monoid_names():
        assert isinstance(monoid(name), Monoid)


def test_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="known: count, sum"):
        monoid("median")


@pytest.mark.parametrize("name", list(CASES))
@PER_MONOID
@given(data=st.data())
def test_monoid_laws_and_state_round_trip(name: str, data: st.DataObject) -> None:
    """Identity laws, associativity, honest commutativity flag, JSON round trip of partials."""
    m = monoid(name)
    case = CASES[name]
    a, b, c = (fold(m, data.draw(st.lists(case.inputs, max_size=6))) for _ in range(3))
    assert m.combine(m.identity, a) == a
    assert m.combine(a, m.identity) == a
    left = m.combine(m.combine(a, b), c)
    right = m.combine(a, m.combine(b, c))
    if case.exact:
        assert left == right
    else:
        assert close(m.lower(left), m.lower(right), abs_=1e-6)
    if m.commutative:
        assert close(m.lower(m.combine(a, b)), m.lower(m.combine(b, a)), abs_=1e-6)
    for partial in (a, left):
        assert m.from_state(json.loads(json.dumps(m.to_state(partial)))) == partial


@pytest.mark.parametrize("name", list(CASES))
@PER_MONOID
@given(data=st.data())
def test_lower_matches_direct_computation(name: str, data: st.DataObject) -> None:
    m = monoid(name)
    case = CASES[name]
    xs = data.draw(st.lists(case.inputs, max_size=30))
    # a random binary tree of combines must agree with the direct computation too
    partials = [m.lift(x) for x in xs]
    while len(partials) > 1:
        i = data.draw(st.integers(0, len(partials) - 2))
        partials[i : i + 2] = [m.combine(partials[i], partials[i + 1])]
    result = m.lower(partials[0] if partials else m.identity)
    assert case.agree(result, case.reference(xs))


def test_commutative_flags() -> None:
    non_commutative = {n for n in monoid_names() if not monoid(n).commutative}
    assert non_commutative == {"argmax", "argmin", "first", "last", "collect"}


# --- semantics of particular monoids -------------------------------------------------------------


def test_empty_windows_lower_to_documented_values() -> None:
    expected = {
        "count": 0,
        "sum": 0,
        "min": None,
        "max": None,
        "mean": None,
        "geomean": None,
        "sample_stddev": None,
        "pop_stddev": None,
        "maxcount": 0,
        "mincount": 0,
        "argmax": None,
        "argmin": None,
        "first": None,
        "last": None,
        "collect": [],
        "distinct_count": 0,
    }
    for name, value in expected.items():
        m = monoid(name)
        assert m.lower(m.identity) == value, name
    empty_filter = monoid("bloom").lower(0)
    assert 1 not in empty_filter and empty_filter.estimated_count() == 0


def test_argmax_ties_keep_the_oldest_and_accept_mappings_or_pairs() -> None:
    m = monoid("argmax", value_field="price", arg_field="id")
    xs = [{"price": 3, "id": "a"}, (5, "b"), {"price": 5, "id": "c"}, (1, "d")]
    assert m.lower(fold(m, xs)) == "b"
    assert m.lower(m.combine(m.lift((5, "c")), m.lift((5, "b")))) == "c"
    assert (
        monoid("argmin").lower(fold(monoid("argmin"), [(2, "x"), {"value": 2, "arg": "y"}])) == "x"
    )


def test_first_last_collect_keep_window_order() -> None:
    xs = [None, 0, "a", None]
    assert monoid("first").lower(fold(monoid("first"), xs)) is None
    assert monoid("first").lower(fold(monoid("first"), xs[1:])) == 0
    assert monoid("last").lower(fold(monoid("last"), xs[:-1])) == "a"
    assert monoid("collect").lower(fold(monoid("collect"), xs)) == xs


def test_geomean_rejects_non_positive_input() -> None:
    m = monoid("geomean")
    for bad in (0, -1.5, math.nan):
        with pytest.raises(ValueError, match="positive"):
            m.lift(bad)


def test_mean_and_stddev_stay_accurate_for_large_values() -> None:
    rng = random.Random(7)
    xs = [1e9 + rng.random() for _ in range(20_000)] + [1e17, -1e17]
    mean = monoid("mean")
    assert math.isclose(mean.lower(fold(mean, xs)), math.fsum(xs) / len(xs), rel_tol=1e-15)
    ys = xs[:-2]
    for name, reference in (("sample_stddev", statistics.stdev), ("pop_stddev", statistics.pstdev)):
        m = monoid(name)
        assert math.isclose(m.lower(fold(m, ys)), reference(ys), rel_tol=1e-6)


def test_sum_and_mean_are_exact_on_integers() -> None:
    xs = [10**30, 1, -(10**30), 3]
    assert monoid("sum").lower(fold(monoid("sum"), xs)) == 4
    assert monoid("mean").lower(fold(monoid("mean"), xs)) == 1.0


@pytest.mark.parametrize("cardinality", [50, 2_000, 20_000])
def test_distinct_count_within_documented_error(cardinality: int) -> None:
    precision = 12
    m = monoid("distinct_count", precision=precision)
    bound = 4 * 1.04 / math.sqrt(2**precision)  # four standard errors
    values = [f"user-{i}" for i in range(cardinality)]
    sketch = fold(m, values + values[: cardinality // 3])  # duplicates do not count
    assert abs(m.lower(sketch) - cardinality) <= bound * cardinality


def test_distinct_count_merges_overlapping_sketches_as_a_union() -> None:
    m = monoid("distinct_count")
    left = fold(m, range(0, 6_000))
    right = fold(m, range(3_000, 9_000))
    assert m.combine(left, right) == fold(m, range(9_000))


def test_bloom_has_no_false_negatives_and_few_false_positives() -> None:
    m = monoid("bloom", capacity=500, error_rate=0.01)
    inserted = list(range(0, 1_000, 2))
    f = m.lower(fold(m, inserted))
    assert all(x in f for x in inserted)
    false_positives = sum(x in f for x in range(1, 20_000, 2))
    assert false_positives <= 0.03 * 10_000
    assert abs(f.estimated_count() - len(inserted)) <= 0.05 * len(inserted)


def test_sketch_hashing_is_stable_across_processes() -> None:
    # str hashing must not depend on PYTHONHASHSEED: persisted partials stay valid
    script = (
        "from stores.monoids import monoid; "
        "b, d = monoid('bloom'), monoid('distinct_count'); "
        "print(b.to_state(b.lift('abc')), d.to_state(d.lift('abc')))"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    b, d = monoid("bloom"), monoid("distinct_count")
    assert outputs == {f"{b.to_state(b.lift('abc'))} {d.to_state(d.lift('abc'))}\n"}


@given(st.lists(st.integers(-100, 100), max_size=20))
def test_compose_computes_every_part(xs: list[int]) -> None:
    parts = {"sum": monoid("sum"), "max": monoid("max"), "last": monoid("last")}
    m = compose(parts)
    a = fold(m, xs)
    assert m.lower(a) == {name: p.lower(fold(p, xs)) for name, p in parts.items()}
    assert m.from_state(json.loads(json.dumps(m.to_state(a)))) == a
    assert not m.commutative


def naive_compose(parts: dict[str, Any]) -> Any:
    """Reference: the component-wise monoid written plainly with ``zip``."""
    monoids = list(parts.values())
    return make_monoid(
        tuple(m.identity for m in monoids),
        lambda x: tuple(m.lift(x) for m in monoids),
        lambda a, b: tuple(m.combine(x, y) for m, x, y in zip(monoids, a, b, strict=True)),
        lambda a: {n: m.lower(x) for (n, m), x in zip(parts.items(), a, strict=True)},
        to_state=lambda a: [m.to_state(x) for m, x in zip(monoids, a, strict=True)],
        from_state=lambda o: tuple(m.from_state(x) for m, x in zip(monoids, o, strict=True)),
    )


TRIPLE_PARTS = {"mean", "geomean", "sample_stddev", "pop_stddev"}
"""Parts whose partial is a triple, spliced into the composed partial field by field."""


def spliced(parts: dict[str, Any], nested: Any) -> tuple:
    """The composed layout of the naive reference's partial (a tuple of the parts' partials):
    the triples' fields spliced in place."""
    flat: list[Any] = []
    for name, partial in zip(parts, nested, strict=True):
        if name in TRIPLE_PARTS:
            flat.extend(partial)
        else:
            flat.append(partial)
    return tuple(flat)


def identical(a: Any, b: Any) -> bool:
    """Same types and values, floats bit for bit (NaN equal to NaN, -0.0 unlike 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, tuple | list):
        return len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(identical(a[k], b[k]) for k in a)
    return a == b


NUMERIC_PARTS = [n for n in monoid_names() if n not in ("argmax", "argmin")]
PAIR_PARTS = ["argmax", "argmin", "count", "first", "last", "collect", "maxcount", "min"]


def user_part() -> Any:
    """A part compose knows nothing about (called, not inlined)."""
    return make_monoid((), lambda x: (repr(x),), lambda a, b: (a + b)[-2:], list, name="tail2")


@given(
    data=st.data(),
    numeric=st.booleans(),
    with_user_part=st.booleans(),
)
def test_generated_compose_equals_the_naive_reference(
    data: st.DataObject, numeric: bool, with_user_part: bool
) -> None:
    pool = NUMERIC_PARTS if numeric else PAIR_PARTS
    names = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=8, unique=True))
    parts = {name: monoid(name) for name in names}
    if with_user_part:
        parts["user"] = user_part()
    number = st.one_of(
        st.integers(-(10**6), 10**6), st.floats(-1e6, 1e6, allow_nan=False, allow_subnormal=False)
    )
    if numeric:
        if "geomean" in names:
            number = number.map(lambda x: abs(x) + 1)
        xs = data.draw(st.lists(number, min_size=1, max_size=12))
    else:
        xs = data.draw(st.lists(st.tuples(number, st.integers(0, 9)), min_size=1, max_size=12))
    fast, slow = compose(parts), naive_compose(parts)
    assert identical(fast.identity, spliced(parts, slow.identity))
    lifted = {m: [m.lift(x) for x in xs] for m in (fast, slow)}
    assert identical(lifted[fast], [spliced(parts, a) for a in lifted[slow]])
    split = data.draw(st.integers(0, len(xs)))
    results = {}
    for m in (fast, slow):
        left = reduce(m.combine, lifted[m][:split], m.identity)
        right = reduce(m.combine, reversed(lifted[m][split:]), m.identity)
        results[m] = [m.combine(left, right), m.combine(right, left), m.combine(m.identity, left)]
    assert identical(results[fast], [spliced(parts, a) for a in results[slow]])
    for a, b in zip(results[fast], results[slow], strict=True):
        assert identical(fast.lower(a), slow.lower(b))
        assert identical(fast.to_state(a), slow.to_state(b))
        assert identical(
            fast.from_state(fast.to_state(a)), spliced(parts, slow.from_state(slow.to_state(b)))
        )
    with pytest.raises(ValueError):
        fast.combine(fast.identity, (*fast.identity, 0))


def test_composed_partials_leave_the_collector_at_the_first_young_collection() -> None:
    # the default aggregations' partial is one flat tuple of numbers, which CPython stops
    # tracking at the first collection that meets it (a nested one stays tracked, and so
    # travels on to the older generations, whose collections it makes long)
    m = compose({name: monoid(name) for name in ("count", "sum", "max", "mean", "pop_stddev")})
    partial = m.combine(m.lift(1.5), m.lift(-2))
    assert all(isinstance(field, int | float) for field in partial)
    assert gc.is_tracked(partial)
    gc.collect(0)
    assert not gc.is_tracked(partial)
    with pytest.raises(ValueError, match="not the partial"):
        m.from_state([1, 2.0, 2.0, [1, 2.0], [1, 2.0, 0.0]])


def test_premap_and_compose_serve_json_records() -> None:
    m = compose(
        {
            "total": premap(monoid("sum"), "qty"),
            "avg": premap(monoid("mean"), "qty"),  # a spliced part with a called lift
            "top": monoid("argmax", value_field="qty", arg_field="sku"),
            "skus": premap(monoid("distinct_count"), "sku"),
        }
    )
    records = [{"sku": "a", "qty": 2}, {"sku": "b", "qty": 5}, {"sku": "a", "qty": 1}]
    assert m.lower(fold(m, records)) == {"total": 8, "avg": 8 / 3, "top": "b", "skus": 2}
    with pytest.raises(ValueError, match="at least one"):
        compose({})


def test_make_monoid_builds_a_user_monoid() -> None:
    concat = make_monoid("", str, str.__add__, str.upper, name="concat")
    assert concat.lower(fold(concat, [1, "a", 2])) == "1A2"
    assert concat.to_state("x") == "x"
    assert premap(concat, len).lower(fold(premap(concat, len), ["ab", "c"])) == "21"


def test_identity_lift_and_lower_are_flagged() -> None:
    """``lift_is_identity``/``lower_is_identity`` say which built-ins pass inputs (results)
    through unchanged, so that an aggregator may skip the call (FiBA does)."""
    flagged = {
        name: (monoid(name).lift_is_identity, monoid(name).lower_is_identity)
        for name in monoid_names()
    }
    assert flagged["sum"] == (True, True)
    assert flagged["max"] == (True, True)
    assert flagged["count"] == (False, True)
    assert flagged["mean"] == (False, False)
    custom = make_monoid(0, abs, operator.add)
    assert (custom.lift_is_identity, custom.lower_is_identity) == (False, True)
    for name, (lifts, lowers) in flagged.items():
        m = monoid(name)
        sample = m.combine(m.lift(3), m.lift(4)) if name not in {"argmax", "argmin"} else None
        if lifts:
            assert m.lift(3) == 3, name
        if lowers and sample is not None:
            assert m.lower(sample) == sample, name


FIELDS = st.one_of(
    st.none(),
    st.integers(-3, 3),
    st.integers(),
    st.sampled_from([10**400, -(10**400), 2**53 + 1, -(2**63)]),  # beyond float, past 53 bits
    st.floats(),  # NaN, ±inf, ±0.0, subnormals, huge
    st.floats(-1e3, 1e3, allow_nan=False),
)
"""A field of a random partial: what lifted numbers give and the values that break them."""


def random_partials(data: st.DataObject, widths: list[int]) -> tuple[tuple, tuple]:
    """Two partials of parts whose spliced widths are ``widths`` (0: kept whole): fields
    drawn from ``FIELDS``, or, three times in four, spliced triples shaped as lifted numbers make
    them (an int count, a float, a float or int) to reach their float arithmetic."""
    floats = st.one_of(st.floats(-1e6, 1e6), st.floats())
    ints = st.one_of(st.integers(-3, 2**64), st.sampled_from([2**53 + 1, 1 - 2**53, 10**400]))
    shaped = st.tuples(ints, floats, st.one_of(floats, ints))

    def fields(width: int) -> st.SearchStrategy:
        if width and data.draw(st.integers(0, 3)):
            return shaped
        return st.tuples(*[FIELDS] * max(1, width))

    return tuple(
        tuple(field for width in widths for field in data.draw(fields(width))) for _ in "ab"
    )


def outcome(combine: Callable[[Any, Any], Any], a: Any, b: Any) -> Any:
    """``combine(a, b)``, or the type of the exception it raises."""
    try:
        return combine(a, b)
    except Exception as exc:
        return type(exc)


def same_outcome(x: Any, y: Any) -> bool:
    """Both the same exception type, or ``identical`` results."""
    if isinstance(x, type) or isinstance(y, type):
        return x is y
    return identical(x, y)


def parts_combine(monoids: list[Any]) -> Callable[[tuple, tuple], tuple]:
    """The composed combine written with the parts' own functions: each part's fields packed
    back into its partial (spliced parts), combined by its ``combine``, spliced again."""
    import stores.monoids as module

    widths = [module._spliced_width(m) for m in monoids]

    def combine(a: tuple, b: tuple) -> tuple:
        if len(a) != sum(max(1, w) for w in widths) or len(b) != len(a):
            raise ValueError("wrong length")
        out: list[Any] = []
        i = 0
        for m, w in zip(monoids, widths, strict=True):
            if w:
                out.extend(m.combine(a[i : i + w], b[i : i + w]))
            else:
                out.append(m.combine(a[i], b[i]))
            i += max(1, w)
        return tuple(out)

    return combine


@settings(max_examples=max(100, settings.default.max_examples))
@given(data=st.data(), with_user_part=st.booleans())
def test_fieldwise_combine_equals_the_generated_one_and_the_parts(
    data: st.DataObject, with_user_part: bool
) -> None:
    """The compiled build's composed combine (interpreted in the pure build) against the
    generated one, on random partials: results bit for bit, else the same exception; and
    the parts' own functions wherever they give a result."""
    import stores.monoids as module

    names = data.draw(st.lists(st.sampled_from(monoid_names()), min_size=1, max_size=7))
    monoids = [monoid(name) for name in names]
    if with_user_part:
        monoids.insert(data.draw(st.integers(0, len(monoids))), user_part())
    fieldwise = module.FieldwiseCombine(tuple(monoids))
    generated = module._generated_combine(tuple(monoids))
    widths = [module._spliced_width(m) for m in monoids]
    for _ in range(10):
        a, b = random_partials(data, widths)
        expected = outcome(generated, a, b)
        assert same_outcome(outcome(fieldwise, a, b), expected), (a, b, expected)
        by_parts = outcome(parts_combine(monoids), a, b)
        if not isinstance(by_parts, type):  # (compiled, first and last take tuples only)
            assert identical(expected, by_parts)
        assert same_outcome(outcome(fieldwise, list(a), list(b)), expected)
    a, b = random_partials(data, widths)
    for wrong in ((*a, 0), a[:-1]):
        for left, right in ((wrong, b), (a, wrong)):
            assert outcome(generated, left, right) is ValueError
            assert outcome(fieldwise, left, right) is ValueError
