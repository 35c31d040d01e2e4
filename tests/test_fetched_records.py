"""The natively decoded input records (``stores/native/src/fetched_records.rs``,
``agents.fetched_input``) against aiokafka's consumer, which is the oracle.

Hypothesis draws Fetch responses as a broker sends them: several record batches built by
aiokafka's ``BatchBuilder`` (keys and values None or bytes, headers, timestamps in any order,
offsets with gaps as compaction leaves them), transactional batches of a few producers,
commit and abort markers (control batches), batches stamped with the broker's append time,
now and then a batch compressed with one of Kafka's four codecs (decoded from its plain
rewrite, ``compressed_batches.rs``), and the last batch cut short; a fetch offset
inside the first batches; ``read_committed`` with the response's aborted transactions, or
``read_uncommitted``. The native records (offsets, timestamps and their type, keys, values,
headers) and the next fetch offset must be those of aiokafka's ``PartitionRecords``, compressed
batches included (the decoder declined them before, handing the response to aiokafka).
The hook's reads of aiokafka's private names are pinned to the code they were written
against; a real consumer on both brokers gives the same records through the hook as without.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.consumer import fetcher as aiokafka_fetcher
from aiokafka.consumer.fetcher import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    Fetcher,
    FetchResult,
    PartitionRecords,
)
from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.record.util import calc_crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

import stores
from agents.clients import client_options
from agents.fetched_input import RawMemoryRecords, RecordList, native_fetches
from app.topics import TopicSpec, create_topics
from tests.test_window_store import make_settings

native: Any = stores.native()
needs_native = pytest.mark.skipif(native is None, reason="no native core")

TOPIC = "input"
CODECS = ("gzip", "snappy", "lz4", "zstd")
_ATTRIBUTES = 21
_CRC = 17
_LOG_APPEND_TIME = 0x08
_CONTROL = 0x20

maybe_bytes = st.none() | st.binary(max_size=40)
headers = st.lists(st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=8)), max_size=2)
record = st.tuples(maybe_bytes, maybe_bytes, st.integers(0, 2**41), headers)
batch_spec = st.fixed_dictionaries(
    {
        "records": st.lists(record, min_size=1, max_size=6),
        "gap": st.integers(0, 3),
        "producer": st.sampled_from([-1, 1, 2, 3]),
        "control": st.sampled_from([None, None, None, "commit", "abort"]),
        "log_append": st.booleans(),
        "codec": st.sampled_from([0] * 8 + [1, 2, 3, 4]),
    }
)


def built(spec: dict[str, Any], base: int) -> bytes:
    """One record batch as aiokafka's producer builds it, at offset ``base``, then turned
    into what a broker may hold: a control batch (its one record a marker), the broker's
    append time, the CRC rewritten."""
    transactional = spec["producer"] >= 0
    codec = spec["codec"] if spec["control"] is None else 0  # brokers write control batches plain
    builder = BatchBuilder(1 << 20, codec, is_transactional=transactional)
    if spec["control"] is not None:
        marker = 0 if spec["control"] == "abort" else 1
        builder.append(timestamp=5, key=b"\0\0\0" + bytes([marker]), value=b"\0\0\0\0\0\0")
    else:
        for key, value, timestamp, hdrs in spec["records"]:
            builder.append(timestamp=timestamp, key=key, value=value, headers=hdrs)
    if transactional:
        builder._set_producer_state(spec["producer"], 0, 0)
    data = bytearray(builder._build())
    data[:8] = base.to_bytes(8, "big")
    attributes = int.from_bytes(data[_ATTRIBUTES : _ATTRIBUTES + 2], "big")
    if spec["control"] is not None:
        attributes |= _CONTROL
    if spec["log_append"]:
        attributes |= _LOG_APPEND_TIME
    data[_ATTRIBUTES : _ATTRIBUTES + 2] = attributes.to_bytes(2, "big")
    data[_CRC:_ATTRIBUTES] = calc_crc32c(bytes(data[_ATTRIBUTES:])).to_bytes(4, "big")
    return bytes(data)


@st.composite
def responses(draw: st.DrawFn) -> tuple[bytes, int, list[tuple[int, int]]]:
    """``(record bytes, fetch offset, aborted transactions)`` of a Fetch response."""
    specs = draw(st.lists(batch_spec, min_size=1, max_size=5))
    data, base, firsts = b"", draw(st.integers(0, 1000)), []
    for spec in specs:
        base += spec["gap"]
        firsts.append((spec["producer"], base))
        data += built(spec, base)
        base += 1 if spec["control"] is not None else len(spec["records"])
    cut = draw(st.integers(0, 40))
    if cut:
        data += built(draw(batch_spec), base)[:-cut]  # the broker cut the last batch short
    fetch_offset = draw(st.integers(firsts[0][1], firsts[-1][1]))
    aborted = draw(st.lists(st.sampled_from(firsts), max_size=3))
    return data, fetch_offset, [a for a in aborted if a[0] >= 0]


def aiokafka_records(data: bytes, fetch_offset: int, aborted: Any, isolation: int) -> Any:
    tp = TopicPartition(TOPIC, 3)
    records = PartitionRecords(
        tp, MemoryRecords(data), aborted, fetch_offset, None, None, True, isolation
    )
    return list(records), records.next_fetch_offset


@needs_native
@settings(max_examples=200, deadline=None)
@given(responses(), st.booleans())
def test_native_records_are_aiokafkas(response: Any, committed: bool) -> None:
    data, fetch_offset, aborted = response
    isolation = READ_COMMITTED if committed else READ_UNCOMMITTED
    want, next_offset = aiokafka_records(data, fetch_offset, aborted, isolation)
    got = native.FetchedRecords.decode(
        data, TOPIC, 3, fetch_offset, aborted if committed else None, True
    )
    assert got is not None
    assert list(got) == want
    assert got.offsets() == [r.offset for r in want]
    assert got.timestamps() == [r.timestamp for r in want]
    assert got.next_offset == next_offset
    for r in want:
        assert got.record_at(r.offset) == r
        assert got.timestamp_at(r.offset) == r.timestamp
    if want:
        assert got.last_offset == want[-1].offset
        middle = want[len(want) // 2].offset
        assert list(got.after(middle)) == [r for r in want if r.offset > middle]
        assert list(got[1:3]) == want[1:3]


def assert_indexes_as_a_list(view: Any, items: list[Any], what: str) -> None:
    """``view`` (a native sequence: ``FetchedRecords``, ``Effects``) answers every index and
    step-1 slice as the list ``items`` does, a slice being a view that slices again; an index
    out of range is an IndexError and another step a ValueError, both naming ``what``."""
    n = len(items)
    assert len(view) == n
    for i in range(-n - 1, n + 1):
        if -n <= i < n:
            assert view[i] == items[i]
        else:
            with pytest.raises(IndexError, match=f"^{what} index out of range$"):
                view[i]
    bounds = (None, -n - 2, -2, 0, 1, n // 2, n, n + 2)
    for start in bounds:
        for stop in bounds:
            part, want = view[start:stop], items[start:stop]
            assert list(part) == want and len(part) == len(want)
            assert list(part[1:-1]) == want[1:-1] and (not want or part[-1] == want[-1])
    with pytest.raises(ValueError, match=f"^a slice of {what}s has step 1$"):
        view[::2]


@needs_native
def test_fetched_records_index_and_slice_as_a_list() -> None:
    spec = {"gap": 0, "producer": -1, "control": None, "log_append": False, "codec": 0}
    records = [(b"k", bytes([i]), 10 + i, []) for i in range(5)]
    data = built({**spec, "records": records}, 7)
    want, _ = aiokafka_records(data, 0, None, READ_UNCOMMITTED)
    assert_indexes_as_a_list(
        native.FetchedRecords.decode(data, TOPIC, 3, 0, None, True), want, "record"
    )


@needs_native
def test_a_corrupt_batch_is_left_to_aiokafka_which_raises() -> None:
    data = bytearray(
        built(
            {
                "records": [(b"k", b"v", 1, [])],
                "gap": 0,
                "producer": -1,
                "control": None,
                "log_append": False,
                "codec": 0,
            },
            0,
        )
    )
    data[-1] ^= 0xFF
    assert native.FetchedRecords.decode(bytes(data), TOPIC, 0, 0, None, True) is None


def test_record_list_answers_as_the_native_chunk() -> None:
    data = b"".join(
        built(
            {
                "records": [(b"k", bytes([i]), 10 + i, [])],
                "gap": 0,
                "producer": -1,
                "control": None,
                "log_append": False,
                "codec": 0,
            },
            5 + 2 * i,
        )
        for i in range(4)
    )
    want, _ = aiokafka_records(data, 0, None, READ_UNCOMMITTED)
    chunk = RecordList(want)
    assert chunk.offsets() == [5, 7, 9, 11] and chunk.last_offset == 11
    assert list(chunk.after(7)) == want[2:] and chunk.record_at(9) == want[2]
    assert chunk.timestamp_at(11) == 13 and list(chunk[1:2]) == want[1:2]
    with pytest.raises(KeyError):
        chunk.record_at(6)


PINNED = {
    Fetcher.fetched_records: "be434889",
    Fetcher._proc_fetch_request: "59bf948f",
    FetchResult.getall: "3e717e30",
    FetchResult.check_assignment: "b5340df6",
    FetchResult._update_position: "83fb1473",
    PartitionRecords.__init__: "8ec1c2ae",
    PartitionRecords._unpack_records: "b803e6d4",
}
"""The aiokafka code ``agents.fetched_input`` mirrors or reads the private names of (a digest
of its source): a new aiokafka that changes any of it fails here, before a worker reads."""


def test_the_aiokafka_code_the_hook_mirrors_is_unchanged() -> None:
    digests = {
        f.__qualname__: hashlib.sha256(inspect.getsource(f).encode()).hexdigest()[:8]
        for f in PINNED
    }
    assert digests == {f.__qualname__: d for f, d in PINNED.items()}
    assert aiokafka_fetcher.MemoryRecords in (MemoryRecords, RawMemoryRecords)


@pytest.mark.kafka
@pytest.mark.timeout(120)
def test_a_consumer_reads_the_same_records_through_the_hook(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path
) -> None:
    """Plain batches, then a batch of each of Kafka's codecs, a committed and an aborted
    transaction (Apache Kafka) and records with headers, read with ``read_committed`` in
    chunks of at most 7 records, through the hook (all decoded natively) and without."""
    settings = make_settings(kafka_bootstrap, embedded_profile, tmp_path, partitions=1)
    asyncio.run(_read_both_ways(settings, embedded_profile))


async def _read_both_ways(settings: Any, embedded: bool) -> None:
    topic = f"{settings.app_id}-fetched"
    await create_topics(settings, [TopicSpec(topic, 1, 1)])
    options = client_options(settings)
    plain = AIOKafkaProducer(**options, linger_ms=50)
    compressing = [AIOKafkaProducer(**options, compression_type=c) for c in CODECS]
    # the embedded broker (Tansu) has no transactions: a plain record stands in for them
    transactional = plain if embedded else AIOKafkaProducer(**options, transactional_id=topic)
    producers = {plain, *compressing, transactional}
    for producer in producers:
        await producer.start()
    try:
        for i in range(30):
            await plain.send(topic, f"v{i}".encode(), key=b"k" if i % 3 else None, partition=0)
        await plain.flush()
        kinds: set[str] = set()
        hooked = await _read(options, topic, 0, 30, kinds)
        assert hooked == await _read(options, topic, 0, 30)
        for codec, producer in zip(CODECS, compressing, strict=True):
            await producer.send_and_wait(topic, codec.encode(), partition=0)
        if embedded:
            await plain.send_and_wait(topic, b"committed", partition=0)
        else:
            async with transactional.transaction():
                await transactional.send(topic, b"committed", partition=0)
            await transactional.begin_transaction()
            await transactional.send_and_wait(topic, b"aborted", partition=0)
            await transactional.abort_transaction()
        for i in range(5):
            await plain.send(topic, f"w{i}".encode(), partition=0, headers=[("h", b"1")])
        await plain.flush()
    finally:
        for producer in producers:
            await producer.stop()
    rest = await _read(options, topic, 30, 10, kinds)
    assert rest == await _read(options, topic, 30, 10)
    assert [value for _, _, value, _ in rest][:5] == [*(c.encode() for c in CODECS), b"committed"]
    # every response decoded natively, compressed batches included
    assert kinds == ({"FetchedRecords"} if native else {"RecordList"})


async def _read(
    options: dict[str, Any], topic: str, start: int, count: int, kinds: set[str] | None = None
) -> list[Any]:
    """``count`` records of ``topic`` from offset ``start``, through the hook when ``kinds``
    is given (the names of the chunks' types are added to it)."""
    consumer = AIOKafkaConsumer(
        **options, isolation_level="read_committed", enable_auto_commit=False
    )
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, start)
        if kinds is not None:
            native_fetches(consumer)
        records: list[Any] = []
        while len(records) < count:
            chunks = await consumer.getmany(timeout_ms=5000, max_records=7)
            assert chunks, f"only {len(records)} records"
            for chunk in chunks.values():
                assert len(chunk) <= 7
                if kinds is not None:
                    kinds.add(type(chunk).__name__)
                records.extend(chunk)
        return [(r.offset, r.key, r.value, r.headers) for r in records]
    finally:
        await consumer.stop()
