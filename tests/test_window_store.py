"""The window store against a real broker: write/restore round trips, from the local RocksDB and
from the changelog alone, with deletes, applied offsets and multi-record producer batches.

The oracle is a plain dict ``(key, time) -> partial`` driven by the same operations. Partials
are ``[count, sum]`` lists serialised as JSON (the store is agnostic of the monoid).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import uuid
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from hypothesis import example, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from agents.clients import client_options
from agents.kafka_changelog import ChangelogReader, KafkaChangelog
from app.settings import Settings
from app.topics import CHANGELOG_TOPIC_CONFIGS, TopicSpec, create_topics
from stores import native, window_store
from stores.changelog import (
    APPLIED_KEY,
    SHAPE_KEY,
    ChangelogTruncated,
    entry_id,
    split_entry_id,
)
from stores.key_windows import WindowConfig
from stores.monoids import make_monoid, monoid, monoid_names
from stores.restored_entries import PyEntries
from stores.state_shape import StateMismatch
from stores.window_store import MarshalStateCodec, RestoredPartition, WindowStore

pytestmark = pytest.mark.kafka


class JsonCodec:
    """Partials as JSON (the monoids' state round trip is JSON too)."""

    format = "test-json/1"

    def encode(self, partial: Any) -> bytes:
        return json.dumps(partial).encode()

    def decode(self, data: bytes) -> Any:
        return json.loads(data)


def make_settings(bootstrap: str, embedded: bool, state_dir: Path, partitions: int = 2) -> Settings:
    return Settings(
        broker=bootstrap,
        broker_profile="embedded" if embedded else "kafka",
        app_id=f"ws-{uuid.uuid4().hex[:10]}",
        partitions=partitions,
        state_dir=state_dir,
    )


async def create_changelog(settings: Settings) -> None:
    spec = TopicSpec(settings.changelog_topic, settings.partitions, 1, CHANGELOG_TOPIC_CONFIGS)
    await create_topics(settings, [spec])


async def open_store(
    settings: Settings, *partitions: int, codec: Any = None
) -> tuple[WindowStore, dict]:
    store = WindowStore(settings, codec or JsonCodec(), KafkaChangelog(settings))
    await store.start()
    restored = {p: await store.restore(p) for p in partitions}
    return store, restored


def as_entries(restored: RestoredPartition) -> dict[tuple[str, int], Any]:
    entries = {}
    for key, pairs in restored.windows.items():
        times = [t for t, _ in pairs]
        assert times == sorted(times), f"entries of {key!r} not in time order"
        assert len(set(times)) == len(times)
        for t, partial in pairs:
            entries[(key, t)] = partial
    return entries


def test_entry_ids_sort_by_key_then_time() -> None:
    pairs = [("a", -5), ("a", 0), ("a", 7), ("ab", -1), ("b", 3)]
    ids = [entry_id(k, t) for k, t in pairs]
    assert [split_entry_id(i) for i in ids] == pairs
    by_id = sorted(ids)
    # keys are grouped (length-prefixed), times ascend inside a key, negative first
    assert [split_entry_id(i) for i in by_id] == sorted(pairs, key=lambda p: (len(p[0]), p))


@hsettings(max_examples=40)
@given(
    name=st.sampled_from(monoid_names()),
    xs=st.lists(st.floats(1e-3, 1e6, allow_nan=False), max_size=6),
)
def test_marshal_state_codec_round_trips_every_monoid(name: str, xs: list[float]) -> None:
    m = monoid(name)
    codec = MarshalStateCodec(m)
    partial = m.identity
    for x in xs:
        partial = m.combine(partial, m.lift({"value": x, "arg": str(x)} if "arg" in name else x))
    encoded = codec.encode(partial)
    # built-in partials travel in marshal form: back equal, with the same types
    assert encoded[:1] != b"\x00"
    decoded = codec.decode(encoded)
    assert decoded == partial and type(decoded) is type(partial)
    assert m.to_state(decoded) == m.to_state(partial)
    assert codec.decode_many([encoded, encoded]) == [partial, partial]


class Moments(NamedTuple):
    """A partial marshal refuses (a tuple subclass): the codec falls back to the state form."""

    n: int
    total: float


MOMENTS = make_monoid(
    Moments(0, 0.0),
    lambda x: Moments(1, x),
    lambda a, b: Moments(a.n + b.n, a.total + b.total),
    lambda a: a.total,
    name="moments",
    to_state=list,
    from_state=lambda state: Moments(*state),
)


def test_marshal_state_codec_falls_back_to_the_state_of_other_partials() -> None:
    codec = MarshalStateCodec(MOMENTS)
    partial = Moments(3, 1.5)
    encoded = codec.encode(partial)
    assert encoded[:1] == b"\x00"
    assert codec.decode(encoded) == partial and type(codec.decode(encoded)) is Moments
    plain = MarshalStateCodec(monoid("sum")).encode(2.5)
    # a batch mixing both forms decodes each one by its own form
    assert codec.decode_many([plain, encoded, plain]) == [2.5, partial, 2.5]
    with pytest.raises(ValueError):
        codec.decode_many([plain, b"\x00not marshal"])


async def test_reader_starts_inside_a_batch_and_stops_at_the_end(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path
) -> None:
    """Records produced back to back share batches; a read from an offset inside one yields
    exactly the records from that offset to the end, a read from beyond the end raises."""
    settings = make_settings(kafka_bootstrap, embedded_profile, tmp_path, partitions=1)
    await create_changelog(settings)
    producer = KafkaChangelog(settings)
    await producer.start()
    try:
        records = [(b"k%d" % i, b"v%d" % i) for i in range(100)]
        for at in range(0, 100, 30):  # batches of 30 records (the last of 10)
            await producer.send_records(settings.changelog_topic, 0, records[at : at + 30])
        await producer.flush()
    finally:
        await producer.stop()
    tp = TopicPartition(settings.changelog_topic, 0)

    async def read(start: int) -> list[tuple[int, bytes | None, bytes | None]]:
        async with ChangelogReader(settings) as reader:
            got = [
                (r.offset, r.key, r.value)
                async for batches in reader.read(tp, start)
                for batch in batches
                for r in batch
            ]
            assert reader.position == 100
        return got

    assert await read(37) == [(i, b"k%d" % i, b"v%d" % i) for i in range(37, 100)]
    assert await read(100) == []
    with pytest.raises(ChangelogTruncated):
        await read(150)


# --- property test: random operations, restarts with and without the local copy ---------------

KEYS = st.sampled_from(["a", "b", "ключ", "k:1"])

operation = st.one_of(
    st.tuples(st.just("record"), KEYS, st.integers(-3, 12), st.integers(-5, 5), st.integers(0, 3)),
    st.tuples(st.just("skip")),
    # emit=batch: several effects in one record_many call
    st.tuples(
        st.just("many"),
        st.lists(st.tuples(KEYS, st.integers(-3, 12), st.integers(-5, 5)), min_size=1, max_size=6),
    ),
    st.tuples(st.just("evict"), KEYS, st.integers(1, 3)),
    st.tuples(st.just("send")),
    st.tuples(st.just("flush")),
    st.tuples(st.just("restart"), st.booleans()),
    st.tuples(st.just("crash"), st.booleans(), st.integers(0, 1000)),
)


class LossyProducer:
    """A ``ChangelogLink`` that holds records back until ``flush``: ``crash(n)`` delivers
    only the first ``n`` held records and drops the rest, as a SIGKILL can."""

    def __init__(self, settings: Settings) -> None:
        self.inner = KafkaChangelog(settings)
        self.held: list[tuple[str, int, bytes, bytes | None, asyncio.Future]] = []

    async def send_records(self, topic: str, partition: int, records):
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in records]
        self.held.extend(
            (topic, partition, k, v, f) for (k, v), f in zip(records, futures, strict=True)
        )
        return futures[-1] if futures else None

    async def deliver(self, n: int) -> None:
        batch, self.held = self.held[:n], self.held[n:]
        for topic, partition, key, value, future in batch:  # one by one: every cut is possible
            delivery = await self.inner.send_records(topic, partition, [(key, value)])
            future.set_result(await delivery)
        await self.inner.flush()

    async def flush(self) -> None:
        await self.deliver(len(self.held))

    async def start(self) -> None:
        """Nothing: the test starts and stops ``inner`` itself, once for all store restarts."""

    async def stop(self) -> None:
        """Nothing (see ``start``)."""

    def reader(self) -> ChangelogReader:
        return self.inner.reader()

    def consumer(self, fetch_max_wait_ms: int):
        return self.inner.consumer(fetch_max_wait_ms)

    def on_standbys(self, follow) -> None:
        self.inner.on_standbys(follow)


class Model:
    """The oracle: entries, applied offset, and per operation since the last flush, its
    changelog records (queued in the store, then held by the producer once handed over by
    ``send_changes``) and the state after it (what a crash may fall back to)."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, int], list[int]] = {}
        self.applied = -1
        self.durable = ({}, -1)  # state and applied offset at the last flush
        # (records, whether a prefix is the whole effect, state after, applied it carries)
        self.queued: list[tuple[int, bool, dict, int]] = []
        self.queued_upto = -1  # applied offset of the last queued upsert or marker
        # (first held record index, records, whether a prefix is the whole effect, state after)
        self.unflushed: list[tuple[int, int, bool, dict, int]] = []
        self.held = 0
        self.local_dirty = False  # written locally since the last checkpoint

    def times(self, key: str) -> list[int]:
        return sorted(t for k, t in self.entries if k == key)

    def did(self, records: int, atomic_first: bool, changelog_applied: int) -> None:
        self.queued.append((records, atomic_first, dict(self.entries), changelog_applied))
        self.queued_upto = max(self.queued_upto, changelog_applied)

    def handed_over(self) -> None:
        """``send_changes``: the queued records, then an applied marker if skipped records
        follow the last upsert, go to the producer; the local writes stay pending (no
        write-out below the pending limit: the local copy stays at its checkpoint)."""
        if self.applied > self.queued_upto:
            self.did(1, True, self.applied)
        for records, atomic_first, state, applied in self.queued:
            self.unflushed.append((self.held, records, atomic_first, state, applied))
            self.held += records
        self.queued = []

    def flushed(self) -> None:
        self.durable = (dict(self.entries), self.applied)
        self.unflushed, self.held, self.queued = [], 0, []
        self.queued_upto, self.local_dirty = self.applied, False

    def after_crash(self, delivered: int) -> tuple[dict, int, int]:
        """State and applied offset the changelog holds when the first ``delivered`` held
        records got out, and how many to deliver (a cut inside a sweep moves to its start:
        a sweep's tombstones are independent, this oracle only models whole sweeps)."""
        entries, applied = self.durable
        cut = delivered
        for first, records, atomic_first, state, op_applied in self.unflushed:
            if not atomic_first and first < cut < first + records:
                cut = first
            if cut < first + (1 if atomic_first else records):
                break
            entries, applied = state, max(applied, op_applied)
        return entries, applied, cut


async def run_operations(settings: Settings, ops: list[tuple]) -> None:
    await create_changelog(settings)
    model = Model()
    producer = LossyProducer(settings)
    await producer.inner.start()
    store = WindowStore(settings, JsonCodec(), producer)
    await store.start()
    restored = await store.restore(0)
    assert restored.applied_offset == -1 and restored.windows == {}
    await store.flush()  # the new partition's shape record, checkpointed, before the operations
    offset = 0
    try:
        for op in ops:
            kind = op[0]
            if kind == "record":
                _, key, time, value, n_evict = op
                evicted = [t for t in model.times(key) if t != time][:n_evict]
                old = model.entries.get((key, time), [0, 0])
                partial = [old[0] + 1, old[1] + value]
                store.record(0, offset, key, time, partial, evicted)
                for t in evicted:
                    del model.entries[(key, t)]
                model.entries[(key, time)] = partial
                model.applied = offset
                model.did(1 + len(evicted), True, offset)
                offset += 1
            elif kind == "many":
                effects = []
                for key, time, value in op[1]:
                    old = model.entries.get((key, time), [0, 0])
                    partial = [old[0] + 1, old[1] + value]
                    effects.append((offset, key, time, partial))
                    model.entries[(key, time)] = partial
                    model.applied = offset
                    model.did(1, True, offset)  # each effect one upsert record
                    offset += 1
                store.record_many(0, effects)
            elif kind == "skip":
                store.record_skipped(0, offset)
                model.applied = offset
                offset += 1
            elif kind == "evict":
                _, key, n = op
                doomed = model.times(key)[:n]
                store.evict(0, key, doomed)
                for t in doomed:
                    del model.entries[(key, t)]
                if doomed:
                    model.did(len(doomed), False, -1)
            elif kind == "send":
                await store.send_changes(0)
                model.handed_over()
            elif kind == "flush":
                await store.flush()
                model.flushed()
            else:
                keep_local = op[1]
                if kind == "restart":
                    await store.stop()
                    model.flushed()
                    expected, expected_applied = model.durable
                else:
                    # SIGKILL: no flush, no checkpoint, only a prefix of the held records out
                    # (the queued ones are lost); the store closed as a failed worker closes it
                    expected, expected_applied, cut = model.after_crash(op[2] % (model.held + 1))
                    await producer.deliver(cut)
                    producer.held.clear()
                    store.abandon()
                    await store.stop()
                local_was_clean = kind == "restart" or not model.local_dirty
                if not keep_local:
                    shutil.rmtree(store.partition_path(0))
                store = WindowStore(settings, JsonCodec(), producer)
                await store.start()
                restored = await store.restore(0)
                assert restored.applied_offset == expected_applied
                assert as_entries(restored) == expected
                assert restored.local_entries_reused == (keep_local and local_was_clean)
                if restored.local_entries_reused:  # after a crash, the tail delivered since
                    assert restored.changelog_records == (0 if kind == "restart" else cut)
                model.entries, model.applied = dict(expected), expected_applied
                model.flushed()
                # a copy rebuilt from the changelog alone gets its checkpoint at the next flush
                model.local_dirty = not restored.local_entries_reused and bool(expected)
                offset = model.applied + 1
            assert store.applied_offset(0) == model.applied
    finally:
        await store.stop()
        await producer.inner.stop()


@hsettings(max_examples=25)
@given(ops=st.lists(operation, max_size=25))
# a crash right after an event's upsert, before the tombstones of the entries it evicted
@example(ops=[("record", "a", 0, 1, 0), ("record", "a", 1, 1, 1), ("send",), ("crash", False, 2)])
# events queued and never handed over are lost with the crash; the skips after the handover
# are covered by the marker
@example(
    ops=[
        ("record", "a", 0, 1, 0),
        ("skip",),
        ("send",),
        ("record", "b", 1, 1, 0),
        ("crash", False, 9),
    ]
)
# a crash before the first flush after a restore from the changelog alone: no usable copy
@example(ops=[("record", "a", 0, 0, 0), ("restart", False), ("crash", True, 0)])
# local copy ahead of the changelog after a crash: events, or a sweep, written after the last
# flush; and a crash before they were written, which leaves the local copy reusable
@example(
    ops=[
        ("record", "a", 0, 1, 0),
        ("flush",),
        ("record", "b", 1, 1, 0),
        ("send",),
        ("crash", True, 0),
    ]
)
@example(
    ops=[("record", "a", 0, 1, 0), ("flush",), ("evict", "a", 1), ("send",), ("crash", True, 0)]
)
@example(ops=[("record", "a", 0, 1, 0), ("flush",), ("evict", "a", 1), ("crash", True, 0)])
# emit=batch: a record_many during the background backfill of a copy rebuilt from the changelog
# (the restored entry it overwrites must not shadow it once the backfill is ingested)
@example(ops=[("record", "a", 0, 1, 0), ("restart", False), ("many", [("a", 0, 2)]), ("send",)])
# emit=batch: a crash inside a record_many call's records, then its sweep lost with the crash
@example(
    ops=[
        ("many", [("a", 0, 1), ("b", 1, 1), ("a", 0, 2)]),
        ("send",),
        ("evict", "a", 1),
        ("crash", True, 2),
    ]
)
@example(
    ops=[
        ("skip",),
        ("flush",),
        ("skip",),
        ("send",),
        ("crash", True, 0),
        ("skip",),
        ("crash", True, 0),
    ]
)
def test_random_operations_survive_restarts_and_crashes(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path_factory: pytest.TempPathFactory, ops
) -> None:
    state_dir = tmp_path_factory.mktemp("state")
    settings = make_settings(kafka_bootstrap, embedded_profile, state_dir, partitions=1)
    asyncio.run(run_operations(settings, [*ops, ("restart", True), ("restart", False)]))


# --- batching, partitions, another worker's writes ---------------------------------------------


async def test_batched_changelog_restores_exactly(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path
) -> None:
    """Thousands of records sent back to back travel in multi-record batches (the embedded
    broker's ListOffsets trap); the restore from the changelog alone must see every one."""
    settings = make_settings(kafka_bootstrap, embedded_profile, tmp_path / "a")
    await create_changelog(settings)
    store, _ = await open_store(settings, 0, 1)
    expected: dict[int, dict[tuple[str, int], Any]] = {0: {}, 1: {}}
    for i in range(3000):
        p = i % 2
        key, t = f"k{i % 7}", i // 2
        evicted = [t - 40] if t >= 40 else []
        store.record(p, i // 2, key, t, [1, i], evicted)
        expected[p][(key, t)] = [1, i]
        for e in evicted:
            expected[p].pop((key, e), None)
    store.record_skipped(1, 1500)
    await store.stop()

    shutil.rmtree(tmp_path / "a")
    store, restored = await open_store(settings, 0, 1)
    await store.stop()
    assert restored[0].applied_offset == 1499
    assert restored[1].applied_offset == 1500
    for p in (0, 1):
        assert not restored[p].local_entries_reused
        assert as_entries(restored[p]) == expected[p]

    if embedded_profile:
        # Evidence that batches held several records: ListOffsets on this broker undercounts.
        consumer = AIOKafkaConsumer(**client_options(settings))
        await consumer.start()
        try:
            tp = TopicPartition(settings.changelog_topic, 0)
            end = (await consumer.end_offsets([tp]))[tp]
        finally:
            await consumer.stop()
        assert end < restored[0].changelog_records


def compacted(records: list[tuple[bytes, bytes | None]]) -> list[tuple[bytes, bytes]]:
    """What log compaction keeps of ``records`` once it has removed the tombstones too: the last
    record of each key, in the order of those records."""
    last: dict[bytes, bytes | None] = {}
    for key, value in records:
        last.pop(key, None)
        last[key] = value
    return [(key, value) for key, value in last.items() if value is not None]


async def test_the_compacted_changelog_holds_one_record_per_retained_entry(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path
) -> None:
    """Whatever the history, a compacted changelog keeps one record per retained entry plus the
    shape and the applied marker (O(retained entries)): every evicted entry gets a tombstone,
    on the ``emit=batch`` path (``record_many``, then ``evict`` per key) and the ``emit=event``
    path (``record`` with its evictions); and the compacted records alone restore the state."""
    settings = make_settings(kafka_bootstrap, embedded_profile, tmp_path / "a", partitions=1)
    await create_changelog(settings)
    store, _ = await open_store(settings, 0)
    expected: dict[tuple[str, int], Any] = {}
    keep = 12  # times per key kept: a sliding window over each key's last times

    def expire(key: str) -> list[int]:
        times = sorted(t for k, t in expected if k == key)
        doomed = times[: max(0, len(times) - keep)]
        for t in doomed:
            del expected[(key, t)]
        return doomed

    offset = 0
    for batch in range(25):  # emit=batch: 8 records per key per batch, then the evictions
        effects = []
        for j in range(32):
            effects.append((offset, f"k{j % 4}", batch * 8 + j // 4, [1, offset]))
            expected[(f"k{j % 4}", batch * 8 + j // 4)] = [1, offset]
            offset += 1
        store.record_many(0, effects)
        for key in ("k0", "k1", "k2", "k3"):
            store.evict(0, key, expire(key))
        await store.send_changes(0)
    for i in range(200):  # emit=event: each record with the evictions it causes
        key, t = f"k{i % 4}", 200 + i // 4
        expected[(key, t)] = [1, offset]
        store.record(0, offset, key, t, [1, offset], expire(key))
        offset += 1
    store.record_skipped(0, offset)
    await store.stop()

    history = [(r.key, r.value) for r in await read_changelog(settings)]
    kept = compacted(history)
    entries = {split_entry_id(key) for key, _ in kept if key not in (SHAPE_KEY, APPLIED_KEY)}
    assert entries == set(expected) and len(expected) == 4 * keep
    assert len(kept) == len(expected) + 2  # the shape and the applied marker
    assert len(history) > 20 * len(kept)

    copy = make_settings(kafka_bootstrap, embedded_profile, tmp_path / "b", partitions=1)
    await create_changelog(copy)
    await write_changelog(copy, kept)
    store, restored = await open_store(copy, 0)
    await store.stop()
    assert restored[0].applied_offset == offset
    assert as_entries(restored[0]) == expected


async def test_tail_written_by_another_worker_is_replayed_on_top_of_local(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path
) -> None:
    """Worker A checkpoints and releases; B (no local state) takes over and writes; A gets the
    partition back: its local copy plus the changelog tail equals B's state."""
    a = make_settings(kafka_bootstrap, embedded_profile, tmp_path / "a", partitions=1)
    b = dataclasses.replace(a, state_dir=tmp_path / "b")
    await create_changelog(a)
    store_a, _ = await open_store(a, 0)
    for i in range(50):
        store_a.record(0, i, "k", i, [1, i], [i - 10] if i >= 10 else [])
    await store_a.release(0)

    store_b, restored = await open_store(b, 0)
    assert restored[0].applied_offset == 49 and not restored[0].local_entries_reused
    for i in range(50, 80):
        store_b.record(0, i, "k", i, [1, i], [i - 10])
    store_b.evict(0, "k", [70, 71])
    store_b.record_skipped(0, 80)
    await store_b.release(0)
    b_state = (await store_b.restore(0)).windows
    await store_b.stop()

    back = await store_a.restore(0)
    await store_a.stop()
    assert back.local_entries_reused
    assert back.applied_offset == 80
    assert back.windows == b_state
    assert [t for t, _ in back.windows["k"]] == [t for t in range(70, 80) if t not in (70, 71)]


@pytest.mark.parametrize("chunk", [1, 20_000])
async def test_writes_during_the_background_backfill_survive_it(
    kafka_bootstrap: str,
    embedded_profile: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    chunk: int,
) -> None:
    """A copy rebuilt from the changelog alone is written after ``restore`` returns, while
    events update, evict and add entries (with ``chunk`` 1 the writes interleave with the SST
    build); the ingested entries must not shadow those writes: the copy a clean restart reuses
    equals the state."""
    monkeypatch.setattr(window_store, "_BACKFILL_CHUNK", chunk)
    settings = make_settings(kafka_bootstrap, embedded_profile, tmp_path / "a", partitions=1)
    await create_changelog(settings)
    store, _ = await open_store(settings, 0)
    expected = {}
    for i in range(60):
        store.record(0, i, f"k{i % 3}", i, [1, i])
        expected[(f"k{i % 3}", i)] = [1, i]
    await store.stop()
    shutil.rmtree(tmp_path / "a")

    store, restored = await open_store(settings, 0)
    assert not restored[0].local_entries_reused
    for i in range(60, 80):
        key = f"k{i % 3}"
        evicted = [i - 60] if i % 2 else []  # entries the backfill also writes
        store.record(0, i, key, i - 57, [2, i], evicted)  # updates a restored entry
        expected[(key, i - 57)] = [2, i]
        for t in evicted:
            expected.pop((key, t), None)
        await asyncio.sleep(0)
    store.evict(0, "k1", [61 - 57])
    expected.pop(("k1", 4), None)
    await store.stop()

    store, again = await open_store(settings, 0)
    await store.stop()
    assert again[0].local_entries_reused and again[0].changelog_records == 0
    assert again[0].applied_offset == 79
    assert as_entries(again[0]) == expected


async def test_marked_records_without_effect_are_not_read_again(
    kafka_bootstrap, embedded_profile, tmp_path: Path
) -> None:
    """``send_changes`` puts the applied offset of records without effect (late, bad input)
    on the changelog: another worker restoring the partition from the changelog (the
    first one never flushed or stopped: a crash) resumes after them."""
    a = make_settings(kafka_bootstrap, embedded_profile, tmp_path / "a", partitions=1)
    b = dataclasses.replace(a, state_dir=tmp_path / "b")
    await create_changelog(a)
    store_a, _ = await open_store(a, 0)
    try:
        for i in range(10):
            store_a.record(0, i, "k", i, [1, i])
        store_a.record_skipped(0, 10)
        store_a.record_skipped(0, 11)
        await store_a.send_changes(0)
        await store_a._producer.flush()  # delivered; store_a.flush() never ran
        store_b, restored = await open_store(b, 0)
        await store_b.stop()
    finally:
        await store_a.stop()
    assert restored[0].applied_offset == 11
    assert [t for t, _ in restored[0].windows["k"]] == list(range(10))


async def test_a_failed_backfill_leaves_no_checkpoint(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If writing the local copy after a changelog-only restore fails, the partition keeps
    working, ``flush`` and ``stop`` succeed, and the incomplete copy is never reused."""
    settings = make_settings(kafka_bootstrap, embedded_profile, tmp_path / "a", partitions=1)
    await create_changelog(settings)
    store, _ = await open_store(settings, 0)
    for i in range(10):
        store.record(0, i, "k", i, [1, i])
    await store.stop()
    shutil.rmtree(tmp_path / "a")

    class BrokenWriter:
        def __init__(self, **kwargs: Any) -> None:
            raise OSError("disk full")

    with monkeypatch.context() as patch:
        patch.setattr(window_store, "SstFileWriter", BrokenWriter)
        store, _ = await open_store(settings, 0)
        store.record(0, 10, "k", 10, [1, 10])
        await store.flush()
        await store.stop()

    store, again = await open_store(settings, 0)
    await store.stop()
    assert not again[0].local_entries_reused
    assert again[0].applied_offset == 10
    assert as_entries(again[0]) == {("k", i): [1, i] for i in range(11)}


async def test_local_writes_go_in_pieces_in_order_with_the_loops_turns_between(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pending local writes over the pending limit are written out in the background, in
    pieces of ``LOCAL_PIECE_OPS`` operations with the event loop's turns in between; a
    ``flush`` that comes meanwhile waits for them, so newer writes never land before older
    ones: a clean restart reads the local copy back exactly."""
    monkeypatch.setattr(window_store, "LOCAL_PENDING_LIMIT", 500)
    settings = make_settings(kafka_bootstrap, embedded_profile, tmp_path / "a", partitions=1)
    await create_changelog(settings)
    store, _ = await open_store(settings, 0)
    expected: dict[tuple[str, int], Any] = {}
    offset = 0

    def record(records: range, version: int) -> None:
        nonlocal offset
        for i in records:  # 2 local operations each
            key, t = f"k{i % 5}", i // 5
            store.record(0, offset, key, t, [version, i])
            expected[(key, t)] = [version, i]
            offset += 1

    record(range(1000), 1)  # over the pending limit: written out in about five pieces
    await store.send_changes(0)
    writing = store._open[0].writing
    assert writing is not None
    await asyncio.sleep(0)  # the write-out has written its first piece and paused
    record(range(950, 1000), 2)  # newer partials of the entries of its last piece
    flushing = asyncio.create_task(store.flush())
    turns = 0
    while not writing.done():
        turns += 1
        await asyncio.sleep(0)
    await flushing
    assert turns >= 1000 // window_store.LOCAL_PIECE_OPS - 1
    await store.stop()

    store, restored = await open_store(settings, 0)  # a clean restart: the local copy
    await store.stop()
    assert restored[0].local_entries_reused
    assert restored[0].applied_offset == offset - 1
    assert as_entries(restored[0]) == expected


async def test_redelivered_offset_is_rejected(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path
) -> None:
    settings = make_settings(kafka_bootstrap, embedded_profile, tmp_path, partitions=1)
    await create_changelog(settings)
    store, _ = await open_store(settings, 0)
    try:
        store.record(0, 5, "k", 1, [1, 1])
        with pytest.raises(ValueError, match="redelivered"):
            store.record(0, 5, "k", 2, [1, 1])
        with pytest.raises(ValueError, match="redelivered"):
            store.record_skipped(0, 3)
    finally:
        await store.stop()


async def test_standby_replica_follows_and_takes_over_with_a_short_tail(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path
) -> None:
    """B follows partition 0 while A writes it; B's takeover reuses its replica and replays
    only what arrived after its last chunk."""
    a = make_settings(kafka_bootstrap, embedded_profile, tmp_path / "a", partitions=2)
    b = dataclasses.replace(a, state_dir=tmp_path / "b")
    await create_changelog(a)
    store_a, _ = await open_store(a, 0)
    store_b, _ = await open_store(b, 1)
    try:
        await store_b.follow([0, 1])
        assert store_b.standby_partitions == {0}  # 1 is active on B
        for i in range(400):
            store_a.record(0, i, f"k{i % 3}", i, [1, i], [i - 30] if i >= 30 else [])
        await store_a.flush()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while store_b.standby_position(0) < 400 + 370 and loop.time() < deadline:
            await asyncio.sleep(0.05)
        store_a.evict(0, "k0", [399])
        store_a.record_skipped(0, 400)
        await store_a.release(0)
        expected = (await store_a.restore(0)).windows

        taken = await store_b.restore(0)
        assert store_b.standby_partitions == frozenset()
        assert taken.local_entries_reused
        # at most the sweep's tombstone and the applied marker, if the follower missed them
        assert taken.changelog_records <= 2
        assert taken.applied_offset == 400
        assert taken.windows == expected
    finally:
        await store_a.stop()
        await store_b.stop()


async def test_local_copy_of_a_longer_changelog_is_discarded(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path
) -> None:
    """A local copy whose checkpoint lies beyond the changelog's end (the topic was recreated,
    e.g. an embedded broker restarted) describes another history: the changelog wins."""
    old = make_settings(kafka_bootstrap, embedded_profile, tmp_path / "old", partitions=1)
    await create_changelog(old)
    store, _ = await open_store(old, 0)
    for i in range(20):
        store.record(0, i, "k", i, [1, i])
    await store.stop()

    new = dataclasses.replace(old, app_id=f"{old.app_id}-recreated")
    await create_changelog(new)
    store = WindowStore(new, JsonCodec(), KafkaChangelog(new))
    shutil.copytree(old.state_dir / old.app_id, new.state_dir / new.app_id)
    await store.start()
    try:
        restored = await store.restore(0)
    finally:
        await store.stop()
    assert not restored.local_entries_reused
    assert restored.applied_offset == -1 and restored.windows == {}


async def test_changelog_records_wait_for_the_outputs_barrier(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path
) -> None:
    """``send_changes`` hands no changelog record over before ``before_changelog`` returns
    (on every path: here the sweep's ``evict`` and a record); a failing barrier abandons the
    store: the records it held back are never sent, nor anything after them (no gap)."""
    settings = make_settings(kafka_bootstrap, embedded_profile, tmp_path, partitions=1)
    await create_changelog(settings)
    store, _ = await open_store(settings, 0)
    released = asyncio.Event()
    calls: list[str] = []

    async def outputs_delivered() -> None:
        calls.append("barrier")
        await released.wait()

    store.before_changelog = outputs_delivered
    try:
        store.record(0, 0, "k", 1, [1, 1])
        store.evict(0, "k", [1])
        sending = asyncio.ensure_future(store.send_changes(0))
        await asyncio.sleep(0.5)
        await store._producer.flush()
        assert calls == ["barrier"] and not sending.done()
        # only the shape record, written when the partition was opened
        assert [r.key for r in await read_changelog(settings)] == [SHAPE_KEY]
        released.set()
        await sending
        await store._producer.flush()
        assert len(await read_changelog(settings)) == 3  # + the upsert and the sweep's tombstone

        async def undeliverable() -> None:
            raise RuntimeError("an output was not acknowledged")

        store.before_changelog = undeliverable
        store.record(0, 1, "k", 2, [1, 2])
        with pytest.raises(RuntimeError, match="not acknowledged"):
            await store.send_changes(0)
        store.before_changelog = None
        store.record(0, 2, "k", 3, [1, 3])
        await store.send_changes(0)
        await store._producer.flush()
        assert len(await read_changelog(settings)) == 3
    finally:
        await store.stop()


async def write_changelog(settings: Settings, records: list[tuple[bytes, bytes | None]]) -> None:
    """Send ``records`` to partition 0 of the changelog, acknowledged, as one hand-over."""
    writer = KafkaChangelog(settings)
    await writer.start()
    try:
        await writer.send_records(settings.changelog_topic, 0, records)
        await writer.flush()
    finally:
        await writer.stop()


async def read_changelog(settings: Settings) -> list:
    async with ChangelogReader(settings) as reader:
        tp = TopicPartition(settings.changelog_topic, 0)
        return [r for batches in [b async for b in reader.read(tp, 0)] for b in batches for r in b]


# --- the state's shape --------------------------------------------------------------------------


@pytest.mark.parametrize("keep_local", [True, False])
async def test_state_of_other_settings_is_refused_from_local_copy_and_changelog(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path, keep_local: bool
) -> None:
    """A partition written with ``count,sum`` is refused, with what changed, by a store with
    the aggregations reordered or another window (a worker restarted with other settings, or
    a newcomer to the group: the changelog's shape record decides), from its local copy or
    from the changelog alone; the same settings restore it."""
    settings = dataclasses.replace(
        make_settings(kafka_bootstrap, embedded_profile, tmp_path, partitions=1),
        aggregations=("count", "sum"),
    )
    await create_changelog(settings)
    store, _ = await open_store(settings, 0)
    store.record(0, 0, "k", 5, [1, 5])
    await store.stop()
    reordered = dataclasses.replace(settings, aggregations=("sum", "count"))
    other_window = dataclasses.replace(settings, windows=settings.windows[:1])
    for changed, fragment in [
        (reordered, "aggregations changed from count,sum to sum,count"),
        (other_window, "windows changed from 1m=60000ms,5m=300000ms,1h=3600000ms to 1m=60000ms"),
    ]:
        if not keep_local:
            shutil.rmtree(tmp_path / settings.app_id, ignore_errors=True)
        store = WindowStore(changed, JsonCodec(), KafkaChangelog(changed))
        await store.start()
        try:
            with pytest.raises(StateMismatch, match=fragment):
                await store.restore(0)
            assert store.partitions == frozenset()
        finally:
            await store.stop()
    store, restored = await open_store(settings, 0)
    await store.stop()
    assert as_entries(restored[0]) == {("k", 5): [1, 5]}


@pytest.mark.parametrize("marshalled", [False, True])
async def test_record_many_writes_what_record_writes(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path, marshalled: bool
) -> None:
    """``record_many`` queues the changelog records and the pending local writes ``record``
    queues for the same effects (some carrying evicted times), and both stores restore the
    same state, from the changelog and from their local copies. ``marshalled``: the worker's
    codec, so ``record_many`` writes through the native core where it is installed (else JSON,
    the Python path)."""
    codec = MarshalStateCodec(monoid("sum")) if marshalled else None
    effects: list[tuple] = []
    for offset in range(900):
        effect = (offset, f"k{offset % 7}", offset // 3, (1, offset) if codec else [1, offset])
        effects.append((*effect, [offset // 3 - 9]) if offset % 5 == 0 else effect)
    expected: dict[tuple[str, int], Any] = {}
    for _, key, t, partial, *evicted in effects:
        expected[(key, t)] = partial
        for gone in evicted[0] if evicted else ():
            expected.pop((key, gone), None)
    one = make_settings(kafka_bootstrap, embedded_profile, tmp_path / "one", partitions=1)
    many = make_settings(kafka_bootstrap, embedded_profile, tmp_path / "many", partitions=1)
    await create_changelog(one)
    await create_changelog(many)
    store_one, _ = await open_store(one, 0, codec=codec)
    for effect in effects:
        store_one.record(0, *effect)
    store_one_queued = list(store_one._open[0].queued)
    store_one_pending = store_one._open[0].pending.items()
    await store_one.stop()
    store_many, _ = await open_store(many, 0, codec=codec)
    assert (store_many._native_writes is not None) == (marshalled and native() is not None)
    store_many.record_many(0, effects[:500])
    store_many.record_many(0, effects[500:])
    queued = list(store_many._open[0].queued)
    assert queued == store_one_queued
    assert store_many._open[0].pending.items() == store_one_pending
    await store_many.stop()
    for settings in (one, many):  # the changelog twice over, then each local copy
        store, restored = await open_store(settings, 0, codec=codec)
        await store.stop()
        assert restored[0].local_entries_reused and restored[0].applied_offset == 899
        assert as_entries(restored[0]) == expected


@pytest.mark.skipif(native() is None, reason="the native core is not installed")
async def test_native_and_python_restores_give_the_same_state(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The native restore (record batches replayed in one call each, partials decoded natively)
    and the Python one (``PyEntries``) restore the same windows and applied offset from the
    same changelog (many producer batches, evictions, a sweep, skipped records), from the
    changelog alone and from the local copy."""
    settings = dataclasses.replace(
        make_settings(kafka_bootstrap, embedded_profile, tmp_path, partitions=1),
        aggregations=("sum", "count", "max"),
    )
    codec = MarshalStateCodec(WindowConfig.from_settings(settings).composed)
    await create_changelog(settings)
    store = WindowStore(settings, codec, KafkaChangelog(settings))
    await store.start()
    await store.restore(0)
    for offset in range(3000):
        key, t = f"k{offset % 7}", offset // 7
        evicted = [t - 50] if offset % 3 == 0 and t >= 50 else []
        if offset % 11 == 0:
            store.record_skipped(0, offset)
        else:
            store.record(
                0, offset, key, t, (float(offset), 1, -0.0 if offset % 2 else 2**40), evicted
            )
        if offset % 500 == 499:
            await store.send_changes(0)
    store.evict(0, "k3", range(60, 80))
    await store.stop()

    async def restored(python: bool, keep_local: bool) -> RestoredPartition:
        if not keep_local:
            shutil.rmtree(tmp_path / settings.app_id, ignore_errors=True)
        with monkeypatch.context() as patch:
            if python:
                patch.setattr(window_store, "restored_entries", PyEntries)
            store = WindowStore(settings, codec, KafkaChangelog(settings))
            await store.start()
            try:
                return await store.restore(0)
            finally:
                await store.stop()

    for keep_local in (False, True):
        by_native = await restored(False, keep_local)
        by_python = await restored(True, keep_local)
        assert by_native.local_entries_reused == by_python.local_entries_reused == keep_local
        assert by_native.applied_offset == by_python.applied_offset == 2999
        assert by_native.windows == by_python.windows
        assert list(by_native.windows) == list(by_python.windows) == [f"k{i}" for i in range(7)]
        assert not [t for t, _ in by_native.windows["k3"] if 60 <= t < 80]  # swept
