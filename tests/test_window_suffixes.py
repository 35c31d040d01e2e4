"""``WindowSuffix`` against brute force: after every insert, eviction and stream-time advance,
the kept window ``[S - w, S]`` equals the fold (non-commutative: ``collect``) of exactly the
entries in it, through rebuilds, appends at the young end, late inserts behind and before the
split, and entries evicted below the window."""

from __future__ import annotations

from functools import reduce
from itertools import cycle

from hypothesis import given
from hypothesis import strategies as st

from bench.counting import CountingMonoid
from stores.fiba import FiBA
from stores.monoids import monoid
from stores.window_suffixes import MIN_ANSWERS, WindowSuffix

COLLECT = monoid("collect")
RETENTION = 100

step = st.tuples(
    st.integers(0, 3),  # stream-time advance
    # lateness of the insert; ("edge", k): the window size + k, at the window's start
    st.one_of(
        st.just(0),
        st.just(0),
        st.integers(1, 120),
        st.tuples(st.just("edge"), st.integers(-1, 1)),
    ),
    st.booleans(),  # ask the window after this step
)
steps = st.lists(step, max_size=200)


def _expected(fiba: FiBA, start: int, s: int) -> tuple:
    return reduce(COLLECT.combine, [p for t, p in fiba if start <= t <= s], COLLECT.identity)


@given(steps=steps, size=st.sampled_from([1, 2, 7, 30, 64]), min_arity=st.sampled_from([2, 4]))
def test_kept_window_is_the_fold_of_its_entries(steps, size, min_arity):
    fiba = FiBA(COLLECT, min_arity)
    suffix = WindowSuffix(COLLECT, size)
    s = 0
    lateness = 0
    for value, (advance, late, ask) in enumerate(steps):  # distinct values: order shows
        s += advance
        t = s - (size + late[1] if isinstance(late, tuple) else late)
        if t < s - RETENTION:
            continue  # late: refused, as KeyWindows does
        lateness = max(lateness, s - t)
        youngest = fiba.youngest()
        fiba.insert(t, value)  # FiBA lifts it
        suffix.inserted(t, COLLECT.lift(value), youngest is None or t >= youngest)
        fiba.bulk_evict(s - RETENTION - 1)
        if ask:
            assert suffix.aggregate(fiba, s - size, s, lateness) == _expected(fiba, s - size, s)


@given(
    steps=st.lists(step, min_size=50, max_size=200),  # long enough to keep windows
    sizes=st.lists(st.integers(1, 12), min_size=1, max_size=8),
    size=st.sampled_from([2, 7, 30, 64]),
)
def test_kept_window_after_bulk_inserts_is_the_fold_of_its_entries(steps, sizes, size):
    """The steps' inserts in groups, each one ``bulk_insert`` told by ``inserted_many`` (as
    ``KeyWindows.apply`` does), the window asked after every group (more than ``MIN_ANSWERS``
    times, so it is kept, not answered by range queries)."""
    fiba = FiBA(COLLECT)
    suffix = WindowSuffix(COLLECT, size)
    s = lateness = value = 0
    remaining = list(steps)
    for group_size in cycle(sizes):
        if not remaining:
            break
        group, remaining = remaining[:group_size], remaining[group_size:]
        pairs = []
        for advance, late, _ in group:
            s += advance
            t = s - (size + late[1] if isinstance(late, tuple) else late)
            if t >= s - RETENTION:
                lateness = max(lateness, s - t)
                value += 1
                pairs.append((t, value))
        pairs.sort(key=lambda pair: pair[0])
        youngest = fiba.youngest()
        fiba.bulk_insert(pairs)
        times = [t for t, _ in pairs]
        suffix.inserted_many(times, [COLLECT.lift(v) for _, v in pairs], youngest)
        fiba.bulk_evict(s - RETENTION - 1)
        for _ in range(MIN_ANSWERS + 1):  # asked often enough to stay kept
            assert suffix.aggregate(fiba, s - size, s, lateness) == _expected(fiba, s - size, s)


def test_each_part_recomputed_after_an_insert_into_it():
    """Entries at every time 0..100, window 30, lateness 2 so far: the first front holds 70
    (a span of 30 // 64, at least 1), the middle 71..94, the back 95..100. An insert into each
    part (and the same time again at the young end) leaves every answer equal to the
    brute-force fold."""
    fiba = FiBA(COLLECT, 2)
    for t in range(101):
        fiba.insert(t, t)
    suffix = WindowSuffix(COLLECT, 30)
    assert suffix.aggregate(fiba, 70, 100, 2) == _expected(fiba, 70, 100)
    for t, s in [(96, 100), (80, 100), (70, 100), (100, 100), (101, 101), (85, 104)]:
        youngest = fiba.youngest()
        fiba.insert(t, 1000 + t)
        suffix.inserted(t, COLLECT.lift(1000 + t), t >= youngest)
        assert suffix.aggregate(fiba, s - 30, s, 20) == _expected(fiba, s - 30, s), t


SUM = monoid("sum")


def _combines_per_event(size: int, late_every: int, lateness: int = 20) -> tuple[float, float]:
    """Combines per event of keeping the window of ``size`` over ``4 * size`` events (every
    ``late_every``-th one ``lateness`` late; 0: none), and of asking the FiBA range query
    instead, on a FiBA holding ``2 * size`` entries."""
    counting = CountingMonoid(SUM)
    fiba = FiBA.from_sorted(counting, [(t, t) for t in range(2 * size)])
    suffix = WindowSuffix(counting, size)
    s = 2 * size - 1
    seen_lateness = 0
    kept = asked = 0
    for i in range(4 * size):
        s += 1
        t = s - lateness if late_every and i % late_every == 0 else s
        seen_lateness = max(seen_lateness, s - t)
        appended = t >= fiba.youngest()
        fiba.insert(t, 1)
        fiba.bulk_evict(s - 2 * size)
        before = counting.combines
        suffix.inserted(t, 1, appended)
        got = suffix.aggregate(fiba, s - size, s, seen_lateness)
        kept += counting.combines - before
        before = counting.combines
        assert got == fiba.aggregate_range(s - size, s)
        asked += counting.combines - before
    return kept / (4 * size), asked / (4 * size)


def test_in_order_events_cost_constant_combines():
    """In order, keeping a window costs 4-5 combines per event whatever its size (one
    append, two to answer, one per front entry and two range aggregates per rebuild of a few
    hundred entries), where the range query costs O(log m): 12 at 100 entries, 22 at 10,000."""
    small, _ = _combines_per_event(100, 0)
    large, large_query = _combines_per_event(10_000, 0)
    assert small <= 5 and large <= 5
    assert large_query >= 3 * large


def test_late_events_behind_the_split_cost_far_less_than_range_queries():
    """Every fifth event 20 late: after the first, the margin puts the late inserts behind
    the split, where they cost one suffix aggregate from the split (O(log b))."""
    kept, asked = _combines_per_event(10_000, 5)
    assert kept <= asked / 2
