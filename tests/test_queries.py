"""The latency plumbing of the query paths (``agents.queries``): the answers producer and the
profile-dependent fetch wait. Answers themselves are checked end to end in test_worker_e2e.py."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace

from aiokafka import AIOKafkaConsumer, TopicPartition

from agents.queries import (
    EMBEDDED_QUERY_FETCH_WAIT_MS,
    KAFKA_QUERY_FETCH_WAIT_MS,
    LatencyProducer,
    query_fetch_wait_ms,
)
from app.clients import client_options
from app.settings import Settings
from app.topics import create_topics


def test_fetch_wait_is_short_only_where_the_broker_does_not_answer_early() -> None:
    embedded = replace(Settings(), broker_profile="embedded")
    kafka = replace(Settings(), broker_profile="kafka")
    assert query_fetch_wait_ms(embedded) == EMBEDDED_QUERY_FETCH_WAIT_MS
    assert query_fetch_wait_ms(kafka) == KAFKA_QUERY_FETCH_WAIT_MS
    assert EMBEDDED_QUERY_FETCH_WAIT_MS < KAFKA_QUERY_FETCH_WAIT_MS


def test_latency_producer_starts_on_first_send_and_delivers_in_order_per_key(
    kafka_bootstrap: str, embedded_profile: bool
) -> None:
    suffix = uuid.uuid4().hex[:8]
    settings = replace(
        Settings(),
        broker=kafka_bootstrap,
        broker_profile="embedded" if embedded_profile else "kafka",
        app_id=f"latency-{suffix}",
        input_topic=f"latency-{suffix}-events",
        aggregates_topic=f"latency-{suffix}-aggregates",
        queries_topic=f"latency-{suffix}-queries",
        answers_topic=f"latency-{suffix}-answers",
        dead_letter_topic=f"latency-{suffix}-dlq",
        partitions=2,
    )

    async def scenario() -> list[tuple[bytes, bytes]]:
        await create_topics(settings)
        producer = LatencyProducer(settings)
        await producer.flush()  # nothing sent yet: no producer is started
        await producer.stop()
        producer = LatencyProducer(settings)
        sent = [(f"k{i}".encode(), f"answer {i}".encode()) for i in range(5)]
        for key, value in sent:
            await producer.send(settings.answers_topic, key, value)
        await producer.send(settings.answers_topic, b"k0", b"answer 0 again")
        await producer.flush()
        await producer.stop()
        consumer = AIOKafkaConsumer(**client_options(settings), enable_auto_commit=False)
        await consumer.start()
        try:
            tps = [TopicPartition(settings.answers_topic, p) for p in range(2)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            received: list[tuple[bytes, bytes]] = []
            for _ in range(50):
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    received += [(r.key, r.value) for r in records]
                if len(received) > len(sent):
                    break
        finally:
            await consumer.stop()
        return received

    received = asyncio.run(scenario())
    assert sorted(received) == sorted(
        [(f"k{i}".encode(), f"answer {i}".encode()) for i in range(5)]
        + [(b"k0", b"answer 0 again")]
    )
    k0 = [value for key, value in received if key == b"k0"]
    assert k0 == [b"answer 0", b"answer 0 again"]
