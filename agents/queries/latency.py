"""The latency-bound Kafka clients of the query paths.

``LatencyProducer`` sends answers and forwarded queries at once (``linger_ms=0``), unlike the
app producer's outputs, which linger to fill batches; ``query_fetch_wait_ms`` is the longest
broker-side wait of the consumers of queries and answers, short on the embedded broker, which
answers a fetch only when the wait expires. Reference: docs/reference/http.md.
"""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaProducer

from agents.batched_send import kafka_timestamp
from agents.clients import client_options
from agents.config import WorkerSettings

KAFKA_QUERY_FETCH_WAIT_MS = 100
EMBEDDED_QUERY_FETCH_WAIT_MS = 10


def query_fetch_wait_ms(settings: WorkerSettings) -> int:
    """Longest wait of a query/answer fetch on the broker.

    Kafka answers a fetch as soon as a record arrives (``fetch_min_bytes`` 1), so a long wait
    costs no latency there and keeps an idle consumer cheap. The embedded broker answers only
    when the wait expires, so there a query or answer waits up to this long after it arrived:
    a short wait (embedded profile), paid for by idle fetch requests (each costs the worker's
    event loop a request and a response; 5 ms instead of 10 ms gained no measurable latency
    under load and cost throughput, see bench/RESULTS.md).
    """
    return EMBEDDED_QUERY_FETCH_WAIT_MS if settings.embedded else KAFKA_QUERY_FETCH_WAIT_MS


class LatencyProducer:
    """An aiokafka producer that sends every record at once (``linger_ms=0``, ``acks=all``),
    started on first use: answers and forwarded queries are latency-bound, unlike the app
    producer's outputs, which linger to fill batches."""

    def __init__(self, settings: WorkerSettings) -> None:
        self.settings = settings
        self._producer: AIOKafkaProducer | None = None
        self._starting = asyncio.Lock()

    async def send(
        self, topic: str, key: bytes, value: bytes, timestamp: int | None = None
    ) -> None:
        """Hand one record to the producer (delivery is awaited by ``flush``), with Kafka
        ``timestamp`` (epoch ms, ``agents.batched_send.kafka_timestamp``; None: the clock)."""
        if self._producer is None:
            async with self._starting:
                if self._producer is None:
                    producer = AIOKafkaProducer(
                        **client_options(self.settings), linger_ms=0, acks="all"
                    )
                    await producer.start()
                    self._producer = producer
        await self._producer.send(topic, value, key=key, timestamp_ms=kafka_timestamp(timestamp))

    async def flush(self) -> None:
        """Wait until every record sent so far is acknowledged."""
        if self._producer is not None:
            await self._producer.flush()

    async def stop(self) -> None:
        """Deliver what was sent and stop."""
        if self._producer is not None:
            await self._producer.stop()
