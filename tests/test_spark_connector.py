"""Spark's own Kafka connector, for real: resolved from Maven Central, on the test session's
classpath, reading both brokers.

Through the connector (``engine="jvm"``) a batch read and an ``availableNow`` stream give the
very rows of the ``fiba-kafka`` Python source, corrupt records included; with
``kafka.isolation.level=read_committed`` aborted records are hidden, in either engine (Apache
Kafka only: the embedded broker has no transactions). The connector's "latest" comes from
ListOffsets, which the embedded broker answers wrongly (the base offset of the newest record
batch + 1): batch reads get explicit offsets from the Fetch high watermark on every broker (the
README's snippet, as written, reads every record on both), streaming through ``read_records`` is
refused where ListOffsets is seen wrong, and the connector itself streams correctly on that
broker only topics written in single-record batches (what those tests show). Without the
connector ``engine="auto"`` falls back to the Python source with one line.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid

import pytest

from agents.records import Answer, dumps
from app.brokers.process import BrokerSetupError
from spark_bridge.connector import CONNECTOR_ARTIFACT, connector_jars, shipped_by_spark
from spark_bridge.jvm import parse_values
from spark_bridge.read import flatten_window, read_aggregates, read_records
from spark_bridge.schema import AGGREGATES, ANSWERS
from tests.spark_fixtures import (
    create_topic,
    produce,
    run_available_now,
    unique_topic,
)
from tests.test_spark_source import aggregate

PARTITIONS = 3
CORRUPT = [(1, b"bad", b"{not json"), (2, None, b"\xff not utf-8"), (0, b"k", b"[]")]


def rows(df) -> list[dict]:
    """``df``'s rows as plain dicts (maps as dicts), by partition and offset."""
    return [r.asDict(recursive=True) for r in df.orderBy("partition", "offset").collect()]


def aggregate_values(n: int, start: int = 0) -> list[tuple[int, bytes, bytes]]:
    return [
        (i % PARTITIONS, r.key.encode(), dumps(r.to_json()))
        for i, r in ((i, aggregate(i)) for i in range(start, start + n))
    ]


@pytest.fixture(scope="module")
def mixed_topics(kafka_bootstrap):
    """An aggregates and an answers topic written in multi-record batches, corrupt values
    included; returns ({kind: topic}, {kind: number of records})."""
    aggregates = create_topic(kafka_bootstrap, unique_topic("conn-agg"), PARTITIONS)
    answers = create_topic(kafka_bootstrap, unique_topic("conn-ans"), PARTITIONS)
    produce(kafka_bootstrap, aggregates, aggregate_values(300) + CORRUPT)
    replies = [
        Answer(f"q{i}", f"k{i % 4}", i, i + 9, {"sum": i / 2, "argmax": {"ts": i}}, i, i + 30)
        for i in range(60)
    ] + [Answer("qe", "k0", None, None, {}, 0, None, error="unknown window")]
    produce(
        kafka_bootstrap,
        answers,
        [(i % PARTITIONS, a.key.encode(), dumps(a.to_json())) for i, a in enumerate(replies)]
        + CORRUPT,
    )
    return {AGGREGATES: aggregates, ANSWERS: answers}, {
        AGGREGATES: 300 + len(CORRUPT),
        ANSWERS: len(replies) + len(CORRUPT),
    }


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.parametrize("kind", [AGGREGATES, ANSWERS])
def test_a_batch_read_through_the_connector_equals_the_python_source(
    spark, kafka_bootstrap, broker_profile, mixed_topics, kind
):
    topics, counts = mixed_topics
    read = {
        engine: rows(
            read_records(
                spark,
                kind,
                kafka_bootstrap,
                topics[kind],
                engine=engine,
                broker_profile=broker_profile,
            )
        )
        for engine in ("python", "jvm")
    }
    assert len(read["python"]) == counts[kind]
    assert read["jvm"] == read["python"]
    assert sum(r["_corrupt_record"] is not None for r in read["jvm"]) == len(CORRUPT)


@pytest.mark.spark
@pytest.mark.kafka
def test_offset_ranges_through_the_connector_equal_the_python_source(
    spark, kafka_bootstrap, broker_profile, mixed_topics
):
    topics, _ = mixed_topics
    topic = topics[AGGREGATES]
    ranges = {
        "starting_offsets": f'{{"{topic}": {{"0": 40, "2": 3}}}}',  # 1: default, earliest
        "ending_offsets": f'{{"{topic}": {{"0": -1, "1": 10, "2": 7}}}}',
    }
    read = {
        engine: rows(
            read_records(
                spark,
                AGGREGATES,
                kafka_bootstrap,
                topic,
                engine=engine,
                broker_profile=broker_profile,
                **ranges,
            )
        )
        for engine in ("python", "jvm")
    }
    assert [(r["partition"], r["offset"]) for r in read["python"]] == [
        *((0, o) for o in range(40, 101)),
        *((1, o) for o in range(10)),
        *((2, o) for o in range(3, 7)),
    ]
    assert read["jvm"] == read["python"]


@pytest.mark.spark
@pytest.mark.kafka
def test_an_available_now_stream_through_the_connector_equals_the_python_source(
    spark, kafka_bootstrap, embedded_profile, tmp_path
):
    """Two ``availableNow`` runs on one checkpoint, records produced before each: every record
    once, the rows of the Python source's batch read."""
    if embedded_profile:
        pytest.skip(
            "the connector takes a stream's end from ListOffsets, wrong on the embedded broker: "
            "read_records refuses it (test_the_embedded_broker_streams_...)"
        )
    topic = create_topic(kafka_bootstrap, unique_topic("conn-stream"), PARTITIONS)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    stream = read_records(
        spark,
        AGGREGATES,
        kafka_bootstrap,
        topic,
        engine="jvm",
        streaming=True,
        starting_offsets="earliest",
    )
    produce(kafka_bootstrap, topic, aggregate_values(90) + CORRUPT[:1])
    run_available_now(stream, out, checkpoint)
    assert spark.read.parquet(str(out)).count() == 91
    produce(kafka_bootstrap, topic, aggregate_values(60, start=90) + CORRUPT[1:])
    run_available_now(stream, out, checkpoint)
    streamed = rows(spark.read.parquet(str(out)))
    batch = rows(read_records(spark, AGGREGATES, kafka_bootstrap, topic, engine="python"))
    assert len(batch) == 150 + len(CORRUPT)
    assert streamed == batch


@pytest.mark.spark
@pytest.mark.kafka
def test_the_readme_snippet_as_written_reads_every_record_on_either_broker(
    spark, kafka_bootstrap, tmp_path
):
    """README "Spark" as written (no engine, no broker profile: ``auto``, profile ``kafka``) on
    a topic written in multi-record batches: the batch read has every record, the stream (two
    ``availableNow`` runs, records produced batched before each) every record produced after
    it started, and ``flatten_window`` flattens the stream as it does the batch."""
    topic = create_topic(kafka_bootstrap, unique_topic("conn-readme"), PARTITIONS)
    produce(kafka_bootstrap, topic, aggregate_values(150))
    aggs = read_aggregates(spark, kafka_bootstrap, topic)  # batch, typed
    assert aggs.count() == 150
    five = flatten_window(aggs, "5m")
    stream = read_aggregates(spark, kafka_bootstrap, topic, streaming=True)
    flat_stream = flatten_window(stream, "5m")
    assert flat_stream.columns == five.columns
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    run_available_now(flat_stream, out, checkpoint)  # starts at latest: nothing yet
    produce(kafka_bootstrap, topic, aggregate_values(120, start=150))
    run_available_now(flat_stream, out, checkpoint)
    streamed = rows(spark.read.parquet(str(out)))
    later = rows(flatten_window(read_aggregates(spark, kafka_bootstrap, topic), "5m"))
    assert len(later) == 270
    assert streamed == [r for r in later if r["offset"] >= 150 // PARTITIONS]


def produce_one_record_batches(bootstrap: str, topic: str, records) -> None:
    """Send ``(partition, key, value)`` records one record batch each (``max_batch_size``
    below one record), the embedded profile's way for topics read back by end offset."""
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, max_batch_size=16)
        await producer.start()
        try:
            for partition, key, value in records:
                await producer.send_and_wait(topic, value, key=key, partition=partition)
        finally:
            await producer.stop()

    asyncio.run(run())


@pytest.mark.spark
@pytest.mark.kafka
def test_the_embedded_broker_streams_through_the_connector_only_single_record_batches(
    spark, kafka_bootstrap, broker_profile, embedded_profile, tmp_path
):
    """What works on the embedded broker: the connector streams a topic written in single-record
    batches exactly (ListOffsets is right there); ``read_records`` refuses a stream with this
    profile, because the worker's outputs are written in multi-record batches, and without it
    as soon as ListOffsets answers below the high watermark."""
    if not embedded_profile:
        pytest.skip("Apache Kafka streams through read_records (the availableNow test)")
    refused = "engine jvm cannot stream this topic: Spark's Kafka connector takes each"
    with pytest.raises(ValueError, match=refused + ".* the embedded broker answers it wrongly"):
        read_records(
            spark,
            AGGREGATES,
            kafka_bootstrap,
            "t",
            engine="jvm",
            streaming=True,
            broker_profile=broker_profile,
        )
    batched = create_topic(kafka_bootstrap, unique_topic("conn-stream-b"), 1)
    produce(kafka_bootstrap, batched, [(0, None, b"{}")] * 20)
    with pytest.raises(ValueError, match=r"answers it wrongly \(.*\[0\]: \d+, high watermark 20\)"):
        read_records(spark, AGGREGATES, kafka_bootstrap, batched, engine="jvm", streaming=True)
    topic = create_topic(kafka_bootstrap, unique_topic("conn-stream1"), PARTITIONS)
    produce_one_record_batches(kafka_bootstrap, topic, aggregate_values(30) + CORRUPT)
    raw = (
        spark.readStream.format("kafka")
        .options(
            **{"kafka.bootstrap.servers": kafka_bootstrap},
            subscribe=topic,
            startingOffsets="earliest",
        )
        .load()
    )
    run_available_now(parse_values(raw, AGGREGATES), tmp_path / "out", tmp_path / "checkpoint")
    streamed = rows(spark.read.parquet(str(tmp_path / "out")))
    batch = rows(read_records(spark, AGGREGATES, kafka_bootstrap, topic, engine="python"))
    assert len(batch) == 30 + len(CORRUPT)
    assert streamed == batch


def produce_transactions(bootstrap: str, topic: str) -> None:
    """Four transactions on partition 0: ``c0..c4`` committed, ``a0..a4`` aborted, ``c5..c9``
    committed, ``o0..o4`` left open (the broker aborts it after ten minutes)."""
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            transactional_id=f"spark-test-{uuid.uuid4().hex}",
            transaction_timeout_ms=600_000,
        )
        await producer.start()
        try:
            for prefix, numbers, end in (
                ("c", range(5), producer.commit_transaction),
                ("a", range(5), producer.abort_transaction),
                ("c", range(5, 10), producer.commit_transaction),
                ("o", range(5), None),
            ):
                await producer.begin_transaction()
                for n in numbers:
                    answer = Answer(f"{prefix}{n}", "k", 0, 9, {"sum": float(n)}, 1, 9)
                    await producer.send_and_wait(topic, dumps(answer.to_json()), partition=0)
                if end is not None:
                    await end()
        finally:
            await producer.stop()

    asyncio.run(run())


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.parametrize("engine", ["jvm", "python"])
def test_read_committed_hides_aborted_outputs_in_either_engine(
    spark, kafka_bootstrap, embedded_profile, engine
):
    """Committed records only, up to the last stable offset: neither aborted records nor those
    of a transaction still open (read_uncommitted shows both)."""
    if embedded_profile:
        pytest.skip("the embedded broker has no transactions (aborted records stay visible)")
    topic = create_topic(kafka_bootstrap, unique_topic("conn-txn"), 1)
    produce_transactions(kafka_bootstrap, topic)

    def query_ids(**options: str) -> list[str]:
        df = read_records(spark, ANSWERS, kafka_bootstrap, topic, engine=engine, options=options)
        return [r["query_id"] for r in rows(df)]

    committed = [f"c{n}" for n in range(10)]
    assert query_ids(**{"kafka.isolation.level": "read_committed"}) == committed
    others = [f"{prefix}{n}" for prefix in "ao" for n in range(5)]
    assert sorted(query_ids()) == sorted(committed + others)


@pytest.mark.once  # (Maven and the cache, on any build and broker)
def test_the_connector_jars_are_those_spark_does_not_ship(tmp_path):
    """Resolved into a fresh cache (Maven's ~/.m2 is warm after ``make spark-jars``)."""
    jars = connector_jars(root=tmp_path)
    names = sorted(jar.name.rsplit("-", 1)[0] for jar in jars)
    assert names == [
        "commons-pool2",
        "kafka-clients",
        CONNECTOR_ARTIFACT,
        "spark-token-provider-kafka-0-10_2.13",
    ]
    everything = {p.parent.parent.name for p in tmp_path.rglob("*.jar")}
    assert "scala-library" in everything  # resolved, but Spark's own copy is the one used
    assert connector_jars(root=tmp_path) == jars  # reused


@pytest.mark.once  # (Maven and the cache, on any build and broker)
def test_a_connector_maven_does_not_serve_is_one_line_and_no_cache(tmp_path):
    with pytest.raises(BrokerSetupError) as error:
        connector_jars("0.0.0-no-such-version", root=tmp_path)
    message = str(error.value)
    assert message.startswith(f"resolving Spark's Kafka connector {CONNECTOR_ARTIFACT} 0.0.0-no")
    assert "\n" not in message
    assert list(tmp_path.iterdir()) == []


def test_an_artifact_counts_as_shipped_only_with_a_versioned_jar_of_its_own_name():
    shipped = {"kafka-clients-3.9.2.jar", "spark-tags_2.13-4.2.0.jar", "guava-33.4.0-jre.jar"}
    assert shipped_by_spark("kafka-clients", shipped)
    assert shipped_by_spark("spark-tags_2.13", shipped)
    assert shipped_by_spark("guava", shipped)
    assert not shipped_by_spark("kafka", shipped)
    assert not shipped_by_spark("spark-tags", shipped)


def test_a_callers_jars_join_the_connectors():
    from spark_bridge.session import session_conf

    jars = session_conf({"spark.jars": "/opt/extra.jar", "spark.ui.enabled": "true"})
    assert jars["spark.jars"].endswith(",/opt/extra.jar")
    assert f"{CONNECTOR_ARTIFACT}-{spark_version()}.jar" in jars["spark.jars"]
    assert jars["spark.ui.enabled"] == "true"
    assert jars["spark.sql.session.timeZone"] == "UTC"


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.parametrize("engine", ["auto", "jvm"])
def test_without_the_connector_auto_falls_back_with_one_line_and_jvm_stops(
    kafka_bootstrap, embedded_profile, mixed_topics, tmp_path, engine
):
    """``fiba spark-read`` on a machine where the connector cannot be resolved (an empty cache
    and a ``mvn`` that fails as offline Maven does): with ``--engine auto`` one warning line and
    the rows still read; with ``--engine jvm`` one error line naming why, exit code 2."""
    if embedded_profile:
        pytest.skip("engine auto reads with the Python source on the embedded broker anyway")
    topics, _ = mixed_topics
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mvn = bin_dir / "mvn"
    mvn.write_text("#!/bin/sh\necho '[ERROR] Could not transfer artifact (offline)'\nexit 1\n")
    mvn.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "FIBA_CACHE_DIR": str(tmp_path / "cache"),
    }
    command = ["spark-read", "--broker", kafka_bootstrap, "--topic", topics[AGGREGATES]]
    command += ["--engine", engine, "--limit", "400", "--no-progress", "--master", "local[1]"]
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    why = (
        f"resolving Spark's Kafka connector {CONNECTOR_ARTIFACT} {spark_version()} from Maven "
        "Central failed: Could not transfer artifact (offline)"
    )
    ours = [line for line in done.stderr.splitlines() if "Kafka connector" in line]
    if engine == "jvm":
        assert done.returncode == 2, done.stderr
        refusal = "fiba: engine jvm needs Spark's Kafka connector, not on the classpath: "
        assert ours == [refusal + why]
        return
    assert done.returncode == 0, done.stderr
    assert ours == [
        f"Spark's Kafka connector is not on the classpath ({why}): engine auto reads with the "
        "fiba-kafka Python source"
    ]
    assert "only showing top 400 rows" not in done.stdout  # all 303 rows shown
    assert done.stdout.count("{not json") == 1


def spark_version() -> str:
    import pyspark

    return pyspark.__version__
