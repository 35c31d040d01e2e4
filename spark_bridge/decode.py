"""Kafka record values -> Arrow record batches of ``spark_bridge.schema``: the one decoder.

Both engines decode with this module, so they give identical rows by construction:
``decode_batch(kind, records)`` turns records consumed by the ``fiba-kafka`` data source into one
``pyarrow.RecordBatch`` of ``SCHEMAS[kind]``; ``decode_kafka_batches(kind, batches)`` does the
same for the Arrow batches of Spark's Kafka connector rows (``mapInArrow``, see
``spark_bridge.jvm.parse_values``). Timestamps are µs, UTC. Nested columns are assembled from
flat lists with ``MapArray.from_arrays`` / ``StructArray.from_arrays`` instead of converting
nested Python objects, which is several times faster.

Each value is validated completely (the contract of ``spark_bridge.schema``) before anything of
it is appended to the columns, so an invalid value yields a corrupt row and can never make the
Arrow conversion of its batch fail. Each record costs O(size of its value); parsing is the
standard library's linear JSON scanner (nesting deeper than the recursion limit is corrupt).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema

from agents.records import (
    COUNT,
    ERROR,
    EVENT_TS,
    FROM,
    KEY,
    QUERY_ID,
    RESULT,
    STREAM_TIME,
    TO,
    WINDOW_AGGREGATES,
    WINDOW_COUNT,
    WINDOW_END,
    WINDOW_START,
    WINDOWS,
)
from spark_bridge.schema import (
    AGGREGATES,
    ANSWERS,
    INPUT_OFFSET,
    INPUT_PARTITION,
    JSON_NUMBER,
    MAX_INT32,
    MAX_INT64,
    MAX_TIME_MS,
    MIN_TIME_MS,
    OFFSET,
    PARTITION,
    RAW,
    RESULT_JSON,
    SCHEMAS,
    TIMESTAMP,
    TOPIC,
)

ARROW_SCHEMAS = {kind: to_arrow_schema(schema, timezone="UTC") for kind, schema in SCHEMAS.items()}
"""Record kind -> the Arrow schema Spark expects from the data source's ``read``."""

_TS = pa.timestamp("us", tz="UTC")


class KafkaRecord(NamedTuple):
    """The parts of a consumed Kafka record the bridge keeps (timestamp in epoch ms)."""

    topic: str
    partition: int
    offset: int
    timestamp: int | None
    value: bytes | None
    key: bytes | None = None


class _Corrupt(Exception):
    """The value does not follow the record contract."""


_INVALID = (_Corrupt, ValueError, OverflowError, RecursionError)
"""What validating one value may raise: all mean "corrupt record" (``UnicodeError``, the JSON
decoder's and ``float``'s errors are ``ValueError``s)."""


def _int(value: Any, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise _Corrupt
    return value


def _opt_int(value: Any, low: int, high: int) -> int | None:
    return None if value is None else _int(value, low, high)


def _time(value: Any) -> int:
    """Epoch ms within ``MIN_TIME_MS..MAX_TIME_MS`` -> µs."""
    return _int(value, MIN_TIME_MS, MAX_TIME_MS) * 1000


def _opt_time(value: Any) -> int | None:
    return None if value is None else _time(value)


def _str(value: Any) -> str:
    if type(value) is not str:
        raise _Corrupt
    return value


def _opt_str(value: Any) -> str | None:
    return None if value is None else _str(value)


def _obj(value: Any) -> dict[str, Any]:
    if type(value) is not dict:
        raise _Corrupt
    return value


def _not_json(name: str) -> None:
    raise _Corrupt(name)  # NaN, Infinity, -Infinity: accepted by Python's json, not JSON


def _finite_float(text: str) -> float:
    """A JSON number with a fraction or exponent; 1e400 (infinite as a double) is refused."""
    number = float(text)
    if number - number != 0.0:
        raise _Corrupt(text)
    return number


def _check_strings(obj: Any) -> None:
    """Raise ``_Corrupt`` when a string (key or value) anywhere in ``obj`` holds an unpaired
    surrogate (from a ``\\ud800`` escape). Iterative: any depth the parser accepted."""
    stack = [obj]
    while stack:
        item = stack.pop()
        if type(item) is str:
            item.encode("utf-8")  # UnicodeEncodeError (a ValueError) on a lone surrogate
        elif type(item) is dict:
            stack.extend(item)
            stack.extend(item.values())
        elif type(item) is list:
            stack.extend(item)


def _load(value: bytes | None) -> dict[str, Any]:
    """The JSON object of ``value``; raises one of ``_INVALID`` when it is not one."""
    if value is None:
        raise _Corrupt
    text = value.decode("utf-8")
    obj = _obj(json.loads(text, parse_float=_finite_float, parse_constant=_not_json))
    if b"\\u" in value:
        _check_strings(obj)
    return obj


def value_text(value: Any) -> str:
    """A JSON value as the text of a ``*_json`` map entry: a string as its characters, anything
    else as compact JSON (floats in shortest round-trip form)."""
    if type(value) is str:
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


Split = tuple[list[tuple[str, float | None]], list[tuple[str, str]]]
"""A value map split into its (numeric, text) entries."""


def split_values(values: dict[str, Any]) -> Split:
    """The entries of one aggregates/result object, classified (see ``spark_bridge.schema``).

    Raises one of ``_INVALID`` for a number that is not a finite double.
    """
    numbers: list[tuple[str, float | None]] = []
    texts: list[tuple[str, str]] = []
    for name, value in values.items():
        kind = type(value)
        if kind is float:  # finite: _finite_float parsed it
            numbers.append((name, value))
        elif kind is int:
            numbers.append((name, float(value)))  # OverflowError beyond the double range
        elif value is None:
            numbers.append((name, None))
        elif kind is not str:  # object, list, boolean
            texts.append((name, value_text(value)))
        elif JSON_NUMBER.fullmatch(value):  # a string spelling a number
            numbers.append((name, _finite_float(value)))
        else:
            texts.append((name, value))
    return numbers, texts


class _ValueMaps:
    """Column builder of a pair (map<string,double>, map<string,string>) of split values."""

    def __init__(self) -> None:
        self.num_offsets = [0]
        self.num_keys: list[str] = []
        self.num_values: list[float | None] = []
        self.text_offsets = [0]
        self.text_keys: list[str] = []
        self.text_values: list[str] = []
        self.nulls: list[bool] = []

    def add(self, split: Split | None) -> None:
        """Append one row: the entries of ``split``, or null maps when it is None."""
        self.nulls.append(split is None)
        if split is not None:
            numbers, texts = split
            for name, number in numbers:
                self.num_keys.append(name)
                self.num_values.append(number)
            for name, text in texts:
                self.text_keys.append(name)
                self.text_values.append(text)
        self.num_offsets.append(len(self.num_keys))
        self.text_offsets.append(len(self.text_keys))

    def arrays(self) -> tuple[pa.Array, pa.Array]:
        mask = pa.array(self.nulls, pa.bool_()) if any(self.nulls) else None
        numbers = pa.MapArray.from_arrays(
            pa.array(self.num_offsets, pa.int32()),
            pa.array(self.num_keys, pa.string()),
            pa.array(self.num_values, pa.float64()),
            mask=mask,
        )
        texts = pa.MapArray.from_arrays(
            pa.array(self.text_offsets, pa.int32()),
            pa.array(self.text_keys, pa.string()),
            pa.array(self.text_values, pa.string()),
            mask=mask,
        )
        return numbers, texts


def _corrupt_text(value: bytes | None) -> str:
    return "" if value is None else value.decode("utf-8", "replace")


def _window(name: str, window: Any) -> tuple[str, int, int, int, Split]:
    w = _obj(window)
    return (
        name,
        _time(w.get(WINDOW_START)),
        _time(w.get(WINDOW_END)),
        _int(w.get(WINDOW_COUNT), 0, MAX_INT64),
        split_values(_obj(w.get(WINDOW_AGGREGATES))),
    )


def _aggregate_columns(values: Sequence[bytes | None]) -> tuple[list[pa.Array], list[str | None]]:
    schema = ARROW_SCHEMAS[AGGREGATES]
    window_type = schema.field(WINDOWS).type.item_type
    scalars: dict[str, list[Any]] = {
        name: [] for name in (KEY, EVENT_TS, STREAM_TIME, INPUT_PARTITION, INPUT_OFFSET)
    }
    bad: list[bool] = []
    corrupt: list[str | None] = []
    w_offsets = [0]
    w_names: list[str] = []
    w_start: list[int] = []
    w_end: list[int] = []
    w_count: list[int] = []
    w_values = _ValueMaps()
    for value in values:
        try:
            obj = _load(value)
            row = {
                KEY: _str(obj.get(KEY)),
                EVENT_TS: _time(obj.get(EVENT_TS)),
                STREAM_TIME: _time(obj.get(STREAM_TIME)),
                INPUT_PARTITION: _opt_int(obj.get(INPUT_PARTITION), 0, MAX_INT32),
                INPUT_OFFSET: _opt_int(obj.get(INPUT_OFFSET), 0, MAX_INT64),
            }
            windows = [_window(name, w) for name, w in _obj(obj.get(WINDOWS)).items()]
        except _INVALID:
            for column in scalars.values():
                column.append(None)
            bad.append(True)
            corrupt.append(_corrupt_text(value))
            w_offsets.append(len(w_names))
            continue
        for name, item in row.items():
            scalars[name].append(item)
        bad.append(False)
        corrupt.append(None)
        for name, start, end, count, split in windows:
            w_names.append(name)
            w_start.append(start)
            w_end.append(end)
            w_count.append(count)
            w_values.add(split)
        w_offsets.append(len(w_names))
    numbers, texts = w_values.arrays()
    window_structs = pa.StructArray.from_arrays(
        [
            pa.array(w_start, _TS),
            pa.array(w_end, _TS),
            pa.array(w_count, pa.int64()),
            numbers,
            texts,
        ],
        fields=list(window_type),
    )
    windows_column = pa.MapArray.from_arrays(
        pa.array(w_offsets, pa.int32()),
        pa.array(w_names, pa.string()),
        window_structs,
        mask=pa.array(bad, pa.bool_()),
    )
    columns = [
        pa.array(scalars[KEY], pa.string()),
        pa.array(scalars[EVENT_TS], _TS),
        pa.array(scalars[STREAM_TIME], _TS),
        windows_column.cast(schema.field(WINDOWS).type),
        pa.array(scalars[INPUT_PARTITION], pa.int32()),
        pa.array(scalars[INPUT_OFFSET], pa.int64()),
    ]
    return columns, corrupt


def _answer_columns(values: Sequence[bytes | None]) -> tuple[list[pa.Array], list[str | None]]:
    schema = ARROW_SCHEMAS[ANSWERS]
    scalars: dict[str, list[Any]] = {
        name: [] for name in (QUERY_ID, KEY, FROM, TO, COUNT, STREAM_TIME, ERROR)
    }
    corrupt: list[str | None] = []
    results = _ValueMaps()
    for value in values:
        try:
            obj = _load(value)
            row = {
                QUERY_ID: _str(obj.get(QUERY_ID)),
                KEY: _str(obj.get(KEY)),
                FROM: _opt_time(obj.get(FROM)),
                TO: _opt_time(obj.get(TO)),
                COUNT: _opt_int(obj.get(COUNT), 0, MAX_INT64),
                STREAM_TIME: _opt_time(obj.get(STREAM_TIME)),
                ERROR: _opt_str(obj.get(ERROR)),
            }
            result = obj.get(RESULT)
            split = None if result is None else split_values(_obj(result))
        except _INVALID:
            for column in scalars.values():
                column.append(None)
            corrupt.append(_corrupt_text(value))
            results.add(None)
            continue
        for name, item in row.items():
            scalars[name].append(item)
        corrupt.append(None)
        results.add(split)
    numbers, texts = results.arrays()
    columns = [
        pa.array(scalars[QUERY_ID], pa.string()),
        pa.array(scalars[KEY], pa.string()),
        pa.array(scalars[FROM], _TS),
        pa.array(scalars[TO], _TS),
        numbers.cast(schema.field(RESULT).type),
        texts.cast(schema.field(RESULT_JSON).type),
        pa.array(scalars[COUNT], pa.int64()),
        pa.array(scalars[STREAM_TIME], _TS),
        pa.array(scalars[ERROR], pa.string()),
    ]
    return columns, corrupt


def decode_values(
    kind: str, values: Sequence[bytes | None]
) -> tuple[list[pa.Array], list[str | None]]:
    """The record columns of ``SCHEMAS[kind]`` (``"aggregates"`` or ``"answers"``) decoded from
    ``values``, in order, and each value's ``_corrupt_record`` text (None when valid)."""
    if kind == AGGREGATES:
        return _aggregate_columns(values)
    if kind == ANSWERS:
        return _answer_columns(values)
    raise ValueError(f"unknown record kind {kind!r} (expected {AGGREGATES} or {ANSWERS})")


def _micros(ms: int | None) -> int | None:
    return None if ms is None else ms * 1000


def _kafka_columns(records: Sequence[KafkaRecord]) -> list[pa.Array]:
    return [
        pa.array([r.topic for r in records], pa.string()),
        pa.array([r.partition for r in records], pa.int32()),
        pa.array([r.offset for r in records], pa.int64()),
        pa.array([_micros(r.timestamp) for r in records], _TS),
    ]


def decode_batch(kind: str, records: Sequence[KafkaRecord]) -> pa.RecordBatch:
    """The rows of ``records`` (all of one kind: ``"aggregates"``, ``"answers"`` or ``"raw"``:
    undecoded), in order."""
    if kind == RAW:
        columns = [
            pa.array([r.key for r in records], pa.binary()),
            pa.array([r.value for r in records], pa.binary()),
            *_kafka_columns(records),
        ]
        return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMAS[RAW])
    if kind not in (AGGREGATES, ANSWERS):
        raise ValueError(f"unknown record kind {kind!r} (expected one of {sorted(SCHEMAS)})")
    columns, corrupt = decode_values(kind, [r.value for r in records])
    kafka = [*_kafka_columns(records), pa.array(corrupt, pa.string())]
    return pa.RecordBatch.from_arrays(columns + kafka, schema=ARROW_SCHEMAS[kind])


def decode_kafka_batches(kind: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function: batches of Spark Kafka rows (``value`` binary, ``topic`` string,
    ``partition`` int, ``offset`` bigint, ``timestamp`` timestamp) -> batches of
    ``SCHEMAS[kind]``, the Kafka columns passed through."""
    schema = ARROW_SCHEMAS[kind]
    for batch in batches:
        columns, corrupt = decode_values(kind, batch.column("value").to_pylist())
        kafka = [
            batch.column(TOPIC).cast(pa.string()),
            batch.column(PARTITION).cast(pa.int32()),
            batch.column(OFFSET).cast(pa.int64()),
            batch.column(TIMESTAMP).cast(_TS),
            pa.array(corrupt, pa.string()),
        ]
        yield pa.RecordBatch.from_arrays(columns + kafka, schema=schema)
