"""Read the output topics into DataFrames with either engine; flatten one window into columns.

``read_aggregates(spark, bootstrap, topic)`` / ``read_answers(...)`` return DataFrames of
``spark_bridge.schema``, batch or streaming (``streaming=True``), with ``engine`` ``"python"``
(the ``fiba-kafka`` data source), ``"jvm"`` (Spark's connector and the same decoder, offsets
from the Fetch high watermark) or ``"auto"`` (for a batch the connector when on the classpath
and the profile is not ``embedded``, with one warning line otherwise; for a stream always the
Python source, whose micro-batch ends are right on every broker). Offsets JSON leaving out a
partition gives it the default in both engines. ``flatten_window(df, window)`` turns one window
into columns, on a batch or on a stream of ``read_aggregates``.
Reference: docs/reference/spark.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from weakref import WeakKeyDictionary

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from agents.records import WINDOW_AGGREGATES, WINDOW_COUNT, WINDOW_END, WINDOW_START, WINDOWS
from spark_bridge.jvm import (
    STREAM_REFUSED,
    check_list_offsets,
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
_BATCH_TWINS: WeakKeyDictionary[DataFrame, Callable[[], DataFrame]] = WeakKeyDictionary()
"""Stream DataFrame of ``read_records`` -> a batch read of the same topic (``flatten_window``
learns a stream's aggregation names from it)."""


def engine_for(
    engine: str, broker_profile: str, connector_available: bool, streaming: bool = False
) -> str:
    """``"python"`` or ``"jvm"`` for the requested ``engine`` (see the module docstring)."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, not {engine!r}")
    if engine == "auto":
        jvm = connector_available and broker_profile != EMBEDDED and not streaming
        return "jvm" if jvm else "python"
    return engine


def choose_engine(
    spark: SparkSession, engine: str, broker_profile: str = "kafka", streaming: bool = False
) -> str:
    """``engine_for`` with the connector looked up on ``spark``'s classpath (when it matters).

    ``engine="jvm"`` without the connector raises ``ValueError`` saying why it is missing;
    ``engine="auto"`` without it logs that as one warning line (once per reason).
    """
    if (
        engine not in ENGINES
        or engine == "python"
        or (engine == "auto" and (broker_profile == EMBEDDED or streaming))
    ):
        return engine_for(engine, broker_profile, False, streaming)
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
    return engine_for(engine, broker_profile, available, streaming)


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
    latest); offsets JSON leaving out a partition gives it that default, in either engine.
    ``options`` are extra source options: for the Python engine those of
    ``spark_bridge.source``, for the JVM engine those ``jvm_kafka_options`` maps; any other
    raises ``ValueError``. ``broker_profile`` (``app.settings``) steers ``engine="auto"``.
    Costs on the driver, engine jvm: a batch read or a stream starting at offsets JSON takes
    one metadata, one ListOffsets and one Fetch round trip (``explicit_offsets``), a stream
    one more ListOffsets (``check_list_offsets``).
    """
    chosen = choose_engine(spark, engine, broker_profile, streaming)
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
        df = reader.format(SHORT_NAME).options(**opts).load()
    else:
        if streaming and broker_profile == EMBEDDED:
            raise ValueError(STREAM_REFUSED + "the embedded broker answers it wrongly")
        opts.update(jvm_kafka_options(options or {}))
        bridge = {**opts, **(options or {})}
        if streaming:
            check_list_offsets(bridge, topic)
        opts.update(explicit_offsets(bridge, topic, streaming))
        raw = reader.format("kafka").options(subscribe=topic, **opts).load()
        df = parse_values(raw, kind)
    if streaming:
        _BATCH_TWINS[df] = partial(
            read_records,
            spark,
            kind,
            bootstrap,
            topic,
            engine=chosen,
            options=options,
            broker_profile=broker_profile,
        )
    return df


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
    ``<prefix><name>_json`` per JSON aggregation. Rows without that window get nulls.

    ``numeric=None`` discovers both name lists from the data (``aggregation_names``): on a batch
    from ``df``; on a stream of ``read_aggregates`` (columns are fixed when a stream starts)
    from a batch read of the same topic now, so names no record of the topic has yet are left
    out. Either costs one job over the records; ``numeric=``/``json=`` skip it. Any other
    stream needs them (``ValueError``).
    """
    if numeric is None:
        names_from = df
        if df.isStreaming:
            twin = _BATCH_TWINS.get(df)
            if twin is None:
                raise ValueError(
                    "flatten_window on a stream needs numeric=[...] (and json=[...]) unless the "
                    "stream is read_aggregates(..., streaming=True) itself"
                )
            names_from = twin()
        numeric, json = aggregation_names(names_from, window)
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
