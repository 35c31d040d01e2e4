"""The Spark schemas of the output topics, derived from ``agents.records`` (the one schema module).

Aggregates topic, one row per Kafka record (``AGGREGATES_SCHEMA``)::

    key string, event_ts timestamp, stream_time timestamp,
    windows map<string, struct<start timestamp, end timestamp, count bigint,
                               aggregates map<string, double>,
                               aggregates_json map<string, string>>>,
    topic string, partition int, offset bigint, timestamp timestamp, _corrupt_record string

Answers topic (``ANSWERS_SCHEMA``)::

    query_id string, key string, from timestamp, to timestamp,
    result map<string, double>, result_json map<string, string>, count bigint,
    stream_time timestamp, error string, topic, partition, offset, timestamp, _corrupt_record

Raw records (``RAW_SCHEMA``, the data source's ``records=raw``): Kafka ``key`` and ``value``
bytes plus the Kafka columns, for decoding in the JVM with ``spark_bridge.jvm.parse_values``.

Record times (epoch ms) become Spark timestamps (UTC instants, exact: Spark keeps µs).
``topic``, ``partition``, ``offset`` and ``timestamp`` (the Kafka record timestamp) are named as
in Spark's own Kafka source.

Aggregate values: JSON carries numbers (sum, max, mean...) and non-numbers (an argmax object, a
collect list). Each value is first rendered as text the way Spark's JSON reader renders a JSON
value read as a string (a string as its characters, anything else as compact JSON); a value
whose text is a JSON number goes to ``aggregates`` as a double, a JSON ``null`` to ``aggregates``
as a null, every other value to ``aggregates_json`` as that text. So each aggregation name is a
key of exactly one of the two maps, and both engines (the Python data source and the JVM Kafka
connector parsing with ``from_json``) classify identically by construction.

Corrupt records: a value that is not a JSON object, or lacks a required field (aggregates:
``key``, ``event_ts``, ``stream_time``, ``windows`` and in each window ``start``, ``end``,
``count``, ``aggregates``; answers: ``query_id``, ``key``) or holds it with the wrong JSON type,
yields a row whose record columns are null, whose Kafka columns are set and whose
``_corrupt_record`` holds the value as (UTF-8, replaced) text — never a dropped row. On a good
record ``_corrupt_record`` is null.
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
JSON_NUMBER_SQL = "^" + JSON_NUMBER.pattern + "$"
"""The same pattern anchored, for Spark SQL ``rlike``."""

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

# The value JSON as Spark's JSON reader (``from_json``) must read it on the JVM path: times as
# bigint epoch ms, value maps as text (then classified with JSON_NUMBER_SQL).
_RAW_WINDOW = StructType(
    [
        StructField(WINDOW_START, LongType()),
        StructField(WINDOW_END, LongType()),
        StructField(WINDOW_COUNT, LongType()),
        StructField(WINDOW_AGGREGATES, TEXTS),
    ]
)
RAW_VALUE_SCHEMAS = {
    AGGREGATES: StructType(
        [
            StructField(KEY, StringType()),
            StructField(EVENT_TS, LongType()),
            StructField(STREAM_TIME, LongType()),
            StructField(WINDOWS, MapType(StringType(), _RAW_WINDOW, valueContainsNull=True)),
        ]
    ),
    ANSWERS: StructType(
        [
            StructField(QUERY_ID, StringType()),
            StructField(KEY, StringType()),
            StructField(FROM, LongType()),
            StructField(TO, LongType()),
            StructField(RESULT, TEXTS),
            StructField(COUNT, LongType()),
            StructField(STREAM_TIME, LongType()),
            StructField(ERROR, StringType()),
        ]
    ),
}
"""Record kind -> the schema ``from_json`` parses its value with (JVM engine)."""
