"""The two builds of the hot path: mypyc-compiled and pure Python (``stores.COMPILED``).

The switch ``FIBA_PURE_PYTHON=1`` loads the pure-Python sources even where compiled modules
exist, a compiled module built from another source is never loaded, and both builds give the
same results, bit for bit, on random workloads of every FiBA operation and of the per-key
windows (the whole suite also runs under both builds: ``make test``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import stores
from app.settings import Settings, WindowSpec
from stores import fiba, key_windows, monoids
from tests.test_monoids import outcome, random_partials, same_outcome

ROOT = Path(stores.__file__).resolve().parent.parent
COMPILED = stores.build().partition("+")[0] == "compiled"
needs_compiled = pytest.mark.skipif(
    not COMPILED, reason=f"the {stores.build()} build is loaded (no compiled modules, or off)"
)

_PROBE = (
    "import importlib, stores; "
    "print(stores.build(), *(importlib.import_module(m).__file__ for m in stores.COMPILED))"
)


def _probe(pythonpath: Path, pure: bool) -> tuple[list[str], str]:
    """``[build, the file of each module of COMPILED]`` and stderr of a fresh interpreter."""
    env = {k: v for k, v in os.environ.items() if k != stores.PURE_PYTHON_SWITCH}
    env["PYTHONPATH"] = str(pythonpath)
    if pure:
        env[stores.PURE_PYTHON_SWITCH] = "1"
    done = subprocess.run(
        [sys.executable, "-c", _PROBE],
        cwd=pythonpath,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split(), done.stderr


@needs_compiled
def test_the_switch_loads_the_pure_python_sources_where_compiled_modules_exist() -> None:
    compiled, _ = _probe(ROOT, pure=False)
    assert compiled[0].partition("+")[0] == "compiled"
    assert not any(path.endswith(".py") for path in compiled[1:])
    pure, _ = _probe(ROOT, pure=True)
    sources = [str(ROOT / (name.replace(".", "/") + ".py")) for name in stores.COMPILED]
    assert pure == ["pure", *sources]


@needs_compiled
def test_a_compiled_module_built_from_another_source_is_not_loaded(tmp_path: Path) -> None:
    """A copy of the build loads compiled; once a source changes, pure Python and a warning."""
    shutil.copytree(ROOT / "stores", tmp_path / "stores", ignore=shutil.ignore_patterns("target"))
    assert _probe(tmp_path, pure=False)[0][0].partition("+")[0] == "compiled"
    with (tmp_path / "stores/monoids.py").open("a") as source:
        source.write("# edited after the build\n")
    loaded, stderr = _probe(tmp_path, pure=False)
    assert loaded[0].partition("+")[0] == "pure"
    assert "compiled stores.monoids built from another source" in stderr


_PURE_FIBA = stores.load_pure("stores.fiba")
_PURE_MONOIDS = stores.load_pure("stores.monoids")
_PURE_KEY_WINDOWS = stores.load_pure("stores.key_windows")


def test_a_pure_twin_imports_the_pure_twins_of_the_compiled_modules() -> None:
    assert _PURE_KEY_WINDOWS.FiBA is _PURE_FIBA.FiBA
    assert _PURE_KEY_WINDOWS.compose is _PURE_MONOIDS.compose
    suffixes = stores.load_pure("stores.window_suffixes")
    assert _PURE_KEY_WINDOWS.WindowSuffix is suffixes.WindowSuffix
    assert suffixes.FiBA is _PURE_FIBA.FiBA
    assert key_windows.FiBA is fiba.FiBA  # the process's own modules are left as they were


_TIMES = st.integers(0, 60)
_VALUES = st.one_of(st.integers(-1000, 1000), st.floats(-1e6, 1e6, allow_nan=False))
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), _TIMES, _VALUES),
        st.tuples(st.just("evict"), _TIMES),
        st.tuples(st.just("bulk_insert"), st.lists(st.tuples(_TIMES, _VALUES), max_size=30)),
        st.tuples(st.just("bulk_evict"), _TIMES),
        st.tuples(st.just("query_range"), _TIMES, _TIMES),
    ),
    max_size=120,
)
_MONOIDS = ("sum", "mean", "sample_stddev", "collect", "argmax", "composed")


def _monoid(module: object, name: str) -> object:
    if name == "composed":
        return module.compose(
            {part: module.monoid(part) for part in ("sum", "mean", "max", "count", "last")}
        )
    if name == "argmax":  # (value, arg) pairs: the value, and its time-independent label
        inner = module.monoid("argmax")
        return module.premap(inner, lambda x: (x, repr(x)))
    return module.monoid(name)


def _trace(module: object, partials: object, name: str, min_arity: int, ops: list) -> list:
    """Every operation's outcome and the window after it, as ``repr`` (floats to the bit)."""
    tree = module.FiBA(_monoid(partials, name), min_arity)
    seen = []
    for clock, (op, *args) in enumerate(ops):
        if op == "bulk_insert":
            outcome = tree.bulk_insert(sorted((clock + t, x) for t, x in args[0]))
        elif op == "insert":
            outcome = tree.insert(clock + args[0], args[1])
        else:
            outcome = getattr(tree, op)(*(clock + t for t in args))
        seen.append(
            repr((outcome, tree.query(), len(tree), tree.oldest(), tree.youngest(), list(tree)))
        )
    if all(isinstance(x, int) for x in _values(ops)):
        # check_invariants recomputes every cached fold from scratch, left to right: with
        # floats (not associative) a fold the tree built in another order may differ in its
        # last bit, so the invariants are checked on exact (integer) workloads only; the
        # builds are compared bit for bit on every workload
        tree.check_invariants()
    return seen


def _values(ops: list) -> list:
    """Every value that ``ops`` insert."""
    values = []
    for op, *args in ops:
        if op == "insert":
            values.append(args[1])
        elif op == "bulk_insert":
            values.extend(x for _, x in args[0])
    return values


@needs_compiled
@settings(max_examples=60)
@given(name=st.sampled_from(_MONOIDS), min_arity=st.integers(2, 5), ops=_OPS)
@example(  # a float sum whose cached left-spine folds differ from a left fold in the last bit
    name="sum",
    min_arity=2,
    ops=[
        ("bulk_insert", [(0, -1), (3, 0)]),
        ("bulk_insert", [(0, 7.7213), (3, 0)]),
        ("insert", 0, 1),
    ],
)
def test_both_builds_give_identical_results(name: str, min_arity: int, ops: list) -> None:
    assert not fiba.__file__.endswith(".py") and _PURE_FIBA.__file__.endswith(".py")
    compiled = _trace(fiba, monoids, name, min_arity, ops)
    assert compiled == _trace(_PURE_FIBA, _PURE_MONOIDS, name, min_arity, ops)


_RECOGNISED = [
    n for n in monoids.monoid_names() if monoids.monoid(n).combine in monoids._COMBINE_FORMS
]


@needs_compiled
@settings(max_examples=60)
@given(data=st.data())
def test_both_builds_composed_combines_agree_on_random_partials(data: st.DataObject) -> None:
    """The compiled build composes with ``FieldwiseCombine``, the pure one with the generated
    function: the same results, bit for bit, or the same exception, on random partials. (Of
    the parts whose arithmetic they write themselves: the others' own functions are called,
    and, compiled, refuse ill-typed fields, as ``distinct_count`` a ``None``.)"""
    names = data.draw(st.lists(st.sampled_from(_RECOGNISED), min_size=1, max_size=7))
    compiled = monoids.compose({f"p{i}": monoids.monoid(n) for i, n in enumerate(names)})
    pure = _PURE_MONOIDS.compose({f"p{i}": _PURE_MONOIDS.monoid(n) for i, n in enumerate(names)})
    assert isinstance(compiled.combine, monoids.FieldwiseCombine)
    assert not isinstance(pure.combine, _PURE_MONOIDS.FieldwiseCombine)
    widths = [monoids._spliced_width(monoids.monoid(name)) for name in names]
    for _ in range(10):
        a, b = random_partials(data, widths)
        assert same_outcome(outcome(compiled.combine, a, b), outcome(pure.combine, a, b))


@pytest.mark.parametrize("pure", [False, True])
def test_fiba_version_names_the_build_loaded(pure: bool) -> None:
    env = {k: v for k, v in os.environ.items() if k != stores.PURE_PYTHON_SWITCH}
    if pure:
        env[stores.PURE_PYTHON_SWITCH] = "1"
    version = subprocess.run(
        [sys.executable, "-c", "from app.cli import main; main()", "--version"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    expected = _probe(ROOT, pure)[0][0]  # what a fresh process loads (this one may differ)
    assert version.startswith("fiba, version ") and f"(hot path: {expected})" in version


# Per-key windows: events at times relative to a clock advancing 1 ms per operation, mostly
# in order, some late (behind the retention of 100), some future (beyond the skew of 10 or the
# wall clock), some bad values; one by one (``accept``, or ``apply_one`` and
# ``lowered_windows``), columnar (``apply``, then per touched key ``evict_expired`` and
# ``record_of``, or ``accept_batch``), sweeps and range queries.
_EVENTS = st.tuples(
    st.sampled_from(("a", "a", "a", "a", "b", "c")),
    st.one_of(st.integers(-2, 2), st.integers(-130, 12)),
    st.one_of(
        st.integers(-1000, 1000),
        st.floats(-1e6, 1e6, allow_nan=False),
        st.sampled_from((None, {"value": 1})),  # values no aggregation here takes
    ),
)
_WINDOW_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("accept"), _EVENTS),
        st.tuples(st.just("apply_one"), _EVENTS),
        st.tuples(st.just("apply"), st.lists(_EVENTS, max_size=40)),
        st.tuples(st.just("accept_batch"), st.lists(_EVENTS, max_size=40)),
        st.tuples(st.just("sweep")),
        st.tuples(
            st.just("query_range"),
            st.sampled_from("abz"),
            st.integers(-120, 0),
            st.integers(-60, 10),
        ),
    ),
    min_size=150,  # enough answers of key "a" for its kept windows (WindowSuffix) to be used
    max_size=250,
)
_WINDOW_SETTINGS = st.builds(
    lambda aggregations, resolution, skew, window_end: replace(
        Settings(),
        windows=(WindowSpec("w10", 10), WindowSpec("w40", 40), WindowSpec("w100", 100)),
        retention=100,
        max_future_skew=10,
        max_wall_clock_skew=skew,
        resolution=resolution,
        aggregations=aggregations,
        window_end=window_end,
    ),
    st.sampled_from((("sum", "max", "mean", "pop_stddev", "collect"), ("count", "sum", "min"))),
    st.sampled_from((None, 4)),
    st.sampled_from((None, 100)),  # with the clock below: times beyond 150 are future
    st.sampled_from((key_windows.STREAM_TIME, key_windows.EVENT_TIME)),
)


def _window_config(module: object, partials: object, settings: Settings) -> object:
    """``module.WindowConfig.from_settings(settings)`` over the monoids of ``partials`` (the
    settings name built-ins; ``stores.aggregations`` would resolve them in the process's
    build, and the composed partial's layout differs with the build of its parts)."""
    parts = {name: partials.monoid(name) for name in (*settings.aggregations, "count")}
    composed = partials.compose(parts)
    return replace(
        module.WindowConfig.from_settings(settings),
        composed=composed,
        partial_monoid=module._prelifted(composed),
    )


def _windows_trace(
    module: object, partials: object, settings: Settings, emit: str, ops: list
) -> list[str]:
    """Every operation's outcome and the state after it, as ``repr`` (floats to the bit)."""
    config = _window_config(module, partials, settings)
    windows = module.KeyWindows(config, emit=emit, clock=lambda: 0.05)
    seen = []
    for step, (op, *args) in enumerate(ops):
        clock = step
        if op in ("accept", "apply_one"):
            key, dt, value = args[0]
            try:
                outcome = getattr(windows, op)(key, clock + dt, value)
            except module.Rejected as rejected:
                outcome = (rejected.reason, rejected.detail)
            if op == "apply_one":
                outcome = (outcome, windows.lowered_windows(key, clock + dt))
        elif op == "apply":
            events = [(key, clock + dt, value) for key, dt, value in args[0]]
            applied = windows.apply(events, range(len(events)))
            rejected = [(tag, why.reason, why.detail) for tag, why in applied.rejected]
            records = [
                (windows.evict_expired(key), windows.record_of(key, ts))
                for key, (_, ts) in applied.last.items()
            ]
            outcome = (applied.effects, rejected, applied.last, records)
        elif op == "accept_batch":
            events = [(key, clock + dt, value) for key, dt, value in args[0]]
            result = windows.accept_batch(events)
            outcomes = [
                (o.reason, o.detail) if isinstance(o, module.Rejected) else o
                for o in result.outcomes
            ]
            outcome = (outcomes, result.records, result.evicted, result.last_ts)
        elif op == "sweep":
            outcome = windows.sweep()
        else:
            key, lo, hi = args
            outcome = windows.query_range(key, clock + lo, clock + hi)
        state = [(key, windows.entries(key)) for key in windows]
        seen.append(repr((outcome, windows.stream_time, windows.entry_count(), state)))
    return seen


@needs_compiled
@settings(max_examples=30, deadline=None)
@given(
    window_settings=_WINDOW_SETTINGS,
    emit=st.sampled_from(("event", "changes", "batch")),
    ops=_WINDOW_OPS,
)
def test_both_builds_give_identical_key_windows(
    window_settings: Settings, emit: str, ops: list
) -> None:
    assert not key_windows.__file__.endswith(".py")
    compiled = _windows_trace(key_windows, monoids, window_settings, emit, ops)
    assert compiled == _windows_trace(_PURE_KEY_WINDOWS, _PURE_MONOIDS, window_settings, emit, ops)
