"""Aggregations by name: the built-ins, ``module:attribute`` import paths and entry points.

An ``aggregations`` entry names a monoid as a built-in (``sum``), an import path
``package.module:attr`` or an entry point of the group ``fiba_stream.monoids``, tried in that
order. ``check_monoid`` spot-checks a custom monoid before a worker starts (associativity and
the identity on generated inputs, the state codec round trip, a JSON form of every lowered
value) and raises ``AggregationError`` naming it. Details: docs/design/fiba.md; the setting:
docs/reference/configuration.md.
"""

from __future__ import annotations

import importlib
import json
import marshal
import math
import random
from importlib.metadata import entry_points
from itertools import pairwise
from typing import Any

from stores.monoids import monoid, monoid_names

ENTRY_POINT_GROUP = "fiba_stream.monoids"
MONOID_MEMBERS = ("identity", "lift", "combine", "lower")
SAMPLE_TRIPLES = 300


class AggregationError(ValueError):
    """An aggregation that cannot be used; ``str(exc)`` is one line naming it."""


def is_builtin(name: str) -> bool:
    """True for the names of ``stores.monoids.monoid``."""
    return name in monoid_names()


def resolve_aggregation(name: str) -> Any:
    """The monoid ``name`` stands for (see the module docstring); ``AggregationError`` when
    it names nothing importable or something that is no monoid. O(1) after the first import."""
    if is_builtin(name):
        return monoid(name)
    found = _imported(name) if ":" in name else _entry_point(name)
    _require_members(found, name)
    return found


def validated_monoid(spec: str | Any, name: str) -> Any:
    """The monoid ``spec`` stands for, checked as a worker checks its ``aggregations`` before it
    starts: a name (``resolve_aggregation``) or a monoid object, spot-checked by
    ``check_monoid`` unless it is a built-in. ``name`` names it in the errors; one
    ``AggregationError`` for any failure. O(``SAMPLE_TRIPLES``) combines for a custom monoid."""
    if isinstance(spec, str):
        found = resolve_aggregation(spec)
        builtin = is_builtin(spec)
    else:
        _require_members(spec, name)
        found, builtin = spec, _is_builtin_object(spec)
    if not builtin:
        check_monoid(found, name)
    return found


def _require_members(found: Any, name: str) -> None:
    missing = [member for member in MONOID_MEMBERS if not hasattr(found, member)]
    if missing:
        raise AggregationError(
            f"{name!r} is a {type(found).__name__}, not a monoid (it lacks {', '.join(missing)})"
        )


def _is_builtin_object(m: Any) -> bool:
    """True for an object whose name and ``combine`` are a built-in's, as ``argmax(...)`` and
    ``argmin(...)`` of ``stores.monoids`` with any fields (they lift mappings, which generated
    inputs are not); the others built there are spot-checked and pass."""
    name = getattr(m, "name", None)
    return isinstance(name, str) and is_builtin(name) and m.combine is monoid(name).combine


def _imported(path: str) -> Any:
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise AggregationError(f"{path!r} is not an import path (write package.module:attribute)")
    try:
        found: Any = importlib.import_module(module_name)
    except Exception as exc:  # any error of the user's module is a config error
        raise AggregationError(
            f"cannot import {path!r}: {type(exc).__name__}: {exc}".replace("\n", " ")
        ) from None
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise AggregationError(f"cannot import {path!r}: no attribute {part!r}") from None
    return found


def stored_name(name: str) -> str:
    """How the state shape (``stores.state_shape``) names aggregation ``name``: itself, or for
    an entry point ``name=module:attribute`` (its target), so that a package that points the
    name elsewhere is a changed shape, not state silently read by another monoid."""
    if is_builtin(name) or ":" in name:
        return name
    matches = entry_points(group=ENTRY_POINT_GROUP, name=name)
    return f"{name}={next(iter(matches)).value}" if matches else name


def _entry_point(name: str) -> Any:
    matches = entry_points(group=ENTRY_POINT_GROUP, name=name)
    if not matches:
        raise AggregationError(
            f"unknown aggregation {name!r} (built-ins: {', '.join(monoid_names())}; or "
            f"package.module:attribute, or an entry point of group {ENTRY_POINT_GROUP})"
        )
    entry = next(iter(matches))
    try:
        return entry.load()
    except Exception as exc:  # any error of the user's package is a config error
        raise AggregationError(
            f"cannot load entry point {name!r} ({entry.value}): {type(exc).__name__}: {exc}"
        ) from None


def json_form(value: Any) -> Any:
    """The JSON form of a lowered value that is no JSON type: what its ``to_json()`` returns
    (``stores.monoids.BloomFilter`` has one); ``TypeError`` for an object without one."""
    to_json = getattr(value, "to_json", None)
    if callable(to_json):
        return to_json()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def check_monoid(m: Any, name: str, seed: int = 0) -> None:
    """Spot-check ``m`` (see the module docstring); ``AggregationError`` saying what failed."""
    rng = random.Random(seed)
    inputs = list(getattr(m, "sample_inputs", None) or _generated_inputs(rng))
    lifted = []
    for x in inputs:
        try:
            lifted.append(m.lift(x))
        except Exception:  # an input this monoid does not take: not its sample
            continue
    if len(lifted) < 2:
        raise AggregationError(
            f"{name!r}: lift accepts fewer than 2 of the generated inputs; give the monoid a "
            "sample_inputs attribute (a list of inputs it takes)"
        )
    try:
        partials = [*lifted, *(m.combine(a, b) for a, b in pairwise(lifted))]
        for a in [m.identity, *partials]:
            _check_partial(m, name, a)
        for _ in range(SAMPLE_TRIPLES):
            a, b, c = (rng.choice(partials) for _ in range(3))
            left, right = m.combine(m.combine(a, b), c), m.combine(a, m.combine(b, c))
            if not _close(m.lower(left), m.lower(right)):
                raise AggregationError(
                    f"{name!r} is not associative: combine(combine(a, b), c) != "
                    f"combine(a, combine(b, c)) for partials {a!r}, {b!r}, {c!r}"
                )
    except AggregationError:
        raise
    except Exception as exc:
        raise AggregationError(
            f"{name!r} failed on generated partials: {type(exc).__name__}: {exc}"
        ) from None


def _check_partial(m: Any, name: str, a: Any) -> None:
    lowered = m.lower(a)
    for side in (m.combine(m.identity, a), m.combine(a, m.identity)):
        if not _close(m.lower(side), lowered):
            raise AggregationError(f"{name!r}: identity {m.identity!r} is not neutral for {a!r}")
    if not _close(m.lower(_codec_round_trip(m, name, a)), lowered):
        raise AggregationError(f"{name!r}: partial {a!r} changes through to_state/from_state")
    try:
        json.dumps(lowered, default=json_form)
    except (TypeError, ValueError) as exc:
        raise AggregationError(
            f"{name!r}: lowered value {lowered!r} has no JSON form: {exc}"
        ) from None


def _codec_round_trip(m: Any, name: str, a: Any) -> Any:
    """``a`` after the worker's state codec (``stores.window_store.MarshalStateCodec``)."""
    try:
        return marshal.loads(marshal.dumps(a, 4))
    except ValueError:
        pass
    to_state = getattr(m, "to_state", None)
    from_state = getattr(m, "from_state", None)
    if to_state is None or from_state is None:
        raise AggregationError(
            f"{name!r}: partial {a!r} is no plain value (int, float, str, tuple, list, dict...) "
            "and the monoid has no to_state/from_state to store it"
        )
    try:
        return from_state(marshal.loads(marshal.dumps(to_state(a), 4)))
    except ValueError:
        raise AggregationError(
            f"{name!r}: to_state of partial {a!r} is no plain value (int, float, str, tuple...)"
        ) from None


def _generated_inputs(rng: random.Random) -> list[Any]:
    ints = [rng.randint(-1000, 1000) for _ in range(12)]
    floats = [round(rng.uniform(-1000.0, 1000.0), 3) for _ in range(12)]
    return [1, 2, 3, *ints, *floats]


def _close(x: Any, y: Any) -> bool:
    """Equal, floats to a relative 1e-9 (float combines are associative up to rounding)."""
    if isinstance(x, float) or isinstance(y, float):
        if isinstance(x, int | float) and isinstance(y, int | float):
            return math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12) or (x != x and y != y)
        return False
    if isinstance(x, list | tuple) and isinstance(y, list | tuple):
        return len(x) == len(y) and all(map(_close, x, y))
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(_close(x[k], y[k]) for k in x)
    return bool(x == y)
