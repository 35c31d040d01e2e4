"""The two builds of the hot path: mypyc-compiled and pure Python (``stores.COMPILED``).

The switch ``FIBA_PURE_PYTHON=1`` loads the pure-Python sources even where compiled modules
exist, a compiled module built from another source is never loaded, and both builds give the
same results, bit for bit, on random workloads of every FiBA operation (the whole suite also
runs under both builds: ``make test``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stores
from stores import fiba, monoids
from tests.test_monoids import outcome, random_partials, same_outcome

ROOT = Path(stores.__file__).resolve().parent.parent
COMPILED = stores.build() == "compiled"
needs_compiled = pytest.mark.skipif(
    not COMPILED, reason=f"the {stores.build()} build is loaded (no compiled modules, or off)"
)

_PROBE = (
    "import stores, stores.fiba, stores.monoids; "
    "print(stores.build(), stores.fiba.__file__, stores.monoids.__file__)"
)


def _probe(pythonpath: Path, pure: bool) -> tuple[list[str], str]:
    """``[build, fiba's file, monoids' file]`` and stderr of a fresh interpreter."""
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
    assert compiled[0] == "compiled"
    assert not any(path.endswith(".py") for path in compiled[1:])
    pure, _ = _probe(ROOT, pure=True)
    assert pure == ["pure", str(ROOT / "stores/fiba.py"), str(ROOT / "stores/monoids.py")]


@needs_compiled
def test_a_compiled_module_built_from_another_source_is_not_loaded(tmp_path: Path) -> None:
    """A copy of the build loads compiled; once a source changes, pure Python and a warning."""
    shutil.copytree(ROOT / "stores", tmp_path / "stores")
    assert _probe(tmp_path, pure=False)[0][0] == "compiled"
    with (tmp_path / "stores/monoids.py").open("a") as source:
        source.write("# edited after the build\n")
    loaded, stderr = _probe(tmp_path, pure=False)
    assert loaded[0] == "pure"
    assert "compiled stores.monoids built from another source" in stderr


_PURE_FIBA = stores.load_pure("stores.fiba")
_PURE_MONOIDS = stores.load_pure("stores.monoids")

# Times relative to a clock that advances one step per operation: mostly a sliding window
# (in-order inserts, evictions at the old end), with out-of-order inserts and range queries.
_AHEAD = st.integers(-12, 2)
_BEHIND = st.integers(-40, -20)
_VALUES = st.one_of(st.integers(-1000, 1000), st.floats(-1e6, 1e6, allow_nan=False))
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), _AHEAD, _VALUES),
        st.tuples(st.just("evict"), _BEHIND),
        st.tuples(st.just("bulk_insert"), st.lists(st.tuples(_AHEAD, _VALUES), max_size=30)),
        st.tuples(st.just("bulk_evict"), _BEHIND),
        st.tuples(st.just("query_range"), _BEHIND, _AHEAD),
    ),
    min_size=1,
    max_size=150,
)
_MONOIDS = stores.load_pure("stores.monoids")

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
    tree.check_invariants()
    return seen


@needs_compiled
@settings(max_examples=60)
@given(name=st.sampled_from(_MONOIDS), min_arity=st.integers(2, 5), ops=_OPS)
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
