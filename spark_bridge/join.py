"""The as-of join job: batch rows enriched with the latest aggregate of their key.

Each row of a batch dataset (a key and an event-time column) gets the aggregate record of its
key, of the chosen window, with the greatest window end at or before the row's time (ties: the
record written last); rows without one keep nulls, every row is kept once; optionally the
latest answer of each range query by ``query_id``. No data goes to the driver: both sides are
unioned, partitioned by key and sorted, and a running ``last(aggregate, ignorenulls)`` carries
the latest aggregate forward: one shuffle, O((n + m) log(n + m)) work split over keys.
Reference: docs/reference/spark.md.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

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
    CORRUPT_RECORD,
    JSON_SUFFIX,
    OFFSET,
    PARTITION,
    RESULT_JSON,
    WINDOW_AGGREGATES_JSON,
)

AGGREGATE_PREFIX = "agg_"
ANSWER_PREFIX = "answer_"
_K, _T, _KIND, _P, _O, _AGG = "__k", "__t", "__kind", "__p", "__o", "__agg"


def event_time(column: Column, data_type: T.DataType) -> Column:
    """``column`` as a timestamp: numbers are epoch milliseconds, strings are parsed by
    ``to_timestamp`` (ISO-8601), dates and timestamps are cast."""
    if isinstance(data_type, T.NumericType):
        return F.timestamp_millis(column.cast("long"))
    if isinstance(data_type, T.StringType):
        return F.to_timestamp(column)
    return column.cast("timestamp")


def asof_join(
    batch: DataFrame,
    aggregates: DataFrame,
    window: str,
    *,
    key_column: str = "key",
    time_column: str = "ts",
    aggregations: Sequence[str] | None = None,
    answers: DataFrame | None = None,
    query_id_column: str = QUERY_ID,
) -> DataFrame:
    """``batch`` with the as-of aggregate of ``window`` (see the module docstring).

    Added columns: ``agg_stream_time``, ``agg_event_ts``, ``agg_window_start``,
    ``agg_window_end``, ``agg_window_count``, then either the maps ``agg_aggregates`` and
    ``agg_aggregates_json`` or, when ``aggregations`` names them, one double column
    ``agg_<name>`` each. With ``answers`` (answers schema): ``answer_result``,
    ``answer_result_json``, ``answer_count``, ``answer_from``, ``answer_to``,
    ``answer_stream_time``, ``answer_error`` of the row's ``query_id_column``.
    """
    for column in (key_column, time_column):
        if column not in batch.columns:
            raise ValueError(f"batch has no column {column!r} (columns: {batch.columns})")
    w = F.col(WINDOWS)[window]
    payload = {
        AGGREGATE_PREFIX + STREAM_TIME: F.col(STREAM_TIME),
        AGGREGATE_PREFIX + EVENT_TS: F.col(EVENT_TS),
        AGGREGATE_PREFIX + "window_start": w[WINDOW_START],
        AGGREGATE_PREFIX + "window_end": w[WINDOW_END],
        AGGREGATE_PREFIX + "window_count": w[WINDOW_COUNT],
    }
    if aggregations is None:
        payload[AGGREGATE_PREFIX + WINDOW_AGGREGATES] = w[WINDOW_AGGREGATES]
        payload[AGGREGATE_PREFIX + WINDOW_AGGREGATES_JSON] = w[WINDOW_AGGREGATES_JSON]
    else:  # only the requested values travel through the shuffle and the sort
        for name in aggregations:
            payload[AGGREGATE_PREFIX + name] = w[WINDOW_AGGREGATES][name]
    agg_side = aggregates.where(F.col(CORRUPT_RECORD).isNull() & w.isNotNull()).select(
        F.col(KEY).alias(_K),
        w[WINDOW_END].alias(_T),
        F.lit(0).alias(_KIND),
        F.col(PARTITION).alias(_P),
        F.col(OFFSET).alias(_O),
        F.struct(*[c.alias(name) for name, c in payload.items()]).alias(_AGG),
    )
    time_type = batch.schema[time_column].dataType
    batch_side = batch.select(
        "*",
        F.col(key_column).cast("string").alias(_K),
        event_time(F.col(time_column), time_type).alias(_T),
        F.lit(1).alias(_KIND),
    )
    by_key_in_time = (
        Window.partitionBy(_K)
        .orderBy(F.col(_T).asc_nulls_first(), _KIND, _P, _O)
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    joined = (
        batch_side.unionByName(agg_side, allowMissingColumns=True)
        .withColumn(_AGG, F.last(_AGG, ignorenulls=True).over(by_key_in_time))
        .where(F.col(_KIND) == 1)
    )
    out = joined.select(
        *[F.col(c) for c in batch.columns],
        *[F.col(_AGG)[name].alias(name) for name in payload],
    )
    if answers is not None:
        out = attach_answers(out, answers, query_id_column)
    return out


def latest_answers(answers: DataFrame) -> DataFrame:
    """One row per ``query_id``: its answer written last (greatest partition, offset)."""
    position = F.struct(F.col(PARTITION), F.col(OFFSET))
    answer = F.struct(
        *[F.col(c).alias(c) for c in (RESULT, RESULT_JSON, COUNT, FROM, TO, STREAM_TIME, ERROR)]
    )
    return (
        answers.where(F.col(CORRUPT_RECORD).isNull())
        .groupBy(F.col(QUERY_ID).alias("__qid"))
        .agg(F.max_by(answer, position).alias("__answer"))
    )


def attach_answers(rows: DataFrame, answers: DataFrame, query_id_column: str) -> DataFrame:
    """``rows`` left-joined with ``latest_answers`` on ``query_id_column`` (``answer_*``)."""
    if query_id_column not in rows.columns:
        raise ValueError(f"batch has no column {query_id_column!r} to attach answers by")
    a = F.col("__answer")
    joined = rows.join(
        latest_answers(answers),
        rows[query_id_column].cast("string") == F.col("__qid"),
        "left",
    )
    return joined.select(
        *[rows[c] for c in rows.columns],
        *[
            a[name].alias(ANSWER_PREFIX + name)
            for name in (RESULT, RESULT + JSON_SUFFIX, COUNT, FROM, TO, STREAM_TIME, ERROR)
        ],
    )


def read_batch(spark, path: str, fmt: str | None = None) -> DataFrame:
    """The batch dataset at ``path``: Parquet, or CSV with a header (types inferred).

    ``fmt`` (``"parquet"`` or ``"csv"``) defaults from the path's suffix (Parquet otherwise).
    """
    chosen = fmt or ("csv" if path.rstrip("/").lower().endswith(".csv") else "parquet")
    if chosen == "csv":
        return spark.read.option("header", True).option("inferSchema", True).csv(path)
    if chosen == "parquet":
        return spark.read.parquet(path)
    raise ValueError(f"batch format must be parquet or csv, not {chosen!r}")
