"""FiBA against the brute-force oracle, plus targeted unit tests.

The state machines of ``tests.window_machine`` drive FiBA and ``OracleWindow`` side by side for
every MIN_ARITY in 2..8 with the non-commutative ``collect`` (which also exposes any reordering
of entries), and for a spread of arities with ``first``, ``last`` (non-commutative), ``max`` and
``argmax`` (non-invertible; argmax breaks ties towards the oldest entry, so it is not
commutative either), and once with the in-order (FIFO) workload. ``check_invariants()`` runs
after every step.
"""

from __future__ import annotations

import operator
import random
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from stores.fiba import FiBA, _Node
from stores.monoids import monoid
from tests.cyclic_garbage import cyclic_garbage
from tests.oracle import OracleWindow
from tests.window_machine import window_machine

pytestmark = pytest.mark.once  # pure Python on either build, no broker

COLLECT = monoid("collect")
SUM = monoid("sum")
MAX = monoid("max")

_PICKS = st.integers(0, 1 << 30)  # an index into the current keys, taken modulo their count

# A quarter of the active profile's examples: 25 under "ci" (the default), 125 under "dev".
_MACHINE_SETTINGS = settings(
    max_examples=max(10, settings.default.max_examples // 4), stateful_step_count=40
)


def _with_edge_ranges(machine: type[RuleBasedStateMachine]) -> type[RuleBasedStateMachine]:
    """``machine`` plus range queries that reach an end of the window: suffixes (``t_to`` at or
    past the youngest time: FiBA's right-finger path) and prefixes (``t_from`` at or before the
    oldest: the left-finger path), with the other bound at, beside or between entries; and
    ``items_from`` at, beside or between entries."""

    class EdgeRanges(machine):  # type: ignore[valid-type,misc]
        def _edge(self, pick: int, shift: int) -> int:
            keys = self.oracle.entries.keys()
            return keys[pick % len(keys)] + shift

        @precondition(lambda self: len(self.oracle) > 0)
        @rule(pick=_PICKS, shift=st.integers(-1, 1), beyond=st.integers(0, 2))
        def query_suffix(self, pick: int, shift: int, beyond: int) -> None:
            t_from = self._edge(pick, shift)
            t_to = self.oracle.youngest() + beyond
            assert self.window.query_range(t_from, t_to) == self.oracle.query_range(t_from, t_to)

        @precondition(lambda self: len(self.oracle) > 0)
        @rule(pick=_PICKS, shift=st.integers(-1, 1), before=st.integers(0, 2))
        def query_prefix(self, pick: int, shift: int, before: int) -> None:
            t_from = self.oracle.oldest() - before
            t_to = self._edge(pick, shift)
            assert self.window.query_range(t_from, t_to) == self.oracle.query_range(t_from, t_to)

        @rule(t=st.integers(-15, 600), shift=st.integers(-1, 1), pick=_PICKS, at_key=st.booleans())
        def items_from(self, t: int, shift: int, pick: int, at_key: bool) -> None:
            if at_key and len(self.oracle):
                t = self._edge(pick, shift)
            expected = [(u, x) for u, x in self.oracle.entries.items() if u >= t]
            assert list(self.window.items_from(t)) == expected

    EdgeRanges.__name__ = EdgeRanges.__qualname__ = machine.__name__
    return EdgeRanges


def _machine_test(
    min_arity: int,
    name: str,
    values: st.SearchStrategy | None = None,
    out_of_order: bool = True,
):
    machine = window_machine(
        lambda m: FiBA(m, min_arity), monoid(name), values=values, out_of_order=out_of_order
    )
    case = _with_edge_ranges(machine).TestCase
    case.settings = _MACHINE_SETTINGS
    return case


TestCollect2 = _machine_test(2, "collect")
TestCollect3 = _machine_test(3, "collect")
TestCollect4 = _machine_test(4, "collect")
TestCollect5 = _machine_test(5, "collect")
TestCollect6 = _machine_test(6, "collect")
TestCollect7 = _machine_test(7, "collect")
TestCollect8 = _machine_test(8, "collect")
TestMax2 = _machine_test(2, "max")
TestFirst3 = _machine_test(3, "first")
TestLast2 = _machine_test(2, "last")
TestArgmax4 = _machine_test(4, "argmax", values=st.tuples(st.integers(0, 3), st.integers(0, 1000)))
TestInOrderCollect2 = _machine_test(2, "collect", out_of_order=False)  # the FIFO workload


# --- unit tests ------------------------------------------------------------------------------


def _window(min_arity: int, times: range | list, agg=COLLECT) -> tuple[FiBA, OracleWindow]:
    fiba = FiBA(agg, min_arity)
    oracle = OracleWindow(agg)
    for t in times:
        fiba.insert(t, t)
        oracle.insert(t, t)
    return fiba, oracle


def test_empty_window() -> None:
    fiba = FiBA(COLLECT)
    assert len(fiba) == 0
    assert list(fiba) == []
    assert fiba.query() == []
    assert fiba.query_range(0, 10) == []
    assert fiba.oldest() is None and fiba.youngest() is None
    assert fiba.get(3) is None and 3 not in fiba
    assert fiba.evict(3) is False
    assert fiba.bulk_evict(3) == 0
    fiba.bulk_insert([])
    fiba.check_invariants()
    assert len(fiba) == 0


def test_rejects_min_arity_below_two() -> None:
    with pytest.raises(ValueError, match="min_arity"):
        FiBA(SUM, 1)


def test_collision_combines_old_first() -> None:
    fiba = FiBA(COLLECT, 2)
    for t in range(20):
        fiba.insert(t, t)
    fiba.insert(7, "late")
    fiba.insert(0, "oldest")
    fiba.insert(19, "youngest")
    assert fiba.get(7) == (7, "late")
    assert fiba.get(0) == (0, "oldest")
    assert fiba.get(19) == (19, "youngest")
    assert len(fiba) == 20
    fiba.check_invariants()


def test_tuple_times() -> None:
    """The streaming layer keys entries by (event time, sequence)."""
    fiba = FiBA(COLLECT, 3)
    oracle = OracleWindow(COLLECT)
    events = [((t // 3, -(t % 3)), t) for t in range(90)]
    for t, x in reversed(events):
        fiba.insert(t, x)
        oracle.insert(t, x)
    fiba.check_invariants()
    assert list(fiba) == list(oracle)
    assert fiba.query_range((5, -1), (9, 0)) == oracle.query_range((5, -1), (9, 0))
    assert fiba.bulk_evict((10, -1)) == oracle.bulk_evict((10, -1))
    fiba.bulk_insert([((11, 5), "a"), ((11, 5), "b"), ((40, 0), "c")])
    oracle.bulk_insert([((11, 5), "a"), ((11, 5), "b"), ((40, 0), "c")])
    fiba.check_invariants()
    assert list(fiba) == list(oracle)
    assert fiba.query() == oracle.query()


def test_float_times() -> None:
    fiba, oracle = _window(2, [x / 4 for x in range(50, 0, -1)])
    fiba.check_invariants()
    assert fiba.query() == oracle.query()
    assert fiba.query_range(2.1, 7.3) == oracle.query_range(2.1, 7.3)


def test_unsorted_bulk_insert_raises_without_change() -> None:
    fiba, _ = _window(2, range(30))
    before = list(fiba)
    with pytest.raises(ValueError, match="out of order"):
        fiba.bulk_insert([(40, 1), (45, 2), (41, 3)])
    assert list(fiba) == before
    fiba.check_invariants()


def test_bulk_insert_equal_times_combine_in_order() -> None:
    fiba, oracle = _window(2, range(0, 40, 2))
    pairs = [(-1, "a"), (-1, "b"), (4, "c"), (4, "d"), (5, "e"), (5, "f"), (99, "g"), (99, "h")]
    fiba.bulk_insert(iter(pairs))
    oracle.bulk_insert(pairs)
    fiba.check_invariants()
    assert list(fiba) == list(oracle)
    assert fiba.get(4) == (4, "c", "d")


@pytest.mark.parametrize("min_arity", [2, 3, 5])
def test_bulk_evict_nothing_everything_and_on_empty(min_arity: int) -> None:
    fiba, _ = _window(min_arity, range(100))
    assert fiba.bulk_evict(-1) == 0
    assert len(fiba) == 100
    assert fiba.bulk_evict(99) == 100
    assert len(fiba) == 0 and fiba.query() == []
    assert fiba.bulk_evict(1000) == 0
    fiba.check_invariants()
    fiba.insert(5, 5)
    assert fiba.query() == [5]


@pytest.mark.parametrize("min_arity", [2, 4, 8])
def test_bulk_evict_every_boundary(min_arity: int) -> None:
    """Cut a window of 200 (built out of order) at every possible time."""
    times = [(t * 37) % 200 for t in range(200)]
    for boundary in range(0, 200, 3):
        fiba, oracle = _window(min_arity, times)
        assert fiba.bulk_evict(boundary) == oracle.bulk_evict(boundary)
        fiba.check_invariants()
        assert list(fiba) == list(oracle)
        assert fiba.query() == oracle.query()


@pytest.mark.parametrize("min_arity", [2, 3, 4, 8])
def test_from_sorted_builds_valid_tree(min_arity: int) -> None:
    for n in [0, 1, 2 * min_arity - 1, 2 * min_arity, 100, 1000]:
        pairs = [(t, COLLECT.lift(t)) for t in range(n)]
        fiba = FiBA.from_sorted(COLLECT, pairs, min_arity)
        fiba.check_invariants()
        assert list(fiba) == pairs
        assert fiba.query() == list(range(n))
        fiba.insert(n, n)
        fiba.evict(0)
        fiba.check_invariants()


def test_from_sorted_combines_equal_times_and_rejects_disorder() -> None:
    fiba = FiBA.from_sorted(COLLECT, [(1, ("a",)), (1, ("b",)), (2, ("c",))])
    assert list(fiba) == [(1, ("a", "b")), (2, ("c",))]
    with pytest.raises(ValueError, match="out of order"):
        FiBA.from_sorted(COLLECT, [(2, ("a",)), (1, ("b",))])


def test_aggregate_range_is_raw_partial() -> None:
    fiba, _ = _window(3, range(50), MAX)
    assert fiba.aggregate_range(10, 20) == 20
    assert fiba.aggregate_range(20, 10) is None  # identity of max
    assert fiba.aggregate() == 49


def test_range_query_edges() -> None:
    fiba, oracle = _window(2, range(0, 200, 2))
    for t_from, t_to in [(-5, -1), (500, 600), (7, 7), (8, 8), (9, 5), (-5, 500), (0, 198)]:
        assert fiba.query_range(t_from, t_to) == oracle.query_range(t_from, t_to)


def test_evict_inner_entries_in_every_order() -> None:
    for min_arity in (2, 3):
        fiba, oracle = _window(min_arity, range(120))
        for t in [(k * 53) % 120 for k in range(120)]:
            assert fiba.evict(t) is True
            oracle.evict(t)
            fiba.check_invariants()
            assert fiba.query() == oracle.query()
        assert len(fiba) == 0


def test_check_invariants_names_broken_invariant() -> None:
    fiba, _ = _window(2, range(40))
    fiba._lf.times.reverse()
    with pytest.raises(AssertionError, match="order"):
        fiba.check_invariants()
    fiba, _ = _window(2, range(40))
    fiba._root.children[1].agg = ("bogus",)
    with pytest.raises(AssertionError, match="aggregates"):
        fiba.check_invariants()
    fiba, _ = _window(2, range(40))
    del fiba._lf.times[:]
    del fiba._lf.values[:]
    with pytest.raises(AssertionError, match="arity"):
        fiba.check_invariants()


@pytest.mark.parametrize("min_arity", [2, 3, 4, 5])
def test_in_order_sliding_window_through_growth_and_shrinking(min_arity: int) -> None:
    """The in-order fast paths (left-finger refills merging up the left spine, right-finger
    splits climbing the right spine) through phases of a growing, steady and shrinking window,
    so that every level of the tree refills and splits, the root included, and the window
    passes through heights 1 to 5 and back; invariants and the aggregates checked each step,
    with suffix and prefix range queries."""
    fiba = FiBA(COLLECT, min_arity)
    oracle = OracleWindow(COLLECT)
    t = 0
    for size_change in [+150, 0, -120, +80, -100, +60, -70]:
        for _ in range(abs(size_change) or 150):
            if size_change >= 0:
                fiba.insert(t, t)
                oracle.insert(t, t)
                t += 1
            if size_change <= 0 and len(oracle):
                oldest = oracle.oldest()
                assert fiba.evict(oldest) is True
                oracle.evict(oldest)
            fiba.check_invariants()
            assert fiba.query() == oracle.query()
            if len(oracle) > 2:
                keys = oracle.entries.keys()
                lo, hi = keys[len(keys) // 3], keys[2 * len(keys) // 3]
                assert fiba.query_range(lo, t) == oracle.query_range(lo, t)
                assert fiba.query_range(-1, hi) == oracle.query_range(-1, hi)


_AFTER_LAZY_EVICTS = {
    "oldest": lambda w, gone: w.oldest(),
    "len": lambda w, gone: len(w),
    "query": lambda w, gone: w.query(),
    "iter": lambda w, gone: list(w),
    "get": lambda w, gone: [w.get(t) for t in range(gone - 2, gone + 2)],
    "contains": lambda w, gone: [t in w for t in range(gone - 2, gone + 2)],
    "items_from": lambda w, gone: (
        list(w.items_from(gone - 1)) if isinstance(w, FiBA) else [e for e in w if e[0] >= gone - 1]
    ),
    "prefix range": lambda w, gone: w.query_range(-5, gone + 3),
    "bulk_evict": lambda w, gone: (w.bulk_evict(gone + 1), list(w)),
    "bulk_evict in the finger": lambda w, gone: (w.bulk_evict(gone), w.query(), list(w)),
    "old insert": lambda w, gone: (w.insert(gone - 3, -1), w.query(), list(w)),
    "bulk_insert": lambda w, gone: (w.bulk_insert([(gone - 1, -2), (gone + 1, -3)]), list(w)),
    "evict a later entry": lambda w, gone: (w.evict(gone + 1), w.query(), list(w)),
    "insert into the finger": lambda w, gone: (w.insert(gone + 0.5, -5), w.query(), list(w)),
    "inserts splitting the left spine": lambda w, gone: [
        (w.insert(gone + 6 + x / 16, x), w.query(), len(w))[1:] for x in range(16)
    ],
}


@pytest.mark.parametrize("min_arity", [2, 4])
@pytest.mark.parametrize("observer", list(_AFTER_LAZY_EVICTS))
def test_in_order_evicts_drop_left_finger_entries_lazily(min_arity: int, observer: str) -> None:
    """An in-order evict at a left finger below the root leaves the entry in the finger's lists
    (``_lf_start`` moves past it) until a refill or another operation settles them; whatever
    follows sees exactly the live entries, the same as the oracle."""
    observe = _AFTER_LAZY_EVICTS[observer]
    lazily_held = 0
    for gone in range(1, 40):
        fiba = FiBA(COLLECT, min_arity)
        oracle = OracleWindow(COLLECT)
        for t in range(60):
            fiba.insert(t, t)
            oracle.insert(t, t)
        for t in range(gone):
            assert fiba.evict(t) is True
            oracle.evict(t)
        fiba.check_invariants()
        live = len(fiba._lf.times) - fiba._lf_start  # (white box)
        lazily_held += fiba._lf_start > 0
        assert live >= min_arity - 1
        assert observe(fiba, gone) == observe(oracle, gone), (gone, observer)
        fiba.check_invariants()
        assert fiba.query() == oracle.query()
        assert list(fiba) == list(oracle)
    assert lazily_held > 10  # most of these windows held evicted entries lazily


@pytest.mark.parametrize("min_arity", [2, 4])
def test_out_of_order_inserts_keep_the_lazily_evicted_entries(min_arity: int) -> None:
    """Sliding rounds whose inserts land ``d`` entries from the young end (splits climbing to
    the root and repairing the left spine included) leave the left finger's evicted entries
    in place unless they land in it; the window stays exact throughout."""
    fiba = FiBA(COLLECT, min_arity)
    oracle = OracleWindow(COLLECT)
    high = 10**6
    for t in range(150):
        for w in (fiba, oracle):
            w.insert(t, t)
    for j in range(12):
        for w in (fiba, oracle):
            w.insert(high + j, j)
    held = 0
    for low in range(150, 700):
        oldest = oracle.oldest()
        for w in (fiba, oracle):
            w.evict(oldest)
            w.insert(low, low)
        held += fiba._lf_start > 0
        fiba.check_invariants()
        assert fiba.query() == oracle.query()
    assert list(fiba) == list(oracle)
    assert held > 100, held


class _PassThrough:
    """A sum whose ``lift`` and ``lower`` are flagged as the identity and must not be called."""

    identity = 0
    combine = staticmethod(operator.add)
    lift_is_identity = True
    lower_is_identity = True

    @staticmethod
    def lift(x: Any) -> Any:
        raise AssertionError("lift called although flagged as the identity")

    lower = lift


def test_identity_lift_and_lower_are_not_called() -> None:
    fiba = FiBA(_PassThrough(), 2)
    for t in range(50):
        fiba.insert(t, t)
    fiba.evict(0)
    assert fiba.query() == sum(range(1, 50))
    assert fiba.query_range(10, 20) == sum(range(10, 21))
    fiba.check_invariants()


class _CalledSum:
    """``sum`` whose ``combine`` is a function of its own, not :func:`operator.add`."""

    identity = 0
    lift_is_identity = True
    lower_is_identity = True

    @staticmethod
    def combine(a: Any, b: Any) -> Any:
        return a + b

    @staticmethod
    def lift(x: Any) -> Any:
        return x

    lower = lift


def _nodes(fiba: FiBA) -> list[tuple[Any, ...]]:
    """Every node's entries, aggregate, count and cached folds, in depth-first order."""
    fiba._settle()
    rows = []
    stack = [fiba._root]
    while stack:
        node = stack.pop()
        rows.append((node.times, node.values, node.agg, node.cnt, node.suffix, node.prefix))
        stack.extend(node.children or [])
    return rows


@pytest.mark.parametrize("min_arity", [2, 4])
def test_a_combine_that_is_operator_add_is_applied_with_plus(min_arity: int) -> None:
    """``sum`` (``combine`` is :func:`operator.add`: ``+`` on the in-order paths, no call)
    gives the same nodes, aggregates and folds as the same sum combined by calls, through a
    growing, sliding and shrinking window with some out-of-order inserts."""
    added, called = FiBA(SUM, min_arity), FiBA(_CalledSum(), min_arity)
    assert added._add and not called._add
    rng = random.Random(min_arity)
    t = 0
    for size_change in [+300, 0, -250, +200, -240]:
        for _ in range(abs(size_change) or 300):
            late = t - rng.randrange(min(t, 40) + 1)
            for fiba in (added, called):
                if size_change >= 0:
                    fiba.insert(t, t % 101)
                    if t % 7 == 0:
                        fiba.insert(late, 1)
                if size_change <= 0 and len(fiba):
                    fiba.evict(fiba.oldest())
            t += 1
            assert added.query() == called.query()
        assert _nodes(added) == _nodes(called)
        added.check_invariants()


@pytest.mark.parametrize("min_arity", [2, 4])
def test_in_order_refills_rewrite_the_finger_in_place_and_hand_the_merged_leaf_to_the_next_split(
    min_arity: int,
) -> None:
    """In a sliding window, a refill of the left finger that merges rewrites the finger's
    entries in its own lists (its live entries to the front, over the entries evicted lazily,
    which leaves no evicted entry), and the leaf it merged away becomes the next right-finger
    split's new finger, its lists the up half's, instead of new ones."""
    fiba = FiBA(SUM, min_arity)
    for t in range(300):
        fiba.insert(t, t)
    rewritten = reused = 0
    for t in range(300, 900):
        lf = fiba._lf
        lists = (lf.times, lf.values)
        spare = fiba._spare
        fiba.evict(t - 300)
        if fiba._spare is not spare:  # a refill merged a leaf into the finger
            assert fiba._lf is lf and not fiba._lf_start
            assert all(a is b for a, b in zip(lists, (lf.times, lf.values), strict=True))
            rewritten += 1
        spare = fiba._spare
        spare_times = None if spare is None else spare.times
        rf = fiba._rf
        fiba.insert(t, t)
        if spare is not None and fiba._rf is spare:
            assert rf.times is spare_times
            reused += 1
        fiba.check_invariants()
        assert fiba.query() == sum(range(t - 299, t + 1))
    assert rewritten > 20 and reused > 20, (rewritten, reused)


@pytest.mark.parametrize("min_arity", [2, 3, 4])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_removed_nodes_are_freed_by_reference_counting(seed: int, min_arity: int) -> None:
    """No operation leaves a reference cycle of nodes behind (parent links would make every
    removed subtree one): the cyclic garbage collector finds no node after a random mix of
    in-order and out-of-order inserts, evicts anywhere, bulk evicts (partial, cutting across
    levels, and total) and bulk inserts, so evicted state is freed at once, not in one long
    collection pause."""
    rng = random.Random(seed)
    fiba = FiBA(monoid("sum"), min_arity=min_arity)
    t = 0
    with cyclic_garbage() as garbage:
        for _ in range(1500):
            r = rng.random()
            if r < 0.45:
                t += 1
                fiba.insert(t, 1)
            elif r < 0.55:
                fiba.insert(t - rng.randrange(80), 1)
            elif r < 0.7 and len(fiba):
                fiba.evict(next(iter(fiba))[0])
            elif r < 0.75 and len(fiba):
                entries = list(fiba)
                fiba.evict(entries[rng.randrange(len(entries))][0])
            elif r < 0.85:
                fiba.bulk_evict(t - rng.randrange(400))
            elif r < 0.95:
                size = rng.randrange(1, 60)
                fiba.bulk_insert(sorted((t + rng.randrange(-100, 100), 1) for _ in range(size)))
            else:
                fiba.bulk_evict(t + 200)
    fiba.check_invariants()
    assert not [obj for obj in garbage if isinstance(obj, _Node)]


@pytest.mark.parametrize("size", [0, 1, 7, 1000])
def test_clear_empties_the_tree_and_frees_every_node(size: int) -> None:
    """``clear`` leaves an empty, valid, usable tree, and the dropped nodes are freed by
    reference counting (a tree dropped linked would be one cycle per node)."""
    with cyclic_garbage() as garbage:
        fiba = FiBA.from_sorted(monoid("collect"), [(t, (t,)) for t in range(size)])
        fiba.insert(size // 2, 99)
        fiba.clear()
        assert len(fiba) == 0 and fiba.query() == []
        fiba.check_invariants()
        fiba.insert(5, 1)
        fiba.insert(3, 2)
        assert fiba.query() == [2, 1]
        fiba.check_invariants()
        fiba.clear()
        del fiba
    assert not [obj for obj in garbage if isinstance(obj, _Node)]


def test_a_tree_dropped_without_clear_is_cyclic_garbage() -> None:
    """What ``clear`` is for (and what makes the checks above able to fail)."""
    with cyclic_garbage() as garbage:
        fiba = FiBA.from_sorted(monoid("sum"), [(t, 1) for t in range(100)])
        del fiba
    assert [obj for obj in garbage if isinstance(obj, _Node)]
