"""The input consumer's fetched records, per partition as one chunk, decoded natively.

``native_fetches(consumer)`` makes ``consumer.getmany`` return, per partition, a chunk of
records instead of a list of ``ConsumerRecord``: on the native build a
``stores._native.FetchedRecords`` over the Fetch response's bytes (decoded in one call, no
Python object per record), else, and for a response holding what the native decoder does
not take (compressed or legacy batches, bytes aiokafka refuses), aiokafka's own records in a
``RecordList``. Everything else stays aiokafka's: its fetcher, positions, seeks, pauses,
errors, high watermarks. The hook is aiokafka's ``Fetcher.fetched_records`` with its
``FetchResult.getall`` decoding the response at once (the private names it reads are pinned
by tests/test_fetched_records.py), and ``aiokafka.consumer.fetcher.MemoryRecords`` keeping the
response's bytes (``RawMemoryRecords``, process-wide, otherwise unchanged). A chunk answers
``after``, ``offsets``, ``timestamps``, ``record_at``, ``timestamp_at``, ``last_offset``,
slices and ``len``.
"""

from __future__ import annotations

import asyncio
import time
import types
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from typing import Any, Protocol, overload

import aiokafka.consumer.fetcher as aiokafka_fetcher
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.consumer.fetcher import READ_COMMITTED, FetchResult
from aiokafka.record.memory_records import MemoryRecords

import stores


class InputChunk(Protocol):
    """Records of one partition in offset order (``FetchedRecords`` or ``RecordList``)."""

    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[ConsumerRecord]: ...
    def __getitem__(self, index: slice) -> InputChunk: ...
    def after(self, offset: int) -> InputChunk: ...
    @property
    def last_offset(self) -> int: ...
    def offsets(self) -> list[int]: ...
    def timestamps(self) -> list[int]: ...
    def record_at(self, offset: int) -> ConsumerRecord: ...
    def timestamp_at(self, offset: int) -> int: ...


class RecordList:
    """aiokafka's records of one partition (in offset order) as an ``InputChunk``."""

    __slots__ = ("_offsets", "_records")

    def __init__(self, records: Sequence[ConsumerRecord]) -> None:
        self._records = records
        self._offsets = [r.offset for r in records]

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[ConsumerRecord]:
        return iter(self._records)

    @overload
    def __getitem__(self, index: int) -> ConsumerRecord: ...
    @overload
    def __getitem__(self, index: slice) -> RecordList: ...
    def __getitem__(self, index: int | slice) -> ConsumerRecord | RecordList:
        if isinstance(index, slice):
            return RecordList(self._records[index])
        return self._records[index]

    def after(self, offset: int) -> RecordList:
        """The records at offsets above ``offset``. O(log n) plus the copy."""
        return RecordList(self._records[bisect_right(self._offsets, offset) :])

    @property
    def last_offset(self) -> int:
        """The offset of the last record (IndexError if none)."""
        return self._offsets[-1]

    def offsets(self) -> list[int]:
        return list(self._offsets)

    def timestamps(self) -> list[int]:
        return [r.timestamp for r in self._records]

    def record_at(self, offset: int) -> ConsumerRecord:
        """The record at ``offset`` (KeyError if none). O(log n)."""
        i = bisect_left(self._offsets, offset)
        if i == len(self._offsets) or self._offsets[i] != offset:
            raise KeyError(offset)
        return self._records[i]

    def timestamp_at(self, offset: int) -> int:
        return self.record_at(offset).timestamp  # type: ignore[no-any-return]


class RawMemoryRecords(MemoryRecords):  # type: ignore[misc, valid-type]
    """aiokafka's ``MemoryRecords`` that keeps the bytes it reads (``raw``)."""

    __slots__ = ("raw",)

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.raw = data


def keep_fetched_bytes() -> None:
    """Make every consumer's fetcher keep each response's record bytes (``RawMemoryRecords``).
    Idempotent; affects the whole process (the records read are unchanged)."""
    aiokafka_fetcher.MemoryRecords = RawMemoryRecords


def native_fetches(consumer: AIOKafkaConsumer) -> bool:
    """Make the started ``consumer``'s ``getmany`` return one chunk per partition (see the
    module doc): natively decoded where the native core is loaded (True), else aiokafka's
    records as ``RecordList`` (False)."""
    module = stores.native()
    fetcher = consumer._fetcher
    decoded: dict[TopicPartition, tuple[FetchResult, Any]] = {}
    if module is not None:
        keep_fetched_bytes()
    decode = None if module is None else module.FetchedRecords.decode

    def take(tp: TopicPartition, result: FetchResult, most: int | None) -> InputChunk | None:
        """``result.getall(most)`` as one chunk (None: nothing)."""
        if not result.check_assignment(tp) or not result.has_more():
            decoded.pop(tp, None)
            return None
        held = decoded.get(tp)
        if held is None or held[0] is not result:
            held = decoded[tp] = (result, _decoded(decode, tp, result._partition_records))
        chunk = held[1]
        if chunk is None:  # aiokafka reads this response
            records = result.getall(most)
            if not result.has_more():
                del decoded[tp]
            return RecordList(records) if records else None
        records = result._partition_records
        if most is not None and len(chunk) > most:
            piece, rest = chunk[:most], chunk[most:]
            records.next_fetch_offset = piece.last_offset + 1  # as aiokafka's getall
            decoded[tp] = (result, rest)
        else:
            piece = chunk
            records.next_fetch_offset = chunk.next_offset
            del decoded[tp]
        result._update_position()
        if tp not in decoded:
            result._partition_records = None
        return piece if len(piece) else None

    async def fetched_records(
        self: Any, partitions: Any, timeout: float = 0, max_records: int | None = None
    ) -> dict[TopicPartition, InputChunk]:
        """aiokafka's ``Fetcher.fetched_records`` (0.14), each partition's records taken by
        ``take``."""
        while True:
            if self._subscriptions.reassignment_in_progress:
                await self._subscriptions.wait_for_assignment()
            start_time = time.monotonic()
            drained: dict[TopicPartition, InputChunk] = {}
            for tp in list(self._records.keys()):
                if partitions and tp not in partitions:
                    if not self._subscriptions.is_assigned(tp):
                        del self._records[tp]
                    continue
                res_or_error = self._records[tp]
                if type(res_or_error) is FetchResult:
                    chunk = take(tp, res_or_error, max_records)
                    if not res_or_error.has_more():
                        del self._records[tp]
                        self._notify(self._wait_consume_future)
                    if chunk is None:
                        continue
                    drained[tp] = chunk
                    if max_records is not None:
                        max_records -= len(chunk)
                        if max_records == 0:
                            break
                elif drained:
                    return drained
                else:
                    del self._records[tp]
                    self._notify(self._wait_consume_future)
                    res_or_error.check_raise()
            if drained or not timeout:
                return drained
            waiter = self._create_fetch_waiter()
            done, pending = await asyncio.wait([waiter], timeout=timeout)
            if not done or self._closed:
                if pending:
                    pending.pop().cancel()
                return {}
            if waiter.done():
                waiter.result()
            timeout = max(0, timeout - (time.monotonic() - start_time))

    fetcher.fetched_records = types.MethodType(fetched_records, fetcher)
    return module is not None


def _decoded(decode: Any, tp: TopicPartition, records: Any) -> Any:
    """The natively decoded records of aiokafka's untouched ``PartitionRecords`` ``records``,
    or None (aiokafka must read them: no native core, bytes not kept, or a batch the native
    decoder does not take)."""
    raw = getattr(records._records, "raw", None)
    if decode is None or raw is None:
        return None
    committed = records._isolation_level == READ_COMMITTED
    return decode(
        raw,
        tp.topic,
        tp.partition,
        records.next_fetch_offset,
        list(records._aborted_transactions) if committed else None,
        records._check_crcs,
    )
