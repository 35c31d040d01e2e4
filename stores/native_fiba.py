"""The native FiBA (``stores._native``, Rust) behind the API of :class:`stores.fiba.FiBA`.

:func:`native_kinds` tells whether a monoid has a native twin: a built-in of
:mod:`stores.monoids` with a fixed-size partial (``count``, ``sum``, ``min``, ``max``,
``mean``, ``geomean``, ``sample_stddev``, ``pop_stddev``, ``maxcount``, ``mincount``,
``first``, ``last``), or a compose of them, given as the mapping of its parts. Inputs must be
ints within int64, floats or None (``count`` takes anything); times are int64 (the worker's
milliseconds). Partials cross as the Python monoid's own values and ``lower`` is the Python
monoid's function, so a native FiBA returns what :class:`stores.fiba.FiBA` with the same
monoid returns (bit for bit where the combine order is the same: always on ints).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import stores

NATIVE_NAMES = (
    "count",
    "sum",
    "min",
    "max",
    "mean",
    "geomean",
    "sample_stddev",
    "pop_stddev",
    "maxcount",
    "mincount",
    "first",
    "last",
)


def _builtin_name(monoid: Any) -> str | None:
    """The name of the built-in ``monoid`` is, if it is one of ``NATIVE_NAMES`` (the object
    itself, from the compiled or the pure-Python ``stores.monoids``)."""
    name = getattr(monoid, "name", None)
    module = sys.modules.get(type(monoid).__module__)
    if name not in NATIVE_NAMES or module is None or not hasattr(module, "monoid"):
        return None
    return name if module.monoid(name) is monoid else None


def native_kinds(monoid: Any) -> list[str] | None:
    """The native parts of ``monoid`` (a built-in, or a mapping of built-ins to compose), or
    None when it has no native twin."""
    if isinstance(monoid, Mapping):
        names = [_builtin_name(part) for part in monoid.values()]
        return None if not names or None in names else names  # type: ignore[return-value]
    name = _builtin_name(monoid)
    return None if name is None else [name]


def NativeFiBA(monoid: Any, min_arity: int = 4, partials: bool = False) -> Any:
    """A native FiBA for ``monoid``: a built-in of ``NATIVE_NAMES`` or a mapping of them (the
    parts of a :func:`stores.monoids.compose`, whose partials and lowered dicts it returns).
    ``partials`` (a compose only): ``insert``/``bulk_insert`` take the compose's partials, not
    inputs (``TypeError`` for a partial no native field can hold, e.g. a string for ``max``).
    ``ValueError`` when the monoid has no native twin, ``RuntimeError`` when the native core
    is not loaded (see :func:`stores.native`)."""
    module = stores.native()
    if module is None:
        raise RuntimeError(f"the native core is not loaded (build: {stores.build()})")
    kinds = native_kinds(monoid)
    if kinds is None:
        raise ValueError(f"no native twin for {monoid!r}")
    if isinstance(monoid, Mapping):
        from stores.monoids import compose

        lower = compose(monoid).lower
        return module.FiBA(kinds, lower, True, min_arity, partials)
    if partials:
        raise ValueError("partials need a compose (a mapping of built-ins)")
    lower = None if monoid.lower_is_identity else monoid.lower
    return module.FiBA(kinds, lower, False, min_arity)
