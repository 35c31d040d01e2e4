"""The query consumer: the query partitions of the input partitions this worker owns.

Query records are read by an aiokafka consumer of the worker's own, not queued behind the
input backlog in Faust's; its offsets are committed under ``<app_id>-queries`` after the
answers are flushed (at-least-once answers), or, exactly-once, in one transaction per fetched
chunk of a partition with its answers and dead letters. Reference: docs/design/delivery.md.
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from agents.batched_send import kafka_timestamp
from agents.clients import RepeatedFailures, client_options, fetch
from agents.config import FaustWorker, WorkerSettings
from agents.queries.latency import query_fetch_wait_ms
from agents.queries.service import QueryService
from agents.supervision import watched
from agents.transactions import NotOwned

logger = logging.getLogger(__name__)

QUERY_COMMIT_INTERVAL_S = 1.0


def query_group(settings: WorkerSettings) -> str:
    """The consumer group of the query offsets: ``<app_id>-queries``."""
    return f"{settings.app_id}-queries"


class QueryConsumer:
    """Reads the query partitions co-partitioned with the input partitions this worker owns.

    Faust's single consumer hands records to agents in fetch order, so a query record would wait
    behind every input record fetched before it (seconds under a backlog). This own aiokafka
    consumer is assigned, by hand, the query partitions matching the current Faust assignment
    (``follow``) and answers them at once. Its offsets are committed under the group
    ``<app_id>-queries`` (which no consumer ever joins), after the answers so far are flushed:
    a query whose answer may not have been produced is read again by the next owner
    (at-least-once answers). The periodic commit runs beside the reading loop (commits one at
    a time, in order), so queries are not held up by a flush and a commit round trip.

    Exactly-once (``service.transactions``): each query partition is claimed before it is read
    (fencing its previous owner, whose committed offsets are then final), and each fetched
    chunk of a partition is answered in one transaction of it: its answers, its bad-query dead
    letters and its offsets (``_answer_in_transaction``); nothing is committed otherwise.
    """

    def __init__(self, fiba: FaustWorker, service: QueryService) -> None:
        self.fiba = fiba
        self.service = service
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None
        self._handled: dict[TopicPartition, int] = {}
        self._owned: set[int] = set()
        self._committing = asyncio.Lock()
        self._periodic_commit: asyncio.Task[None] | None = None

    async def follow(self, partitions: set[int]) -> None:
        """Read the query partitions ``partitions`` (the owned input partitions) from their
        committed offsets; stop reading the others."""
        settings = self.fiba.settings
        if self._consumer is None:
            self._consumer = AIOKafkaConsumer(
                **client_options(settings),
                group_id=query_group(settings),
                enable_auto_commit=False,
                isolation_level=settings.isolation_level,
                auto_offset_reset="earliest",
                fetch_max_wait_ms=query_fetch_wait_ms(settings),
            )
            await self._consumer.start()
            # Assign only once the group's coordinator is known: aiokafka's coordination task
            # reads the assignment after looking the coordinator up, and an assignment replaced
            # during that lookup (revoke, then assign) killed the task for good.
            await self._consumer._coordinator.ensure_coordinator_known()
            self._task = watched(
                self._run(self._consumer), "fiba-query-consumer", self.service.on_failure
            )
        await self.commit()
        self._owned = set(partitions)
        if self.service.transactions is not None:
            for partition in sorted(partitions):
                await self.service.transactions.claim(partition)
        tps = [TopicPartition(settings.queries_topic, p) for p in sorted(partitions)]
        self._consumer.assign(tps)

    async def commit(self) -> None:
        """Commit the offsets after the queries answered so far (answers flushed first)."""
        async with self._committing:
            if self._consumer is None or not self._handled:
                return
            handled, self._handled = self._handled, {}
            await self.service.flush()
            assigned = self._consumer.assignment()
            offsets = {tp: offset for tp, offset in handled.items() if tp in assigned}
            if offsets:
                await self._consumer.commit(offsets)

    async def _commit_logged(self) -> None:
        try:
            await self.commit()
        except Exception:
            # not fatal: the uncommitted queries are answered again by the next reader
            logger.exception("committing the query offsets failed")

    async def _run(self, consumer: AIOKafkaConsumer) -> None:
        last_commit = asyncio.get_running_loop().time()
        failures = RepeatedFailures("fetching queries")
        while True:
            if not consumer.assignment():
                await asyncio.sleep(0.1)
                continue
            batches = await fetch(consumer, failures, timeout_ms=100) or {}
            for tp, records in batches.items():
                if tp.partition not in self._owned or not records:
                    continue
                if self.service.transactions is not None:
                    await self._answer_in_transaction(tp, records)
                    continue
                for record in records:
                    await self.service.handle(record)
                    self._handled[tp] = record.offset + 1
            now = asyncio.get_running_loop().time()
            previous = self._periodic_commit
            if now - last_commit > QUERY_COMMIT_INTERVAL_S and (
                previous is None or previous.done()
            ):
                last_commit = now
                self._periodic_commit = asyncio.create_task(self._commit_logged())

    async def _answer_in_transaction(
        self, tp: TopicPartition, records: list[ConsumerRecord]
    ) -> None:
        """Answer ``records`` (of query partition ``tp``), then send the answers, the dead
        letters of bad queries among them and the offset after them in one transaction of the
        partition. The answers are made before it begins (a state restored meanwhile sends
        its own transaction). A partition no longer claimed (revoked meanwhile) is skipped:
        its next owner answers these queries."""
        service = self.service
        assert service.transactions is not None
        answers: list[tuple[bytes, bytes, int | None]] = []

        async def collect(key: bytes, value: bytes, timestamp: int | None) -> None:
            answers.append((key, value, timestamp))

        for record in records:
            await service.handle(record, collect)
        topic = self.fiba.settings.answers_topic
        try:
            async with service.transactions.transaction(tp.partition) as producer:
                for key, value, timestamp in answers:
                    await producer.send(
                        topic, value, key=key, timestamp_ms=kafka_timestamp(timestamp)
                    )
                await service.pipeline.dead_letters.outputs.send((tp.topic, tp.partition), producer)
                await producer.send_offsets_to_transaction(
                    {tp: records[-1].offset + 1}, query_group(self.fiba.settings)
                )
        except NotOwned:
            logger.info(
                "query partition %d no longer claimed: %d queries left to its owner",
                tp.partition,
                len(records),
            )

    async def stop(self) -> None:
        """Commit what was answered and stop the consumer."""
        if self._task is not None:
            self._task.cancel()
        if self._periodic_commit is not None:
            await self._periodic_commit
        if self._consumer is not None:
            await self.commit()
            await self._consumer.stop()
