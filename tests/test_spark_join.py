"""The as-of join against a pandas ``merge_asof`` oracle.

Generated data has ties (several aggregates with the same window end, batch rows exactly at a
window end), keys without aggregates, out-of-order updates (window ends not increasing in Kafka
order), records lacking the chosen window, several windows and corrupt records. The oracle:
aggregates of the window sorted by (end, partition, offset), ``merge_asof`` backward by key
with exact matches allowed — the last of tied aggregates wins, as in the job.
"""

from __future__ import annotations

import json
import re

import pandas as pd
import pyarrow as pa
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.records import AggregateRecord, Answer, WindowResult, dumps
from spark_bridge.cli import spark_join, spark_read
from spark_bridge.decode import KafkaRecord, decode_batch
from spark_bridge.join import BadBatchData, asof_join
from spark_bridge.schema import AGGREGATES, AGGREGATES_SCHEMA
from tests.spark_fixtures import create_topic, produce, unique_topic

pytestmark = pytest.mark.spark

KEYS = ["a", "b", "c", "d"]  # "d" has no aggregates in the strategies below
WINDOW = "5m"
PARTITIONS = 2


def partition_of(key: str) -> int:
    return KEYS.index(key) % PARTITIONS


def aggregate_values(draws: list[tuple[str, int, bool]]) -> list[tuple[int, bytes]]:
    """(partition, value) of the drawn aggregates (key, end in s, has the 5m window).

    The window count is the draw's index, so the matched record is identifiable.
    """
    out = []
    for i, (key, end_s, has_window) in enumerate(draws):
        end = 1_000 * end_s
        windows = {"1m": WindowResult(end - 60_000, end, 10_000 + i, {"sum": -1.0})}
        if has_window:
            windows[WINDOW] = WindowResult(
                end - 300_000, end, i, {"sum": i * 0.5, "max": None, "argmax": {"i": i}}
            )
        record = AggregateRecord(key, end - 1, end, windows)
        out.append((partition_of(key), dumps(record.to_json())))
    return out


def with_offsets(values: list[tuple[int, bytes]]) -> list[KafkaRecord]:
    next_offset = [0] * PARTITIONS
    records = []
    for partition, value in values:
        records.append(KafkaRecord("t", partition, next_offset[partition], None, value))
        next_offset[partition] += 1
    return records


def oracle(aggs: list[KafkaRecord], batch: pd.DataFrame) -> pd.DataFrame:
    """id -> matched window count (the draw index), by ``pd.merge_asof``."""
    rows = []
    for r in aggs:
        try:
            obj = json.loads(r.value)
        except ValueError:
            continue
        if WINDOW in obj.get("windows", {}):
            w = obj["windows"][WINDOW]
            rows.append((obj["key"], w["end"], r.partition, r.offset, w["count"]))
    right = pd.DataFrame(rows, columns=["key", "end", "partition", "offset", "match"]).astype(
        {"key": "str", "end": "int64", "partition": "int64", "offset": "int64", "match": "int64"}
    )
    right = right.sort_values(["end", "partition", "offset"], kind="stable")
    left = batch.astype({"key": "str", "ts": "int64"}).sort_values("ts", kind="stable")
    merged = pd.merge_asof(
        left,
        right,
        left_on="ts",
        right_on="end",
        by="key",
        direction="backward",
        allow_exact_matches=True,
    )
    return merged.set_index("id")["match"].astype("Int64").sort_index()


def spark_aggregates(spark, records: list[KafkaRecord]):
    table = pa.Table.from_batches([decode_batch(AGGREGATES, records)])
    return spark.createDataFrame(table, schema=AGGREGATES_SCHEMA)


aggregate_draws = st.lists(
    st.tuples(st.sampled_from(KEYS[:3]), st.integers(0, 12), st.booleans()),
    min_size=0,
    max_size=40,
)
batch_draws = st.lists(
    st.tuples(st.sampled_from(KEYS), st.integers(-1, 14)), min_size=1, max_size=40
)


@settings(max_examples=4)
@given(aggregate_draws, batch_draws, st.booleans(), st.booleans())
def test_asof_join_equals_merge_asof(spark, agg_draws, batch_rows, corrupt, flatten):
    values = aggregate_values(agg_draws)
    if corrupt:
        values.insert(len(values) // 2, (0, b"{corrupt"))
    records = with_offsets(values)
    batch = pd.DataFrame(
        [(i, key, 1_000 * t) for i, (key, t) in enumerate(batch_rows)], columns=["id", "key", "ts"]
    )
    joined = asof_join(
        spark.createDataFrame(batch),
        spark_aggregates(spark, records),
        WINDOW,
        aggregations=["sum", "argmax"] if flatten else None,
    )
    if not flatten:
        joined = joined.withColumn("agg_sum", joined["agg_aggregates"]["sum"])
        joined = joined.withColumn("agg_argmax_json", joined["agg_aggregates_json"]["argmax"])
    columns = ["id", "agg_window_count", "agg_sum", "agg_argmax_json", "agg_window_end"]
    got = joined.select(*columns).toPandas().set_index("id").sort_index()
    expected = oracle(records, batch)
    assert got["agg_window_count"].astype("Int64").tolist() == expected.tolist()
    matched = got["agg_window_count"].notna()
    assert (got.loc[matched, "agg_sum"] == got.loc[matched, "agg_window_count"] * 0.5).all()
    argmax = got.loc[matched, "agg_window_count"].map(lambda i: f'{{"i":{int(i)}}}')
    assert (got.loc[matched, "agg_argmax_json"] == argmax).all()
    assert len(got) == len(batch)


@pytest.mark.parametrize("engine", ["python", "jvm"])
def test_spark_join_cli_end_to_end(spark, kafka_bootstrap, broker_profile, engine, tmp_path):
    """Kafka topics -> ``fiba spark-join`` -> Parquet, with answers attached by query id: the
    same result (the oracle's) through the Python source and through Spark's Kafka connector."""
    agg_topic = create_topic(kafka_bootstrap, unique_topic("join-agg"), PARTITIONS)
    ans_topic = create_topic(kafka_bootstrap, unique_topic("join-ans"), PARTITIONS)
    draws = [
        ("a", 5, True),
        ("b", 3, True),
        ("a", 2, True),
        ("a", 5, True),
        ("a", 8, False),
        ("c", 9, True),
        ("b", 3, True),
        ("a", 7, True),
    ]
    values = [*aggregate_values(draws), (1, b"not json")]
    produce(kafka_bootstrap, agg_topic, [(p, None, v) for p, v in values])
    answers = [
        Answer("q1", "a", 0, 5000, {"sum": 1.0}, 2, 5000),
        Answer("q1", "a", 0, 5000, {"sum": 2.0}, 3, 6000),
        Answer("q2", "b", None, None, {}, 0, None, error="bad window"),
    ]
    produce(kafka_bootstrap, ans_topic, [(0, b"a", dumps(a.to_json())) for a in answers])
    batch = pd.DataFrame(
        {
            "id": range(7),
            "key": ["a", "a", "a", "b", "c", "d", "a"],
            "ts": pd.to_datetime([1000, 2000, 6000, 3000, 8999, 5000, 9000], unit="ms", utc=True),
            "query_id": ["q1", None, "q2", "q2", "zz", None, "q1"],
        }
    )
    batch_path = tmp_path / "batch.parquet"
    batch.to_parquet(batch_path, coerce_timestamps="us")
    out = tmp_path / "out"
    result = CliRunner().invoke(
        spark_join,
        [
            "--batch",
            str(batch_path),
            "--window",
            WINDOW,
            "--out",
            str(out),
            "--aggregates-topic",
            agg_topic,
            "--answers-topic",
            ans_topic,
            "--with-answers",
            "--aggregations",
            "sum,max",
            "--broker",
            kafka_bootstrap,
            "--broker-profile",
            broker_profile,
            "--engine",
            engine,
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    got = pd.read_parquet(out).sort_values("id").reset_index(drop=True)
    records = with_offsets(values)
    epoch_ms = (batch.ts - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(milliseconds=1)
    expected = oracle(records, batch.assign(ts=epoch_ms))
    assert got["agg_window_count"].astype("Int64").tolist() == expected.tolist()
    assert expected.tolist() == [pd.NA, 2, 3, 6, pd.NA, pd.NA, 7]
    assert got["agg_max"].isna().all()
    assert got["answer_count"].astype("Int64").tolist() == [3, pd.NA, 0, 0, pd.NA, pd.NA, 3]
    assert got["answer_error"].tolist()[2] == "bad window"

    mixed = tmp_path / "mixed.csv"
    mixed.write_text("key,ts\na,1970-01-01T00:00:03Z\na,1700000004000\n")
    args = ["--batch", str(mixed), "--window", WINDOW, "--out", str(tmp_path / "mixed-out")]
    args += ["--aggregates-topic", agg_topic, "--broker", kafka_bootstrap, "--no-progress"]
    refused = CliRunner().invoke(spark_join, [*args, "--broker-profile", broker_profile])
    assert (refused.exit_code, refused.output) == (1, f"fiba: {MIXED_TIMES}\n")

    shown = CliRunner().invoke(
        spark_read,
        [
            "--topic",
            agg_topic,
            "--window",
            WINDOW,
            "--limit",
            "3",
            "--broker",
            kafka_bootstrap,
            "--broker-profile",
            broker_profile,
            "--engine",
            engine,
            "--no-progress",
        ],
    )
    assert shown.exit_code == 0, shown.output
    assert "window_count" in shown.output and "only showing top 3 rows" in shown.output


def test_csv_batch_with_iso_times(spark, tmp_path):
    """A CSV batch whose times are ISO-8601 text joins like epoch-ms times do."""
    from spark_bridge.join import read_batch

    records = with_offsets(aggregate_values([("a", 2, True), ("a", 4, True), ("b", 1, True)]))
    path = tmp_path / "rows.csv"
    path.write_text(
        "id,key,ts\n"
        "0,a,1970-01-01T00:00:03Z\n"
        "1,a,1970-01-01T00:00:04Z\n"
        "2,b,1970-01-01T00:00:00.999Z\n"
        "3,z,1970-01-01T00:00:09Z\n"
    )
    aggregates = spark_aggregates(spark, records)
    joined = asof_join(read_batch(spark, str(path)), aggregates, WINDOW)
    got = {r.id: r.agg_window_count for r in joined.collect()}
    assert got == {0: 0, 1: 1, 2: None, 3: None}
    mixed = tmp_path / "mixed.csv"
    mixed.write_text(path.read_text() + "4,a,1700000004000\n")  # epoch ms among ISO text
    with pytest.raises(BadBatchData, match=re.escape(MIXED_TIMES)):
        asof_join(read_batch(spark, str(mixed)), aggregates, WINDOW)


MIXED_TIMES = (
    "batch column 'ts' holds '1700000004000', not an ISO-8601 time: a time column is either "
    "all epoch ms (numbers) or all ISO-8601 text"
)


def test_the_join_job_runs_as_a_script():
    """``python -m spark_bridge`` is the job's script (``spark_bridge.join`` has none: the CLI
    imports it, so it may not import the CLI back; tests/test_layers.py finds no circle)."""
    import subprocess
    import sys

    script = [sys.executable, "-m", "spark_bridge", "--help"]
    done = subprocess.run(script, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: python -m spark_bridge [OPTIONS]")
