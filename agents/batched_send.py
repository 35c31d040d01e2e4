"""Producing many small records cheaply: whole record batches handed to aiokafka at once.

``send_records`` and ``send_output_records`` append the records of one partition to aiokafka
``BatchBuilder``s and hand each over with ``send_batch``: one delivery future per batch instead
of per record (one ``send`` per record cost nearly as much CPU as everything else the worker
does per event). Records of one partition keep their order. ``KeyPartitioner`` picks Kafka's
default partition for a key (murmur2, memoised); ``KeyedOutputs`` queues keyed records by
partition until ``send``. Design: docs/design/delivery.md.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Generator, Hashable, Iterable, Sequence
from typing import Any, NamedTuple

from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import murmur2

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
    """Hand ``records`` (key, value; value None: a tombstone) to ``producer`` for ``topic``
    ``partition``, in order, timestamped by the producer's clock, without headers: see
    ``send_output_records``."""
    return await send_output_records(
        producer, topic, partition, ((key, value, None, NO_HEADERS) for key, value in records)
    )


async def send_output_records(
    producer: AIOKafkaProducer, topic: str, partition: int, records: Iterable[OutputRecord]
) -> BatchDelivery | None:
    """Hand ``records`` (``OutputRecord``) to ``producer`` for ``topic`` ``partition``, in
    order, in as few batches as its batch size allows, each closed (sent without lingering);
    the delivery of the last one, or None if there were no records. O(records) C-level
    appends plus O(1) Python per batch."""
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


class KeyedOutputs:
    """Output records of one topic, queued per *source* (what caused them: an input partition,
    or a ``(topic, partition)``; one transaction per source under exactly-once,
    ``agents.transactions``) and per partition (of their key under Kafka's default partitioner,
    as ``producer.send`` without a partition would pick, or given), handed over by ``send``:
    per record O(1) (a memoised partition and a list append), per ``send`` one
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
        self._queued: dict[Hashable, dict[int, list[OutputRecord]]] = {}

    async def start(self) -> None:
        """Learn the topic's partition count (a metadata request the first time). Idempotent."""
        if self._partition_of is None:
            partitions = await self._producer().partitions_for(self.topic)
            self._partition_of = KeyPartitioner(len(partitions))

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
        partition_of = self._partition_of
        assert partition_of is not None, "KeyedOutputs.start() was not awaited"
        target = partition_of(key) if key is not None else partition % partition_of.partitions
        by_target = self._queued.get(source)
        if by_target is None:
            by_target = self._queued[source] = {}
        queued = by_target.get(target)
        if queued is None:
            queued = by_target[target] = []
        ts = kafka_timestamp(timestamp)
        if ts is not None and ts < self.retention.oldest_kept:
            self.retention.exceeded(ts)
        queued.append((key, value, ts, headers))

    def add_many(
        self,
        keys: Sequence[bytes],
        values: Sequence[bytes | None],
        timestamps: Sequence[int | None],
        *,
        source: Hashable = None,
    ) -> None:
        """``add(key, value, timestamp, source=source)`` for each keyed record, in order, in
        one loop (the clock that bounds the timestamps, ``kafka_timestamp``, read once):
        O(1) per record without a Python call besides the memoised partition."""
        partition_of = self._partition_of
        assert partition_of is not None, "KeyedOutputs.start() was not awaited"
        by_target = self._queued.get(source)
        if by_target is None:
            by_target = self._queued[source] = {}
        now = time.time_ns() // 1_000_000
        retention = self.retention
        for key, value, ms in zip(keys, values, timestamps, strict=True):
            target = partition_of(key)
            queued = by_target.get(target)
            if queued is None:
                queued = by_target[target] = []
            ts = None if ms is None or ms < 0 else min(ms, now)
            if ts is not None and ts < retention.oldest_kept:
                retention.exceeded(ts)
            queued.append((key, value, ts, NO_HEADERS))

    async def send(
        self, source: Hashable = ALL_SOURCES, producer: AIOKafkaProducer | None = None
    ) -> list[BatchDelivery]:
        """Hand the records queued for ``source`` (default: every source) to ``producer``
        (default: the one given at construction), per partition in the order queued; the
        deliveries (one per partition and source with records: awaiting them waits for all)."""
        if source is ALL_SOURCES:
            sources, self._queued = list(self._queued.values()), {}
        else:
            by_target = self._queued.pop(source, None)
            sources = [] if by_target is None else [by_target]
        if not sources:
            return []
        producer = producer or self._producer()
        deliveries = []
        for by_target in sources:
            for partition, records in by_target.items():
                delivery = await send_output_records(producer, self.topic, partition, records)
                if delivery is not None:
                    deliveries.append(delivery)
        return deliveries
