"""The JVM engine: Spark's own Kafka connector (``spark-sql-kafka-0-10``) plus ``from_json``.

When the connector jar is on the classpath (``--packages
org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version>``), ``format("kafka")`` reads the
topic in the JVM (no Python worker per task) and ``parse_values`` turns its ``value`` column into
exactly the schema of the Python data source (``spark_bridge.schema``): same columns, same types,
same numeric/JSON split of aggregate values, same ``_corrupt_record`` rule. Note that Spark's
connector takes "latest" from ListOffsets, which is right on Kafka and wrong on the embedded
broker, so this engine is for real clusters.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

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
    CORRUPT_RECORD,
    JSON_NUMBER_SQL,
    OFFSET,
    PARTITION,
    RAW_VALUE_SCHEMAS,
    RESULT_JSON,
    SCHEMAS,
    TIMESTAMP,
    TOPIC,
    WINDOW_AGGREGATES_JSON,
)

KAFKA_PROVIDER_CLASS = "org.apache.spark.sql.kafka010.KafkaSourceProvider"


def jvm_kafka_available(spark: SparkSession) -> bool:
    """True when Spark's Kafka connector can be loaded by the session's JVM.

    False as well when the session has no JVM gateway (Spark Connect).
    """
    jvm = getattr(spark, "_jvm", None) or getattr(spark.sparkContext, "_jvm", None)
    if jvm is None:
        return False
    try:
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName(KAFKA_PROVIDER_CLASS, False, loader)
    except Exception:
        return False
    return True


def jvm_kafka_options(options: Mapping[str, str]) -> dict[str, str]:
    """The connector's options for the bridge's security passthrough options.

    ``kafka.sasl.username``/``password`` become a ``kafka.sasl.jaas.config`` (PLAIN or SCRAM
    login module), PEM files ``kafka.ssl.cafile``/``certfile``/``keyfile`` become PEM trust and
    key stores. Other ``kafka.*`` options pass through unchanged.
    """
    lowered = {k.lower(): v for k, v in options.items()}
    out = {
        k: v
        for k, v in lowered.items()
        if k.startswith("kafka.")
        and k not in ("kafka.sasl.username", "kafka.sasl.password")
        and not k.startswith("kafka.ssl.")
    }
    user = lowered.get("kafka.sasl.username")
    if user is not None:
        mechanism = lowered.get("kafka.sasl.mechanism", "PLAIN").upper()
        module = (
            "org.apache.kafka.common.security.scram.ScramLoginModule"
            if mechanism.startswith("SCRAM")
            else "org.apache.kafka.common.security.plain.PlainLoginModule"
        )
        password = lowered.get("kafka.sasl.password", "")
        out["kafka.sasl.jaas.config"] = (
            f'{module} required username="{user}" password="{password}";'
        )
    if lowered.get("kafka.ssl.cafile"):
        out["kafka.ssl.truststore.type"] = "PEM"
        out["kafka.ssl.truststore.location"] = lowered["kafka.ssl.cafile"]
    if lowered.get("kafka.ssl.certfile"):
        out["kafka.ssl.keystore.type"] = "PEM"
        out["kafka.ssl.keystore.location"] = lowered["kafka.ssl.certfile"]
        if lowered.get("kafka.ssl.keyfile"):
            out["kafka.ssl.keystore.key"] = lowered["kafka.ssl.keyfile"]
    return out


def _ts(column: Column) -> Column:
    return F.timestamp_millis(column)


def _numbers(values: Column) -> Column:
    kept = F.map_filter(values, lambda _, v: v.isNull() | v.rlike(JSON_NUMBER_SQL))
    return F.transform_values(kept, lambda _, v: v.cast("double"))


def _texts(values: Column) -> Column:
    return F.map_filter(values, lambda _, v: v.isNotNull() & ~v.rlike(JSON_NUMBER_SQL))


def _aggregate_columns(p: Column) -> tuple[Column, list[Column]]:
    windows = p[WINDOWS]
    bad_window = F.exists(
        F.map_values(windows),
        lambda w: (
            w.isNull()
            | w[WINDOW_START].isNull()
            | w[WINDOW_END].isNull()
            | w[WINDOW_COUNT].isNull()
            | w[WINDOW_AGGREGATES].isNull()
        ),
    )
    corrupt = (
        p.isNull()
        | p[KEY].isNull()
        | p[EVENT_TS].isNull()
        | p[STREAM_TIME].isNull()
        | windows.isNull()
        | bad_window
    )
    typed_windows = F.transform_values(
        windows,
        lambda _, w: F.struct(
            _ts(w[WINDOW_START]).alias(WINDOW_START),
            _ts(w[WINDOW_END]).alias(WINDOW_END),
            w[WINDOW_COUNT].alias(WINDOW_COUNT),
            _numbers(w[WINDOW_AGGREGATES]).alias(WINDOW_AGGREGATES),
            _texts(w[WINDOW_AGGREGATES]).alias(WINDOW_AGGREGATES_JSON),
        ),
    )
    return corrupt, [
        p[KEY].alias(KEY),
        _ts(p[EVENT_TS]).alias(EVENT_TS),
        _ts(p[STREAM_TIME]).alias(STREAM_TIME),
        typed_windows.alias(WINDOWS),
    ]


def _answer_columns(p: Column) -> tuple[Column, list[Column]]:
    corrupt = p.isNull() | p[QUERY_ID].isNull() | p[KEY].isNull()
    return corrupt, [
        p[QUERY_ID].alias(QUERY_ID),
        p[KEY].alias(KEY),
        _ts(p[FROM]).alias(FROM),
        _ts(p[TO]).alias(TO),
        _numbers(p[RESULT]).alias(RESULT),
        _texts(p[RESULT]).alias(RESULT_JSON),
        p[COUNT].alias(COUNT),
        _ts(p[STREAM_TIME]).alias(STREAM_TIME),
        p[ERROR].alias(ERROR),
    ]


def parse_values(df: DataFrame, kind: str) -> DataFrame:
    """``df`` with Kafka columns (``value`` binary, ``topic``, ``partition``, ``offset``,
    ``timestamp``, as ``format("kafka")`` yields) parsed into ``SCHEMAS[kind]``.

    Pure column expressions (``from_json`` in PERMISSIVE mode, higher-order map functions):
    runs in the JVM, row by row, with no shuffle.
    """
    if kind not in (AGGREGATES, ANSWERS):
        raise ValueError(f"unknown record kind {kind!r}")
    text = F.col("value").cast("string")
    parsed = F.from_json(text, RAW_VALUE_SCHEMAS[kind], {"mode": "PERMISSIVE"})
    with_parsed = df.withColumn("__parsed", parsed)
    p = F.col("__parsed")
    corrupt, columns = _aggregate_columns(p) if kind == AGGREGATES else _answer_columns(p)
    schema = SCHEMAS[kind]
    record_columns = [
        F.when(~corrupt, c).cast(field.dataType).alias(field.name)
        for c, field in zip(columns, schema.fields, strict=False)
    ]
    return with_parsed.select(
        *record_columns,
        F.col(TOPIC),
        F.col(PARTITION).cast("int").alias(PARTITION),
        F.col(OFFSET).cast("long").alias(OFFSET),
        F.col(TIMESTAMP).cast("timestamp").alias(TIMESTAMP),
        F.when(corrupt, F.coalesce(text, F.lit(""))).alias(CORRUPT_RECORD),
    ).to(schema)
