"""Producing many small records cheaply: whole record batches handed to aiokafka at once.

``send_records`` and ``send_output_records`` put the records of one partition into record
batch builders and hand each over with ``send_batch``: one delivery future per batch instead
of per record (one ``send`` per record cost nearly as much CPU as everything else the worker
does per event). Records of one partition keep their order. ``KeyedOutputs`` queues keyed
records by partition (Kafka's default partitioner) until ``send``. With the native core
(``stores._native``, ``stores/native/src/record_batch.rs``) the queues are native
(``OutputQueue``: each record encoded once, ``add_many`` a chunk in one call) and so are the
builders (``RecordBatchBuilder``, byte for byte aiokafka's, filled a batch per call), unless
the producer compresses or serialises (``native_builder``); without it, ``ListQueue`` and
aiokafka's ``BatchBuilder``. Design: docs/design/delivery.md.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Generator, Hashable, Iterable
from typing import Any, NamedTuple

from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import murmur2

import stores
from agents.retention_watch import RetentionCheck

ALL_SOURCES: Any = object()
"""``KeyedOutputs.send``'s default: the records of every source."""

KEY_CACHE_SIZE = 1 << 16
"""Keys whose partition ``KeyPartitioner`` memoises (about 10 MB at most)."""


class DeliveredRecord(NamedTuple):
    """Where the last record of a ``send_records`` call landed."""

    offset: int


class BatchDelivery:
    """Awaitable (any number of times): the ``DeliveredRecord`` of the last record handed over
    by one ``send_records`` call, once its batch is acknowledged."""

    __slots__ = ("_future", "_last_index")

    def __init__(self, future: asyncio.Future[Any], last_index: int) -> None:
        self._future = future
        self._last_index = last_index

    def __await__(self) -> Generator[Any, None, DeliveredRecord]:
        metadata = yield from self._future.__await__()
        return DeliveredRecord(metadata.offset + self._last_index)

    def add_done_callback(self, callback: Callable[[asyncio.Future[Any]], object]) -> None:
        """Call ``callback(future)`` from the event loop once the batch is acknowledged or
        failed (its future, as ``asyncio.Future.add_done_callback`` does)."""
        self._future.add_done_callback(callback)


Headers = list[tuple[str, bytes]]
"""Kafka record headers: (name, value) pairs (a list: aiokafka's C record builder wants one)."""

NO_HEADERS: Headers = []
"""The headers of a record without any (shared, never modified)."""

OutputRecord = tuple[bytes | None, bytes | None, int | None, Headers]
"""An output record: key, value (None: a tombstone), Kafka timestamp in epoch ms (None: the
producer's clock) and headers."""


def kafka_timestamp(ms: int | None) -> int | None:
    """``ms`` as a Kafka record timestamp that a broker accepts, so that an odd event time never
    makes a batch fail: None (the producer's clock) for no time or one before 1970, and this
    machine's clock for a time ahead of it (Apache Kafka refuses a batch with a timestamp more
    than ``message.timestamp.after.max.ms`` ahead of its clock: one hour by default since 4.0,
    and an accepted event may be up to ``max_wall_clock_skew`` ahead). O(1)."""
    if ms is None or ms < 0:
        return None
    return min(ms, time.time_ns() // 1_000_000)


async def send_records(
    producer: AIOKafkaProducer,
    topic: str,
    partition: int,
    records: Iterable[tuple[bytes | None, bytes | None]],
) -> BatchDelivery | None:
    """Hand ``records`` (key, value; value None: a tombstone; or a native
    ``ChangelogRecords``) to ``producer`` for ``topic`` ``partition``, in order, timestamped by
    the producer's clock, without headers: see ``send_output_records``. With native builders a
    ``ChangelogRecords`` is moved into them as it is and pairs go to ``QueuedRecords`` in one
    native call (no tuple made per record in Python)."""
    new_builder = native_builder(producer)
    if new_builder is not None:
        return await _send_native(producer, new_builder, topic, partition, records)
    return await send_output_records(
        producer, topic, partition, ((key, value, None, NO_HEADERS) for key, value in records)
    )


async def send_output_records(
    producer: AIOKafkaProducer, topic: str, partition: int, records: Iterable[OutputRecord]
) -> BatchDelivery | None:
    """Hand ``records`` (``OutputRecord``s, or a native ``QueuedRecords``) to ``producer``
    for ``topic`` ``partition``, in order, in as few batches as its batch size allows, each
    closed (sent without lingering); the delivery of the last one, or None if there were no
    records. Native builders (``native_builder``): O(bytes) in one call per batch; else
    O(records) C-level appends plus O(1) Python per batch."""
    new_builder = native_builder(producer)
    if new_builder is not None:
        return await _send_native(producer, new_builder, topic, partition, records)
    builder = producer.create_batch()
    in_builder = 0
    for key, value, timestamp, headers in records:
        if builder.append(key=key, value=value, timestamp=timestamp, headers=headers) is None:
            # full: closed
            await producer.send_batch(builder, topic, partition=partition)
            builder = producer.create_batch()
            in_builder = 0
            # a first record always fits
            builder.append(key=key, value=value, timestamp=timestamp, headers=headers)
        in_builder += 1
    if not in_builder:
        return None  # no records (a full builder is always followed by a record)
    builder.close()  # complete: sent without lingering
    future = await producer.send_batch(builder, topic, partition=partition)
    return BatchDelivery(future, in_builder - 1)


def native_builder(producer: AIOKafkaProducer) -> Callable[[], Any] | None:
    """A maker of empty native record batch builders (``stores._native.RecordBatchBuilder``)
    standing for ``producer.create_batch()``: the producer's batch size, flagged
    transactional when it is, byte for byte the batches aiokafka would build; None when the
    native core is not loaded or the producer compresses batches or serialises keys or values
    (aiokafka's builder does that). Reads aiokafka's accumulator settings (aiokafka 0.14)."""
    native = stores.native()
    if native is None:
        return None
    accumulator = producer._message_accumulator
    if (
        accumulator._compression_type
        or producer._key_serializer is not None
        or producer._value_serializer is not None
    ):
        return None
    txn_manager = accumulator._txn_manager
    transactional = txn_manager is not None and txn_manager.transactional_id is not None
    return functools.partial(native.RecordBatchBuilder, accumulator._batch_size, transactional)


async def _send_native(
    producer: AIOKafkaProducer,
    new_builder: Callable[[], Any],
    topic: str,
    partition: int,
    records: Any,
) -> BatchDelivery | None:
    """``send_output_records`` with native builders, each filled in one call (``records``
    may also be a ``ChangelogRecords``)."""
    native: Any = stores.native()
    if isinstance(records, native.QueuedRecords | native.ChangelogRecords):
        queued = records
    else:
        queued = native.QueuedRecords(records)
    if not len(queued):
        return None
    while True:
        builder = new_builder()
        queued.fill(builder)
        if not len(queued):
            builder.close()  # complete: sent without lingering
            future = await producer.send_batch(builder, topic, partition=partition)
            return BatchDelivery(future, builder.record_count() - 1)
        await producer.send_batch(builder, topic, partition=partition)  # full: closed


def default_partition(key: bytes, partitions: int) -> int:
    """The partition of Kafka key ``key`` among ``partitions`` under Kafka's default
    partitioner (murmur2 of the key bytes, the same on every client). O(len(key))."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class KeyPartitioner:
    """The partition of a key in a topic of ``partitions`` partitions under Kafka's default
    partitioner (murmur2 of the key bytes), memoised for the ``KEY_CACHE_SIZE`` keys used most
    recently (a C-level LRU): O(1) for a cached key, O(len(key)) otherwise. Bounded, so that
    keys gone idle, or of partitions moved to another worker, do not accumulate."""

    __slots__ = ("_cached", "partitions")

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self._cached = functools.lru_cache(maxsize=KEY_CACHE_SIZE)(
            functools.partial(default_partition, partitions=partitions)
        )

    def __call__(self, key: bytes) -> int:
        return self._cached(key)

    def cached_keys(self) -> int:
        """How many keys are memoised now (at most ``KEY_CACHE_SIZE``)."""
        return self._cached.cache_info().currsize


class ListQueue:
    """Output records of one topic queued per partition in Python lists: the native
    ``OutputQueue``'s twin where the native core is not loaded (same methods and outcome).
    ``partition_of``: the topic's ``KeyPartitioner``. Per record O(1): a memoised partition,
    ``kafka_timestamp`` and a list append."""

    __slots__ = ("_by_target", "_partition_of")

    def __init__(self, partition_of: KeyPartitioner) -> None:
        self._partition_of = partition_of
        self._by_target: dict[int, list[OutputRecord]] = {}

    def add(
        self,
        key: bytes | None,
        value: bytes | None,
        timestamp: int | None = None,
        headers: Headers = NO_HEADERS,
        partition: int = 0,
    ) -> int | None:
        """Queue one record (without a key: in ``partition`` modulo the partition count);
        its Kafka timestamp (``kafka_timestamp(timestamp)``)."""
        partition_of = self._partition_of
        target = partition_of(key) if key is not None else partition % partition_of.partitions
        queued = self._by_target.get(target)
        if queued is None:
            queued = self._by_target[target] = []
        ts = kafka_timestamp(timestamp)
        queued.append((key, value, ts, headers))
        return ts

    def add_many(
        self,
        keys: list[bytes | None],
        values: list[bytes | None],
        timestamps: list[int | None],
        partition: int = 0,
    ) -> int | None:
        """Queue ``keys[i], values[i], timestamps[i]`` for every i, in order: the least
        Kafka timestamp among them (None if none has one)."""
        if not len(keys) == len(values) == len(timestamps):
            raise ValueError("keys, values and timestamps differ in length")
        least = None
        for key, value, timestamp in zip(keys, values, timestamps, strict=True):
            ts = self.add(key, value, timestamp, NO_HEADERS, partition)
            if ts is not None and (least is None or ts < least):
                least = ts
        return least

    def partitions(self) -> list[int]:
        """The partitions with records queued."""
        return list(self._by_target)

    def take(self, partition: int) -> list[OutputRecord]:
        """The records queued for ``partition``, which is left empty."""
        return self._by_target.pop(partition, [])


def new_output_queue(partition_of: KeyPartitioner) -> Any:
    """An empty queue of output records for a topic of ``partition_of.partitions``
    partitions: the native ``OutputQueue`` where the native core is loaded, else a
    ``ListQueue``."""
    native = stores.native()
    if native is None:
        return ListQueue(partition_of)
    return native.OutputQueue(partition_of.partitions)


class KeyedOutputs:
    """Output records of one topic, queued per *source* (what caused them: an input partition,
    or a ``(topic, partition)``; one transaction per source under exactly-once,
    ``agents.transactions``) and per partition (of their key under Kafka's default partitioner,
    as ``producer.send`` without a partition would pick, or given), handed over by ``send``.
    Queued in a native ``OutputQueue`` where the native core is loaded, else a ``ListQueue``:
    per record O(1), and ``add_many`` queues a chunk's records in one call; per ``send`` one
    ``send_output_records`` per partition with records. ``retention`` checks each record's
    timestamp against the topic's ``retention.ms`` (``agents.retention_watch``; ``name``
    labels it)."""

    def __init__(
        self, producer: Callable[[], AIOKafkaProducer], topic: str, name: str | None = None
    ) -> None:
        self._producer = producer
        self.topic = topic
        self.retention = RetentionCheck(topic, name or topic)
        self._partition_of: KeyPartitioner | None = None
        self._queued: dict[Hashable, Any] = {}

    async def start(self) -> None:
        """Learn the topic's partition count (a metadata request the first time). Idempotent."""
        if self._partition_of is None:
            partitions = await self._producer().partitions_for(self.topic)
            self._partition_of = KeyPartitioner(len(partitions))

    def _queue(self, source: Hashable) -> Any:
        """A new queue for ``source``'s records."""
        partition_of = self._partition_of
        assert partition_of is not None, "KeyedOutputs.start() was not awaited"
        queue = self._queued[source] = new_output_queue(partition_of)
        return queue

    def add(
        self,
        key: bytes | None,
        value: bytes | None,
        timestamp: int | None = None,
        headers: Headers = NO_HEADERS,
        *,
        partition: int = 0,
        source: Hashable = None,
    ) -> None:
        """Queue one record caused by ``source`` (``start`` must have been awaited) with Kafka
        timestamp ``timestamp`` (epoch ms, see ``kafka_timestamp``; None: the producer's
        clock); a record without a key goes to ``partition`` modulo the topic's partition
        count."""
        queue = self._queued.get(source)
        if queue is None:
            queue = self._queue(source)
        ts = queue.add(key, value, timestamp, headers, partition)
        if ts is not None and ts < self.retention.oldest_kept:
            self.retention.exceeded(ts)

    def add_many(
        self,
        keys: list[bytes | None],
        values: list[bytes | None],
        timestamps: list[int | None],
        *,
        partition: int = 0,
        source: Hashable = None,
    ) -> None:
        """``add(keys[i], values[i], timestamps[i], partition=partition, source=source)``
        for every i, in order, without headers: in one native call where the native core is
        loaded (O(bytes), no Python per record)."""
        queue = self._queued.get(source)
        if queue is None:
            queue = self._queue(source)
        least = queue.add_many(keys, values, timestamps, partition)
        if least is not None and least < self.retention.oldest_kept:
            self.retention.exceeded(least)

    def add_records(self, records: Any, *, source: Hashable = None) -> None:
        """``add(key, value, timestamp, source=source)`` for each ``(key, value, timestamp)``
        of the native ``KeyedRecords`` buffer ``records`` (the native core is loaded), in one
        call with no Python object per record."""
        queue = self._queued.get(source)
        if queue is None:
            queue = self._queue(source)
        least = queue.add_records(records)
        if least is not None and least < self.retention.oldest_kept:
            self.retention.exceeded(least)

    async def send(
        self, source: Hashable = ALL_SOURCES, producer: AIOKafkaProducer | None = None
    ) -> list[BatchDelivery]:
        """Hand the records queued for ``source`` (default: every source) to ``producer``
        (default: the one given at construction), per partition in the order queued; the
        deliveries (one per partition and source with records: awaiting them waits for all)."""
        if source is ALL_SOURCES:
            queues, self._queued = list(self._queued.values()), {}
        else:
            queue = self._queued.pop(source, None)
            queues = [] if queue is None else [queue]
        if not queues:
            return []
        producer = producer or self._producer()
        deliveries = []
        for queue in queues:
            for partition in queue.partitions():
                records = queue.take(partition)
                delivery = await send_output_records(producer, self.topic, partition, records)
                if delivery is not None:
                    deliveries.append(delivery)
        return deliveries
