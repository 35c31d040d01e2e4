"""The Spark schemas of the output topics and the record contract both engines decode by.

Aggregates topic, one row per Kafka record (``AGGREGATES_SCHEMA``)::

    key string, event_ts timestamp, stream_time timestamp,
    windows map<string, struct<start timestamp, end timestamp, count bigint,
                               aggregates map<string, double>,
                               aggregates_json map<string, string>>>,
    input_partition int, input_offset bigint,
    topic string, partition int, offset bigint, timestamp timestamp, _corrupt_record string

``input_partition``/``input_offset``: input topic partition and offset of the event the record
answers (null in records written before the worker added them).

Answers topic (``ANSWERS_SCHEMA``)::

    query_id string, key string, from timestamp, to timestamp,
    result map<string, double>, result_json map<string, string>, count bigint,
    stream_time timestamp, error string, topic, partition, offset, timestamp, _corrupt_record

Raw records (``RAW_SCHEMA``, the data source's ``records=raw``): Kafka ``key`` and ``value``
bytes plus the Kafka columns. ``topic``, ``partition``, ``offset`` and ``timestamp`` (the Kafka
record timestamp) are named as in Spark's own Kafka source.

The contract (one decoder, ``spark_bridge.decode``, applies it for both engines, so their rows
are identical by construction). A valid value is exactly one JSON object (RFC 8259: no
``NaN``/``Infinity``, no trailing text) in valid UTF-8 with no unpaired surrogate escape, whose
required fields have their JSON type (aggregates: ``key`` string, ``event_ts``, ``stream_time``
integers, ``windows`` object of objects with integer ``start``, ``end``, ``count`` and object
``aggregates``; answers: ``query_id`` and ``key`` strings; optional fields null or of their
type) and are in range: times are epoch ms within 0001-01-02..9999-12-30 (``MIN_TIME_MS``..
``MAX_TIME_MS``, so a nanosecond time is out of range), counts and ``input_offset`` in
0..2^63-1, ``input_partition`` in 0..2^31-1; a number with a fraction or exponent must be a
finite double (no 1e400) and an integer aggregate value must fit one.
Anything else is a corrupt record: its record columns are null, its Kafka columns set and
``_corrupt_record`` holds the value as (UTF-8, replaced) text — never a dropped row nor an
exception. On a valid record ``_corrupt_record`` is null.

Aggregate values: a JSON number, or a string spelling a finite one (``JSON_NUMBER``), goes to
``aggregates`` as a double, ``null`` to ``aggregates`` as null; any other value goes to
``aggregates_json`` as text: a string as its characters, anything else as compact JSON with
floats in their shortest round-trip form (Python's ``repr``: ``[312622855.817]``). So each
aggregation name is a key of exactly one of the two maps.
"""

from __future__ import annotations

import re

from pyspark.sql.types import (
    BinaryType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from agents.records import (
    COUNT,
    ERROR,
    EVENT_TS,
    FROM,
    INPUT_OFFSET,
    INPUT_PARTITION,
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

# Kafka columns, named as in Spark's Kafka source.
TOPIC = "topic"
PARTITION = "partition"
OFFSET = "offset"
TIMESTAMP = "timestamp"
CORRUPT_RECORD = "_corrupt_record"

JSON_SUFFIX = "_json"
"""Suffix of the map holding a map's non-numeric values: ``aggregates_json``, ``result_json``."""
WINDOW_AGGREGATES_JSON = WINDOW_AGGREGATES + JSON_SUFFIX
RESULT_JSON = RESULT + JSON_SUFFIX

JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
"""A JSON number (RFC 8259 grammar); matched against a value's whole text."""

MIN_TIME_MS = -62_135_510_400_000
"""0001-01-02T00:00:00Z in epoch ms: the earliest time of a valid record."""
MAX_TIME_MS = 253_402_214_399_999
"""9999-12-30T23:59:59.999Z in epoch ms: the latest time of a valid record. Spark's timestamp
range less a day at each end, so that a collected time becomes a Python ``datetime`` in any
local time zone (Python cannot convert the first and last day in every zone)."""
MAX_INT32 = 2**31 - 1
MAX_INT64 = 2**63 - 1

NUMBERS = MapType(StringType(), DoubleType(), valueContainsNull=True)
TEXTS = MapType(StringType(), StringType(), valueContainsNull=True)

WINDOW_TYPE = StructType(
    [
        StructField(WINDOW_START, TimestampType()),
        StructField(WINDOW_END, TimestampType()),
        StructField(WINDOW_COUNT, LongType()),
        StructField(WINDOW_AGGREGATES, NUMBERS),
        StructField(WINDOW_AGGREGATES_JSON, TEXTS),
    ]
)

KAFKA_FIELDS = [
    StructField(TOPIC, StringType()),
    StructField(PARTITION, IntegerType()),
    StructField(OFFSET, LongType()),
    StructField(TIMESTAMP, TimestampType()),
    StructField(CORRUPT_RECORD, StringType()),
]

AGGREGATE_FIELDS = [
    StructField(KEY, StringType()),
    StructField(EVENT_TS, TimestampType()),
    StructField(STREAM_TIME, TimestampType()),
    StructField(WINDOWS, MapType(StringType(), WINDOW_TYPE, valueContainsNull=True)),
    StructField(INPUT_PARTITION, IntegerType()),
    StructField(INPUT_OFFSET, LongType()),
]
AGGREGATES_SCHEMA = StructType(AGGREGATE_FIELDS + KAFKA_FIELDS)

ANSWER_FIELDS = [
    StructField(QUERY_ID, StringType()),
    StructField(KEY, StringType()),
    StructField(FROM, TimestampType()),
    StructField(TO, TimestampType()),
    StructField(RESULT, NUMBERS),
    StructField(RESULT_JSON, TEXTS),
    StructField(COUNT, LongType()),
    StructField(STREAM_TIME, TimestampType()),
    StructField(ERROR, StringType()),
]
ANSWERS_SCHEMA = StructType(ANSWER_FIELDS + KAFKA_FIELDS)

RAW_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        *KAFKA_FIELDS[:4],
    ]
)
"""The undecoded records, as Spark's Kafka source yields them (without ``timestampType``)."""

AGGREGATES = "aggregates"
ANSWERS = "answers"
RAW = "raw"
SCHEMAS = {AGGREGATES: AGGREGATES_SCHEMA, ANSWERS: ANSWERS_SCHEMA, RAW: RAW_SCHEMA}
"""Record kind (the data source's ``records`` option) -> its Spark schema."""
