"""The window store's changelog topic: record format, producer port, reading to the high watermark.

Partition ``i`` of ``<app_id>-windows-changelog`` holds the window state of input partition
``i``. Records: an **upsert** (an entry's new partial plus the times its event evicted and the
input offset: the whole effect of ONE input record, so any prefix of the changelog is the
state after a prefix of the events), a **tombstone** per deleted entry (for compaction), an
**applied marker** (offsets without effect) and the reserved **shape** record.
``ChangelogLink`` is the port the store sends and reads through (``agents.kafka_changelog``
implements it on Kafka). Record layouts: docs/design/window-store.md.
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, TopicPartition

APPLIED_KEY = b"\x00applied"
"""Changelog key of the applied-offset marker; 8 bytes, so it is no entry id (those have at least
12: a 4-byte length and an 8-byte time)."""

SHAPE_KEY = b"\x00shape"
"""Changelog (and local) key of the state's shape record; 6 bytes, no entry id either."""

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


def replay_changelog(
    records: Iterable[ChangelogRecord],
    applied: int,
    put: Callable[[bytes, bytes], object],
    delete: Callable[[bytes], object],
) -> tuple[int, int]:
    """Replay changelog ``records`` (in order) as writes of local entries (entry id -> partial
    bytes): ``put`` for an upsert, ``delete`` for a tombstone and for each time an upsert
    deleted. Return the applied offset after them (starting from ``applied``) and the number of
    records. The one decoder of the record format (``stores.changelog``) for every replay: into
    the in-memory entries of a restore, a local copy, a standby replica. O(records + deleted
    times)."""
    unpack_header = UPSERT_HEADER.unpack_from
    header_size = UPSERT_HEADER.size
    count = 0
    for count, record in enumerate(records, 1):  # noqa: B007
        key, value = record.key, record.value
        if value is None:
            delete(key)
        elif key == APPLIED_KEY:
            applied = max(applied, decode_offset(value))
        elif key == SHAPE_KEY:
            put(key, value)
        else:
            # the upsert value after its header and deleted times is the local value (partial)
            offset, n_deleted = unpack_header(value)
            end = header_size + 8 * n_deleted
            if n_deleted:
                prefix = key[:-8]
                for i in range(header_size, end, 8):
                    delete(prefix + value[i : i + 8])
            put(key, value[end:])
            if offset > applied:
                applied = offset
    return applied, count


class ChangelogTruncated(Exception):
    """A changelog partition ends before an offset that was read earlier: it was recreated."""


class ChangelogProducer(Protocol):
    """What the store needs from a producer. ``send_records`` hands records (key, value; value
    None: a tombstone) of one partition over in order and returns the delivery of the last one,
    an awaitable whose result has ``.offset`` (None for no records); ``flush`` returns once
    every record handed over so far is acknowledged."""

    async def send_records(
        self, topic: str, partition: int, records: Sequence[tuple[bytes, bytes | None]]
    ) -> Awaitable[Any] | None: ...

    async def flush(self) -> None: ...


class ChangelogRecord(Protocol):
    """A record as the reader hands it over (aiokafka's C ``DefaultRecord``, or a
    ``ConsumerRecord``): ``offset``, ``key`` and ``value`` (``None`` for a tombstone)."""

    @property
    def offset(self) -> int: ...

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...


@dataclass(frozen=True, slots=True)
class FetchedBatch:
    """A record batch as a reader hands it over, with its bytes for a native replay
    (``stores.restored_entries``): ``data[pos:pos + size]`` is one whole Kafka record batch,
    its CRC checked; iterating gives its records at offsets >= ``min_offset`` (``records``
    parses them: aiokafka's batch) as ``ChangelogRecord``s."""

    records: Iterable[ChangelogRecord]
    data: bytes
    pos: int
    size: int
    min_offset: int

    def __iter__(self) -> Iterator[ChangelogRecord]:
        start = self.min_offset
        if _OFFSET.unpack_from(self.data, self.pos)[0] >= start:  # the batch's base offset
            return iter(self.records)
        return (r for r in self.records if r.offset >= start)


class ChangelogReading(AbstractAsyncContextManager["ChangelogReading"], Protocol):
    """Reads changelog partitions back to their end (``agents.kafka_changelog.ChangelogReader``,
    used as ``async with``). ``read(tp, start)`` yields, per fetched chunk, a list of record
    batches (each an iterable of ``ChangelogRecord``s in offset order, iterated once) from
    offset ``start`` to the partition's end, and raises ``ChangelogTruncated`` when the
    partition ends before ``start``; ``position`` is the offset after what it handed over."""

    position: int

    def read(
        self, tp: TopicPartition, start: int, timeout: float = 30.0
    ) -> AsyncIterator[list[Iterable[ChangelogRecord]]]: ...


class ChangelogLink(ChangelogProducer, Protocol):
    """The window store's way to its changelog topic, implemented above ``stores``
    (``agents.kafka_changelog``): send and flush records (``ChangelogProducer``), ``start`` and
    ``stop`` what the link owns (with the store), ``reader()`` to read partitions back to their
    end (restore), ``consumer(fetch_max_wait_ms)`` a group-less consumer to tail them (standby
    replicas), and ``on_standbys(follow)``: where an assignor hands out standby partitions, call
    ``follow(partitions)`` with them on every assignment."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def reader(self) -> ChangelogReading: ...

    def consumer(self, fetch_max_wait_ms: int) -> AIOKafkaConsumer: ...

    def on_standbys(self, follow: Callable[[set[int]], Awaitable[None]]) -> None: ...
