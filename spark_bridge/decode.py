"""Kafka records -> Arrow record batches of ``spark_bridge.schema`` (the Python engine's parser).

``decode_batch(kind, records)`` turns consumed records of the aggregates or answers topic into
one ``pyarrow.RecordBatch`` with exactly the Arrow form of ``SCHEMAS[kind]`` that Spark's Python
data source expects (timestamps in µs, UTC). Nested columns are assembled from flat lists with
``MapArray.from_arrays`` / ``StructArray.from_arrays`` instead of converting nested Python
objects, which is several times faster. Each record costs O(size of its value).

Value semantics (corrupt records, numeric vs JSON aggregate values) are those documented in
``spark_bridge.schema``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
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
from spark_bridge.schema import AGGREGATES, ANSWERS, JSON_NUMBER, RAW, RESULT_JSON, SCHEMAS

ARROW_SCHEMAS = {kind: to_arrow_schema(schema, timezone="UTC") for kind, schema in SCHEMAS.items()}
"""Record kind -> the Arrow schema Spark expects from the data source's ``read``."""


class KafkaRecord(NamedTuple):
    """The parts of a consumed Kafka record the bridge keeps (timestamp in epoch ms)."""

    topic: str
    partition: int
    offset: int
    timestamp: int | None
    value: bytes | None
    key: bytes | None = None


class _Corrupt(Exception):
    """The value does not follow the record format."""


def _int(value: Any) -> int:
    if type(value) is not int:
        raise _Corrupt
    return value


def _opt_int(value: Any) -> int | None:
    return None if value is None else _int(value)


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


def value_text(value: Any) -> str | None:
    """A JSON value as Spark's JSON reader renders it into a string column (None for null)."""
    if value is None:
        return None
    if type(value) is str:
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


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

    def add(self, values: dict[str, Any] | None) -> None:
        """Append one row: the entries of ``values``, or null maps when it is None.

        A value whose text (``value_text``) is a JSON number goes to the numeric map as a float,
        null to the numeric map as null, anything else to the text map as its text.
        """
        self.nulls.append(values is None)
        if values:
            num_keys, num_values = self.num_keys, self.num_values
            for name, value in values.items():
                kind = type(value)
                if kind is float:
                    num_keys.append(name)
                    num_values.append(value)
                elif kind is int:
                    num_keys.append(name)
                    num_values.append(float(value))
                elif value is None:
                    num_keys.append(name)
                    num_values.append(None)
                else:
                    text = value_text(value)
                    assert text is not None
                    if JSON_NUMBER.fullmatch(text):
                        num_keys.append(name)
                        num_values.append(float(text))
                    else:
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


def _micros(ms: int | None) -> int | None:
    return None if ms is None else ms * 1000


def _kafka_columns(records: Sequence[KafkaRecord], corrupt: list[str | None]) -> list[pa.Array]:
    ts = pa.timestamp("us", tz="UTC")
    return [
        pa.array([r.topic for r in records], pa.string()),
        pa.array([r.partition for r in records], pa.int32()),
        pa.array([r.offset for r in records], pa.int64()),
        pa.array([_micros(r.timestamp) for r in records], ts),
        pa.array(corrupt, pa.string()),
    ]


def _corrupt_text(value: bytes | None) -> str:
    return "" if value is None else value.decode("utf-8", "replace")


def _load(value: bytes | None) -> dict[str, Any]:
    if value is None:
        raise _Corrupt
    try:
        return _obj(json.loads(value))
    except (ValueError, RecursionError):
        raise _Corrupt from None


def _window(name: str, window: Any) -> tuple[str, int, int, int, dict[str, Any]]:
    w = _obj(window)
    return (
        name,
        _int(w.get(WINDOW_START)),
        _int(w.get(WINDOW_END)),
        _int(w.get(WINDOW_COUNT)),
        _obj(w.get(WINDOW_AGGREGATES)),
    )


def _decode_aggregates(records: Sequence[KafkaRecord]) -> pa.RecordBatch:
    schema = ARROW_SCHEMAS[AGGREGATES]
    window_type = schema.field(WINDOWS).type.item_type
    keys: list[str | None] = []
    event_ts: list[int | None] = []
    stream_time: list[int | None] = []
    bad: list[bool] = []
    corrupt: list[str | None] = []
    w_offsets = [0]
    w_names: list[str] = []
    w_start: list[int] = []
    w_end: list[int] = []
    w_count: list[int] = []
    w_values = _ValueMaps()
    for record in records:
        try:
            obj = _load(record.value)
            key = _str(obj.get(KEY))
            ets = _int(obj.get(EVENT_TS))
            st = _int(obj.get(STREAM_TIME))
            windows = [_window(name, w) for name, w in _obj(obj.get(WINDOWS)).items()]
        except _Corrupt:
            keys.append(None)
            event_ts.append(None)
            stream_time.append(None)
            bad.append(True)
            corrupt.append(_corrupt_text(record.value))
            w_offsets.append(len(w_names))
            continue
        keys.append(key)
        event_ts.append(ets * 1000)
        stream_time.append(st * 1000)
        bad.append(False)
        corrupt.append(None)
        for name, start, end, count, values in windows:
            w_names.append(name)
            w_start.append(start * 1000)
            w_end.append(end * 1000)
            w_count.append(count)
            w_values.add(values)
        w_offsets.append(len(w_names))
    ts = pa.timestamp("us", tz="UTC")
    numbers, texts = w_values.arrays()
    window_structs = pa.StructArray.from_arrays(
        [
            pa.array(w_start, ts),
            pa.array(w_end, ts),
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
        pa.array(keys, pa.string()),
        pa.array(event_ts, ts),
        pa.array(stream_time, ts),
        windows_column.cast(schema.field(WINDOWS).type),
        *_kafka_columns(records, corrupt),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _decode_answers(records: Sequence[KafkaRecord]) -> pa.RecordBatch:
    schema = ARROW_SCHEMAS[ANSWERS]
    scalars: dict[str, list[Any]] = {
        name: [] for name in (QUERY_ID, KEY, FROM, TO, COUNT, STREAM_TIME, ERROR)
    }
    bad: list[bool] = []
    corrupt: list[str | None] = []
    results = _ValueMaps()
    for record in records:
        try:
            obj = _load(record.value)
            row = {
                QUERY_ID: _str(obj.get(QUERY_ID)),
                KEY: _str(obj.get(KEY)),
                FROM: _micros(_opt_int(obj.get(FROM))),
                TO: _micros(_opt_int(obj.get(TO))),
                COUNT: _opt_int(obj.get(COUNT)),
                STREAM_TIME: _micros(_opt_int(obj.get(STREAM_TIME))),
                ERROR: _opt_str(obj.get(ERROR)),
            }
            result = obj.get(RESULT)
            if result is not None:
                _obj(result)
        except _Corrupt:
            for column in scalars.values():
                column.append(None)
            bad.append(True)
            corrupt.append(_corrupt_text(record.value))
            results.add(None)
            continue
        for name, value in row.items():
            scalars[name].append(value)
        bad.append(False)
        corrupt.append(None)
        results.add(result)
    ts = pa.timestamp("us", tz="UTC")
    numbers, texts = results.arrays()
    columns = [
        pa.array(scalars[QUERY_ID], pa.string()),
        pa.array(scalars[KEY], pa.string()),
        pa.array(scalars[FROM], ts),
        pa.array(scalars[TO], ts),
        numbers.cast(schema.field(RESULT).type),
        texts.cast(schema.field(RESULT_JSON).type),
        pa.array(scalars[COUNT], pa.int64()),
        pa.array(scalars[STREAM_TIME], ts),
        pa.array(scalars[ERROR], pa.string()),
        *_kafka_columns(records, corrupt),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _raw(records: Sequence[KafkaRecord]) -> pa.RecordBatch:
    columns = [
        pa.array([r.key for r in records], pa.binary()),
        pa.array([r.value for r in records], pa.binary()),
        *_kafka_columns(records, [None] * len(records))[:4],
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMAS[RAW])


def decode_batch(kind: str, records: Sequence[KafkaRecord]) -> pa.RecordBatch:
    """The rows of ``records`` (all of one kind: ``"aggregates"``, ``"answers"`` or ``"raw"``:
    undecoded), in order."""
    if kind == RAW:
        return _raw(records)
    if kind == AGGREGATES:
        return _decode_aggregates(records)
    if kind == ANSWERS:
        return _decode_answers(records)
    raise ValueError(f"unknown record kind {kind!r} (expected one of {sorted(SCHEMAS)})")
