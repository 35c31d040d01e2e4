"""Producing many small records cheaply: whole record batches handed to aiokafka at once.

``AIOKafkaProducer.send`` pays per record for a coroutine, a delivery future, the accumulator's
bookkeeping and, later, resolving that future, and a worker with ``emit=event`` produces three
records per input event: sent one by one through Faust's producer they took the worker's CPU
per event to about 400 µs, against 215-240 µs sent as below (same-machine A/B runs in
``bench/RESULTS.md``, "Worker pipeline end to end"). ``send_records``
instead appends the records of one partition to aiokafka ``BatchBuilder``s (its C record
builder, no future per record) and hands each builder over with ``send_batch``, closed (the
producer sends it without lingering): one delivery future per batch. Records of one partition
keep their order (aiokafka keeps one batch of a partition in flight at a time; ``send_batch``
waits until the partition's previous batch has left the accumulator).

``KeyPartitioner`` gives the partition that Kafka's default partitioner picks for a key
(murmur2, as every client does), memoised for the keys used most recently, for the explicit
partitions ``send_batch`` needs; ``KeyedOutputs`` queues keyed records of one topic by that
partition until ``send``.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Generator, Iterable
from typing import Any, NamedTuple

from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import murmur2

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


async def send_records(
    producer: AIOKafkaProducer,
    topic: str,
    partition: int,
    records: Iterable[tuple[bytes | None, bytes | None]],
) -> BatchDelivery | None:
    """Hand ``records`` (key, value; value None: a tombstone) to ``producer`` for ``topic``
    ``partition``, in order, in as few batches as its batch size allows; the delivery of the
    last one, or None if there were no records. O(records) C-level appends plus O(1) Python per
    batch."""
    builder = producer.create_batch()
    in_builder = 0
    for key, value in records:
        if builder.append(key=key, value=value, timestamp=None) is None:  # full: closed
            await producer.send_batch(builder, topic, partition=partition)
            builder = producer.create_batch()
            in_builder = 0
            builder.append(key=key, value=value, timestamp=None)  # a first record always fits
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
    """Output records of one topic, queued per partition of their key (Kafka's default
    partitioner, as ``producer.send`` without a partition would pick) and handed over together
    by ``send``: per record O(1) (a memoised partition and a list append), per ``send`` one
    ``send_records`` per partition with records."""

    def __init__(self, producer: Callable[[], AIOKafkaProducer], topic: str) -> None:
        self._producer = producer
        self.topic = topic
        self._partition_of: KeyPartitioner | None = None
        self._queued: dict[int, list[tuple[bytes | None, bytes | None]]] = {}

    async def start(self) -> None:
        """Learn the topic's partition count (a metadata request the first time). Idempotent."""
        if self._partition_of is None:
            partitions = await self._producer().partitions_for(self.topic)
            self._partition_of = KeyPartitioner(len(partitions))

    def add(self, key: bytes, value: bytes) -> None:
        """Queue one record (``start`` must have been awaited)."""
        assert self._partition_of is not None, "KeyedOutputs.start() was not awaited"
        partition = self._partition_of(key)
        queued = self._queued.get(partition)
        if queued is None:
            queued = self._queued[partition] = []
        queued.append((key, value))

    async def send(self) -> None:
        """Hand every queued record to the producer, per partition in the order queued."""
        if not self._queued:
            return
        queued, self._queued = self._queued, {}
        producer = self._producer()
        for partition, records in queued.items():
            await send_records(producer, self.topic, partition, records)
