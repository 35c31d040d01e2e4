"""The native record batches (``stores/native/src/record_batch.rs``) against aiokafka's, byte
for byte: aiokafka's ``BatchBuilder`` (over its C ``DefaultRecordBatchBuilder``) is the oracle.

Hypothesis draws record lists (keys and values None or bytes of any length, timestamps from 0
to beyond 2^40 in any order, headers with non-ASCII names and None values), batch sizes small
enough to split them, the transactional flag and a producer state, and checks that the native
``RecordBatchBuilder`` accepts and refuses the same records with the same metadata and builds
the same bytes, whether it is fed a record at a time (``append``) or a batch at a time
(``QueuedRecords.fill``); that the native ``OutputQueue`` queues what ``ListQueue`` queues,
on the same partitions (murmur2 as aiokafka's); and that ``native_builder`` builds, for a
producer as configured (plain, idempotent, transactional), the bytes its ``create_batch``
builds. Skipped without the native core.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import murmur2
from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.record.default_records import DefaultRecordBatch
from hypothesis import given, settings
from hypothesis import strategies as st

import stores
from agents.batched_send import KeyPartitioner, ListQueue, native_builder

pytestmark = pytest.mark.skipif(stores.native() is None, reason="no native core")
native: Any = stores.native()

maybe_bytes = st.none() | st.binary(max_size=300)
headers = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=20)), max_size=3)
records = st.lists(st.tuples(maybe_bytes, maybe_bytes, st.integers(0, 2**41), headers), max_size=40)
producer_states = st.none() | st.tuples(
    st.integers(0, 2**63 - 1), st.integers(0, 2**15 - 1), st.integers(0, 2**31 - 1)
)


def aiokafka_batches(
    batch: list, batch_size: int, transactional: bool, state: tuple | None
) -> list[tuple[bytes, list]]:
    """``batch`` put into aiokafka builders as ``send_output_records`` does (a new builder
    whenever one is full): each builder's bytes and its records' metadata."""
    out = []
    builder, metadata = BatchBuilder(batch_size, 0, is_transactional=transactional), []
    for key, value, timestamp, hdrs in batch:
        meta = builder.append(key=key, value=value, timestamp=timestamp, headers=hdrs)
        if meta is None:
            out.append((builder, metadata))
            builder, metadata = BatchBuilder(batch_size, 0, is_transactional=transactional), []
            meta = builder.append(key=key, value=value, timestamp=timestamp, headers=hdrs)
        metadata.append((meta.offset, meta.size, meta.timestamp))
    out.append((builder, metadata))
    if state is not None:
        for builder, _ in out:
            builder._set_producer_state(*state)
    return [(bytes(builder._build()), metadata) for builder, metadata in out]


@settings(max_examples=300, deadline=None)
@given(records, st.integers(61, 3000), st.booleans(), producer_states)
def test_native_batches_are_aiokafkas_byte_for_byte(
    batch: list, batch_size: int, transactional: bool, state: tuple | None
) -> None:
    expected = aiokafka_batches(batch, batch_size, transactional, state)
    # a record at a time
    got = []
    builder, metadata = native.RecordBatchBuilder(batch_size, transactional), []
    for key, value, timestamp, hdrs in batch:
        meta = builder.append(key=key, value=value, timestamp=timestamp, headers=hdrs)
        if meta is None:
            assert builder.closed()
            got.append((builder, metadata))
            builder, metadata = native.RecordBatchBuilder(batch_size, transactional), []
            meta = builder.append(key=key, value=value, timestamp=timestamp, headers=hdrs)
        metadata.append((meta.offset, meta.size, meta.timestamp))
    got.append((builder, metadata))
    if state is not None:
        for builder, _ in got:
            builder._set_producer_state(*state)
    assert [(builder._build(), metadata) for builder, metadata in got] == expected
    # a batch at a time
    queued = native.QueuedRecords(batch)
    assert list(queued) == [tuple(record) for record in batch]  # read back as queued
    filled = []
    while True:
        builder = native.RecordBatchBuilder(batch_size, transactional)
        queued.fill(builder)
        if state is not None:
            builder._set_producer_state(*state)
        filled.append(builder._build())
        if not len(queued):
            break
        assert builder.closed()  # full, closed by fill
    assert filled == [data for data, _ in expected]


@given(st.lists(st.tuples(maybe_bytes, maybe_bytes), max_size=40))
def test_key_value_pairs_queue_as_records_without_time_or_headers(pairs: list) -> None:
    """``QueuedRecords`` takes the changelog's ``(key, value)`` pairs as they are
    (``send_records``): queued as ``(key, value, None, [])`` records, into the same batch."""
    queued = native.QueuedRecords(pairs)
    assert list(queued) == [(key, value, None, []) for key, value in pairs]
    builder = native.RecordBatchBuilder(1 << 20, False)
    queued.fill(builder)
    assert not len(queued)
    if pairs:
        read = list(DefaultRecordBatch(bytearray(builder._build())))
        assert [(r.key, r.value, r.headers) for r in read] == [(k, v, []) for k, v in pairs]


@given(
    st.lists(st.tuples(st.binary(max_size=300), maybe_bytes), max_size=40),
    st.sampled_from([1 << 20, 300, 100]),
)
def test_queued_and_changelog_records_fill_builders_alike(pairs: list, batch_size: int) -> None:
    """``QueuedRecords`` and ``ChangelogRecords`` of the same pairs fill builders the same
    way: as many records per batch, a builder closed by ``fill`` while records remain and
    none moved into a closed one, the records read back in order."""
    moved = {}
    for kind in (native.QueuedRecords, native.ChangelogRecords):
        queued, moved[kind], read = kind(pairs), [], []
        while len(queued):
            builder = native.RecordBatchBuilder(batch_size, False)
            moved[kind].append(queued.fill(builder))
            assert builder.closed() == bool(len(queued))
            assert not builder.closed() or queued.fill(builder) == 0
            read += [(r.key, r.value) for r in DefaultRecordBatch(bytearray(builder._build()))]
        assert read == pairs
    assert moved[native.QueuedRecords] == moved[native.ChangelogRecords]


def test_a_batch_reads_back_and_its_crc_holds() -> None:
    """Read by aiokafka's own batch reader: records, headers, timestamps (None: the clock
    when appended) and a valid CRC; built twice, the same bytes."""
    builder = native.RecordBatchBuilder(1 << 16, True)
    before = time.time_ns() // 1_000_000
    builder.append(key=b"k", value=None, timestamp=None, headers=[("h\u00e9", b"1"), ("n", None)])
    builder.append(key=None, value=b"v" * 200, timestamp=5, headers=[])
    after = time.time_ns() // 1_000_000
    builder._set_producer_state(7, 3, 11)
    data = builder._build()
    assert builder._build() is data and builder.closed()
    assert builder.append(key=b"late", value=b"x", timestamp=1) is None  # built: closed
    batch = DefaultRecordBatch(bytearray(data))
    assert batch.validate_crc()
    assert (batch.is_transactional, batch.producer_id, batch.producer_epoch) == (True, 7, 3)
    assert batch.base_sequence == 11
    first, second = list(batch)
    assert (first.key, first.value, first.headers) == (b"k", None, [("h\u00e9", b"1"), ("n", None)])
    assert before <= first.timestamp <= after
    assert (second.key, second.value, second.timestamp) == (None, b"v" * 200, 5)


@given(st.binary(max_size=64))
def test_native_murmur2_is_aiokafkas(data: bytes) -> None:
    assert native.murmur2(data) == murmur2(data)


queue_ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("add"),
            st.none() | st.binary(max_size=12),
            maybe_bytes,
            st.none() | st.integers(-(2**40), 2**63 - 1),
            headers,
            st.integers(-5, 40),
        ),
        st.tuples(
            st.just("add_many"),
            st.lists(
                st.tuples(
                    st.none() | st.binary(max_size=12),
                    maybe_bytes,
                    st.none() | st.integers(-(2**40), 2**63 - 1),
                ),
                max_size=10,
            ),
            st.integers(-5, 40),
        ),
    ),
    max_size=30,
)


@settings(deadline=None)
@given(queue_ops, st.integers(1, 9))
def test_the_native_output_queue_queues_what_the_list_queue_does(
    ops: list, partitions: int
) -> None:
    """Same partitions (a key's by murmur2, a keyless record's given one modulo the count),
    same order, same Kafka timestamps (``kafka_timestamp``: None before 1970, at most the
    clock), the same returned timestamps; ``take`` empties a partition."""
    queue, twin = native.OutputQueue(partitions), ListQueue(KeyPartitioner(partitions))
    for op in ops:
        if op[0] == "add":
            _, key, value, timestamp, hdrs, partition = op
            got = queue.add(key, value, timestamp, hdrs, partition)
            assert _same_time(got, twin.add(key, value, timestamp, hdrs, partition))
        else:
            _, items, partition = op
            columns = [list(column) for column in zip(*items, strict=True)] or [[], [], []]
            got = queue.add_many(*columns, partition)
            assert _same_time(got, twin.add_many(*columns, partition))
    assert sorted(queue.partitions()) == sorted(twin.partitions())
    assert len(queue) == sum(len(twin._by_target[p]) for p in twin.partitions())
    for partition in queue.partitions():
        native_records, records = list(queue.take(partition)), twin.take(partition)
        assert len(native_records) == len(records)
        for (k, v, t, h), (k2, v2, t2, h2) in zip(native_records, records, strict=True):
            assert (k, v, list(h)) == (k2, v2, list(h2)) and _same_time(t, t2)
    assert queue.partitions() == [] and len(queue) == 0


def _same_time(a: int | None, b: int | None) -> bool:
    """Kafka timestamps equal, or both the clock (a time ahead of it) read a moment apart."""
    if a is None or b is None:
        return a is b
    return abs(a - b) <= 1000 if max(a, b) >= time.time_ns() // 1_000_000 - 1000 else a == b


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"enable_idempotence": True},
        {"transactional_id": "t-1"},
        {"max_batch_size": 200},
    ],
    ids=["plain", "idempotent", "transactional", "small-batches"],
)
async def test_native_builder_is_the_producers_create_batch(options: dict) -> None:
    """For a producer as configured (never started: no broker needed), the native builder
    builds what ``create_batch`` builds, split where it splits."""
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1", **options)
    await producer.stop()  # never started: nothing to close but the warning
    new_builder = native_builder(producer)
    assert new_builder is not None
    batch = [(b"k%d" % i, b"v" * (i * 7 % 50), 1_700_000_000_000 + i, []) for i in range(30)]
    mine, theirs = new_builder(), producer.create_batch()
    for key, value, timestamp, hdrs in batch:
        a = mine.append(key=key, value=value, timestamp=timestamp, headers=hdrs)
        b = theirs.append(key=key, value=value, timestamp=timestamp, headers=hdrs)
        assert (a is None) == (b is None)
        if a is None:
            break
    assert mine._build() == bytes(theirs._build())


@pytest.mark.parametrize(
    "options",
    [{"compression_type": "gzip"}, {"key_serializer": str.encode}],
    ids=["compressed", "serialised"],
)
async def test_a_compressing_or_serialising_producer_keeps_aiokafkas_builder(
    options: dict,
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1", **options)
    await producer.stop()  # never started: nothing to close but the warning
    assert native_builder(producer) is None
