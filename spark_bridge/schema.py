"""The Spark schemas of the output topics and the record contract both engines decode by.

``AGGREGATES_SCHEMA`` and ``ANSWERS_SCHEMA``: the record fields of ``agents.records`` (times as
timestamps; numeric aggregates in ``aggregates``, every other JSON value as text in
``aggregates_json``), then the Kafka ``topic``, ``partition``, ``offset``, ``timestamp`` and
``_corrupt_record``. A record that breaks the contract (not exactly one JSON object in valid
UTF-8 with its required fields typed and in range) is never dropped: its record columns are
null and ``_corrupt_record`` holds its text. The full contract and every column:
docs/reference/spark.md.
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
