"""Spark test fixtures (loaded by tests/conftest.py) and Kafka helpers of the Spark tests.

``spark``: one local[2] SparkSession for the whole test session (4 shuffle partitions, no UI,
UTC session time zone, the ``fiba-kafka`` data source registered), stopped at session end; its
Python workers run what ``spark_session`` chooses for a local master
(``spark_bridge.python_workers``). pyspark is imported only when a test asks for it.

``create_topic`` creates a topic explicitly (partition count and explicit configs, never broker
auto-creation); ``produce`` sends values to given partitions in multi-record batches.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

TOPIC_CONFIGS = {"retention.ms": "3600000", "retention.bytes": "-1", "cleanup.policy": "delete"}


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The session's local SparkSession (see the module docstring)."""
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from spark_bridge.session import spark_session

    session = spark_session(
        "local[2]",
        app_name="fiba-tests",
        conf={"spark.sql.shuffle.partitions": "4", "spark.default.parallelism": "4"},
    )
    try:
        yield session
    finally:
        session.stop()


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create_topic(bootstrap: str, name: str, partitions: int) -> str:
    """Create ``name`` with ``partitions`` partitions and explicit configs; returns the name."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    async def run() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            await admin.create_topics(
                [NewTopic(name, partitions, 1, topic_configs=dict(TOPIC_CONFIGS))]
            )
        finally:
            await admin.close()

    asyncio.run(run())
    return name


def produce(bootstrap: str, topic: str, records: Iterable[tuple[int, bytes | None, bytes]]) -> None:
    """Send ``(partition, key, value)`` records, batched (many records per produce request)."""
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=50, acks="all")
        await producer.start()
        try:
            futures = [
                await producer.send(topic, value, key=key, partition=partition)
                for partition, key, value in records
            ]
            await producer.flush()
            await asyncio.gather(*futures)
        finally:
            await producer.stop()

    asyncio.run(run())


def kafka_records(values: list[bytes | None]) -> list[Any]:
    """``KafkaRecord``s of ``values`` (partitions 0/1, offsets from 100, distinct timestamps)."""
    from spark_bridge.decode import KafkaRecord

    return [
        KafkaRecord("t", i % 2, 100 + i, 1_700_000_000_000 + i, v) for i, v in enumerate(values)
    ]


def python_engine_rows(spark: Any, kind: str, records: list[Any]) -> list[Any]:
    """The rows the ``fiba-kafka`` source yields for ``records``, collected in offset order."""
    import pyarrow as pa

    from spark_bridge.decode import decode_batch
    from spark_bridge.schema import SCHEMAS

    table = pa.Table.from_batches([decode_batch(kind, records)])
    return spark.createDataFrame(table, schema=SCHEMAS[kind]).orderBy("offset").collect()


def jvm_engine_df(spark: Any, kind: str, records: list[Any]) -> Any:
    """``parse_values`` (the JVM engine's decoding) over a DataFrame of the connector's raw
    columns holding ``records``."""
    from datetime import UTC, datetime

    from spark_bridge.jvm import parse_values

    raw = spark.createDataFrame(
        [
            (
                None if r.value is None else bytearray(r.value),
                r.topic,
                r.partition,
                r.offset,
                datetime.fromtimestamp(r.timestamp / 1000, UTC),
            )
            for r in records
        ],
        "value binary, topic string, partition int, offset bigint, timestamp timestamp",
    )
    return parse_values(raw, kind)


def run_available_now(stream: Any, out: Path, checkpoint: Path) -> Any:
    """One ``availableNow`` run of ``stream`` into a Parquet folder with its checkpoint; returns
    the finished query (its ``recentProgress`` tells the micro-batches)."""
    query = (
        stream.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(300)
    assert query.exception() is None
    return query
