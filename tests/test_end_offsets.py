"""``agents.clients.end_offsets`` on each broker kind with its profile: ListOffsets(latest) with the
``kafka`` profile (Apache Kafka), the Fetch high watermark with the ``embedded`` one (Tansu's
ListOffsets hides the tail of a multi-record batch). Either way the end offset must be the
offset after the last record, i.e. agree with the high watermark a fetch reports."""

import asyncio
import time
import uuid
from dataclasses import replace

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from agents.clients import client_options, end_offsets
from app.settings import Settings
from app.topics import TopicSpec, create_topics

pytestmark = pytest.mark.kafka


async def test_end_offsets_agree_with_the_fetch_high_watermark(kafka_bootstrap, broker_profile):
    settings = replace(Settings(), broker=kafka_bootstrap, broker_profile=broker_profile)
    topic = f"end-offsets-{uuid.uuid4().hex[:8]}"
    await create_topics(settings, [TopicSpec(topic, 2, 1, {})])
    producer = AIOKafkaProducer(**client_options(settings), linger_ms=50)
    await producer.start()
    try:  # multi-record batches: 10 records in partition 0, 3 in partition 1
        partitions = [i % 2 for i in range(6)] + [0] * 7
        await asyncio.gather(*[await producer.send(topic, b"v", partition=p) for p in partitions])
    finally:
        await producer.stop()
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    consumer = AIOKafkaConsumer(**client_options(settings), enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign(tps)
        ends = await end_offsets(consumer, tps, settings)
        await consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + 30
        while any(consumer.highwater(tp) is None for tp in tps) and time.monotonic() < deadline:
            await consumer.getmany(*tps, timeout_ms=500)
        assert ends == {tps[0]: 10, tps[1]: 3}
        assert ends == {tp: consumer.highwater(tp) for tp in tps}
    finally:
        await consumer.stop()
