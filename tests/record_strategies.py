"""Hypothesis strategies of aggregate and answer record values: valid ones and mutated ones.

``record_values(kind)`` draws ``(value bytes or None, expected)`` where ``expected`` is None for
a value the contract of ``spark_bridge.schema`` calls corrupt, else the row the decoder must
yield as a dict (times in µs, aggregate values split into numbers and texts). Mutations of a
valid object: a field of the wrong JSON type, an out-of-range integer (nanosecond times, counts
of 2^64...), a missing required field, trailing text, invalid UTF-8, an unpaired surrogate
escape, NaN/Infinity/1e400, a non-object, a truncated value.
"""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import strategies as st

from spark_bridge.schema import (
    AGGREGATES,
    JSON_NUMBER,
    MAX_INT32,
    MAX_INT64,
    MAX_TIME_MS,
    MIN_TIME_MS,
)

MARK = "__mark__"
"""A string value replaced by invalid bytes after serialisation."""


def _finite_spelling(text: str) -> bool:
    return not JSON_NUMBER.fullmatch(text) or math.isfinite(float(text))


texts = st.text(max_size=8).filter(_finite_spelling)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts
    | st.sampled_from(["12.5", "-0", "1e5"])
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)
times = st.integers(MIN_TIME_MS, MAX_TIME_MS) | st.integers(0, 2_000_000_000_000)
counts = st.integers(0, MAX_INT64) | st.integers(0, 1000)
value_maps = st.dictionaries(texts, json_values, max_size=4)
windows = st.fixed_dictionaries(
    {"start": times, "end": times, "count": counts, "aggregates": value_maps}
)

# field -> (strategy of valid values, required, kind of value: "time", "count", "int32", "str",
# "obj"); window fields are under "windows.*".
AGGREGATE_FIELDS: dict[str, tuple[Any, bool, str]] = {
    "key": (texts, True, "str"),
    "event_ts": (times, True, "time"),
    "stream_time": (times, True, "time"),
    "windows": (st.dictionaries(texts, windows, max_size=3), True, "obj"),
    "input_partition": (st.integers(0, MAX_INT32), False, "int32"),
    "input_offset": (counts, False, "count"),
}
WINDOW_FIELDS: dict[str, tuple[Any, bool, str]] = {
    "start": (times, True, "time"),
    "end": (times, True, "time"),
    "count": (counts, True, "count"),
    "aggregates": (value_maps, True, "obj"),
}
ANSWER_FIELDS: dict[str, tuple[Any, bool, str]] = {
    "query_id": (texts, True, "str"),
    "key": (texts, True, "str"),
    "from": (times, False, "time"),
    "to": (times, False, "time"),
    "result": (value_maps, False, "obj"),
    "count": (counts, False, "count"),
    "stream_time": (times, False, "time"),
    "error": (texts, False, "str"),
}

WRONG_TYPES = {
    "str": st.integers() | st.floats(allow_nan=False) | st.booleans() | st.lists(st.integers()),
    "time": texts | st.just(1.0) | st.floats(allow_nan=False) | st.booleans() | st.just([]),
    "count": texts | st.just(3.0) | st.booleans() | st.just({}),
    "int32": texts | st.just(2.5) | st.booleans() | st.just([1]),
    "obj": texts | st.integers() | st.lists(st.integers(), max_size=2),
}
OUT_OF_RANGE = {
    "time": st.integers(MAX_TIME_MS + 1, 2**70)
    | st.integers(-(2**70), MIN_TIME_MS - 1)
    | st.sampled_from([1_700_000_000_000_000_000, MAX_TIME_MS + 1, MIN_TIME_MS - 1]),  # ns
    "count": st.integers(MAX_INT64 + 1, 2**70)
    | st.integers(-(2**40), -1)
    | st.sampled_from([2**64, MAX_INT64 + 1, -1]),
    "int32": st.integers(MAX_INT32 + 1, 2**70)
    | st.integers(-(2**40), -1)
    | st.sampled_from([MAX_INT32 + 1, 2**40]),
}
BAD_BYTES = [b"\xff", b"\xc3", b"a\x80b", b"\xed\xa0\x80"]  # \xed\xa0\x80: encoded surrogate
LONE_SURROGATES = [b"\\ud800", b"x\\udfff", b"\\udc00\\ud800"]
NON_FINITE = [b"NaN", b"Infinity", b"-Infinity", b"1e400", b"[1, -1e999]", b'{"a": NaN}']
TRAILING = [b" x", b"{}", b",", b"]", b" 1", b"\x00"]


def _split(values: dict[str, Any]) -> tuple[dict[str, float | None], dict[str, str]]:
    numbers: dict[str, float | None] = {}
    text_map: dict[str, str] = {}
    for name, value in values.items():
        if value is None:
            numbers[name] = None
        elif (isinstance(value, int | float) and not isinstance(value, bool)) or (
            isinstance(value, str) and JSON_NUMBER.fullmatch(value)
        ):
            numbers[name] = float(value)
        elif isinstance(value, str):
            text_map[name] = value
        else:
            text_map[name] = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return numbers, text_map


def _us(ms: int | None) -> int | None:
    return None if ms is None else ms * 1000


def expected_row(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    """The record columns a valid ``obj`` decodes to (times in µs)."""
    if kind == AGGREGATES:
        return {
            "key": obj["key"],
            "event_ts": _us(obj["event_ts"]),
            "stream_time": _us(obj["stream_time"]),
            "windows": {
                name: (_us(w["start"]), _us(w["end"]), w["count"], *_split(w["aggregates"]))
                for name, w in obj["windows"].items()
            },
            "input_partition": obj.get("input_partition"),
            "input_offset": obj.get("input_offset"),
        }
    result = obj.get("result")
    numbers, text_map = (None, None) if result is None else _split(result)
    return {
        "query_id": obj["query_id"],
        "key": obj["key"],
        "from": _us(obj.get("from")),
        "to": _us(obj.get("to")),
        "result": numbers,
        "result_json": text_map,
        "count": obj.get("count"),
        "stream_time": _us(obj.get("stream_time")),
        "error": obj.get("error"),
    }


@st.composite
def valid_objects(draw: st.DrawFn, kind: str) -> dict[str, Any]:
    fields = AGGREGATE_FIELDS if kind == AGGREGATES else ANSWER_FIELDS
    obj: dict[str, Any] = {}
    for name, (values, required, _) in fields.items():
        presence = "value" if required else draw(st.sampled_from(["value", "null", "absent"]))
        if presence != "absent":
            obj[name] = draw(values) if presence == "value" else None
    return obj


def _encode(draw: st.DrawFn, obj: Any) -> bytes:
    separators = draw(st.sampled_from([(",", ":"), (", ", ": ")]))
    text = json.dumps(obj, separators=separators, ensure_ascii=draw(st.booleans()))
    padding = draw(st.sampled_from(["", " ", "\n"]))
    return (padding + text + padding).encode()


def _target(draw: st.DrawFn, kind: str, obj: dict[str, Any], keep: Any = None) -> tuple:
    """A (container, field name, field spec) of ``obj`` to mutate, top-level or in a window,
    among the fields whose spec passes ``keep`` (all when None)."""
    fields = AGGREGATE_FIELDS if kind == AGGREGATES else ANSWER_FIELDS
    if kind == AGGREGATES and not obj["windows"] and draw(st.booleans()):
        obj["windows"]["w"] = draw(windows)
    top = [(obj, name, spec) for name, spec in fields.items()]
    nested = [
        (window, name, spec)
        for window in (obj["windows"].values() if kind == AGGREGATES else ())
        for name, spec in WINDOW_FIELDS.items()
    ]
    pools = [[t for t in pool if keep is None or keep(t[2])] for pool in (top, nested)]
    return draw(st.sampled_from(draw(st.sampled_from([pool for pool in pools if pool]))))


def _value_slot(draw: st.DrawFn, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    """An aggregates/result object of ``obj`` (created when there is none)."""
    if kind == AGGREGATES:
        if not obj["windows"]:
            obj["windows"]["w"] = draw(windows)
        return obj["windows"][draw(st.sampled_from(sorted(obj["windows"])))]["aggregates"]
    if obj.get("result") is None:
        obj["result"] = {}
    return obj["result"]


@st.composite
def corrupt_values(draw: st.DrawFn, kind: str) -> bytes | None:
    obj = draw(valid_objects(kind))
    mutation = draw(
        st.sampled_from(
            [
                "wrong_type",
                "out_of_range",
                "missing",
                "trailing",
                "bad_utf8",
                "surrogate",
                "non_finite",
                "not_object",
                "truncated",
            ]
        )
    )
    if mutation == "wrong_type":
        container, name, (_, required, spec) = _target(draw, kind, obj)
        container[name] = draw(WRONG_TYPES[spec] | st.none() if required else WRONG_TYPES[spec])
    elif mutation == "out_of_range":
        container, name, (_, _, spec) = _target(draw, kind, obj, lambda f: f[2] in OUT_OF_RANGE)
        container[name] = draw(OUT_OF_RANGE[spec])
    elif mutation == "missing":
        container, name, _ = _target(draw, kind, obj, lambda f: f[1])
        del container[name]
    elif mutation in ("bad_utf8", "surrogate", "non_finite"):
        if mutation == "non_finite":  # in a value map, or in an extra field nothing reads
            slot = draw(st.sampled_from([_value_slot(draw, kind, obj), obj]))
        else:
            slot, _, _ = _target(draw, kind, obj)
        slot[draw(texts)] = MARK
        choices = {"bad_utf8": BAD_BYTES, "surrogate": LONE_SURROGATES, "non_finite": NON_FINITE}
        bad = draw(st.sampled_from(choices[mutation]))
        if mutation != "non_finite":
            bad = b'"' + bad + b'"'
        return json.dumps(obj).encode().replace(f'"{MARK}"'.encode(), bad)
    elif mutation == "not_object":
        return draw(
            st.sampled_from([None, b"", b"[]", b'"text"', b"1", b"null", b"true"])
            | json_values.map(lambda v: json.dumps([v]).encode())
        )
    value = _encode(draw, obj)
    if mutation == "trailing":
        return value + draw(st.sampled_from(TRAILING))
    if mutation == "truncated":
        return value.strip()[: draw(st.integers(0, len(value.strip()) - 1))]
    return value


@st.composite
def record_values(draw: st.DrawFn, kind: str) -> tuple[bytes | None, dict[str, Any] | None]:
    """(value, expected row or None when corrupt); valid and corrupt values about evenly."""
    if draw(st.booleans()):
        obj = draw(valid_objects(kind))
        return _encode(draw, obj), expected_row(kind, obj)
    return draw(corrupt_values(kind)), None
