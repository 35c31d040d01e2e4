"""The native record I/O (``stores/native/src/events.rs``, ``json_text.rs``, ``py_io.rs``)
against the Python path, record for record and byte for byte.

Hypothesis draws input records of every shape the rules accept and every kind of bad one
(malformed or truncated JSON, invalid UTF-8, UTF-16/32 and BOMs, missing fields, duplicate
fields, bad and out-of-range times, ISO-8601 and near misses, numbers of any length, ``-0``,
NaN and ``1e999``, booleans, nested objects, keys in ``key_field``, oversize keys and values)
and checks that the native ``EventParser.parse_many`` gives the Python one's outcome (values
compared with their types: 1 is not 1.0, -0.0 is not 0.0), and draws lowered windows (ints
within and beyond 64 bits, floats from 5e-324 to 1.8e308 and non-finite, None, tuples,
strings with control characters and surrogates, objects of no JSON type) that both
``AggregateEncoder``s must write to the same bytes. Skipped without the native core.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stores
from agents.events import MAX_EVENT_TIME, MIN_EVENT_TIME, BadEvent, EventParser
from agents.records import AggregateEncoder, aggregate_encoder
from app.settings import Settings

pytestmark = pytest.mark.skipif(stores.native() is None, reason="no native core")

SETTINGS = [
    Settings(),
    Settings(key_field="device", max_key_bytes=16, max_value_bytes=300),
    Settings(timestamp_source="kafka", max_key_bytes=8),
    Settings(ts_field="t\u00e9\n", value_field="v"),
]


@dataclass(frozen=True)
class Record:
    """What ``parse_many`` reads of aiokafka's ``ConsumerRecord``."""

    key: bytes | None
    value: bytes | None
    timestamp: int | None


def typed(x: Any) -> Any:
    """``x`` with every value's type spelled out (1 vs 1.0, -0.0 vs 0.0, dict order)."""
    if isinstance(x, dict):
        return ("dict", [(k, typed(v)) for k, v in x.items()])
    if isinstance(x, list | tuple):
        return (type(x).__name__, [typed(v) for v in x])
    if isinstance(x, float):
        return ("float", x.hex())
    if isinstance(x, BadEvent):
        return ("BadEvent", x.reason, x.detail)
    return (type(x).__name__, x)


NUMBER_TEXTS = [
    "0", "-0", "-0.0", "0.0", "1", "-1", "1.0", "2.50", "1e5", "1E5", "1e-5", "-1.5e+3",
    "1e16", "1e-7", "0.1", "5e-324", "1.7976931348623157e308", "1e999", "-1e999", "1e-400",
    "9" * 18, "9" * 19, "-" + "9" * 19, "18446744073709551616", "9" * 101, "-" + "9" * 100,
    "0.30000000000000004", "123456789012345678901234567890.5", "NaN", "Infinity",
    "-Infinity", "01", "1.", ".5", "+1", "0x10",
]  # fmt: skip
TIME_TEXTS = [
    "1700000000000", " 1700000000000\t", "-5", "00012", "99999999999999999999",
    "999999999999999999999", "--5", "", " ", "\u00b2", "\u0663", "\u20035\u3000",
    "2024-01-01", "2024-01-01T12:30:45", "2024-01-01 12:30:45.5", "2024-01-01T12:30:45.123456Z",
    "2024-01-01T12:30:45.1234567", "2024-01-01T12:30:45+05:30", "2024-01-01T12:30:45-23:59",
    "2024-02-29", "2023-02-29", "2024-13-01", "2024-01-01T24:00:00", "2024-01-01T23:59:60",
    "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59.999-01:00", "0000-01-01", "20240101",
    "2024-01-01T12", "2024-01-01t12:30:45", "2024-01-01T12:30:45,5", "1 Jan 2024",
    "\x1c2024-01-01\x1f", "2024-01-01T12:30:45+24:00",
]  # fmt: skip

EDGE_FLOATS = [1e-05, 1.5e-07, 0.0001, 1e16, 1.5e22, 5e-324, 1.7976931348623157e308, -0.0, 2.5]
"""Floats whose text differs between layouts (Python's repr: 1e-05, 1e+16; orjson: 0.00001)."""

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from(EDGE_FLOATS),
    st.integers(-(2**70), 2**70),
    st.integers(MIN_EVENT_TIME - 2, MAX_EVENT_TIME + 2),
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(-1e19, 1e19).map(round).map(float),
    st.text(max_size=12),
    st.sampled_from(TIME_TEXTS),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=6,
)
FIELDS = ["ts", "value", "device", "t\u00e9\n", "v", "other"]


@st.composite
def number_text(draw: st.DrawFn) -> str:
    """A JSON number's spelling (or a near miss), written as it is."""
    return draw(
        st.sampled_from(NUMBER_TEXTS)
        | st.integers(-(10**25), 10**25).map(str)
        | st.floats(allow_nan=False, allow_infinity=False).map(repr)
        | st.tuples(st.integers(0, 10**20), st.integers(-330, 330)).map(lambda p: f"{p[0]}e{p[1]}")
    )


@st.composite
def field_text(draw: st.DrawFn) -> str:
    """A JSON value's text: a dumped value (ASCII-escaped or not), a number's spelling, or a
    string with escapes (lone surrogates among them)."""
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return json.dumps(draw(json_values), ensure_ascii=draw(st.booleans()))
    if kind == 1:
        return draw(number_text())
    if kind == 2:
        return json.dumps(draw(st.sampled_from(TIME_TEXTS)))
    return draw(st.sampled_from(['"\\ud800"', '"a\\u0000b"', '"\\x"', '"tab\there"', '{"a": 1,}']))


good_times = st.one_of(
    st.integers(0, 2_000_000_000_000).map(str),
    st.datetimes().map(lambda d: json.dumps(d.isoformat(sep=" " if d.second % 2 else "T"))),
    st.sampled_from(TIME_TEXTS).map(json.dumps),
    st.sampled_from(EDGE_FLOATS).map(repr),  # fractions of a ms: the detail shows the float
    st.lists(st.sampled_from(EDGE_FLOATS), max_size=2).map(json.dumps),
)
good_values = st.one_of(
    st.integers(-(10**18), 10**18).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.dictionaries(st.text(max_size=4), json_values, max_size=3).map(json.dumps),
)
good_keys = st.one_of(st.text(max_size=20).map(json.dumps), st.integers(-99, 10**17).map(str))
GOOD = {"ts": good_times, "t\u00e9\n": good_times, "value": good_values, "v": good_values}


@st.composite
def object_text(draw: st.DrawFn) -> str:
    """A JSON object's text: the parsers' fields, mostly with values of the kind they take
    (else any), some missing, some repeated, other fields between them, any whitespace."""
    names = [name for name in FIELDS if draw(st.integers(0, 7))]
    names += draw(st.lists(st.sampled_from(FIELDS), max_size=2))
    names = draw(st.permutations(names))
    space = draw(st.sampled_from(["", " ", "\n\t ", "\r"]))
    pairs = []
    for name in names:
        good = GOOD.get(name, good_keys)
        text = draw(good if draw(st.integers(0, 5)) else field_text())
        pairs.append(f"{json.dumps(name)}{space}:{space}{text}")
    return f"{space}{{{space}{(',' + space).join(pairs)}{space}}}{space}"


@st.composite
def record_value(draw: st.DrawFn) -> bytes | None:
    """An input value: mostly JSON objects, else tombstones, other JSON, mutated or raw bytes,
    other encodings, NaN-like text."""
    text = draw(object_text())
    kind = draw(st.integers(0, 17))
    if kind <= 7 or kind > 13:
        return text.encode("utf-8", "surrogatepass")
    if kind == 8:
        return None
    if kind == 9:
        return draw(st.binary(max_size=40))
    if kind == 10:
        encoding = draw(st.sampled_from(["utf-16", "utf-16-le", "utf-32-be", "utf-8-sig"]))
        return text.encode(encoding, "surrogatepass")
    if kind == 11:
        cut = draw(st.integers(0, len(text)))
        return (text[:cut] + draw(st.sampled_from(["", "x", "\x00", "\ud800", "é"]))).encode(
            "utf-8", "surrogatepass"
        )
    if kind == 12:
        data = bytearray(text.encode("utf-8", "surrogatepass"))
        at = draw(st.integers(0, len(data)))
        data[at:at] = draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80", b"}"]))
        return bytes(data)
    return draw(field_text()).encode("utf-8", "surrogatepass")


record_keys = st.one_of(
    st.text(min_size=1, max_size=12).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.text(min_size=1, max_size=12).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.text(min_size=1, max_size=12).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.none(),
    st.just(b""),
    st.binary(max_size=12),
)
records = st.builds(
    Record,
    record_keys,
    record_value(),
    st.none() | st.integers(-(2**63), 2**63 - 1) | st.integers(-5, 2_000_000_000_000),
)


def parsers(settings_: Settings) -> tuple[EventParser, EventParser]:
    native, python = EventParser(settings_), EventParser(settings_, native=False)
    assert native.native and not python.native
    return native, python


@functools.cache
def parsers_of(which: int) -> tuple[EventParser, EventParser]:
    """The native and the Python parser of ``SETTINGS[which]``, built once."""
    return parsers(SETTINGS[which])


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(range(len(SETTINGS))), st.lists(records, max_size=8))
def test_the_native_parser_gives_the_python_outcome_of_every_record(which, chunk) -> None:
    native, python = parsers_of(which)
    expected = [typed(o) for o in python.parse_many(chunk)]
    assert [typed(o) for o in native.parse_many(chunk)] == expected


def test_the_worker_records_are_parsed_without_python() -> None:
    """The typical record, ISO times, object values and every rejection whose detail is the
    rules' own are decided in Rust: the Python parser is never asked."""

    def no_python(record: Record) -> None:
        raise AssertionError(f"the Python parser was asked for {record}")

    python = EventParser(Settings(), native=False)
    module = stores.native()
    assert module is not None
    rust_only = module.EventParser(
        None, "ts", "value", False, 1024, 65536, MIN_EVENT_TIME, MAX_EVENT_TIME,
        ('no "" field', 'no "ts" field', 'no "value" field', 'the "" field is empty'),
        BadEvent, no_python,
    )  # fmt: skip
    chunk = [
        Record(b"k", b'{"ts": 1700000000000, "value": 3.5}', 0),
        Record(b"k", b'{"value": -2, "ts": 1700000000001}', 0),
        Record("ключ".encode(), b'{"ts": "2024-05-01T10:00:00.5Z", "value": {"a": [1, 2.0]}}', 0),
        Record(b"k", b'{"ts": 1.5, "value": 1}', 0),
        Record(b"k", b'{"ts": 1, "value": "x"}', 0),
        Record(b"k", b'{"ts": 1, "value": true}', 0),
        Record(b"k", b'{"ts": 253402300800000, "value": 1}', 0),
        Record(b"k", b'{"ts": 1}', 0),
        Record(b"k", b"[1]", 0),
        Record(b"", b'{"ts": 1, "value": 1}', 0),
        Record(b"\xff", b'{"ts": 1, "value": 1}', 0),
        Record(b"k", None, 0),
    ]
    assert [typed(o) for o in rust_only.parse_many(chunk)] == [
        typed(o) for o in python.parse_many(chunk)
    ]


def test_records_native_cannot_decide_take_the_python_parser() -> None:
    native, python = parsers(Settings())
    chunk = [
        Record(b"k", b'{"ts": 1, "value": NaN}', 0),
        Record(b"k", b'{"ts": 1, "value": 1', 0),
        Record(b"k", b'{"ts": 1, "value": -0}', 0),
        Record(b"k", b'{"ts": 1, "value": 123456789012345678901234}', 0),
        Record(b"k", b'{"ts": "1 May 2024", "value": 1}', 0),
        Record(b"k", '{"ts": 1, "value": 1}'.encode("utf-16"), 0),
    ]
    outcomes = native.parse_many(chunk)
    assert [typed(o) for o in outcomes] == [typed(o) for o in python.parse_many(chunk)]
    assert outcomes[2] == ("k", 1, 0) and type(outcomes[2][2]) is int


# --- the aggregate encoder ---------------------------------------------------------------------

EXTREME_FLOATS = [
    1e16, 1e-7, 1e-5, 1e-4, 0.1, 5e-324, 1.7976931348623157e308, -0.0, 0.0, 2.0, 1e15,
    123456789012345678.0, math.inf, -math.inf, math.nan, 2.2250738585072014e-308,
]  # fmt: skip


class NoJson:
    """A result of no JSON type (a custom aggregation's): the Python encoder writes its repr."""

    def __repr__(self) -> str:
        return "NoJson()"


lowered_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.sampled_from(EXTREME_FLOATS),
    st.floats(-1e6, 1e6).map(round).map(float),
    st.text(max_size=6),
    st.sampled_from(["\ud800", '\x00\x1f\x7f\u2028"\\', "é😀"]),
)
lowered_values = st.one_of(
    lowered_scalars,
    st.tuples(lowered_scalars, st.integers(0, 100)),
    st.tuples(),
    st.tuples(lowered_scalars),
    st.lists(lowered_scalars, max_size=3),
    st.dictionaries(st.text(max_size=3), lowered_scalars, max_size=3),
    st.just(NoJson()),
)
NAMES = ("sum", "max", "first", "maxcount")


@st.composite
def encoder_calls(draw: st.DrawFn) -> tuple[tuple[str, ...], bool, tuple[Any, ...]]:
    names = tuple(draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True)))
    whole = draw(st.booleans())
    windows = []
    for name in draw(st.lists(st.sampled_from(["5m", "1h", "ω"]), max_size=3)):
        lowered = {"count": draw(st.integers(0, 2**64) | lowered_scalars)}
        for n in names:
            lowered[n] = draw(lowered_values)
        if whole and draw(st.booleans()):
            lowered = dict(reversed(lowered.items()))
        start = draw(st.integers(MIN_EVENT_TIME, MAX_EVENT_TIME))
        windows.append((name, start, draw(st.integers(start, MAX_EVENT_TIME)), lowered))
    key = draw(st.text(max_size=8) | st.sampled_from(["\ud800", 'a"b']))
    times = st.integers(MIN_EVENT_TIME, MAX_EVENT_TIME)
    args = (key, draw(times), draw(times), windows, draw(st.integers(0, 2**31)), draw(times))
    return names, whole, args


@settings(max_examples=600, deadline=None)
@given(st.lists(encoder_calls(), min_size=1, max_size=4))
def test_the_native_encoder_writes_the_python_bytes(calls) -> None:
    for names, whole, args in calls:
        python = AggregateEncoder(names, whole)
        native = aggregate_encoder(names, whole)
        assert not isinstance(native, AggregateEncoder)
        expected = python.encode(*args)
        assert native.encode(*args) == expected
        assert native.encode_many([args, args]) == [expected, expected]
    assert python.encode_many([args]) == [expected]


def test_floats_at_the_edges_are_written_as_orjson_writes_them() -> None:
    python = AggregateEncoder(("sum",), True)
    native = aggregate_encoder(("sum",), True)
    for f in EXTREME_FLOATS:
        args = ("k", 1, 2, [("5m", 0, 2, {"count": 1, "sum": f})], 0, 7)
        assert native.encode(*args) == python.encode(*args), f


def test_the_pure_python_switch_keeps_the_python_io(monkeypatch) -> None:
    monkeypatch.setattr(stores, "native", lambda: None)
    assert not EventParser(replace(Settings())).native
    assert isinstance(aggregate_encoder(("sum",), True), AggregateEncoder)
