"""The latency plumbing of the query paths (``agents.queries``): the answers producer and the
profile-dependent fetch wait. Answers themselves are checked end to end in test_worker_e2e.py."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import replace
from types import SimpleNamespace

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition

from agents.clients import client_options
from agents.queries.consumer import QueryConsumer
from agents.queries.latency import (
    EMBEDDED_QUERY_FETCH_WAIT_MS,
    KAFKA_QUERY_FETCH_WAIT_MS,
    LatencyProducer,
    query_fetch_wait_ms,
)
from app.settings import Settings
from app.topics import create_topics


def test_fetch_wait_is_short_only_where_the_broker_does_not_answer_early() -> None:
    embedded = replace(Settings(), broker_profile="embedded")
    kafka = replace(Settings(), broker_profile="kafka")
    assert query_fetch_wait_ms(embedded) == EMBEDDED_QUERY_FETCH_WAIT_MS
    assert query_fetch_wait_ms(kafka) == KAFKA_QUERY_FETCH_WAIT_MS
    assert EMBEDDED_QUERY_FETCH_WAIT_MS < KAFKA_QUERY_FETCH_WAIT_MS


def two_partition_settings(bootstrap: str, embedded: bool, prefix: str) -> Settings:
    """Settings on the test broker with two partitions and topics named ``<prefix>-<unique>-*``."""
    suffix = uuid.uuid4().hex[:8]
    return replace(
        Settings(),
        broker=bootstrap,
        broker_profile="embedded" if embedded else "kafka",
        app_id=f"{prefix}-{suffix}",
        input_topic=f"{prefix}-{suffix}-events",
        aggregates_topic=f"{prefix}-{suffix}-aggregates",
        queries_topic=f"{prefix}-{suffix}-queries",
        answers_topic=f"{prefix}-{suffix}-answers",
        dead_letter_topic=f"{prefix}-{suffix}-dlq",
        partitions=2,
    )


def test_latency_producer_starts_on_first_send_and_delivers_in_order_per_key(
    kafka_bootstrap: str, embedded_profile: bool
) -> None:
    settings = two_partition_settings(kafka_bootstrap, embedded_profile, "latency")

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


class RecordingService:
    """The part of ``QueryService`` that ``QueryConsumer`` calls: records what it handles."""

    def __init__(self) -> None:
        self.handled: list[bytes] = []
        self.failures: list[BaseException] = []
        self.transactions = None  # at-least-once

    async def handle(self, record: ConsumerRecord) -> None:
        self.handled.append(record.value)

    async def flush(self) -> None:
        """Nothing is sent, so nothing to flush."""

    def on_failure(self, error: BaseException) -> None:
        self.failures.append(error)


def test_the_query_consumer_reads_after_a_revoke_and_an_assignment_in_quick_succession(
    kafka_bootstrap: str, embedded_profile: bool
) -> None:
    """A worker's first rebalance calls ``follow(set())`` then ``follow(owned)`` while the
    query group's coordinator may still be looked up: aiokafka's coordination task then died
    on an assertion, and every later fetch failed (no query answered, logged forever)."""
    settings = two_partition_settings(kafka_bootstrap, embedded_profile, "follow")
    service = RecordingService()

    async def scenario() -> None:
        await create_topics(settings)
        consumer = QueryConsumer(SimpleNamespace(settings=settings), service)
        try:
            await consumer.follow(set())
            for _ in range(3):  # the coordination task starts looking the coordinator up
                await asyncio.sleep(0)
            await consumer.follow({0, 1})
            producer = AIOKafkaProducer(**client_options(settings))
            await producer.start()
            try:
                await producer.send_and_wait(settings.queries_topic, b"q", key=b"k", partition=1)
            finally:
                await producer.stop()
            deadline = time.monotonic() + 60
            while not service.handled and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
        finally:
            await consumer.stop()

    asyncio.run(scenario())
    assert service.handled == [b"q"]
