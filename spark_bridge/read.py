"""Read the output topics into DataFrames with either engine; flatten one window into columns.

``read_aggregates(spark, bootstrap, topic)`` / ``read_answers(...)`` return DataFrames of
``spark_bridge.schema``, batch or streaming (``streaming=True``), with ``engine`` ``"python"``
(the ``fiba-kafka`` data source), ``"jvm"`` (Spark's connector and the same decoder) or
``"auto"`` (the connector when on the classpath and the profile is not ``embedded``, with one
warning line otherwise). ``flatten_window(df, window)`` turns one window into columns.
Reference: docs/reference/spark.md.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from agents.records import WINDOW_AGGREGATES, WINDOW_COUNT, WINDOW_END, WINDOW_START, WINDOWS
from spark_bridge.jvm import (
    connector_missing_reason,
    explicit_offsets,
    jvm_kafka_available,
    jvm_kafka_options,
    parse_values,
)
from spark_bridge.schema import AGGREGATES, ANSWERS, JSON_SUFFIX, WINDOW_AGGREGATES_JSON
from spark_bridge.session import register
from spark_bridge.source import SHORT_NAME, check_options

ENGINES = ("auto", "python", "jvm")
EMBEDDED = "embedded"
"""The broker profile of the embedded broker (``app.settings``), whose ListOffsets is wrong."""
log = logging.getLogger(__name__)
_FALLBACKS_LOGGED: set[str] = set()


def engine_for(engine: str, broker_profile: str, connector_available: bool) -> str:
    """``"python"`` or ``"jvm"`` for the requested ``engine`` (see the module docstring)."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, not {engine!r}")
    if engine == "auto":
        return "jvm" if connector_available and broker_profile != EMBEDDED else "python"
    return engine


def choose_engine(spark: SparkSession, engine: str, broker_profile: str = "kafka") -> str:
    """``engine_for`` with the connector looked up on ``spark``'s classpath (when it matters).

    ``engine="jvm"`` without the connector raises ``ValueError`` saying why it is missing;
    ``engine="auto"`` without it logs that as one warning line (once per reason).
    """
    if (
        engine not in ENGINES
        or engine == "python"
        or (engine == "auto" and broker_profile == EMBEDDED)
    ):
        return engine_for(engine, broker_profile, connector_available=False)
    available = jvm_kafka_available(spark)
    if not available:
        why = connector_missing_reason(spark)
        if engine == "jvm":
            raise ValueError(
                f"engine jvm needs Spark's Kafka connector, not on the classpath: {why}"
            )
        line = (
            f"Spark's Kafka connector is not on the classpath ({why}): engine auto reads with "
            "the fiba-kafka Python source"
        )
        if line not in _FALLBACKS_LOGGED:
            _FALLBACKS_LOGGED.add(line)
            log.warning(line)
    return engine_for(engine, broker_profile, available)


def read_records(
    spark: SparkSession,
    kind: str,
    bootstrap: str,
    topic: str,
    *,
    engine: str = "auto",
    streaming: bool = False,
    starting_offsets: str | None = None,
    ending_offsets: str | None = None,
    options: Mapping[str, str] | None = None,
    broker_profile: str = "kafka",
) -> DataFrame:
    """The records of ``kind`` (``"aggregates"`` or ``"answers"``) in ``topic``.

    Offsets default to Spark's Kafka defaults (batch: earliest to latest; streaming: from
    latest). ``options`` are extra source options: for the Python engine those of
    ``spark_bridge.source``, for the JVM engine those ``jvm_kafka_options`` maps; any other
    raises ``ValueError``. ``broker_profile`` (``app.settings``) steers ``engine="auto"``.
    """
    chosen = choose_engine(spark, engine, broker_profile)
    opts: dict[str, str] = {"kafka.bootstrap.servers": bootstrap}
    if starting_offsets is not None:
        opts["startingOffsets"] = starting_offsets
    if ending_offsets is not None and not streaming:
        opts["endingOffsets"] = ending_offsets
    reader = spark.readStream if streaming else spark.read
    if chosen == "python":
        register(spark)
        opts.update(options or {})
        opts.update(topic=topic, records=kind)
        check_options(opts)
        return reader.format(SHORT_NAME).options(**opts).load()
    if broker_profile == EMBEDDED and streaming:
        raise ValueError(
            "engine jvm cannot stream from the embedded broker: Spark's Kafka connector takes "
            "each micro-batch's end from ListOffsets, which that broker answers wrongly; use "
            "engine python"
        )
    opts.update(jvm_kafka_options(options or {}))
    if broker_profile == EMBEDDED:
        opts.update(explicit_offsets({**opts, **(options or {})}, topic))
    raw = reader.format("kafka").options(subscribe=topic, **opts).load()
    return parse_values(raw, kind)


def read_aggregates(spark: SparkSession, bootstrap: str, topic: str, **kwargs) -> DataFrame:
    """The aggregates topic as a DataFrame of ``AGGREGATES_SCHEMA`` (see ``read_records``)."""
    return read_records(spark, AGGREGATES, bootstrap, topic, **kwargs)


def read_answers(spark: SparkSession, bootstrap: str, topic: str, **kwargs) -> DataFrame:
    """The answers topic as a DataFrame of ``ANSWERS_SCHEMA`` (see ``read_records``)."""
    return read_records(spark, ANSWERS, bootstrap, topic, **kwargs)


def aggregation_names(df: DataFrame, window: str) -> tuple[list[str], list[str]]:
    """(numeric, JSON) aggregation names present in ``window`` of ``df``, sorted.

    One small aggregation job (distinct map keys); only the names reach the driver.
    """
    w = F.col(WINDOWS)[window]
    rows = (
        df.select(
            F.explode(
                F.concat(
                    F.transform(
                        F.map_keys(w[WINDOW_AGGREGATES]), lambda k: F.concat(F.lit("n"), k)
                    ),
                    F.transform(
                        F.map_keys(w[WINDOW_AGGREGATES_JSON]), lambda k: F.concat(F.lit("j"), k)
                    ),
                )
            ).alias("name")
        )
        .distinct()
        .collect()
    )
    names = sorted(r.name for r in rows)
    return [n[1:] for n in names if n[0] == "n"], [n[1:] for n in names if n[0] == "j"]


def flatten_window(
    df: DataFrame,
    window: str,
    *,
    numeric: Sequence[str] | None = None,
    json: Sequence[str] = (),
    prefix: str = "",
) -> DataFrame:
    """``df`` (aggregates schema) with ``windows`` replaced by the columns of one window.

    Adds ``<prefix>window_start``, ``<prefix>window_end`` (timestamps), ``<prefix>window_count``
    (bigint), one double column ``<prefix><name>`` per numeric aggregation and one string column
    ``<prefix><name>_json`` per JSON aggregation. ``numeric=None`` discovers both name lists
    from the data (``aggregation_names``). Rows without that window get nulls.
    """
    if numeric is None:
        numeric, json = aggregation_names(df, window)
    w = F.col(WINDOWS)[window]
    columns = [
        w[WINDOW_START].alias(prefix + "window_start"),
        w[WINDOW_END].alias(prefix + "window_end"),
        w[WINDOW_COUNT].alias(prefix + "window_count"),
        *(w[WINDOW_AGGREGATES][name].alias(prefix + name) for name in numeric),
        *(w[WINDOW_AGGREGATES_JSON][name].alias(prefix + name + JSON_SUFFIX) for name in json),
    ]
    kept = [F.col(c) for c in df.columns if c != WINDOWS]
    return df.select(*kept, *columns)
