"""Aggregation monoids: the lift / combine / lower interface of the Reactive Aggregator paper.

A *monoid* here is any object with four members (Tangwongsan et al., VLDB 2015, Table 1):

- ``identity`` — the partial aggregate of the empty window;
- ``lift(x)`` — the partial aggregate of a window holding the single input ``x``;
- ``combine(a, b)`` — the partial aggregate of window ``a`` followed by window ``b``; it must be
  associative with ``identity`` as neutral element, but need be neither commutative nor
  invertible;
- ``lower(a)`` — the user-facing result of a whole window's partial aggregate.

Users can bring their own (duck typing; see :class:`Monoid`) or build one from four functions
with :func:`make_monoid`. The built-ins below are :class:`FunctionMonoid` values whose
``combine`` is a plain function or builtin (``sum`` combines with ``operator.add``), because
``combine`` is the hot path of every aggregator.

Partials are immutable values (ints, floats, tuples, ``None``), since window stores share and
persist them. Each built-in also offers a JSON-safe round trip of its partial state,
``to_state(partial)`` (a value :func:`json.dumps` accepts) and ``from_state(obj)`` (its
inverse, applied to what :func:`json.loads` returns), e.g. tuples travel as lists and the big
integers of ``bloom`` and ``distinct_count`` as hexadecimal strings.

Built-ins (by name through :func:`monoid`; lowered value of the empty window in brackets):

=================  ==========================================================  ===========
name               semantics                                                   empty
=================  ==========================================================  ===========
``count``          number of inputs                                            ``0``
``sum``            sum; exact for ints, plain float addition otherwise         ``0``
``min``/``max``    smallest / largest input (inputs must be mutually ordered)  ``None``
``mean``           arithmetic mean, compensated (Neumaier) sum                 ``None``
``geomean``        geometric mean via a compensated sum of logarithms          ``None``
``sample_stddev``  sample standard deviation (n - 1), Chan et al. combine      ``None``
``pop_stddev``     population standard deviation (n), Chan et al. combine      ``None``
``maxcount``       how many inputs equal the maximum                           ``0``
``mincount``       how many inputs equal the minimum                           ``0``
``argmax``         ``arg`` of the largest ``value``; ties: the oldest wins     ``None``
``argmin``         ``arg`` of the smallest ``value``; ties: the oldest wins    ``None``
``first``          oldest input (non-commutative)                              ``None``
``last``           youngest input (non-commutative)                            ``None``
``collect``        list of all inputs in window order (non-commutative)        ``[]``
``bloom``          Bloom filter of the inputs (the papers' expensive operator) empty filter
``distinct_count`` HyperLogLog estimate of the number of distinct inputs       ``0``
=================  ==========================================================  ===========

:func:`compose` makes one monoid out of several (partials are tuples, ``lower`` returns a
dict), so a single window serves many aggregations; :func:`premap` adapts a monoid's input
(e.g. picks a field out of a JSON object).

Numeric behaviour. ``sum`` and ``count`` are exact on ints; on floats ``sum`` is plain
left-to-right addition in the aggregator's combine order. ``mean`` keeps ``(n, s, c)`` where
``s + c`` is a Neumaier-compensated sum: its error is about one rounding of the true sum (plus
a second-order term in n·ε²·Σ|x|), however large the window and whatever the combine order;
ints stay exact (``c`` is then always ``0``). ``sample_stddev`` and ``pop_stddev`` keep
``(n, mean, M2)`` (M2 = sum of squared deviations) and combine with Chan, Golub and LeVeque's
parallel update, which avoids the catastrophic cancellation of the textbook
``sum(x²) - sum(x)²/n``: for 20 000 values 1e9 + U(0, 1) the textbook formula returns 0.0, this
one the standard deviation to a relative 2e-8. ``geomean`` keeps ``(n, s, c)`` with ``s + c`` a
compensated sum of ``log(x)``; it is defined for positive inputs only: ``lift`` raises
:class:`ValueError` for zero, negative or NaN input. Floating-point combine is associative only
up to rounding: different combine orders may differ in the last bits.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import operator
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from types import FunctionType
from typing import Any, Final

from stores.monoid_protocol import Monoid

__all__ = [
    "BloomFilter",
    "FunctionMonoid",
    "Monoid",
    "argmax",
    "argmin",
    "bloom",
    "compose",
    "distinct_count",
    "make_monoid",
    "monoid",
    "monoid_names",
    "premap",
]


def _same(x: Any) -> Any:
    """Identity function (lift/lower/state conversion of monoids whose values need none)."""
    return x


@dataclass(frozen=True, slots=True)
class FunctionMonoid:
    """A monoid assembled from plain functions; attribute access returns them unwrapped.

    ``to_state``/``from_state`` give a JSON-safe round trip of partials;
    ``commutative`` records whether ``combine(a, b) == combine(b, a)`` (informational).
    """

    name: str
    identity: Any
    lift: Callable[[Any], Any]
    combine: Callable[[Any, Any], Any]
    lower: Callable[[Any], Any]
    to_state: Callable[[Any], Any] = _same
    from_state: Callable[[Any], Any] = _same
    commutative: bool = False

    @property
    def lift_is_identity(self) -> bool:
        """Whether ``lift`` returns its input unchanged, so that a caller may skip the call."""
        return self.lift is _same

    @property
    def lower_is_identity(self) -> bool:
        """Whether ``lower`` returns its input unchanged, so that a caller may skip the call."""
        return self.lower is _same

    def __repr__(self) -> str:
        return f"<monoid {self.name}>"


def make_monoid(
    identity: Any,
    lift: Callable[[Any], Any],
    combine: Callable[[Any, Any], Any],
    lower: Callable[[Any], Any] = _same,
    *,
    name: str = "custom",
    to_state: Callable[[Any], Any] = _same,
    from_state: Callable[[Any], Any] = _same,
    commutative: bool = False,
) -> FunctionMonoid:
    """Build a monoid from its functions.

    The default ``to_state``/``from_state`` pass partials through unchanged, which is right
    when partials are already JSON-native (numbers, strings, ``None``, lists of those).
    """
    return FunctionMonoid(name, identity, lift, combine, lower, to_state, from_state, commutative)


# --- count, sum, min, max ----------------------------------------------------------------------


def _one(_x: Any) -> int:
    return 1


def _min(a: Any, b: Any) -> Any:
    """Smaller of ``a`` and ``b``, ``None`` being the identity; ties keep ``a``."""
    if a is None:
        return b
    if b is None or not b < a:
        return a
    return b


def _max(a: Any, b: Any) -> Any:
    """Larger of ``a`` and ``b``, ``None`` being the identity; ties keep ``a``."""
    if a is None:
        return b
    if b is None or not b > a:
        return a
    return b


COUNT = FunctionMonoid("count", 0, _one, operator.add, _same, commutative=True)
SUM = FunctionMonoid("sum", 0, _same, operator.add, _same, commutative=True)
MIN = FunctionMonoid("min", None, _same, _min, _same, commutative=True)
MAX = FunctionMonoid("max", None, _same, _max, _same, commutative=True)


def _tuple_or_none(obj: Any) -> Any:
    return None if obj is None else tuple(obj)


def _list_or_none(partial: Any) -> Any:
    return None if partial is None else list(partial)


# --- mean and geomean: compensated sums ---------------------------------------------------------


def _compensated_combine(a: tuple, b: tuple) -> tuple:
    """Combine ``(n, s, c)`` triples: counts add, ``s + c`` is a Neumaier-compensated sum.

    The rounding error of ``a.s + b.s`` is computed exactly (Fast2Sum on the operands ordered by
    magnitude) and accumulated in ``c``; on ints the error is always ``0``.
    """
    s1 = a[1]
    s2 = b[1]
    s = s1 + s2
    err = (s1 - s) + s2 if abs(s1) >= abs(s2) else (s2 - s) + s1
    return (a[0] + b[0], s, a[2] + b[2] + err)


def _mean_lift(x: Any) -> tuple:
    return (1, x, 0)


def _mean_lower(a: tuple) -> float | None:
    n = a[0]
    return (a[1] + a[2]) / n if n else None


def _geomean_lift(x: Any) -> tuple:
    if not x > 0:
        raise ValueError(f"geomean is defined for positive inputs only, got {x!r}")
    return (1, math.log(x), 0.0)


def _geomean_lower(a: tuple) -> float | None:
    n = a[0]
    return math.exp((a[1] + a[2]) / n) if n else None


MEAN = FunctionMonoid(
    "mean", (0, 0, 0), _mean_lift, _compensated_combine, _mean_lower, list, tuple, True
)
GEOMEAN = FunctionMonoid(
    "geomean",
    (0, 0.0, 0.0),
    _geomean_lift,
    _compensated_combine,
    _geomean_lower,
    list,
    tuple,
    True,
)


# --- standard deviations: Chan et al. ----------------------------------------------------------


def _moments_lift(x: Any) -> tuple:
    return (1, float(x), 0.0)


def _moments_combine(a: tuple, b: tuple) -> tuple:
    """Chan, Golub, LeVeque parallel update of ``(n, mean, M2)`` (M2 = sum of squared devs)."""
    na = a[0]
    if not na:
        return b
    nb = b[0]
    if not nb:
        return a
    n = na + nb
    delta = b[1] - a[1]
    return (n, a[1] + delta * nb / n, a[2] + b[2] + delta * delta * na * nb / n)


def _sample_stddev_lower(a: tuple) -> float | None:
    n = a[0]
    return math.sqrt(max(a[2], 0.0) / (n - 1)) if n > 1 else None


def _pop_stddev_lower(a: tuple) -> float | None:
    n = a[0]
    return math.sqrt(max(a[2], 0.0) / n) if n else None


SAMPLE_STDDEV = FunctionMonoid(
    "sample_stddev",
    (0, 0.0, 0.0),
    _moments_lift,
    _moments_combine,
    _sample_stddev_lower,
    list,
    tuple,
    True,
)
POP_STDDEV = FunctionMonoid(
    "pop_stddev",
    (0, 0.0, 0.0),
    _moments_lift,
    _moments_combine,
    _pop_stddev_lower,
    list,
    tuple,
    True,
)


# --- maxcount, mincount --------------------------------------------------------------------------


def _count_lift(x: Any) -> tuple:
    return (x, 1)


def _maxcount_combine(a: tuple, b: tuple) -> tuple:
    """``(max, count)``: pick the higher maximum, add the counts if equal; ``count 0`` = empty."""
    if not a[1]:
        return b
    if not b[1]:
        return a
    if b[0] > a[0]:
        return b
    if a[0] > b[0]:
        return a
    return (a[0], a[1] + b[1])


def _mincount_combine(a: tuple, b: tuple) -> tuple:
    """``(min, count)``: pick the lower minimum, add the counts if equal; ``count 0`` = empty."""
    if not a[1]:
        return b
    if not b[1]:
        return a
    if b[0] < a[0]:
        return b
    if a[0] < b[0]:
        return a
    return (a[0], a[1] + b[1])


_second = operator.itemgetter(1)

MAXCOUNT = FunctionMonoid(
    "maxcount", (None, 0), _count_lift, _maxcount_combine, _second, list, tuple, True
)
MINCOUNT = FunctionMonoid(
    "mincount", (None, 0), _count_lift, _mincount_combine, _second, list, tuple, True
)


# --- argmax, argmin -------------------------------------------------------------------------------


def _arg_lifter(value_field: Hashable, arg_field: Hashable) -> Callable[[Any], tuple]:
    def lift(x: Any) -> tuple:
        if type(x) is dict or isinstance(x, Mapping):  # JSON objects are dicts: fast path
            return (x[value_field], x[arg_field])
        value, arg = x
        return (value, arg)

    return lift


def _argmax_combine(a: tuple | None, b: tuple | None) -> tuple | None:
    """``(value, arg)`` with the larger value; on a tie the first (older) one is kept."""
    if a is None:
        return b
    if b is None or not b[0] > a[0]:
        return a
    return b


def _argmin_combine(a: tuple | None, b: tuple | None) -> tuple | None:
    """``(value, arg)`` with the smaller value; on a tie the first (older) one is kept."""
    if a is None:
        return b
    if b is None or not b[0] < a[0]:
        return a
    return b


def _arg_lower(a: tuple | None) -> Any:
    return None if a is None else a[1]


def argmax(value_field: Hashable = "value", arg_field: Hashable = "arg") -> FunctionMonoid:
    """``arg`` of the input with the largest ``value`` (Table 1's ArgMax).

    An input is either a mapping (e.g. a JSON object) read at ``value_field`` and ``arg_field``,
    or a ``(value, arg)`` pair. Ties break deterministically towards the oldest input (the
    first in window order), so combine is not commutative. Empty window: ``None``.
    """
    return FunctionMonoid(
        "argmax",
        None,
        _arg_lifter(value_field, arg_field),
        _argmax_combine,
        _arg_lower,
        _list_or_none,
        _tuple_or_none,
    )


def argmin(value_field: Hashable = "value", arg_field: Hashable = "arg") -> FunctionMonoid:
    """``arg`` of the input with the smallest ``value``; same input and tie rules as argmax."""
    return FunctionMonoid(
        "argmin",
        None,
        _arg_lifter(value_field, arg_field),
        _argmin_combine,
        _arg_lower,
        _list_or_none,
        _tuple_or_none,
    )


# --- first, last, collect: non-commutative ------------------------------------------------------
# first/last keep ``()`` (empty) or ``(x,)``: the empty tuple is falsy and every 1-tuple truthy,
# so ``a or b`` is first's combine whatever x is (None and 0 included).


def _singleton(x: Any) -> tuple:
    return (x,)


def _first_combine(a: tuple, b: tuple) -> tuple:
    return a or b


def _last_combine(a: tuple, b: tuple) -> tuple:
    return b or a


def _only_or_none(a: tuple) -> Any:
    return a[0] if a else None


FIRST = FunctionMonoid("first", (), _singleton, _first_combine, _only_or_none, list, tuple)
LAST = FunctionMonoid("last", (), _singleton, _last_combine, _only_or_none, list, tuple)
COLLECT = FunctionMonoid("collect", (), _singleton, operator.add, list, list, tuple)
"""Inputs in window order; combine is tuple concatenation, O(len(a) + len(b))."""


# --- hashing shared by bloom and distinct_count ---------------------------------------------------


def _stable_bytes(x: Any) -> bytes:
    """Process-independent encoding of an input (Python's ``hash`` of str is salted).

    Strings and bytes are hashed as themselves; anything else by its canonical JSON text
    (sorted keys), falling back to ``repr`` for non-JSON values. Hence ``1`` and ``1.0`` are
    different items, as they are in JSON text.
    """
    if isinstance(x, str):
        return b"s" + x.encode()
    if isinstance(x, bytes):
        return b"b" + x
    return b"j" + json.dumps(x, sort_keys=True, separators=(",", ":"), default=repr).encode()


def _hash64(x: Any) -> int:
    return int.from_bytes(hashlib.blake2b(_stable_bytes(x), digest_size=8).digest(), "little")


# --- bloom ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BloomFilter:
    """The lowered value of the ``bloom`` monoid: an immutable Bloom filter over ``m`` bits.

    ``item in f`` never answers ``False`` for an item that was inserted; it may answer ``True``
    for one that was not (with probability about the configured ``error_rate`` while at most
    ``capacity`` distinct items were inserted).
    """

    bits: int
    m: int
    k: int

    def __contains__(self, item: Any) -> bool:
        probe = _bloom_positions(item, self.m, self.k)
        return self.bits & probe == probe

    def to_json(self) -> dict[str, Any]:
        """The filter as JSON: ``{"m": bits, "k": hash functions, "bits": base64}``, where
        ``bits`` is base64 (RFC 4648, padded) of the ``ceil(m / 8)`` bytes of the bit set,
        little endian (bit ``i`` is bit ``i % 8`` of byte ``i // 8``). O(m)."""
        raw = self.bits.to_bytes((self.m + 7) // 8, "little")
        return {"m": self.m, "k": self.k, "bits": base64.b64encode(raw).decode("ascii")}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> BloomFilter:
        """The filter of a ``to_json`` object (membership tests then work as on the
        original); ``ValueError`` if ``obj`` is not one. O(m)."""
        try:
            m, k = int(obj["m"]), int(obj["k"])
            bits = int.from_bytes(base64.b64decode(obj["bits"], validate=True), "little")
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a bloom filter: {exc}") from None
        if m < 1 or k < 1 or bits.bit_length() > m:
            raise ValueError(f"not a bloom filter: m={m}, k={k}, {bits.bit_length()} bits")
        return cls(bits, m, k)

    def estimated_count(self) -> float:
        """Swamidass-Baldi estimate of the number of distinct items inserted."""
        ones = self.bits.bit_count()
        if ones >= self.m:
            return math.inf
        return -self.m / self.k * math.log1p(-ones / self.m)


def _bloom_positions(item: Any, m: int, k: int) -> int:
    """Bit mask of the ``k`` positions of ``item`` (Kirsch-Mitzenmacher double hashing)."""
    digest = hashlib.blake2b(_stable_bytes(item), digest_size=16).digest()
    h1 = int.from_bytes(digest[:8], "little")
    h2 = int.from_bytes(digest[8:], "little") | 1
    mask = 0
    for i in range(k):
        mask |= 1 << ((h1 + i * h2) % m)
    return mask


def _hex(bits: int) -> str:
    return format(bits, "x")


def _unhex(text: str) -> int:
    return int(text, 16)


def bloom(capacity: int = 1024, error_rate: float = 0.01) -> FunctionMonoid:
    """Bloom filter of the inputs, sized for ``capacity`` distinct items at ``error_rate``.

    The partial is the filter's bit set as a Python int (``m`` bits, ``k`` hash functions with
    ``m = -capacity·ln(error_rate)/ln(2)²`` and ``k = round(m/capacity·ln 2)``); lift hashes the
    input (see ``_stable_bytes``), combine is bitwise or (commutative, idempotent), lower wraps
    the bits in a :class:`BloomFilter` (in output records: its ``to_json`` form). Empty window: a
    filter containing nothing.
    """
    if capacity < 1 or not 0.0 < error_rate < 1.0:
        raise ValueError("bloom needs capacity >= 1 and 0 < error_rate < 1")
    m = max(8, math.ceil(-capacity * math.log(error_rate) / math.log(2) ** 2))
    k = max(1, round(m / capacity * math.log(2)))

    def lift(x: Any) -> int:
        return _bloom_positions(x, m, k)

    def lower(bits: int) -> BloomFilter:
        return BloomFilter(bits, m, k)

    return FunctionMonoid("bloom", 0, lift, operator.or_, lower, _hex, _unhex, True)


# --- distinct_count: HyperLogLog ------------------------------------------------------------------
# The 2^p registers live in one Python int, one byte per register (register i = byte i, little
# endian); register values never exceed 64 - p + 1 < 128, so the register-wise maximum of two
# sketches is computed for all registers at once with SWAR arithmetic on the ints.


def distinct_count(precision: int = 12) -> FunctionMonoid:
    """HyperLogLog estimate of the number of distinct inputs (Flajolet et al. 2007).

    ``precision`` p in [4, 16] gives m = 2^p registers and a relative standard error of about
    ``1.04 / sqrt(m)`` (1.6 % for the default p = 12); small cardinalities (estimate below
    2.5·m) use linear counting and are nearly exact. Partials are mergeable sketches: combine is
    the register-wise maximum (commutative, idempotent), so the union of overlapping windows is
    estimated correctly. A partial takes up to m bytes. Inputs are hashed as in ``bloom``.
    Lower returns an int; the empty window gives ``0``.
    """
    if not 4 <= precision <= 16:
        raise ValueError(f"distinct_count precision must be in [4, 16], got {precision}")
    p = precision
    m = 1 << p
    width = 64 - p
    low_mask = (1 << width) - 1
    high_bits = int.from_bytes(b"\x80" * m, "little")
    alpha = 0.7213 / (1 + 1.079 / m)
    inverse_powers = [2.0**-r for r in range(width + 2)]

    def lift(x: Any) -> int:
        h = _hash64(x)
        rank = width - (h & low_mask).bit_length() + 1
        return rank << (8 * (h >> width))

    def combine(a: int, b: int) -> int:
        if not a:
            return b
        if not b:
            return a
        a_wins = (((a | high_bits) - b) & high_bits) >> 7  # 1 in each byte where a >= b
        keep_a = a_wins * 0xFF
        return (a & keep_a) | (b & ~keep_a)

    def lower(a: int) -> int:
        if not a:
            return 0
        registers = a.to_bytes(m, "little")
        estimate = alpha * m * m / sum(map(inverse_powers.__getitem__, registers))
        zeros = registers.count(0)
        if estimate <= 2.5 * m and zeros:
            estimate = m * math.log(m / zeros)
        return round(estimate)

    return FunctionMonoid("distinct_count", 0, lift, combine, lower, _hex, _unhex, True)


# --- compose, premap ------------------------------------------------------------------------------


def compose(parts: Mapping[str, Any]) -> FunctionMonoid:
    """One monoid computing several aggregations of the same input at once.

    ``parts`` maps result names to monoids (any objects with the monoid members). Combine
    combines component-wise, and lower returns ``{name: part.lower(...)}``. Each part's input is
    the whole input (wrap a part with :func:`premap` to feed it one field). State round-trips
    through each part's ``to_state``/``from_state`` when it has them: ``to_state`` gives the
    list of the parts' states, whatever the partial's layout.

    The partial is one flat tuple: the parts' partials in ``parts`` order, except that the
    three fields of each triple partial (``mean``, ``geomean``, ``sample_stddev``,
    ``pop_stddev``: the parts combined by their ``(n, s, c)`` or ``(n, mean, M2)`` combine) are
    spliced in place of the triple. ``compose({"count": ..., "mean": ...})`` keeps
    ``(count, n, s, c)``, not ``(count, (n, s, c))``. A tuple of numbers only is untracked by
    CPython's cyclic collector at its first young collection; a nested one is not (the
    collector meets the outer tuple before its inner ones and keeps it tracked for one more,
    older, collection), so the spliced layout keeps the windows' partials out of the older
    generations, where they made every generation-1 and full collection long. It also saves
    two tuple objects per partial and their allocation per combine.

    The five functions are generated (``exec``) for the given parts: tuples are unpacked and
    built directly, the parts' functions are bound as default arguments, and the bodies of the
    built-ins' own functions (``operator.add``, the min/max/mean/stddev combines, the identity
    lift/lower...) are written inline, recognised by identity, so a composed combine costs
    about the sum of its parts' combines. The results are those of the parts' functions,
    bit for bit, and a partial of the wrong length raises
    ``ValueError`` as with ``zip``.
    """
    if not parts:
        raise ValueError("compose needs at least one monoid")
    names = tuple(parts)
    monoids = tuple(parts.values())
    identity: list[Any] = []
    for m in monoids:
        if _spliced_width(m):
            identity.extend(m.identity)
        else:
            identity.append(m.identity)
    return FunctionMonoid(
        "compose(" + ",".join(names) + ")",
        tuple(identity),
        _generated_lift(monoids),
        FieldwiseCombine(monoids) if _runs_compiled() else _generated_combine(monoids),
        _generated_lower(names, monoids),
        _generated_to_state(monoids),
        _generated_from_state(monoids),
        all(getattr(m, "commutative", False) for m in monoids),
    )


# Inline bodies of built-in functions, by identity. Expressions use {x} (the argument) or {a},
# {b} (the two partials); statement blocks assign {r} and name their temporaries {t}*. Each is
# the same arithmetic, in the same order, as the function it stands for. The parts whose
# combine has a spliced form in ``_COMBINE_FORMS`` (fixed-size tuple partials: their width and
# block) are spliced: written over their fields, {x0}, {x1}, ... (one partial), {a0}..., {b0}...
# (two partials), {r0}... (the result).
_INLINE_LIFTS: dict[Any, str] = {
    _same: "{x}",
    _one: "1",
    _singleton: "({x},)",
    _count_lift: "({x}, 1)",
}
_INLINE_SPLICED_LIFTS: dict[Any, str] = {
    _mean_lift: "1, {x}, 0",
    _moments_lift: "1, float({x}), 0.0",
}

# The combines compose recognises, by identity: each one's operation code in the compiled
# combine (``FieldwiseCombine``), its width (0: its partial is kept whole, else the number of
# fields it is spliced into) and the generated combine's inline form (an expression over {a},
# {b}, or a statement block). One table, so the compiled and the generated combine recognise
# the same parts and splice them alike.
_ADD: Final = 1
_OR: Final = 2
_MIN: Final = 3
_MAX: Final = 4
_FIRST: Final = 5
_LAST: Final = 6
_COMPENSATED: Final = 7
_MOMENTS: Final = 8
_CALL: Final = 0
"""A part whose combine is not in ``_COMBINE_FORMS``: its own function is called."""
_COMBINE_FORMS: dict[Any, tuple[int, int, tuple[str, ...]]] = {
    operator.add: (_ADD, 0, ("{a} + {b}",)),
    operator.or_: (_OR, 0, ("{a} | {b}",)),
    _min: (_MIN, 0, ("{b} if {a} is None else ({a} if {b} is None or not {b} < {a} else {b})",)),
    _max: (_MAX, 0, ("{b} if {a} is None else ({a} if {b} is None or not {b} > {a} else {b})",)),
    _first_combine: (_FIRST, 0, ("{a} or {b}",)),
    _last_combine: (_LAST, 0, ("{b} or {a}",)),
    _compensated_combine: (
        _COMPENSATED,
        3,
        (
            "{r1} = {a1} + {b1}",
            "{r0} = {a0} + {b0}",
            "{r2} = {a2} + {b2} + (({a1} - {r1}) + {b1} "
            "if abs({a1}) >= abs({b1}) else ({b1} - {r1}) + {a1})",
        ),
    ),
    _moments_combine: (
        _MOMENTS,
        3,
        (
            "if not {a0}:",
            "    {r0}, {r1}, {r2} = {b0}, {b1}, {b2}",
            "elif not {b0}:",
            "    {r0}, {r1}, {r2} = {a0}, {a1}, {a2}",
            "else:",
            "    {r0} = {a0} + {b0}",
            "    {t}d = {b1} - {a1}",
            "    {r1} = {a1} + {t}d * {b0} / {r0}",
            "    {r2} = {a2} + {b2} + {t}d * {t}d * {a0} * {b0} / {r0}",
        ),
    ),
}
_INLINE_LOWERS: dict[Any, str] = {
    _same: "{x}",
    _only_or_none: "({x}[0] if {x} else None)",
    _second: "{x}[1]",
}
_INLINE_SPLICED_LOWERS: dict[Any, str] = {
    _mean_lower: "(({x1} + {x2}) / {x0} if {x0} else None)",
    _pop_stddev_lower: "(sqrt(max({x2}, 0.0) / {x0}) if {x0} else None)",
    _sample_stddev_lower: "(sqrt(max({x2}, 0.0) / ({x0} - 1)) if {x0} > 1 else None)",
}
_GLOBALS = {"sqrt": math.sqrt}


def _spliced_width(m: Any) -> int:
    """How many fields part ``m``'s partial is spliced into (0: it is kept whole)."""
    form = _COMBINE_FORMS.get(m.combine)
    return 0 if form is None else form[1]


def _fields(prefix: str, index: int, m: Any) -> list[str]:
    """The names of part ``index``'s field(s) in the composed partial (one if kept whole)."""
    width = _spliced_width(m)
    if not width:
        return [f"{prefix}{index}"]
    return [f"{prefix}{index}_{j}" for j in range(width)]


def _flat(fields: list[list[str]]) -> list[str]:
    """Every part's field names in order: the composed partial's layout."""
    return [name for part in fields for name in part]


def _packed(fields: list[str]) -> str:
    """The part's own partial built back from its fields: ``(a1_0, a1_1, a1_2)``."""
    return f"({', '.join(fields)},)"


def _generate(name: str, params: str, bound: list[Any], body: list[str]) -> Callable[..., Any]:
    """The function ``def name(params, _f0=bound[0], ...): body`` (``body`` indented lines)."""
    defaults = "".join(f", _f{i}=_f{i}" for i in range(len(bound)))
    source = "\n".join([f"def {name}({params}{defaults}):", *("    " + line for line in body)])
    namespace = dict(_GLOBALS, **{f"_f{i}": f for i, f in enumerate(bound)})
    exec(compile(source, f"<compose {name}>", "exec"), namespace)
    return namespace[name]


def _unpack(source: str, names: list[str]) -> str:
    """``a0, a1_0, a1_1, = a``: raises ``ValueError`` unless ``a`` has exactly those items."""
    return "".join(f"{name}, " for name in names) + f"= {source}"


def _bind(bound: list[Any], f: Any) -> str:
    """The name under which the generated function calls ``f``."""
    bound.append(f)
    return f"_f{len(bound) - 1}"


def _generated_lift(monoids: tuple[Any, ...]) -> Callable[[Any], tuple]:
    bound: list[Any] = []
    items = []
    for m in monoids:
        if _spliced_width(m):
            template = _INLINE_SPLICED_LIFTS.get(m.lift) or f"*{_bind(bound, m.lift)}({{x}})"
        else:
            template = _INLINE_LIFTS.get(m.lift) or f"{_bind(bound, m.lift)}({{x}})"
        items.append(template.format(x="x"))
    return _generate("lift", "x", bound, [f"return ({', '.join(items)},)"])


def _generated_combine(monoids: tuple[Any, ...]) -> Callable[[Any, Any], tuple]:
    bound: list[Any] = []
    a_fields = [_fields("a", i, m) for i, m in enumerate(monoids)]
    b_fields = [_fields("b", i, m) for i, m in enumerate(monoids)]
    body = [_unpack("a", _flat(a_fields)), _unpack("b", _flat(b_fields))]
    items = []
    for i, m in enumerate(monoids):
        if _spliced_width(m):
            r_fields = _fields("r", i, m)
            block = _COMBINE_FORMS[m.combine][2]
            names = {"t": f"t{i}_"}
            for prefix, fields in (("a", a_fields[i]), ("b", b_fields[i]), ("r", r_fields)):
                names.update({f"{prefix}{j}": field for j, field in enumerate(fields)})
            body += [line.format(**names) for line in block]
            items.extend(r_fields)
            continue
        form = _COMBINE_FORMS.get(m.combine)
        template = form[2][0] if form else f"{_bind(bound, m.combine)}({{a}}, {{b}})"
        items.append(f"({template.format(a=a_fields[i][0], b=b_fields[i][0])})")
    return _generate("combine", "a, b", bound, [*body, f"return ({', '.join(items)},)"])


def _generated_lower(names: tuple[str, ...], monoids: tuple[Any, ...]) -> Callable[[tuple], dict]:
    bound: list[Any] = []
    fields = [_fields("a", i, m) for i, m in enumerate(monoids)]
    items = []
    for i, m in enumerate(monoids):
        if _spliced_width(m):
            template = _INLINE_SPLICED_LOWERS.get(m.lower)
            if template is None:
                value = f"{_bind(bound, m.lower)}({_packed(fields[i])})"
            else:
                value = template.format(**{f"x{j}": field for j, field in enumerate(fields[i])})
        else:
            template = _INLINE_LOWERS.get(m.lower) or f"{_bind(bound, m.lower)}({{x}})"
            value = template.format(x=fields[i][0])
        items.append(f"{_bind(bound, names[i])}: {value}")
    body = [_unpack("a", _flat(fields)), f"return {{{', '.join(items)}}}"]
    return _generate("lower", "a", bound, body)


def _generated_to_state(monoids: tuple[Any, ...]) -> Callable[[tuple], list]:
    """``[to_state0(part0), to_state1(part1), ...]``, spliced parts packed back first;
    identity functions are left out."""
    bound: list[Any] = []
    fields = [_fields("a", i, m) for i, m in enumerate(monoids)]
    items = []
    for i, m in enumerate(monoids):
        part = _packed(fields[i]) if _spliced_width(m) else fields[i][0]
        f = getattr(m, "to_state", _same)
        items.append(part if f is _same else f"{_bind(bound, f)}({part})")
    body = [_unpack("a", _flat(fields)), f"return [{', '.join(items)}]"]
    return _generate("to_state", "a", bound, body)


def _generated_from_state(monoids: tuple[Any, ...]) -> Callable[[list], tuple]:
    """The partial of ``[state0, state1, ...]``: ``from_state`` per part, spliced parts'
    fields spliced in; identity functions are left out."""
    bound: list[Any] = []
    items = []
    for i, m in enumerate(monoids):
        f = getattr(m, "from_state", _same)
        value = f"a{i}" if f is _same else f"{_bind(bound, f)}(a{i})"
        items.append(f"*{value}" if _spliced_width(m) else value)
    body = [
        _unpack("a", [f"a{i}" for i in range(len(monoids))]),
        f"r = ({', '.join(items)},)",
        f"if len(r) != {sum(max(1, _spliced_width(m)) for m in monoids)}:",
        "    raise ValueError(f'a state of {len(r)} fields, not the partial of its parts')",
        "return r",
    ]
    return _generate("from_state", "a", bound, body)


class FieldwiseCombine:
    """The composed monoid's combine as compiled code (what :func:`compose` uses in the
    compiled build): one pass over the parts, in the generated combine's order (the spliced
    parts first), each combined by its operation code in ``_COMBINE_FORMS``. Kept-whole parts
    are combined by their operator (``+``, ``|``, ``or``) or own function (``_min``, ``_max``,
    a part compose does not recognise); spliced parts by ``_compensated_fields`` /
    ``_moments_fields``, in machine arithmetic when their fields have the types lifted numbers
    give, else by their own function. The generated combine's results, bit for bit, or its
    exception type (a partial of the wrong length: ``ValueError``). Interpreted it is slower
    than the generated function, which the pure build keeps. O(fields) per call.
    """

    __slots__ = ("_functions", "_offsets", "_ops", "_width")

    def __init__(self, monoids: tuple[Any, ...]) -> None:
        offsets = []
        offset = 0
        for m in monoids:
            offsets.append(offset)
            offset += max(1, _spliced_width(m))
        # the order the generated combine evaluates them in: the spliced parts' blocks first
        order = sorted(range(len(monoids)), key=lambda k: not _spliced_width(monoids[k]))
        forms = [_COMBINE_FORMS.get(monoids[k].combine) for k in order]
        self._ops: list[int] = [_CALL if form is None else form[0] for form in forms]
        self._offsets: list[int] = [offsets[k] for k in order]
        self._functions: list[Any] = [monoids[k].combine for k in order]
        self._width = offset

    def __call__(self, a: Any, b: Any) -> tuple:
        width = self._width
        fa: tuple = a if type(a) is tuple else tuple(a)
        if len(fa) != width:
            raise ValueError(f"a partial of {len(fa)} fields, not {width}")
        fb: tuple = b if type(b) is tuple else tuple(b)
        if len(fb) != width:
            raise ValueError(f"a partial of {len(fb)} fields, not {width}")
        out: list[Any] = [None] * width
        ops = self._ops
        offsets = self._offsets
        for k in range(len(ops)):
            op = ops[k]
            i = offsets[k]
            x = fa[i]
            y = fb[i]
            if op == _ADD:
                out[i] = x + y
            elif op == _MAX:
                out[i] = _max(x, y)
            elif op == _COMPENSATED:
                out[i], out[i + 1], out[i + 2] = _compensated_fields(
                    x, fa[i + 1], fa[i + 2], y, fb[i + 1], fb[i + 2]
                )
            elif op == _MOMENTS:
                out[i], out[i + 1], out[i + 2] = _moments_fields(
                    x, fa[i + 1], fa[i + 2], y, fb[i + 1], fb[i + 2]
                )
            elif op == _MIN:
                out[i] = _min(x, y)
            elif op == _OR:
                out[i] = x | y
            elif op == _FIRST:
                out[i] = x or y
            elif op == _LAST:
                out[i] = y or x
            else:
                out[i] = self._functions[k](x, y)
        return tuple(out)


def _compensated_fields(
    a0: Any, a1: Any, a2: Any, b0: Any, b1: Any, b2: Any
) -> tuple[Any, Any, Any]:
    """``_compensated_combine`` of ``(a0, a1, a2)`` and ``(b0, b1, b2)``: on float sums and
    float or int compensations in machine arithmetic, as Python's float operations do it (an
    int operand converted once, exactly as ``float + int`` does), else by the function
    itself. O(1)."""
    t2a, t2b = type(a2), type(b2)
    if (
        type(a1) is float
        and type(b1) is float
        and (t2a is float or t2a is int)
        and (t2b is float or t2b is int)
    ):
        r0 = a0 + b0  # first, as in the generated combine (the floats raise nothing)
        if t2a is int and t2b is int:  # Python adds the ints first, exactly
            a2, b2 = 0.0, float(a2 + b2)  # and 0.0 + float(n) is float(n), never -0.0
        elif t2a is int:  # converted as float + int converts it (OverflowError if too large)
            a2 = float(a2)
        elif t2b is int:
            b2 = float(b2)
        s, c = _compensated_floats(a1, b1, a2, b2)
        return r0, s, c
    r0, r1, r2 = _compensated_combine((a0, a1, a2), (b0, b1, b2))
    return r0, r1, r2


def _compensated_floats(a1: float, b1: float, a2: float, b2: float) -> tuple[float, float]:
    """``_compensated_combine``'s sum and compensation typed as floats: compiled, machine
    arithmetic."""
    s = a1 + b1
    return s, a2 + b2 + ((a1 - s) + b1 if abs(a1) >= abs(b1) else (b1 - s) + a1)


def _moments_fields(a0: Any, a1: Any, a2: Any, b0: Any, b1: Any, b2: Any) -> tuple[Any, Any, Any]:
    """``_moments_combine`` of ``(a0, a1, a2)`` and ``(b0, b1, b2)``: on int counts and float
    means and M2s of non-empty partials in machine arithmetic (the counts converted to float
    where Python's ``float * int`` converts them), else by the function itself. O(1)."""
    if (
        type(a0) is int
        and type(b0) is int
        and a0
        and b0
        and type(a1) is float
        and type(a2) is float
        and type(b1) is float
        and type(b2) is float
    ):
        return _moments_floats(a0, a1, a2, b0, b1, b2)
    r0, r1, r2 = _moments_combine((a0, a1, a2), (b0, b1, b2))
    return r0, r1, r2


def _moments_floats(
    a0: int, a1: float, a2: float, b0: int, b1: float, b2: float
) -> tuple[int, float, float]:
    """``_moments_combine`` of two non-empty partials typed as int counts and floats:
    compiled, machine arithmetic (the counts converted where ``float * int`` converts them)."""
    n = a0 + b0
    d = b1 - a1
    return n, a1 + d * b0 / n, a2 + b2 + d * d * a0 * b0 / n


def _runs_compiled() -> bool:
    """Whether this module runs compiled (mypyc): its functions are then no Python functions."""
    return not isinstance(_same, FunctionType)


def premap(inner: Any, transform: Callable[[Any], Any] | Hashable) -> FunctionMonoid:
    """``inner`` fed with ``transform(x)`` instead of ``x``.

    ``transform`` is a function, or a key (e.g. a JSON field name) to read with ``x[key]``.
    Partials, combine and lower are ``inner``'s own.
    """
    extract = transform if callable(transform) else operator.itemgetter(transform)
    inner_lift = inner.lift

    def lift(x: Any) -> Any:
        return inner_lift(extract(x))

    return FunctionMonoid(
        f"premap({getattr(inner, 'name', 'custom')})",
        inner.identity,
        lift,
        inner.combine,
        inner.lower,
        getattr(inner, "to_state", _same),
        getattr(inner, "from_state", _same),
        getattr(inner, "commutative", False),
    )


# --- by name --------------------------------------------------------------------------------------

_BY_NAME: dict[str, Callable[..., FunctionMonoid]] = {
    "count": lambda: COUNT,
    "sum": lambda: SUM,
    "min": lambda: MIN,
    "max": lambda: MAX,
    "mean": lambda: MEAN,
    "geomean": lambda: GEOMEAN,
    "sample_stddev": lambda: SAMPLE_STDDEV,
    "pop_stddev": lambda: POP_STDDEV,
    "maxcount": lambda: MAXCOUNT,
    "mincount": lambda: MINCOUNT,
    "argmax": argmax,
    "argmin": argmin,
    "first": lambda: FIRST,
    "last": lambda: LAST,
    "collect": lambda: COLLECT,
    "bloom": bloom,
    "distinct_count": distinct_count,
}


def monoid_names() -> list[str]:
    """Names :func:`monoid` accepts."""
    return list(_BY_NAME)


def monoid(name: str, **params: Any) -> FunctionMonoid:
    """The built-in monoid called ``name``; ``params`` go to parameterised ones.

    Parameterised: ``argmax``/``argmin`` (``value_field``, ``arg_field``), ``bloom``
    (``capacity``, ``error_rate``), ``distinct_count`` (``precision``). Unknown names raise
    :class:`ValueError` listing the known ones.
    """
    try:
        factory = _BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown monoid {name!r}; known: {', '.join(_BY_NAME)}") from None
    return factory(**params)
