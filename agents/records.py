"""The JSON records the worker reads and writes: one schema module for the worker and Spark.

Input ``{"ts", "value"}`` keyed by the aggregation key; aggregates ``{"key", "event_ts",
"stream_time", "windows": {name: {"start", "end", "count", "aggregates"}}, "input_partition",
"input_offset"}`` (identity: key, input partition and offset, never the value); range queries
``{"query_id", "key", "from", "to"}`` or ``"window"``, and their answers ``{"query_id", "key",
"from", "to", "result", "count", "stream_time", "error"}``; dead-letter reason codes and
headers. Times are epoch milliseconds; windows are inclusive at both bounds. Field by field,
with examples checked against ``schemas/``: docs/reference/records.md.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

import stores
from stores.aggregations import json_form
from stores.key_windows import (
    REASON_BAD_VALUE,  # noqa: F401  (a reason code of this module's, defined where it arises)
    REASON_FUTURE,
    REASON_LATE,
    KeyAggregates,
    LoweredWindow,
    WindowResult,
)

# Field names, for code (the worker, the Spark schema) that must not spell them twice.
KEY = "key"
EVENT_TS = "event_ts"
STREAM_TIME = "stream_time"
WINDOWS = "windows"
WINDOW_START = "start"
WINDOW_END = "end"
WINDOW_COUNT = "count"
WINDOW_AGGREGATES = "aggregates"
INPUT_PARTITION = "input_partition"
INPUT_OFFSET = "input_offset"
QUERY_ID = "query_id"
FROM = "from"
TO = "to"
WINDOW = "window"
AGGREGATIONS = "aggregations"
RESULT = "result"
COUNT = "count"
ERROR = "error"


@dataclass(frozen=True, slots=True)
class AggregateRecord(KeyAggregates):
    """What the aggregates topic carries: every configured window of ``key`` at ``stream_time``
    (``stores.key_windows.KeyAggregates``), and the input record it answers (``None`` until the
    worker knows it: ``encode_aggregate``).
    """

    input_partition: int | None = None
    input_offset: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON object (``aggregate_json``)."""
        return aggregate_json(self, self.input_partition, self.input_offset)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> AggregateRecord:
        return cls(
            key=obj[KEY],
            event_ts=int(obj[EVENT_TS]),
            stream_time=int(obj[STREAM_TIME]),
            windows={
                name: WindowResult(
                    start=int(w[WINDOW_START]),
                    end=int(w[WINDOW_END]),
                    count=int(w[WINDOW_COUNT]),
                    aggregates=dict(w[WINDOW_AGGREGATES]),
                )
                for name, w in obj[WINDOWS].items()
            },
            input_partition=obj.get(INPUT_PARTITION),
            input_offset=obj.get(INPUT_OFFSET),
        )


@dataclass(frozen=True, slots=True)
class RangeQuery:
    """A range query over ``[from_ts, to_ts]`` (inclusive) of ``key``'s retained events.

    ``window`` (a configured window name) replaces the bounds by that window at stream time;
    ``aggregations`` restricts the result to some of the configured aggregations.
    """

    query_id: str
    key: str
    from_ts: int | None = None
    to_ts: int | None = None
    window: str | None = None
    aggregations: tuple[str, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {QUERY_ID: self.query_id, KEY: self.key}
        if self.from_ts is not None:
            obj[FROM] = self.from_ts
        if self.to_ts is not None:
            obj[TO] = self.to_ts
        if self.window is not None:
            obj[WINDOW] = self.window
        if self.aggregations is not None:
            obj[AGGREGATIONS] = list(self.aggregations)
        return obj


@dataclass(frozen=True, slots=True)
class Answer:
    """The answer to a ``RangeQuery``; ``error`` is set (and ``result`` empty) when it failed."""

    query_id: str
    key: str
    from_ts: int | None
    to_ts: int | None
    result: dict[str, Any]
    count: int
    stream_time: int | None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            QUERY_ID: self.query_id,
            KEY: self.key,
            FROM: self.from_ts,
            TO: self.to_ts,
            RESULT: self.result,
            COUNT: self.count,
            STREAM_TIME: self.stream_time,
            ERROR: self.error,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Answer:
        return cls(
            query_id=obj[QUERY_ID],
            key=obj[KEY],
            from_ts=obj.get(FROM),
            to_ts=obj.get(TO),
            result=dict(obj.get(RESULT) or {}),
            count=int(obj.get(COUNT) or 0),
            stream_time=obj.get(STREAM_TIME),
            error=obj.get(ERROR),
        )


def dumps(obj: dict[str, Any]) -> bytes:
    """Compact UTF-8 JSON; NaN and infinities are refused (they are not JSON)."""
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()


def encode_json(obj: dict[str, Any]) -> bytes:
    """Compact JSON bytes of an output record (orjson, an order of magnitude faster than the
    standard library on aggregate records); a float that overflowed to
    +-inf (a sum of huge values) or NaN is written as ``null``, since JSON has neither. An
    integer beyond 64 bits (an exact sum of huge integers) takes the standard library. A
    lowered value that is no JSON type is written in its JSON form (``_json_form``; orjson's
    own rendering of dataclasses is switched off)."""
    try:
        return orjson.dumps(obj, default=_json_form, option=orjson.OPT_PASSTHROUGH_DATACLASS)
    except orjson.JSONEncodeError:
        return json.dumps(_finite(obj), separators=(",", ":"), default=_json_form).encode()


def aggregate_json(
    record: KeyAggregates, input_partition: int | None = None, input_offset: int | None = None
) -> dict[str, Any]:
    """The aggregates topic's JSON object of ``record`` (built directly: ``asdict``'s deep
    copies cost more than the whole window update of the event that made the record; the
    aggregates dicts are shared); the input position only when ``input_offset`` is set."""
    obj = {
        KEY: record.key,
        EVENT_TS: record.event_ts,
        STREAM_TIME: record.stream_time,
        WINDOWS: {
            name: {
                WINDOW_START: w.start,
                WINDOW_END: w.end,
                WINDOW_COUNT: w.count,
                WINDOW_AGGREGATES: w.aggregates,
            }
            for name, w in record.windows.items()
        },
    }
    if input_offset is not None:
        obj[INPUT_PARTITION] = input_partition
        obj[INPUT_OFFSET] = input_offset
    return obj


def encode_aggregate(record: KeyAggregates, input_partition: int, input_offset: int) -> bytes:
    """The aggregates topic's bytes of ``record``, answering the input record at
    ``input_offset`` of ``input_partition``. O(size of the record)."""
    return encode_json(aggregate_json(record, input_partition, input_offset))


class AggregateEncoder:
    """The aggregates topic's bytes straight from a key's lowered windows
    (``KeyWindows.lowered_windows``): byte for byte ``encode_aggregate`` of the record
    ``record_of`` would build, without building it (its ``WindowResult``s and
    ``KeyAggregates``, the aggregates copies and the ``aggregate_json`` object cost about as
    much again as the encoding). ``emit=event``'s encoder: one dict per window and one orjson
    call per record, O(size of the record)."""

    __slots__ = ("_aggregations", "_whole")

    def __init__(self, aggregations: tuple[str, ...], lowered_is_aggregates: bool) -> None:
        self._aggregations = aggregations
        self._whole = lowered_is_aggregates

    def encode(
        self,
        key: str,
        event_ts: int,
        stream_time: int,
        windows: Iterable[LoweredWindow],
        input_partition: int,
        input_offset: int,
    ) -> bytes:
        """The bytes of ``key``'s record at ``stream_time`` after the event at ``event_ts``,
        answering the input record at ``input_offset`` of ``input_partition``."""
        names = self._aggregations
        whole = self._whole
        return encode_json(
            {
                KEY: key,
                EVENT_TS: event_ts,
                STREAM_TIME: stream_time,
                WINDOWS: {
                    name: {
                        WINDOW_START: start,
                        WINDOW_END: end,
                        WINDOW_COUNT: lowered[COUNT],
                        WINDOW_AGGREGATES: lowered if whole else {n: lowered[n] for n in names},
                    }
                    for name, start, end, lowered in windows
                },
                INPUT_PARTITION: input_partition,
                INPUT_OFFSET: input_offset,
            }
        )

    def encode_many(
        self, items: Iterable[tuple[str, int, int, Iterable[LoweredWindow], int, int]]
    ) -> list[bytes]:
        """``encode(*item)`` of every item: the bytes of a chunk's records at once."""
        encode = self.encode
        return [encode(*item) for item in items]


def aggregate_encoder(
    aggregations: tuple[str, ...], lowered_is_aggregates: bool
) -> AggregateEncoder:
    """The worker's ``AggregateEncoder``: the native one (``stores/native/src/py_io.rs``, the
    same bytes, which hands any record holding a value of no orjson-native type to the Python
    one) when the native core is loaded, else the Python one."""
    python = AggregateEncoder(aggregations, lowered_is_aggregates)
    module = stores.native()
    if module is None:
        return python
    return module.AggregateEncoder(list(aggregations), lowered_is_aggregates, python)  # type: ignore[no-any-return]


def _json_form(value: Any) -> Any:
    """The JSON form of an aggregation result that is no JSON type: its ``to_json()``
    (``stores.aggregations.json_form``: a ``bloom`` filter's ``BloomFilter.to_json``), else,
    for a custom aggregation whose start-up check met no such value, the string ``repr(value)``
    rather than a record lost to an exception."""
    try:
        return json_form(value)
    except TypeError:
        return repr(value)


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


# --- Dead letters ------------------------------------------------------------------------------
# Kafka Connect DLQ convention: a dead-letter record's key and value are the ORIGINAL bytes of the
# rejected record; these headers (UTF-8 values) say why and where it came from.
DLQ_REASON = "fiba.error.reason"
DLQ_DETAIL = "fiba.error.detail"
DLQ_TOPIC = "fiba.error.topic"
DLQ_PARTITION = "fiba.error.partition"
DLQ_OFFSET = "fiba.error.offset"

# Reason codes (the value of the ``fiba.error.reason`` header).
REASON_MALFORMED_JSON = "malformed_json"
REASON_MISSING_FIELD = "missing_field"
REASON_BAD_KEY = "bad_key"
REASON_EMPTY_KEY = "empty_key"
REASON_BAD_TIMESTAMP = "bad_timestamp"
# REASON_BAD_VALUE, REASON_LATE and REASON_FUTURE: stores.key_windows' rejections.
REASON_OVERSIZE = "oversize"
REASON_BAD_QUERY = "bad_query"


# Kafka Connect's own DLQ headers (``errors.deadletterqueue.context.headers.enable``), beside ours,
# so that Connect tooling reads fiba's dead letters as it reads its own.
CONNECT_TOPIC = "__connect.errors.topic"
CONNECT_PARTITION = "__connect.errors.partition"
CONNECT_OFFSET = "__connect.errors.offset"
CONNECT_EXCEPTION_CLASS = "__connect.errors.exception.class.name"
CONNECT_EXCEPTION_MESSAGE = "__connect.errors.exception.message"
CONNECT_STAGE = "__connect.errors.stage"

CONNECT_STAGES = {
    REASON_BAD_KEY: "KEY_CONVERTER",
    REASON_LATE: "TASK_PUT",
    REASON_FUTURE: "TASK_PUT",
}
"""Connect's processing stage of a reason code; every other reason fails while reading the
value (``VALUE_CONVERTER``)."""


def connect_exception_class(reason: str) -> str:
    """The ``__connect.errors.exception.class.name`` of a reason code: a stable name of the
    rejection (``malformed_json`` -> ``fiba.errors.MalformedJson``), not a Python class."""
    return "fiba.errors." + "".join(part.title() for part in reason.split("_"))


def dead_letter_headers(
    reason: str, detail: str, topic: str, partition: int, offset: int
) -> list[tuple[str, bytes]]:
    """The headers of a dead-letter record: ours (``fiba.error.*``, in the order of the
    constants above), then Kafka Connect's (``__connect.errors.*``) with the same facts."""
    return [
        (DLQ_REASON, reason.encode()),
        (DLQ_DETAIL, detail.encode()),
        (DLQ_TOPIC, topic.encode()),
        (DLQ_PARTITION, str(partition).encode()),
        (DLQ_OFFSET, str(offset).encode()),
        (CONNECT_TOPIC, topic.encode()),
        (CONNECT_PARTITION, str(partition).encode()),
        (CONNECT_OFFSET, str(offset).encode()),
        (CONNECT_EXCEPTION_CLASS, connect_exception_class(reason).encode()),
        (CONNECT_EXCEPTION_MESSAGE, detail.encode()),
        (CONNECT_STAGE, CONNECT_STAGES.get(reason, "VALUE_CONVERTER").encode()),
    ]
