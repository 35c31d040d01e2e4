"""``agents.batched_send`` against a real broker: records handed over as whole batches arrive
complete and in order, on the partitions Kafka's default partitioner picks, and the delivery
returned names the last record's offset."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner
from hypothesis import given
from hypothesis import strategies as st

import stores
from agents.batched_send import (
    KEY_CACHE_SIZE,
    KeyedOutputs,
    KeyPartitioner,
    kafka_timestamp,
    native_builder,
    send_records,
)
from agents.clients import client_options, read_to_end
from app.settings import Settings
from app.topics import TopicSpec, create_topics
from tests.test_window_store import make_settings


async def started_producer(
    settings: Settings, max_batch_size: int, **options: Any
) -> AIOKafkaProducer:
    producer = AIOKafkaProducer(
        **client_options(settings), acks="all", max_batch_size=max_batch_size, **options
    )
    await producer.start()
    return producer


@given(key=st.binary(min_size=1, max_size=40), partitions=st.integers(1, 12))
def test_key_partitioner_is_kafkas_default_partitioner(key: bytes, partitions: int) -> None:
    every = list(range(partitions))
    partition_of = KeyPartitioner(partitions)
    assert partition_of(key) == DefaultPartitioner()(key, every, every)
    assert partition_of(key) == partition_of(key)  # memoised: the same answer


def test_key_partitioner_memoises_a_bounded_number_of_keys() -> None:
    partition_of = KeyPartitioner(7)
    keys = [b"key-%d" % i for i in range(KEY_CACHE_SIZE + 100)]
    every = list(range(7))
    for key in keys:
        partition_of(key)
    assert partition_of.cached_keys() == KEY_CACHE_SIZE
    for key in keys[:100]:  # evicted first (least recently used), still right
        assert partition_of(key) == DefaultPartitioner()(key, every, every)


async def test_records_beyond_one_batch_arrive_complete_and_in_order(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path
) -> None:
    """300 records of about 60 bytes with 1 KB batches: many batches, one call; tombstones
    stay tombstones; the delivery is the last record's offset."""
    settings = make_settings(kafka_bootstrap, embedded_profile, tmp_path, partitions=1)
    topic = f"{settings.app_id}-out"
    await create_topics(settings, [TopicSpec(topic, 1, 1)])
    producer = await started_producer(settings, max_batch_size=1024)
    try:
        records = [
            (b"key-%03d" % i, None if i % 7 == 0 else b"value-%03d-" % i + b"x" * 40)
            for i in range(300)
        ]
        assert await send_records(producer, topic, 0, []) is None
        delivery = await send_records(producer, topic, 0, records)
        await producer.flush()
        assert delivery is not None
        last = await delivery
        assert last == await delivery  # awaitable again
    finally:
        await producer.stop()
    got = await read_to_end(settings, topic)
    assert [(r.key, r.value) for r in got] == records
    assert last.offset == got[-1].offset == 299
    assert [r.offset for r in got] == list(range(300))  # nothing repeated or lost


async def test_keyed_outputs_land_where_producer_send_would_put_them(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path
) -> None:
    """Records queued one by one (``add``) or at once (``add_many``, with their event times as
    Kafka timestamps, bounded by the clock) land on their key's partition, in order."""
    settings = make_settings(kafka_bootstrap, embedded_profile, tmp_path, partitions=4)
    topic = f"{settings.app_id}-out"
    await create_topics(settings, [TopicSpec(topic, 4, 1)])
    producer = await started_producer(settings, max_batch_size=16384)
    try:
        outputs = KeyedOutputs(lambda: producer, topic)
        with pytest.raises(AssertionError, match="start"):
            outputs.add(b"k", b"v")
        await outputs.start()
        sent = [(b"k%d" % (i % 13), b"%d" % i) for i in range(200)]
        for key, value in sent[:120]:
            outputs.add(key, value)
        await outputs.send()
        later = sent[120:]  # in one add_many, with event times (one ahead of the clock)
        stamps = [1_700_000_000_000 + i for i in range(len(later) - 1)] + [2**62]
        outputs.add_many([k for k, _ in later], [v for _, v in later], stamps, source=5)
        await outputs.send()
        await outputs.send()  # nothing queued: nothing sent
        await producer.flush()
        expected_partition = {
            key: (await (await producer.send(topic, b"probe", key=key))).partition
            for key in {k for k, _ in sent}
        }
    finally:
        await producer.stop()
    got = [r for r in await read_to_end(settings, topic) if r.value != b"probe"]
    assert sorted((r.key, r.value) for r in got) == sorted(sent)
    stamp_of = {r.value: r.timestamp for r in got}
    assert [stamp_of[v] for _, v in later[:-1]] == stamps[:-1]
    assert stamp_of[later[-1][1]] <= time.time_ns() // 1_000_000  # the clock's, not 2**62
    for record in got:
        assert record.partition == expected_partition[record.key]
    for key in expected_partition:  # each key's records in the order added
        assert [r.value for r in got if r.key == key] == [v for k, v in sent if k == key]


@pytest.mark.parametrize("compression", [None, "gzip"])
async def test_chunks_added_at_once_land_in_order_with_single_records(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path, compression: str | None
) -> None:
    """``add_many`` (a chunk's records in one call) and ``add`` mixed, for two sources: each
    key's records in the order added (a source's before the next one's), on the partition
    ``producer.send`` picks, with their timestamps (one ahead of the clock sent as the
    clock's), keyless ones on the partition given, tombstones kept; many batches of 2 KB.
    With compression aiokafka builds the batches (``native_builder`` is None), from the same
    queues."""
    settings = make_settings(kafka_bootstrap, embedded_profile, tmp_path, partitions=3)
    topic = f"{settings.app_id}-out"
    await create_topics(settings, [TopicSpec(topic, 3, 1)])
    producer = await started_producer(settings, 2048, compression_type=compression)
    now = time.time_ns() // 1_000_000
    try:
        native = compression is None and stores.native() is not None
        assert (native_builder(producer) is not None) == native
        outputs = KeyedOutputs(lambda: producer, topic)
        await outputs.start()
        by_source: dict[int, list] = {0: [], 40: []}  # sent source after source
        for i in range(0, 400, 40):
            keys = [b"k%d" % (j % 11) if j % 9 else None for j in range(i, i + 40)]
            values = [None if j % 13 == 0 else b"%d-" % j + b"v" * 50 for j in range(i, i + 40)]
            times = [now - 10_000 + j for j in range(i, i + 40)]
            times[5] = now + 3_600_000  # ahead of the clock
            outputs.add_many(keys, values, times, partition=i // 40, source=i % 80)
            outputs.add(b"single", b"%d" % i, now - 5_000 + i, source=i % 80)
            by_source[i % 80] += [*zip(keys, values, times, strict=True)]
            by_source[i % 80].append((b"single", b"%d" % i, now - 5_000 + i))
        sent = by_source[0] + by_source[40]
        deliveries = await outputs.send()
        assert len(deliveries) == 6  # 3 partitions, 2 sources
        for delivery in deliveries:
            await delivery
        expected_partition = {
            key: (await (await producer.send(topic, b"probe", key=key))).partition
            for key in {k for k, _, _ in sent if k is not None}
        }
    finally:
        await producer.stop()
    got = [r for r in await read_to_end(settings, topic) if r.value != b"probe"]
    assert sorted((r.key or b"", r.value or b"") for r in got) == sorted(
        (k or b"", v or b"") for k, v, _ in sent
    )
    for key in expected_partition:
        mine = [r for r in got if r.key == key]
        assert {r.partition for r in mine} == {expected_partition[key]}
        in_order = [(v, t) for k, v, t in sent if k == key]
        assert [r.value for r in mine] == [v for v, _ in in_order]
        for record, (_, t) in zip(mine, in_order, strict=True):
            assert record.timestamp == t or (t > now and now <= record.timestamp <= t)
    keyless = [r for r in got if r.key is None]
    assert all(int(r.value.split(b"-")[0]) // 40 % 3 == r.partition for r in keyless if r.value)


def test_kafka_timestamps_are_never_ahead_of_the_clock_nor_before_1970() -> None:
    """An output's Kafka timestamp is its event time, but one a broker accepts: a time ahead of
    this machine's clock (Apache Kafka 4 refuses one more than an hour ahead and fails the whole
    batch) is sent as the clock's time; no time or one before 1970 as the producer's."""
    before = time.time_ns() // 1_000_000
    assert kafka_timestamp(1_700_000_000_000) == 1_700_000_000_000
    assert kafka_timestamp(None) is None and kafka_timestamp(-1) is None
    for ahead in (before + 3_600_001, 253_402_214_399_999, 2**63 - 1):
        assert before <= kafka_timestamp(ahead) <= time.time_ns() // 1_000_000
