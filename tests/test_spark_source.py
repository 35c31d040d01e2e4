"""The ``fiba-kafka`` data source against a real broker: batch and streaming reads.

Records are produced in multi-record batches (the embedded broker's ListOffsets hides the tail
of such a batch: the source must read to the Fetch high watermark) across several partitions;
what Spark reads must equal what was produced, with Kafka coordinates, and corrupt values must
surface in ``_corrupt_record``.
"""

from __future__ import annotations

import json
import random

import pytest

from agents.records import AggregateRecord, Answer, WindowResult, dumps
from spark_bridge.jvm import parse_values
from tests import spark_fixtures
from tests.spark_fixtures import create_topic, produce, unique_topic

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

PARTITIONS = 3


def aggregate(i: int) -> AggregateRecord:
    """A deterministic aggregate record with three windows and mixed aggregate kinds."""
    rng = random.Random(i)
    st = 1_700_000_000_000 + 1000 * i
    windows = {
        name: WindowResult(
            start=st - size,
            end=st,
            count=rng.randint(1, 50),
            aggregates={
                "sum": rng.uniform(-100, 100),
                "max": rng.randint(-5, 5),
                "mean": None if i % 7 == 0 else rng.random(),
                "argmax": {"ts": st - 5, "value": 1.5},
                "collect": [i, i + 1],
            },
        )
        for name, size in (("1m", 60_000), ("5m", 300_000), ("1h", 3_600_000))
    }
    return AggregateRecord(f"k{i % 11}", st - rng.randint(0, 5000), st, windows)


def expected_row(record: AggregateRecord) -> dict:
    """What the source must yield for ``record``: times in ms, numbers/JSON split."""
    windows = {}
    for name, w in record.windows.items():
        numbers = {
            k: (None if v is None else float(v))
            for k, v in w.aggregates.items()
            if v is None or isinstance(v, int | float)
        }
        texts = {
            k: json.dumps(v, separators=(",", ":"))
            for k, v in w.aggregates.items()
            if k not in numbers
        }
        windows[name] = (w.start, w.end, w.count, numbers, texts)
    return {
        "key": record.key,
        "event_ts": record.event_ts,
        "stream_time": record.stream_time,
        "windows": windows,
    }


def ms(ts) -> int | None:
    return None if ts is None else round(ts.timestamp() * 1000)


def actual_row(row) -> dict:
    windows = {
        name: (ms(w.start), ms(w.end), w["count"], dict(w.aggregates), dict(w.aggregates_json))
        for name, w in row.windows.items()
    }
    return {
        "key": row.key,
        "event_ts": ms(row.event_ts),
        "stream_time": ms(row.stream_time),
        "windows": windows,
    }


@pytest.fixture(scope="module")
def aggregates_topic(kafka_bootstrap):
    """A 3-partition topic of 600 aggregates (200 per partition) and 2 corrupt values."""
    topic = create_topic(kafka_bootstrap, unique_topic("spark-agg"), PARTITIONS)
    records = [aggregate(i) for i in range(600)]
    produce(
        kafka_bootstrap,
        topic,
        [(i % PARTITIONS, r.key.encode(), dumps(r.to_json())) for i, r in enumerate(records)]
        + [(1, b"bad", b"{not json"), (2, b"bad", dumps({"key": "k1", "windows": {}}))],
    )
    return topic, records


def load(spark, bootstrap, topic, **options):
    reader = (
        spark.read.format("fiba-kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
    )
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def test_batch_read_equals_what_was_produced(spark, kafka_bootstrap, aggregates_topic):
    topic, records = aggregates_topic
    rows = load(spark, kafka_bootstrap, topic, maxRecordsPerPartition=120).collect()
    good = [r for r in rows if r._corrupt_record is None]
    assert len(rows) == len(records) + 2
    by_position = {(r.partition, r.offset): r for r in good}
    for i, record in enumerate(records):
        partition, offset = i % PARTITIONS, i // PARTITIONS
        row = by_position[(partition, offset)]
        assert row.topic == topic
        assert actual_row(row) == expected_row(record)
    assert sorted(len({r.offset for r in rows if r.partition == p}) for p in range(3)) == [
        200,
        201,
        201,
    ]


def test_corrupt_records_surface_in_corrupt_record(spark, kafka_bootstrap, aggregates_topic):
    topic, _ = aggregates_topic
    bad = (
        load(spark, kafka_bootstrap, topic)
        .where("_corrupt_record IS NOT NULL")
        .orderBy("partition")
        .collect()
    )
    assert [(r.partition, r.offset, r._corrupt_record) for r in bad] == [
        (1, 200, "{not json"),
        (2, 200, '{"key":"k1","windows":{}}'),
    ]
    assert all(r.key is None and r.windows is None and r.stream_time is None for r in bad)


def test_offset_options_select_ranges(spark, kafka_bootstrap, aggregates_topic):
    topic, _ = aggregates_topic
    df = load(
        spark,
        kafka_bootstrap,
        topic,
        startingOffsets=json.dumps({topic: {"0": 150, "1": -2}}),
        endingOffsets=json.dumps({topic: {"0": -1, "1": 10, "2": 5}}),
    )
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == [(0, o) for o in range(150, 200)] + [(1, o) for o in range(10)] + [
        (2, o) for o in range(5)
    ]


def test_answers_topic_reader(spark, kafka_bootstrap):
    topic = create_topic(kafka_bootstrap, unique_topic("spark-ans"), 2)
    answers = [
        Answer(f"q{i}", f"k{i % 3}", i, i + 10, {"sum": i * 1.5, "argmax": {"ts": i}}, i, i + 20)
        for i in range(20)
    ] + [Answer("qe", "k0", None, None, {}, 0, None, error="unknown window")]
    produce(
        kafka_bootstrap,
        topic,
        [(i % 2, a.key.encode(), dumps(a.to_json())) for i, a in enumerate(answers)]
        + [(0, None, b"[]")],
    )
    rows = load(spark, kafka_bootstrap, topic, records="answers").collect()
    assert len(rows) == len(answers) + 1
    by_id = {r.query_id: r for r in rows if r._corrupt_record is None}
    for a in answers:
        row = by_id[a.query_id]
        assert (row.key, ms(row["from"]), ms(row.to), row["count"], ms(row.stream_time)) == (
            a.key,
            a.from_ts,
            a.to_ts,
            a.count,
            a.stream_time,
        )
        assert dict(row.result) == {k: v for k, v in a.result.items() if k == "sum"}
        assert dict(row.result_json) == {
            k: json.dumps(v, separators=(",", ":")) for k, v in a.result.items() if k != "sum"
        }
        assert row.error == a.error
    assert [r._corrupt_record for r in rows if r.query_id is None] == ["[]"]


def run_available_now(spark, bootstrap, topic, out, checkpoint):
    """One ``availableNow`` run of a file-sink query over the source's raw records decoded by
    ``parse_values`` (the JVM engine's decoding step); returns its micro-batch count."""
    raw = (
        spark.readStream.format("fiba-kafka")
        .options(
            **{"kafka.bootstrap.servers": bootstrap},
            topic=topic,
            records="raw",
            startingOffsets="earliest",
            maxOffsetsPerTrigger="45",
        )
        .load()
    )
    query = spark_fixtures.run_available_now(parse_values(raw, "aggregates"), out, checkpoint)
    return sum(1 for p in query.recentProgress if p["numInputRows"] > 0)


def test_streaming_restart_from_checkpoint_neither_skips_nor_repeats(
    spark, kafka_bootstrap, tmp_path
):
    topic = create_topic(kafka_bootstrap, unique_topic("spark-stream"), PARTITIONS)
    records = [aggregate(i) for i in range(150)]
    sent = [(i % PARTITIONS, r.key.encode(), dumps(r.to_json())) for i, r in enumerate(records)]
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    produce(kafka_bootstrap, topic, sent[:90])
    assert run_available_now(spark, kafka_bootstrap, topic, out, checkpoint) == 2
    assert spark.read.parquet(str(out)).count() == 90

    produce(kafka_bootstrap, topic, [*sent[90:], (0, None, b"\xff not utf-8")])
    run_available_now(spark, kafka_bootstrap, topic, out, checkpoint)

    rows = spark.read.parquet(str(out)).collect()
    positions = [(r.partition, r.offset) for r in rows]
    assert len(positions) == len(set(positions)) == len(records) + 1
    by_position = {(r.partition, r.offset): r for r in rows}
    for p in range(PARTITIONS):
        produced_here = [r for i, r in enumerate(records) if i % PARTITIONS == p]
        for offset, record in enumerate(produced_here):
            assert actual_row(by_position[(p, offset)]) == expected_row(record)
    assert by_position[(0, 50)]._corrupt_record == "\ufffd not utf-8"


def test_the_sessions_python_workers_import_the_installed_pyspark(spark):
    """Spark puts ``SPARK_HOME/python/lib/pyspark.zip`` first on its Python workers' PYTHONPATH,
    and Python compiles a zip's modules at every start (about 3x a start's CPU): at CI's load
    the worker of a streaming Python source (the restart test above) then missed Spark's fixed
    10 s to connect back. ``spark_session`` on a local master starts its workers with
    ``spark_bridge.python_workers.worker_python()``, which leaves the zip out: they import the
    installed pyspark, from cached bytecode."""
    rdd = spark.sparkContext.parallelize(range(4), 2)
    files = set(rdd.map(lambda _: __import__("pyspark").__file__).collect())
    assert files and not any(".zip" in path for path in files), files
