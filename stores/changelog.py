"""The window store's changelog topic: record format, producer port, reading to the high watermark.

Partition ``i`` of the changelog ``<app_id>-windows-changelog`` holds the window state of input
partition ``i`` (the topics are co-partitioned). An *entry* is one ``(key, time)`` of one key's
window with its combined partial. Record kinds (keys and values are bytes):

- **upsert** ``key = entry_id(key, time)``, ``value = UPSERT_HEADER(offset, n) + n deleted
  times + partial bytes``: the whole effect of ONE accepted input record at input ``offset``:
  the entry's new partial and the times of that key's entries evicted by it. Carrying the
  deletions inside the upsert makes each event's effect ONE atomic record: replaying any prefix
  of the changelog yields the state after some prefix of the events, never half an event.
- **tombstone** ``key = entry_id(key, time)``, ``value = None``: deletion of one entry. Written
  after the upsert that already carries the deletion (redundant on replay, idempotent), and for
  the idle-key sweep. Tombstones let a compacted topic (``cleanup.policy=compact`` on a real
  Kafka) eventually forget evicted entries; the embedded broker never compacts.
- **applied marker** ``key = APPLIED_KEY``, ``value = offset``: the input offset up to which the
  partition's input has been consumed, for records with no state effect (late or bad input).

``entry_id`` sorts by key (length-prefixed UTF-8), then by time (offset binary, so negative
times sort first): the local RocksDB iterates a key's entries in time order.

Reading "to the end" of a partition uses the **high watermark of Fetch responses**, which every
broker reports correctly, never ListOffsets (wrong on the embedded broker for multi-record
batches). So the producer may batch normally on every broker.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import OffsetOutOfRangeError
from aiokafka.structs import ConsumerRecord

from app.clients import client_options
from app.settings import Settings

APPLIED_KEY = b"\x00applied"
"""Changelog key of the applied-offset marker; 8 bytes, so it is no entry id (those have at least
12: a 4-byte length and an 8-byte time)."""

_TIME_BIAS = 1 << 63
_LEN = struct.Struct(">I")
_TIME = struct.Struct(">Q")
_OFFSET = struct.Struct(">q")
UPSERT_HEADER = struct.Struct(">qI")
"""Upsert value header: input offset (signed 64-bit), number of deleted times (unsigned 32)."""


def key_prefix(key: str) -> bytes:
    """The common prefix of the entry ids of ``key``: its UTF-8 length (4 bytes) and bytes."""
    raw = key.encode()
    return _LEN.pack(len(raw)) + raw


def entry_id_of(prefix: bytes, time: int) -> bytes:
    """Entry id of ``time`` under a ``key_prefix``. O(1)."""
    return prefix + _TIME.pack(time + _TIME_BIAS)


def entry_id(key: str, time: int) -> bytes:
    """Entry id of ``(key, time)``: ``key_prefix(key)`` + time as offset-binary 64 bits."""
    return entry_id_of(key_prefix(key), time)


def split_entry_id(eid: bytes) -> tuple[str, int]:
    """Inverse of ``entry_id``."""
    return eid[4:-8].decode(), _TIME.unpack_from(eid, len(eid) - 8)[0] - _TIME_BIAS


def encode_upsert(offset: int, deleted_times: Sequence[int], partial: bytes) -> bytes:
    """Upsert value: header, then the deleted times (8 bytes each), then the partial's bytes."""
    deleted = b"".join(_TIME.pack(t + _TIME_BIAS) for t in deleted_times)
    return UPSERT_HEADER.pack(offset, len(deleted_times)) + deleted + partial


def encode_offset(offset: int) -> bytes:
    """An input offset as 8 bytes (the applied marker's value)."""
    return _OFFSET.pack(offset)


def decode_offset(value: bytes) -> int:
    """Inverse of ``encode_offset``."""
    return _OFFSET.unpack_from(value)[0]


class ChangelogTruncated(Exception):
    """A changelog partition ends before an offset that was read earlier: it was recreated."""


class ChangelogProducer(Protocol):
    """What the store needs from a producer: ``send`` returns a delivery awaitable whose result
    has ``.offset``; ``flush`` returns once every record sent so far is acknowledged."""

    async def send(
        self, topic: str, partition: int, key: bytes, value: bytes | None
    ) -> Awaitable[Any]: ...

    async def flush(self) -> None: ...


class AiokafkaChangelogProducer:
    """The store's own aiokafka producer (normal batching, ``acks=all``)."""

    def __init__(self, settings: Settings, linger_ms: int = 5) -> None:
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

    async def send(
        self, topic: str, partition: int, key: bytes, value: bytes | None
    ) -> Awaitable[Any]:
        return await self._producer.send(topic, value=value, key=key, partition=partition)

    async def flush(self) -> None:
        await self._producer.flush()


class FaustChangelogProducer:
    """Adapter of a Faust ``app.producer``.

    Sending the changelog through Faust's producer is the hook that orders changelog writes
    before input-offset commits: Faust's consumer awaits ``app.producer.flush()`` right before
    committing offsets (``faust.transport.consumer.Consumer._commit_offsets``), so every
    changelog record of an event is acknowledged before that event's offset is committed.
    """

    def __init__(self, producer: Any) -> None:
        self._producer = producer

    @property
    def app(self) -> Any:
        """The Faust app of the producer."""
        return self._producer.app

    async def send(
        self, topic: str, partition: int, key: bytes, value: bytes | None
    ) -> Awaitable[Any]:
        return await self._producer.send(topic, key, value, partition, None, None)

    async def flush(self) -> None:
        await self._producer.flush()


def consumer_for(settings: Settings, fetch_max_wait_ms: int = 20) -> AIOKafkaConsumer:
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
        client_id=f"{settings.app_id}-window-store-restore",
    )


async def read_to_high_watermark(
    consumer: AIOKafkaConsumer,
    tp: TopicPartition,
    start: int,
    timeout: float = 30.0,
) -> AsyncIterator[list[ConsumerRecord]]:
    """Yield the records of ``tp`` from offset ``start`` to its end, in chunks.

    "End" is the high watermark reported by the Fetch responses (refreshed with every fetch),
    never ListOffsets. ``tp`` must be assigned to ``consumer`` (alone). Raises
    ``ChangelogTruncated`` when the partition ends before ``start``, ``TimeoutError`` when no
    fetch response arrives for ``timeout`` seconds. O(records read).
    """
    consumer.seek(tp, start)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            batches = await consumer.getmany(tp, timeout_ms=100, max_records=50_000)
        except OffsetOutOfRangeError as exc:
            raise ChangelogTruncated(f"{tp} ends before offset {start}") from exc
        records = batches.get(tp)
        if records:
            deadline = loop.time() + timeout
            yield records
        highwater = consumer.highwater(tp)
        if highwater is not None:
            position = await consumer.position(tp)
            if position > highwater:
                raise ChangelogTruncated(f"{tp} ends at {highwater}, before offset {start}")
            if position == highwater:
                return
        if loop.time() > deadline:
            raise TimeoutError(f"no fetch response for {tp} within {timeout} s")
