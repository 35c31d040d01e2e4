"""The native per-key windows (``stores.native_windows``) against the Python ``KeyWindows``.

Hypothesis draws a configuration (every native aggregation alone and composes of them with
``first``/``last``/``maxcount``; one to three nested windows, equal sizes among them; both
skew rules with a fake clock; ``resolution``; both ``window_end`` modes; every ``emit`` mode)
and a program of steps (batches applied in slices with queries between, one-by-one
``accept``, ``accept_batch``, evictions, sweeps, ``forget``, ``restore`` from the entries, the
clock moving) over in-order, out-of-order, duplicate, late and future times and bad values,
drives both kernels with it and compares every output after every step: effects, rejections
(reason and detail), ``last``, records, lowered windows, evicted times, sweep output,
``query_range``, entries, keys, ``stream_time``. Values are small ints and halves, so sums
and means are exact whatever the combine order and must be equal; geomean and the stddevs
round differently in another combine order (the native windows come from one nested walk over
the native tree, the Python ones from Two-Stacks suffixes over another tree) and are compared
to 1e-9 relative. Ints near the ends of int64 check that their sums beyond it are the Python
path's. Each native window is also, to the bit, its own range query. Then the native combine
counts show the costs.
"""

from __future__ import annotations

import math
from dataclasses import fields, is_dataclass, replace
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import stores
from app.settings import Settings, WindowSpec
from stores.key_windows import KeyWindows, Rejected, WindowConfig
from stores.native_fiba import NATIVE_NAMES
from stores.native_windows import NativeKeyWindows, new_key_windows

pytestmark = pytest.mark.skipif(
    stores.native() is None, reason=f"no native core in this build ({stores.build()})"
)

INEXACT = {"geomean", "sample_stddev", "pop_stddev"}
COMPOSES = [
    ("sum", "count", "max"),
    ("sum", "mean", "max", "count", "last"),
    ("first", "maxcount", "min", "mincount", "pop_stddev"),
    ("last", "geomean", "sample_stddev", "first", "mean"),
    ("count",),
    ("count", "sum", "max", "mean", "pop_stddev"),  # the default, 9 fields
]
AGGREGATIONS = st.one_of(
    st.sampled_from([(name,) for name in NATIVE_NAMES]), st.sampled_from(COMPOSES)
)
KEYS = ("a", "b", "c", "d")
NUMBERS = st.one_of(st.integers(-4, 9), st.sampled_from([0.5, -1.5, 2.0, 3.5, 1e3]))
FOREIGN = st.sampled_from(["x", True, {"v": 1}, None, 2**70, float("nan")])


class Clock:
    """The worker's clock, moved by the test (seconds)."""

    def __init__(self) -> None:
        self.now = 0.25

    def __call__(self) -> float:
        return self.now


@st.composite
def configs(draw: Any) -> tuple[WindowConfig, str]:
    sizes = draw(st.lists(st.sampled_from([0, 7, 30, 50, 100]), min_size=1, max_size=3))
    settings_ = replace(
        Settings(),
        retention=100,
        windows=tuple(WindowSpec(f"w{i}_{size}", size) for i, size in enumerate(sizes)),
        aggregations=draw(AGGREGATIONS),
        max_future_skew=draw(st.sampled_from([None, 40])),
        max_wall_clock_skew=draw(st.sampled_from([None, 60])),
        resolution=draw(st.sampled_from([None, None, 3])),
        window_end=draw(st.sampled_from(["stream_time", "event_time"])),
    )
    return WindowConfig.from_settings(settings_), draw(
        st.sampled_from(["event", "changes", "batch"])
    )


def events(values: st.SearchStrategy[Any]) -> st.SearchStrategy[list[tuple[str, int, Any]]]:
    return st.lists(st.tuples(st.sampled_from(KEYS), st.integers(-30, 420), values), max_size=12)


def steps(values: st.SearchStrategy[Any]) -> st.SearchStrategy[list[tuple]]:
    step = st.one_of(
        st.tuples(st.just("apply"), events(values), st.integers(1, 6)),
        st.tuples(st.just("one"), st.sampled_from(KEYS), st.integers(-30, 420), values),
        st.tuples(st.just("accept_batch"), events(values)),
        st.tuples(st.just("evict"), st.sampled_from(KEYS)),
        st.tuples(st.just("sweep")),
        st.tuples(st.just("forget"), st.sampled_from(KEYS)),
        st.tuples(st.just("restore")),
        st.tuples(st.just("clock"), st.integers(0, 150)),
        st.tuples(
            st.just("query"), st.sampled_from(KEYS), st.integers(-40, 420), st.integers(-40, 420)
        ),
    )
    return st.lists(step, max_size=25)


def assert_same(native: Any, python: Any, inexact: bool, where: str = "") -> None:
    """Equal, floats to 1e-9 relative when ``inexact``; the same types throughout."""
    if isinstance(python, Rejected):
        assert isinstance(native, Rejected), where
        assert (native.reason, native.detail) == (python.reason, python.detail), where
        return
    assert type(native) is type(python), f"{where}: {native!r} vs {python!r}"
    if isinstance(python, float):
        if math.isnan(python):
            assert math.isnan(native), where
        elif inexact:
            assert math.isclose(native, python, rel_tol=1e-9, abs_tol=1e-12), (
                f"{where}: {native!r} vs {python!r}"
            )
        else:
            assert native == python, f"{where}: {native!r} vs {python!r}"
    elif isinstance(python, tuple | list):
        assert len(native) == len(python), f"{where}: {native!r} vs {python!r}"
        for i, (a, b) in enumerate(zip(native, python, strict=True)):
            assert_same(a, b, inexact, f"{where}[{i}]")
    elif isinstance(python, dict):
        assert list(native) == list(python), where
        for k in python:
            assert_same(native[k], python[k], inexact, f"{where}.{k}")
    elif is_dataclass(python):
        for f in fields(python):
            assert_same(
                getattr(native, f.name), getattr(python, f.name), inexact, f"{where}.{f.name}"
            )
    else:
        assert native == python, f"{where}: {native!r} vs {python!r}"


def same_state(native: NativeKeyWindows, python: KeyWindows, inexact: bool) -> None:
    assert native.stream_time == python.stream_time
    assert list(native) == list(python)
    assert len(native) == len(python)
    assert native.entry_count() == python.entry_count()
    for key in KEYS:
        assert (key in native) == (key in python)
        assert_same(native.entries(key), python.entries(key), inexact, f"entries {key}")


class Broken(Exception):
    """Both kernels raised the same error other than ``Rejected`` (the Python path's own,
    e.g. a string summed with ints inside a tree): their states are no longer comparable."""


def both(native: Any, python: Any, inexact: bool, call: Any, where: str) -> None:
    """``call`` on both kernels: the same result, or the same ``Rejected``; the same other
    error raises ``Broken``."""
    outcomes: list[Any] = []
    for kernel in (native, python):
        try:
            outcomes.append(call(kernel))
        except Rejected as rejected:
            outcomes.append(rejected)
        except Exception as error:  # compared below
            outcomes.append(error)
    errors = [type(o) for o in outcomes if isinstance(o, Exception) and not isinstance(o, Rejected)]
    if errors:
        assert errors == [type(outcomes[1])] * 2, f"{where}: {outcomes!r}"
        raise Broken(where)
    assert_same(outcomes[0], outcomes[1], inexact, where)


def run(config: WindowConfig, emit: str, program: list[tuple], moves: bool = False) -> None:
    clock = Clock()
    native = NativeKeyWindows(config, emit=emit, clock=clock)
    python = KeyWindows(config, emit=emit, clock=clock)
    inexact = bool(INEXACT & set(config.aggregations))
    try:
        steps_of(native, python, clock, inexact, program)
    except Broken:
        assert moves, "an error other than a rejection"
        return
    if not moves:
        assert native.native, "a native value moved the windows to the Python path"


def steps_of(
    native: NativeKeyWindows, python: KeyWindows, clock: Clock, inexact: bool, program: list
) -> None:
    for number, step in enumerate(program):
        where = f"step {number} {step[0]}"
        kind = step[0]
        if kind == "apply":
            batch, cut = step[1], step[2]
            for lo in range(0, len(batch), cut):
                piece = batch[lo : lo + cut]
                tags = [f"t{lo + i}" for i in range(len(piece))]
                both(native, python, inexact, lambda k, p=piece, t=tags: k.apply(p, t), where)
                for key in KEYS:  # queries between slices
                    both(native, python, inexact, lambda k, key=key: k.windows_of(key), where)
            for key in KEYS:
                both(native, python, inexact, lambda k, key=key: k.evict_expired(key), where)
                if python.stream_time is not None:
                    both(
                        native,
                        python,
                        inexact,
                        lambda k, key=key: k.lowered_windows(key, python.stream_time - 5),
                        where,
                    )
                    both(native, python, inexact, lambda k, key=key: k.record_of(key, 200), where)
        elif kind == "one":
            both(native, python, inexact, lambda k, s=step: k.accept(*s[1:]), where)
        elif kind == "accept_batch":
            both(native, python, inexact, lambda k, s=step: k.accept_batch(s[1]), where)
        elif kind == "evict":
            both(native, python, inexact, lambda k, s=step: k.evict_expired(s[1]), where)
        elif kind == "sweep":
            both(native, python, inexact, lambda k: k.sweep(), where)
        elif kind == "forget":
            if step[1] in python:
                native.forget(step[1])
                python.forget(step[1])
        elif kind == "restore":
            state = {key: python.entries(key) for key in python}
            both(native, python, inexact, lambda k, s=state: k.restore(s), where)
        elif kind == "clock":
            clock.now += step[1] / 1000
        elif kind == "query":
            both(native, python, inexact, lambda k, s=step: k.query_range(*s[1:]), where)
        same_state(native, python, inexact)
        if python.stream_time is not None:
            for key in KEYS:
                both(native, python, inexact, lambda k, key=key: k.windows_ending(key, 90), where)
                if native.native:
                    windows_are_their_range_queries(native, key, where)


def windows_are_their_range_queries(native: NativeKeyWindows, key: str, where: str) -> None:
    """Each of a key's windows (both ``window_end`` modes), answered together by one nested
    walk, is to the bit its own range query: a window's combine order depends on its span
    alone, not on the other windows asked with it."""
    core = native._core
    for windows in (core.lowered_of(key), core.lowered_ending(key, 90)):
        for name, start, end, lowered in windows:
            alone = core.query_range(key, start, end)
            assert repr(lowered) == repr(alone), f"{where}: {name} {lowered!r} vs {alone!r}"


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs(), program=steps(NUMBERS))
def test_native_windows_equal_the_python_ones(config, program):
    run(*config, program)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs(), program=steps(st.one_of(NUMBERS, FOREIGN)))
def test_values_without_a_native_partial_get_the_python_outcome(config, program):
    """Strings, bools, objects, ints beyond int64, NaN and None: refused as the Python lift
    refuses them, or the state moves to the Python path (same results either way)."""
    run(*config, program, moves=True)


def _config(aggregations: tuple[str, ...], sizes=(100,), retention: int = 100) -> WindowConfig:
    settings_ = replace(
        Settings(),
        retention=retention,
        windows=tuple(WindowSpec(f"w{size}", size) for size in sizes),
        aggregations=aggregations,
        max_future_skew=None,
        max_wall_clock_skew=None,
    )
    return WindowConfig.from_settings(settings_)


def test_a_string_for_max_moves_the_partition_to_the_python_path():
    native = NativeKeyWindows(_config(("max",)), emit="event")
    native.accept("k", 1, 5)
    assert native.native
    accepted = native.accept("s", 2, "zz")  # Python's max takes strings
    assert not native.native
    assert accepted.record.windows["w100"].aggregates["max"] == "zz"
    assert native.entries("k") == [(1, (5, 1))]  # the state moved with it
    assert native.entries("s") == [(2, ("zz", 1))]
    assert native.accept("k", 3, 7).record.windows["w100"].aggregates["max"] == 7


def test_a_value_the_python_lift_refuses_is_refused_with_its_detail():
    native = NativeKeyWindows(_config(("sum",)), emit="event")
    with pytest.raises(Rejected) as refused:
        native.apply_one("k", 1, None)
    assert refused.value.reason == "bad_value"
    assert refused.value.detail.startswith("cannot aggregate None: unsupported operand")
    assert native.native and native.stream_time is None


def test_the_factory_picks_the_native_kernel_for_native_parts_only():
    assert isinstance(new_key_windows(_config(("sum", "max", "last"))), NativeKeyWindows)
    assert type(new_key_windows(_config(("sum", "collect")))) is KeyWindows


def _combines_per_event(n: int, late: int) -> float:
    """Combines per event of ``n`` events applied one by one to one key, every ``late``-th
    one (0: none) 64 entries behind the young end; windows not asked."""
    native = NativeKeyWindows(_config(("sum", "count", "max"), retention=n // 2), emit="event")
    core = native._core
    for t in range(64):
        native.apply_one("k", t * 2, 1)
    core.reset_combines()
    for i in range(n):
        t = 128 + 2 * i
        if late and i % late == 0:
            t -= 129  # an odd time 64 entries back: a new entry out of order
        native.apply_one("k", t, 1)
    return core.combines / n


def test_in_order_events_cost_o1_combines_and_out_of_order_ones_o_log_d():
    small, large = _combines_per_event(2**10, 0), _combines_per_event(2**14, 0)
    assert small < 8 and large < 8  # insert and evict at the ends: O(1) (6.4), whatever n
    assert abs(large - small) < 0.5
    late = _combines_per_event(2**14, 8) - large  # one in 8 is 64 entries back
    assert 8 * late < 8 * math.log2(64) + 8  # O(log d) per out-of-order insert


def _nested_combines(sizes: tuple[int, ...]) -> tuple[int, int]:
    """Combines of a record's windows of the youngest ``sizes`` entries of 2^14 in-order
    events (one nested walk), and of the same windows asked one by one (``query_range``)."""
    native = NativeKeyWindows(_config(("sum", "count"), sizes=sizes, retention=2**15))
    for t in range(2**14):
        native.apply_one("k", t, 1)
    core = native._core
    core.reset_combines()
    lowered = native.lowered_windows("k", 2**14 - 1)
    assert [w[3]["count"] for w in lowered] == [size + 1 for size in sizes]
    together = core.combines
    core.reset_combines()
    for size in sizes:
        native.query_range("k", 2**14 - 1 - size, 2**14 - 1)
    return together, core.combines


def test_a_window_of_the_youngest_d_entries_costs_o_log_d_combines():
    """Windows narrower than the retained entries: one walk from the right finger, the
    spine's levels folded once, then O(log d) per window's boundary."""
    together, alone = _nested_combines((64, 2048))
    assert together < 2 * 4 * (math.log2(64) + math.log2(2048))
    assert together < alone
    # a third nested window adds its boundary's descent, not a walk from the finger
    three, _ = _nested_combines((64, 512, 2048))
    assert three - together < 4 * math.log2(512)


# --- the Faust API's state (stores.sliding_state) on native trees ------------------------------

SLIDING_PARTS = [("sum", "count", "max", "mean", "first"), ("count", "max", "last", "pop_stddev")]


def sliding_ops(values: st.SearchStrategy[Any]) -> st.SearchStrategy[list[tuple]]:
    return st.lists(
        st.tuples(
            st.sampled_from(["add", "add", "add", "put", "remove"]),
            st.sampled_from([0, 0, 0, 1]),
            st.sampled_from(KEYS[:2]),
            st.integers(-1, 25).map(lambda x: 3 * x),  # a grid: entries land on the horizon
            values,
        ),
        max_size=60,
    )


@settings(max_examples=200, deadline=None)
@example(  # an entry on the horizon as the stream time passes it: kept
    names=SLIDING_PARTS[0],
    ops=[("add", 0, "a", t, 1) for t in (0, 3, 18, 33)],
)
@given(names=st.sampled_from(SLIDING_PARTS), ops=sliding_ops(st.one_of(NUMBERS, st.just("zz"))))
def test_the_faust_api_state_on_native_trees_equals_the_python_one(names, ops):
    """``SlidingState`` with its parts given (native trees) against the same without (Python
    trees): every outcome, error, window, range and entry; a string for ``max`` moves its key
    to a Python tree."""
    same_sliding_states(names, ops)


def same_sliding_states(names: tuple[str, ...], ops: list[tuple]) -> None:
    """``ops`` on ``SlidingState`` on native trees and on Python ones: the same outcomes."""
    from stores.monoids import compose, monoid
    from stores.sliding_state import SlidingState

    parts = {name: monoid(name) for name in names}
    sizes = {"w3": 3, "w12": 12, "w30": 30}
    native = SlidingState(compose(parts), sizes, 30, 20, parts=parts)
    python = SlidingState(compose(parts), sizes, 30, 20)
    inexact = bool(INEXACT & set(names)) or "mean" in names
    for number, (op, partition, key, t, value) in enumerate(ops):
        where = f"op {number} {op}"
        outcomes: list[Any] = []
        for state in (native, python):
            try:
                if op == "add":
                    outcomes.append(state.add(partition, key, t, value))
                elif op == "put":
                    state.put(partition, key, t, state.lift(value))
                    outcomes.append(None)
                else:
                    outcomes.append(state.remove(partition, key, t))
            except ValueError as error:  # LateEvent, FutureEvent, KeyPartitionError, bad values
                outcomes.append((type(error), str(error)))
        assert_same(outcomes[0], outcomes[1], inexact, where)
        assert_same(list(native.entries()), list(python.entries()), inexact, where)
        for k in KEYS:
            assert_same(native.all_windows(k), python.all_windows(k), inexact, where)
            assert_same(native.range(k, 10, 60), python.range(k, 10, 60), inexact, where)


# --- int sums beyond int64: the Python path's exact results ------------------------------------

BIG = st.sampled_from([2**62, -(2**62), 2**63 - 1, -(2**63 - 1), -(2**63), 2**62 + 1])
BIG_INTS = st.one_of(st.integers(-4, 9), BIG)
"""Ints near the ends of int64 among small ones: each fits a native field, their sums may not."""


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(  # three events of one key in one batch (the lead's report)
    config=(_config(("sum", "count")), "batch"),
    program=[("apply", [("a", t, 2**62) for t in (1, 2, 3)], 6)],
)
@example(  # two events at one time: their partials combine into one entry
    config=(_config(("mean",)), "event"), program=[("one", "a", 5, 2**62), ("one", "a", 5, 2**62)]
)
@example(  # the sum of a restored entry and a new event, one at a time
    config=(_config(("count", "sum", "max")), "changes"),
    program=[("accept_batch", [("a", 1, 2**63 - 1)]), ("restore",), ("one", "a", 2, 1)],
)
@given(config=configs(), program=steps(BIG_INTS))
def test_int_sums_beyond_int64_get_the_python_results(config, program):
    """Sums of ints within int64 that leave it: the state moves to the Python path before
    they are combined, so every output is the Python one (exact ints)."""
    run(*config, program, moves=True)


def _restore_big(kernel: Any) -> Any:
    lift = kernel.config.lift
    kernel.restore({"a": [(1, lift(2**62)), (2, lift(2**62))]})
    return kernel.windows_of("a")


@pytest.mark.parametrize("aggregations", [("sum", "count"), ("mean",), ("count", "sum", "last")])
@pytest.mark.parametrize(
    "call",
    [
        lambda k: (
            k.apply([("a", t, 2**62) for t in (1, 2, 3)], [1, 2, 3]),
            k.lowered_windows("a", 3),
        ),
        lambda k: (k.apply([("a", 5, 2**62), ("a", 5, 2**62)], [0, 1]), k.windows_of("a")),
        lambda k: [k.accept("a", t, 2**62 + t).record for t in (1, 2)],
        _restore_big,
    ],
    ids=["batch", "one-time", "accept", "restore"],
)
def test_a_sum_beyond_int64_is_the_python_one_on_both_kernels(aggregations, call):
    config = _config(aggregations)
    native, python = NativeKeyWindows(config, emit="batch"), KeyWindows(config, emit="batch")
    assert_same(call(native), call(python), False, "outputs")
    assert not native.native
    same_state(native, python, False)
    lowered = python.query_range("a", 0, 10)[1]
    assert lowered.get("sum", 2**63) >= 2**63 and lowered.get("mean", 2**62) >= 2**62


def test_small_ints_and_big_maxima_stay_native():
    """``bench.worker_pipeline``'s common case (small numbers, restored entries) and ints of
    any size for aggregations that never add them keep the native kernel."""
    native = NativeKeyWindows(_config(("count", "sum", "max", "mean", "pop_stddev")), "batch")
    lift = native.config.lift
    native.restore({f"k{k}": [(t, lift(t % 7)) for t in range(-100, 0, 2)] for k in range(8)})
    for lo in range(0, 4000, 500):
        batch = [(f"k{i % 8}", i, (i % 2001) - 1000) for i in range(lo, lo + 500)]
        native.accept_batch(batch)
    assert native.native
    maxima = NativeKeyWindows(_config(("max", "min", "last", "first", "count")), "batch")
    maxima.accept_batch([("k", t, (-1) ** t * (2**63 - 1 - t)) for t in range(100)])
    assert maxima.native


def test_partials_are_stored_at_the_default_composes_width():
    """The default aggregations' partials are 9 fields wide in the native trees (they were 12:
    every suffix walk and every stored entry carried 3 unused fields), and any compose's width
    fits its kernel's."""
    default = NativeKeyWindows(_config(Settings().aggregations), "event")
    assert default._core.partial_width == 9
    assert NativeKeyWindows(_config(("sum", "count", "max")), "event")._core.partial_width == 3
    widths = [NativeKeyWindows(_config(n), "event")._core.partial_width for n in COMPOSES]
    assert widths == [3, 8, 12, 12, 1, 9]  # 3, 7, 10 and 12 fields (a count added), 1, 9


def test_large_values_stay_native_while_each_key_s_count_allows():
    """Past the O(1) rule (2**59 times the events taken overflows), each key's own count
    decides: at most 11 retained events of 2**59 fit int64, so the kernel stays native until
    a larger value comes."""
    config = _config(("sum", "count"), sizes=(10,), retention=10)
    native, python = NativeKeyWindows(config, "event"), KeyWindows(config, "event")
    for t in range(100):
        for key in ("a", "b"):
            assert_same(native.accept(key, t, 2**59), python.accept(key, t, 2**59), False, "")
    assert native.native
    assert_same(native.accept("a", 100, 2**62), python.accept("a", 100, 2**62), False, "")
    assert not native.native
    assert python.windows_of("a")["w10"].aggregates["sum"] == 10 * 2**59 + 2**62


@settings(max_examples=100, deadline=None)
@example(names=("sum", "count"), ops=[("add", 0, "a", t, 2**62) for t in (0, 3, 6)])
@example(names=("sum", "max"), ops=[("add", 0, "a", 3, 2**62), ("add", 0, "a", 3, 2**62)])
@example(  # changelog records (put) whose sum leaves int64
    names=SLIDING_PARTS[0],
    ops=[("put", 0, "a", 0, 2**62), ("put", 0, "a", 3, 2**62), ("add", 0, "a", 6, 1)],
)
@given(names=st.sampled_from([*SLIDING_PARTS, ("sum", "max")]), ops=sliding_ops(BIG_INTS))
def test_the_faust_api_state_with_int_sums_beyond_int64_equals_the_python_one(names, ops):
    """A key whose native tree might sum beyond int64 moves to a Python tree first."""
    same_sliding_states(names, ops)
