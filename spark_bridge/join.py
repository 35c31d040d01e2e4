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


class BadBatchData(ValueError):
    """A value of the batch dataset the job cannot use; ``str(exc)`` names column and value."""


def event_time(column: Column, data_type: T.DataType) -> Column:
    """``column`` as a timestamp: numbers are epoch milliseconds, strings are parsed as
    ISO-8601 (``try_to_timestamp``: null when a string is not a time, see
    ``check_event_times``), dates and timestamps are cast."""
    if isinstance(data_type, T.NumericType):
        return F.timestamp_millis(column.cast("long"))
    if isinstance(data_type, T.StringType):
        return F.try_to_timestamp(column)
    return column.cast("timestamp")


def check_event_times(batch: DataFrame, time_column: str) -> None:
    """Raise ``BadBatchData`` naming ``time_column`` and one of its values when a string time
    column holds a value that is not ISO-8601 text (e.g. epoch ms mixed into ISO text: a CSV
    column of both is read as text). One job over the column when it is text (stopping at the
    first bad value), none otherwise."""
    data_type = batch.schema[time_column].dataType
    if not isinstance(data_type, T.StringType):
        return
    column = F.col(time_column)
    bad = batch.where(column.isNotNull() & event_time(column, data_type).isNull())
    found = bad.select(column).limit(1).collect()
    if found:
        raise BadBatchData(
            f"batch column {time_column!r} holds {found[0][0]!r}, not an ISO-8601 time: a time "
            "column is either all epoch ms (numbers) or all ISO-8601 text"
        )


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
    ``agg_aggregates_json`` or, when ``aggregations`` names them, two columns each: the double
    ``agg_<name>`` (a numeric value) and the string ``agg_<name>_json`` (any other value, as
    the JSON text of ``aggregates_json``: a collect list, an argmax object, a string); one of the
    two is null. The columns do not depend on the data, so runs append to one Parquet schema.
    With ``answers`` (answers schema): ``answer_result``,
    ``answer_result_json``, ``answer_count``, ``answer_from``, ``answer_to``,
    ``answer_stream_time``, ``answer_error`` of the row's ``query_id_column``.

    A text time column holding a value that is not a time raises ``BadBatchData``
    (``check_event_times``: one job over that column).
    """
    for column in (key_column, time_column):
        if column not in batch.columns:
            raise ValueError(f"batch has no column {column!r} (columns: {batch.columns})")
    check_event_times(batch, time_column)
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
            payload[AGGREGATE_PREFIX + name + JSON_SUFFIX] = w[WINDOW_AGGREGATES_JSON][name]
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
