"""HTTP queries about keys another worker owns, answered by the owner through Kafka.

``AnswerForwarder.ask`` produces the query to the query topic, keyed, so that it reaches the
owner of the key's partition, and waits for its answer, read by a group-less consumer of the
answers topic started on first use. Cost: two produce/fetch round trips per query.
Reference: docs/reference/http.md.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import replace

from aiokafka import AIOKafkaConsumer, TopicPartition

from agents.clients import RepeatedFailures, client_options, fetch
from agents.config import FaustWorker
from agents.queries.latency import LatencyProducer, query_fetch_wait_ms
from agents.records import Answer, RangeQuery, dumps
from agents.supervision import OnFailure, watched


class AnswerForwarder:
    """Answers for HTTP queries about keys another worker owns, obtained through Kafka.

    The query is produced to the query topic (keyed, so it reaches the owner of the key's
    partition); a group-less consumer of the answers topic, started on first use, resolves the
    waiting request by ``query_id`` (a fresh UUID, so old answers never match).
    """

    def __init__(self, fiba: FaustWorker, producer: LatencyProducer, on_failure: OnFailure) -> None:
        self.fiba = fiba
        self.producer = producer
        self.on_failure = on_failure
        self._pending: dict[str, asyncio.Future[Answer]] = {}
        self._consumer: AIOKafkaConsumer | None = None
        self._reader: asyncio.Task[None] | None = None
        self._starting = asyncio.Lock()

    async def ask(self, query: RangeQuery, timeout: float) -> Answer | None:
        await self._start()
        query_id = f"http-{uuid.uuid4().hex}"
        forwarded = replace(query, query_id=query_id)
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._pending[query_id] = future
        try:
            await self.producer.send(
                self.fiba.settings.queries_topic, query.key.encode(), dumps(forwarded.to_json())
            )
            result = await asyncio.wait_for(future, timeout)
        except TimeoutError:
            return None
        finally:
            self._pending.pop(query_id, None)
        return replace(result, query_id=query.query_id)

    async def _start(self) -> None:
        async with self._starting:
            if self._consumer is not None:
                return
            settings = self.fiba.settings
            consumer = AIOKafkaConsumer(
                **client_options(settings),
                enable_auto_commit=False,
                auto_offset_reset="latest",
                fetch_max_wait_ms=query_fetch_wait_ms(settings),
                isolation_level=settings.outputs_isolation_level,
            )
            await consumer.start()
            consumer.assign(
                [TopicPartition(settings.answers_topic, p) for p in range(settings.partitions)]
            )
            self._consumer = consumer
            self._reader = watched(self._read(consumer), "fiba-answers-reader", self.on_failure)

    async def _read(self, consumer: AIOKafkaConsumer) -> None:
        failures = RepeatedFailures("fetching answers")
        while True:
            batches = await fetch(consumer, failures, timeout_ms=500) or {}
            for records in batches.values():
                for record in records:
                    if not self._pending:
                        break
                    try:
                        result = Answer.from_json(json.loads(record.value))
                    except (ValueError, KeyError, TypeError):
                        continue
                    future = self._pending.get(result.query_id)
                    if future is not None and not future.done():
                        future.set_result(result)

    async def stop(self) -> None:
        """Stop the answers consumer (if it was started); the producer is the service's."""
        if self._reader is not None:
            self._reader.cancel()
        if self._consumer is not None:
            await self._consumer.stop()
