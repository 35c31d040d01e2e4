"""The window store's changelog on Kafka: the ``stores.changelog.ChangelogLink``s and the reader.

``KafkaChangelog`` sends through an own producer, ``FaustChangelog`` through the worker's Faust
producer (so one flush covers the aggregates too) and follows the standby partitions Faust's
assignor hands out. "The end" of a partition is the high watermark of Fetch responses, never
ListOffsets, so the producer batches normally on every broker; with exactly-once the reader
reads committed records only. ``ChangelogReader`` restores a partition with raw Fetch requests,
the next one in flight while the current is applied. Design: docs/design/window-store.md.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka import errors as kafka_errors
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import OffsetOutOfRangeError
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.record.control_record import ABORT_MARKER, ControlRecord
from aiokafka.record.memory_records import MemoryRecords

from agents.batched_send import send_records
from agents.clients import client_options
from agents.config import FaustWorker, WorkerSettings
from stores.changelog import ChangelogRecord, ChangelogTruncated, FetchedBatch


class KafkaChangelog:
    """The store's changelog through an own aiokafka producer (normal batching, ``acks=all``),
    started and stopped with the store. No assignor hands out standbys: the owner calls
    ``WindowStore.follow`` itself."""

    def __init__(self, settings: WorkerSettings, linger_ms: int = 5) -> None:
        self.settings = settings
        self._producer = AIOKafkaProducer(
            **client_options(settings),
            acks="all",
            linger_ms=linger_ms,
            max_batch_size=1 << 20,
            client_id=f"{settings.app_id}-window-store",
        )

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        await self._producer.stop()

    async def send_records(
        self, topic: str, partition: int, records: Sequence[tuple[bytes, bytes | None]]
    ) -> Awaitable[Any] | None:
        return await send_records(self._producer, topic, partition, records)

    async def flush(self) -> None:
        await self._producer.flush()

    def reader(self) -> ChangelogReader:
        return ChangelogReader(self.settings)

    def consumer(self, fetch_max_wait_ms: int) -> AIOKafkaConsumer:
        return consumer_for(self.settings, fetch_max_wait_ms)

    def on_standbys(self, follow: Callable[[set[int]], Awaitable[None]]) -> None:
        return None


class FaustChangelog:
    """The changelog through the aiokafka producer of the worker's Faust app
    (``FibaApp.kafka_producer``), which also carries its aggregates, so that one ``flush``
    covers both; Faust starts and stops that producer. ``on_standbys`` follows the standby
    partitions of Faust's assignor (``faust_standby_partitions``) on every assignment."""

    def __init__(self, fiba: FaustWorker) -> None:
        self._fiba = fiba

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def send_records(
        self, topic: str, partition: int, records: Sequence[tuple[bytes, bytes | None]]
    ) -> Awaitable[Any] | None:
        return await send_records(self._fiba.kafka_producer(), topic, partition, records)

    async def flush(self) -> None:
        await self._fiba.app.producer.flush()

    def reader(self) -> ChangelogReader:
        return ChangelogReader(self._fiba.settings)

    def consumer(self, fetch_max_wait_ms: int) -> AIOKafkaConsumer:
        return consumer_for(self._fiba.settings, fetch_max_wait_ms)

    def on_standbys(self, follow: Callable[[set[int]], Awaitable[None]]) -> None:
        app, topic = self._fiba.app, self._fiba.settings.assignment_topic

        async def assigned(sender: Any, assigned: Any, **kwargs: Any) -> None:
            await follow(faust_standby_partitions(app, topic))

        app.on_partitions_assigned.connect(assigned)


def consumer_for(settings: WorkerSettings, fetch_max_wait_ms: int = 20) -> AIOKafkaConsumer:
    """A group-less consumer for reading changelog partitions (manual assignment).

    ``fetch_max_wait_ms`` bounds how long the broker holds a fetch at the end of a partition;
    short for a restore, which stops there anyway.
    """
    return AIOKafkaConsumer(
        **client_options(settings),
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="none",
        max_partition_fetch_bytes=16 << 20,
        fetch_max_bytes=64 << 20,
        fetch_max_wait_ms=fetch_max_wait_ms,
        isolation_level=settings.isolation_level,
        client_id=f"{settings.app_id}-window-store-restore",
    )


_BATCH_SIZE_OFFSET = 12
"""A record batch is its base offset (8 bytes), its length (4) and that many bytes."""
_READ_UNCOMMITTED = 0
_READ_COMMITTED = 1
_RETRY_BACKOFF_S = 0.1


class ChangelogReader:
    """Reads changelog partitions from an offset to their end with raw Fetch requests.

    One aiokafka ``AIOKafkaClient`` (metadata, connections, API version negotiation, security
    options of ``settings``); ``read`` fetches from the partition's leader, keeps the next fetch
    in flight while the caller processes the previous response, and stops at the high
    watermark of the Fetch responses (see the module doc). Semantics are those of a consumer
    of ``settings.isolation_level`` with CRC checks: control batches are skipped, records
    before the start offset (inside the first batch) are dropped; ``read_committed``
    (exactly-once) stops at the last stable offset instead of the high watermark and drops the
    batches of aborted transactions (``_CommittedFilter``). Use as ``async with``.

    ``position``: the offset after the last batch ``read`` handed over (its start before);
    once ``read`` is exhausted, the partition's end.
    """

    def __init__(
        self,
        settings: WorkerSettings,
        max_wait_ms: int = 20,
        max_bytes: int = 64 << 20,
        partition_max_bytes: int = 16 << 20,
    ) -> None:
        self._client = AIOKafkaClient(
            **client_options(settings), client_id=f"{settings.app_id}-window-store-restore"
        )
        self._max_wait_ms = max_wait_ms
        self._max_bytes = max_bytes
        self._partition_max_bytes = partition_max_bytes
        self._isolation = (
            _READ_COMMITTED if settings.isolation_level == "read_committed" else _READ_UNCOMMITTED
        )
        self.position = 0

    async def __aenter__(self) -> ChangelogReader:
        try:
            await self._client.bootstrap()
        except BaseException:
            await self._client.close()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._client.close()

    async def read(
        self, tp: TopicPartition, start: int, timeout: float = 30.0
    ) -> AsyncIterator[list[Iterable[ChangelogRecord]]]:
        """Yield the records of ``tp`` from offset ``start`` to its end, one list of record
        batches (each a ``FetchedBatch``: its records, in offset order, to be iterated once,
        and its bytes) per Fetch response.

        "End" is the high watermark of the last Fetch response (``read_committed``: its last
        stable offset). Raises ``ChangelogTruncated``
        when the partition ends before ``start``, ``TimeoutError`` when no data arrives for
        ``timeout`` seconds while the partition is not read to its end. O(records read); the
        per-record work is aiokafka's C parser, plus the caller's.
        """
        await self._client.add_topic(tp.topic)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        position = self.position = start
        pending = asyncio.ensure_future(self._fetch(tp, position, deadline))
        try:
            while True:
                highwater, end, data, aborted = await pending
                batches: list[Iterable[ChangelogRecord]] = []
                records = MemoryRecords(data)
                committed = _CommittedFilter(aborted) if self._isolation else None
                at = 0  # where the batch ``next_batch`` returns begins in ``data``
                while records.has_next():
                    batch = records.next_batch()
                    size = _BATCH_SIZE_OFFSET + int.from_bytes(data[at + 8 : at + 12])
                    if not batch.validate_crc():
                        raise kafka_errors.CorruptRecordException(f"invalid CRC in {tp}")
                    if committed is not None and not committed.keeps(batch):
                        pass  # a batch of an aborted transaction
                    elif not batch.is_control_batch:
                        # only the first batch read may begin before ``start``
                        batches.append(FetchedBatch(batch, data, at, size, start))
                    position = max(position, batch.next_offset)
                    at += size
                if position > highwater:
                    raise ChangelogTruncated(f"{tp} ends at {highwater}, before offset {start}")
                if batches:
                    deadline = loop.time() + timeout
                done = position >= end
                pending = None
                if not done:
                    pending = asyncio.ensure_future(self._fetch(tp, position, deadline))
                    # one event-loop turn: the task sends its request now, so the broker
                    # serves it while the caller applies these batches
                    await asyncio.sleep(0)
                if batches:
                    yield batches
                self.position = position
                if done:
                    return
        finally:
            if pending is not None and not pending.done():
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pending

    async def _fetch(
        self, tp: TopicPartition, offset: int, deadline: float
    ) -> tuple[int, int, bytes, list[tuple[int, int]]]:
        """``(high watermark, end, record bytes, aborted transactions)`` of one Fetch of ``tp``
        at ``offset`` from its leader (end: the high watermark, or with ``read_committed`` the
        last stable offset), retrying retriable errors (with a metadata refresh) until
        ``deadline``."""
        client = self._client
        loop = asyncio.get_running_loop()
        request = FetchRequest(
            self._max_wait_ms,
            1,
            self._max_bytes,
            self._isolation,
            [(tp.topic, [(tp.partition, offset, self._partition_max_bytes)])],
        )
        while True:
            leader = client.cluster.leader_for_partition(tp)
            error: Exception
            if leader is None or leader < 0:
                error = kafka_errors.LeaderNotAvailableError(f"no leader for {tp}")
                await client.force_metadata_update()
            else:
                try:
                    response = await client.send(leader, request)
                except kafka_errors.KafkaError as exc:
                    if not exc.retriable:
                        raise
                    error = exc
                else:
                    error_type, highwater, data = _partition_data(response, tp)
                    if error_type is kafka_errors.NoError:
                        if not self._isolation:
                            return highwater, highwater, data, []
                        stable, aborted = _stable_offset(response, tp)
                        return highwater, stable, data, aborted
                    if error_type is OffsetOutOfRangeError:
                        raise ChangelogTruncated(f"{tp} has no offset {offset}")
                    error = error_type(f"fetch of {tp} at {offset}")
                    if not error.retriable and error_type not in _REFRESH_METADATA:
                        raise error
                    client.force_metadata_update()
            if loop.time() > deadline:
                raise TimeoutError(f"no fetch response for {tp}: {error!r}")
            await asyncio.sleep(_RETRY_BACKOFF_S)


_REFRESH_METADATA = (
    kafka_errors.NotLeaderForPartitionError,
    kafka_errors.UnknownTopicOrPartitionError,
)
"""Partition errors after which a fetch is retried once the metadata is refreshed."""


class _CommittedFilter:
    """Which record batches of one ``read_committed`` Fetch response a consumer keeps: those of
    no aborted transaction (the response lists each aborted transaction's producer id and
    first offset; a producer's batches from there up to its abort marker are dropped), as
    aiokafka's consumer does, per batch rather than per record. O(batches + aborted)."""

    def __init__(self, aborted: list[tuple[int, int]]) -> None:
        self._pending = sorted(aborted, key=lambda entry: entry[1])
        self._aborting: set[int] = set()

    def keeps(self, batch: Any) -> bool:
        """False for a batch of an aborted transaction and for an abort marker; control
        batches otherwise pass (the caller skips them)."""
        producer = batch.producer_id
        if producer is None or producer < 0:
            return True
        while self._pending and self._pending[0][1] <= batch.base_offset:
            self._aborting.add(self._pending.pop(0)[0])
        if batch.is_control_batch:
            for record in batch:
                if ControlRecord.parse(record.key) == ABORT_MARKER:
                    self._aborting.discard(producer)
                    return False
            return True
        return not (batch.is_transactional and producer in self._aborting)


def _stable_offset(response: Any, tp: TopicPartition) -> tuple[int, list[tuple[int, int]]]:
    """``(last stable offset, aborted transactions)`` of ``tp`` in a Fetch response of version
    4 or later (v4-v10: ``[lso, (log start,) aborted, records]``; v11+: ``[lso, log start,
    aborted, preferred replica, records]``)."""
    for topic, partitions in response.topics:
        if topic != tp.topic:
            continue
        for partition, _error, _highwater, *fields in partitions:
            if partition == tp.partition:
                aborted = fields[2] if response.API_VERSION >= 11 else fields[-2]
                return fields[0], list(aborted or ())
    return -1, []


def _partition_data(response: Any, tp: TopicPartition) -> tuple[type[Exception], int, bytes]:
    """``(error type, high watermark, record bytes)`` of ``tp`` in a Fetch response (every
    version: the record bytes are the last field of a partition's entry)."""
    for topic, partitions in response.topics:
        if topic != tp.topic:
            continue
        for partition, error_code, highwater, *fields in partitions:
            if partition == tp.partition:
                return kafka_errors.for_code(error_code), highwater, fields[-1] or b""
    return kafka_errors.UnknownTopicOrPartitionError, -1, b""


def faust_standby_partitions(app: Any, topic: str) -> set[int]:
    """The partitions of ``topic`` that Faust's assignor made this worker a standby for.

    Faust's ``PartitionAssignor`` computes standbys (``table_standby_replicas`` of them, on
    other members than the active, preferring to promote a standby to active on takeover) for
    every co-partitioned topic group, tables or not; only table changelogs get them as Kafka
    assignments. For the assignment topic (``agents.input_reader``) they name the input
    partitions whose window store this worker should ``follow``. Read it in
    ``on_partitions_assigned``.
    """
    return {tp.partition for tp in app.assignor.assigned_standbys() if tp.topic == topic}
