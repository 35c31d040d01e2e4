"""Click commands of the Spark bridge, run as ``fiba spark-join`` and ``fiba spark-read``.

Both take ``--config`` and the connection flags of ``app.settings`` (``--broker``,
``--security-protocol``, ``--sasl-*``, ``--ssl-*``; env ``FIBA_*``), check that the broker is
reachable (exit 2 otherwise), and run Spark on ``--master`` (default: what ``spark-submit``
configured, else ``local[*]``) with a progress bar on stderr. A session they create is stopped
at the end; one that was already running (a notebook, a test) is left running.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from agents.connection import KafkaConnection, driver_refusal
from app.cli_base import (
    CONNECTION_SETTINGS,
    CliFailure,
    require_broker,
    require_topics,
    with_settings,
)
from app.settings import Settings
from spark_bridge.read import ENGINES
from spark_bridge.schema import AGGREGATES, ANSWERS


def source_options(settings: Settings, extra: tuple[str, ...] = ()) -> dict[str, str]:
    """Data source options of ``settings``' connection (servers, security) plus ``NAME=VALUE``
    pairs."""
    out = KafkaConnection.from_settings(settings).source_options()
    for pair in extra:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise CliFailure(f"--option must be NAME=VALUE, not {pair!r}", 2)
        out[name] = value
    return out


def check_source_options(engine: str, options: dict[str, str]) -> None:
    """Stop with one line (exit code 2) when ``engine``'s source would refuse ``options``
    (``engine="auto"``: when both would), before anything touches the broker or starts Spark:
    a bad option is reported as such, whether or not the topics exist. O(options)."""
    from spark_bridge.jvm import jvm_kafka_options
    from spark_bridge.source import check_options

    def check_jvm(options: dict[str, str]) -> None:
        jvm_kafka_options(options)
        refusal = driver_refusal({k.lower(): v for k, v in options.items()})
        if refusal:
            raise ValueError(refusal)

    checks = {"python": [check_options], "jvm": [check_jvm]}
    errors = []
    for check in checks.get(engine, [check_options, check_jvm]):
        try:
            check(options)
            return
        except ValueError as exc:
            errors.append(exc)
    raise CliFailure(str(errors[0]), 2)


@contextmanager
def session(master: str | None) -> Iterator[Any]:
    """The active SparkSession, or a new one on ``master`` stopped on exit."""
    from pyspark.sql import SparkSession

    from spark_bridge.session import register, spark_session

    active = SparkSession.getActiveSession()
    if active is not None:
        yield register(active)
        return
    if master is None:
        from pyspark import SparkConf

        master = None if SparkConf().contains("spark.master") else "local[*]"
    spark = spark_session(master, app_name="fiba-spark")
    try:
        yield spark
    finally:
        spark.stop()


MASTER = click.option(
    "--master", default=None, help="Spark master URL (default: spark-submit's, else local[*])"
)
ENGINE = click.option(
    "--engine",
    type=click.Choice(ENGINES),
    default="auto",
    show_default=True,
    help="python: the fiba-kafka data source; jvm: Spark's Kafka connector; auto: jvm if present",
)
OPTION = click.option(
    "--option", "extra", multiple=True, metavar="NAME=VALUE", help="extra source option"
)
PROGRESS = click.option("--progress/--no-progress", default=True, help="progress bar on stderr")


@click.command("spark-join", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--batch", required=True, help="batch dataset: Parquet (file or folder) or CSV")
@click.option(
    "--batch-format",
    type=click.Choice(["parquet", "csv"]),
    default=None,
    help="default: csv for *.csv, else parquet",
)
@click.option("--window", required=True, help="window name, as configured (e.g. 5m)")
@click.option("--out", required=True, help="output Parquet folder")
@click.option("--key-column", default="key", show_default=True)
@click.option(
    "--time-column",
    default="ts",
    show_default=True,
    help="event time: epoch ms, ISO-8601 text or timestamp",
)
@click.option(
    "--aggregations",
    default=None,
    help="comma-separated names: flatten into agg_<name> columns (default: maps)",
)
@click.option(
    "--with-answers",
    is_flag=True,
    help="attach the answers topic's latest answer by --query-id-column",
)
@click.option("--query-id-column", default="query_id", show_default=True)
@click.option("--overwrite", is_flag=True, help="replace --out if it exists")
@MASTER
@ENGINE
@OPTION
@PROGRESS
@with_settings(*CONNECTION_SETTINGS, "aggregates_topic", "answers_topic")
def spark_join(
    settings: Settings,
    batch: str,
    batch_format: str | None,
    window: str,
    out: str,
    key_column: str,
    time_column: str,
    aggregations: str | None,
    with_answers: bool,
    query_id_column: str,
    overwrite: bool,
    master: str | None,
    engine: str,
    extra: tuple[str, ...],
    progress: bool,
) -> None:
    """As-of join: each batch row with its key's latest aggregate of WINDOW at or before its
    time (see spark_bridge.join), written as Parquet to --out."""
    from pyspark.errors import AnalysisException

    from spark_bridge.join import BadBatchData, asof_join, read_batch
    from spark_bridge.progress import spark_progress
    from spark_bridge.read import read_aggregates, read_answers

    require_broker(settings)
    options = source_options(settings, extra)
    check_source_options(engine, options)
    require_topics(
        settings, settings.aggregates_topic, *([settings.answers_topic] if with_answers else [])
    )
    bootstrap = ",".join(settings.bootstrap_servers)
    names = [n.strip() for n in aggregations.split(",") if n.strip()] if aggregations else None
    began = time.monotonic()
    with session(master) as spark, spark_progress(spark, enabled=progress, desc="spark-join"):
        try:
            rows = read_batch(spark, batch, batch_format)
            profile = settings.broker_profile
            source = {"engine": engine, "options": options, "broker_profile": profile}
            aggregates = read_aggregates(spark, bootstrap, settings.aggregates_topic, **source)
            answers = (
                read_answers(spark, bootstrap, settings.answers_topic, **source)
                if with_answers
                else None
            )
            joined = asof_join(
                rows,
                aggregates,
                window,
                key_column=key_column,
                time_column=time_column,
                aggregations=names,
                answers=answers,
                query_id_column=query_id_column,
            )
            joined.write.mode("overwrite" if overwrite else "errorifexists").parquet(out)
        except BadBatchData as exc:  # a data error, as an unreadable input
            raise CliFailure(str(exc)) from None
        except ValueError as exc:
            raise CliFailure(str(exc), 2) from None
        except AnalysisException as exc:  # e.g. unreadable input, --out exists
            raise CliFailure(exc.getMessage() or str(exc)) from None
    click.echo(f"wrote {out} in {time.monotonic() - began:.1f}s", err=True)


@click.command("spark-read", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--topic", default=None, help="topic to read (default: the aggregates topic)")
@click.option(
    "--records",
    type=click.Choice([AGGREGATES, ANSWERS]),
    default=None,
    help="record kind (default: answers for the answers topic, else aggregates)",
)
@click.option("--window", default=None, help="flatten this window into columns")
@click.option("--limit", type=int, default=20, show_default=True, help="rows shown")
@click.option("--starting-offsets", default="earliest", show_default=True)
@MASTER
@ENGINE
@OPTION
@PROGRESS
@with_settings(*CONNECTION_SETTINGS, "aggregates_topic", "answers_topic")
def spark_read(
    settings: Settings,
    topic: str | None,
    records: str | None,
    window: str | None,
    limit: int,
    starting_offsets: str,
    master: str | None,
    engine: str,
    extra: tuple[str, ...],
    progress: bool,
) -> None:
    """Show a sample of an output topic read into Spark, and its schema."""
    from spark_bridge.progress import spark_progress
    from spark_bridge.read import flatten_window, read_records

    require_broker(settings)
    chosen = topic or settings.aggregates_topic
    options = source_options(settings, extra)
    check_source_options(engine, options)
    require_topics(settings, chosen)
    kind = records or (ANSWERS if chosen == settings.answers_topic else AGGREGATES)
    with session(master) as spark, spark_progress(spark, enabled=progress, desc="spark-read"):
        try:
            df = read_records(
                spark,
                kind,
                ",".join(settings.bootstrap_servers),
                chosen,
                engine=engine,
                starting_offsets=starting_offsets,
                options=options,
                broker_profile=settings.broker_profile,
            )
        except ValueError as exc:
            raise CliFailure(str(exc), 2) from None
        if window is not None and kind == AGGREGATES:
            df = flatten_window(df, window)
        df.printSchema()
        df.show(limit, truncate=40)
