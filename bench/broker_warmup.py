"""A freshly started Apache Kafka broker brought to the state of one that has served for a while.

A fresh JVM interprets, then compiles, the code of each request it serves: on the loaded
2-core machine its JIT compilers spent 4.6-5.4 µs of CPU per event of the first worker cell
measured after a broker start (bench/RESULTS.md, "the broker's CPU"), a cost a production
broker paid long ago.
``warm_up(bootstrap)`` produces, stop-and-wait as the worker does, ``WARM_UP_REQUESTS``
requests of the shapes the benchmarks send (aggregate-sized records of 651 bytes in batches of
1-200 over 1 and 4 partitions; changelog-sized records of 53 bytes in batches of 400 and 2,000
to a compacted topic) through the worker's batch path (``agents.batched_send``), and reads each
topic back with small fetches, on topics of its own (prefix ``warm-up-``). About 18 s on
this 2-core machine at load 6; the benchmarks that start a broker of kind ``kafka`` call it
(``bench.bench_broker``).
"""

from __future__ import annotations

import asyncio
import uuid

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from agents.batched_send import send_output_records

AGGREGATE = b"a" * 651
CHANGE = b"c" * 53
SHAPES = (
    # (compacted, records per batch, partitions, value)
    (False, 1, 1, AGGREGATE),
    (False, 25, 4, AGGREGATE),
    (False, 200, 1, AGGREGATE),
    (True, 400, 1, CHANGE),
    (True, 2000, 1, CHANGE),
)
WARM_UP_REQUESTS = 12_000
"""Produce requests in all, spread over ``SHAPES`` (fewer of the larger ones): enough for the
JVM's tiered compilation to reach its optimising compiler on the per-request code (about 10^4
calls), and for the per-record code many times over."""
PARTITIONS = 4


async def warm_up(bootstrap: str, requests: int = WARM_UP_REQUESTS) -> None:
    """Serve ``requests`` produce requests of ``SHAPES`` and fetch their records back (see the
    module doc). Topics ``warm-up-<8 hex>-plain`` and ``-compacted`` stay on the broker."""
    prefix = f"warm-up-{uuid.uuid4().hex[:8]}"
    topics = {False: f"{prefix}-plain", True: f"{prefix}-compacted"}
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [
                NewTopic(topics[False], PARTITIONS, 1),
                NewTopic(topics[True], PARTITIONS, 1, topic_configs={"cleanup.policy": "compact"}),
            ]
        )
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", max_batch_size=1 << 20)
    await producer.start()
    try:
        weights = [1 / (per_batch * parts) ** 0.5 for _, per_batch, parts, _ in SHAPES]
        for (compacted, per_batch, parts, value), weight in zip(SHAPES, weights, strict=True):
            count = max(1, round(requests * weight / sum(weights)))
            for i in range(count):
                deliveries = []
                for partition in range(parts):
                    records = [
                        (f"key-{(i * per_batch + j) % 1000}".encode(), value, None, [])
                        for j in range(per_batch)
                    ]
                    deliveries.append(
                        await send_output_records(producer, topics[compacted], partition, records)
                    )
                for delivery in deliveries:
                    await delivery
    finally:
        await producer.stop()
    for topic in topics.values():
        await _read_back(bootstrap, topic)


async def _read_back(bootstrap: str, topic: str) -> None:
    """Read ``topic``'s partitions to their end with fetches of at most 64 KiB a partition."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=1 << 16,
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        for tp in tps:
            while await consumer.position(tp) < ends[tp]:
                await consumer.getmany(tp, timeout_ms=500)
    finally:
        await consumer.stop()


def warm_up_sync(bootstrap: str, requests: int = WARM_UP_REQUESTS) -> None:
    """``warm_up`` from synchronous code."""
    asyncio.run(warm_up(bootstrap, requests))
