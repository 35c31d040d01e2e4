"""Durable, changelog-backed contents of the per-key windows of the input partitions a worker owns.

The pipeline keeps one in-memory FiBA per key; that FiBA is only an *index*, rebuilt with an
O(n) bulk build from what ``WindowStore.restore`` returns. The durable contents are *entries*
``(key, time) -> partial`` (times are FiBA times: event ms, or pane starts with ``resolution``),
one local RocksDB (rocksdict) per input partition under
``<state_dir>/<app_id>/window-store/partition-<i>``, mirrored to partition ``i`` of the changelog
topic ``<app_id>-windows-changelog`` (record format: ``stores.changelog``).

API (all methods of one partition must be called from one task at a time, as a Faust agent
does; different partitions may interleave):

- ``WindowStore(settings, codec, producer=None)``; ``await start()``; ``await stop()``.
- ``await restore(partition) -> RestoredPartition(partition, applied_offset, windows)``:
  ``windows[key]`` is that key's ``[(time, partial), ...]`` sorted by time; ``applied_offset`` is
  the last input offset whose effect is in the state (-1: none).
- ``await record(partition, offset, key, time, partial, evicted_times=())``: the effect of ONE
  accepted input record. Local: one RocksDB WriteBatch (upsert, deletions, applied offset).
  Changelog: one upsert record carrying the deletions, plus one tombstone per evicted entry
  (for compaction); O(1 + evicted) per event, amortized O(1) since each entry is evicted once.
  ``offset`` must exceed ``applied_offset(partition)`` (the pipeline skips redeliveries).
- ``record_skipped(partition, offset)``: an input record with no state effect; O(1), no
  changelog record (one applied marker per partition is sent at the next ``flush``).
- ``await evict(partition, key, times)``: the idle-key sweep; one tombstone per entry.
- ``await flush()``: every changelog record so far acknowledged, local checkpoints written.
- ``await release(partition)``: partition revoked: flush, checkpoint, close its RocksDB.
- ``applied_offset(partition)``; ``partitions`` (the open ones).
- ``await follow(partitions)``: standby replicas (``standby_replicas``): tail these partitions'
  changelogs into their local copies in the background, so that taking one over (``restore``)
  replays only a short tail. With a ``FaustChangelogProducer`` and ``standby_replicas`` > 0 the
  store follows the standbys of Faust's assignor by itself (``faust_standby_partitions``).

Design choice: an own changelog, not Faust tables. Faust's table recovery reads changelogs to
the end offset given by ListOffsets, which the embedded broker gets wrong for multi-record
batches; Faust tables are exact there only with single-record producer batches (~2.6k msg/s),
below the worker's ~8k events/s target with one changelog record per event. This store produces
with normal batching and reads changelogs to the high watermark of Fetch responses, which is
correct on every broker, so one code path serves the embedded broker and a real Kafka.

Exactness (at-least-once input, SIGKILL at any instant, with or without the data dir). Facts:

1. Each event's whole effect is ONE changelog upsert record (deletions inside it), appended in
   input-offset order per partition (aiokafka keeps one in-flight batch per partition, so
   records land in send order). Replaying any prefix of a changelog partition therefore yields
   the exact state after some prefix of that partition's events; the applied offset it yields is
   the largest input offset seen (upserts carry theirs; markers cover skipped records).
2. Offsets are committed only after the changelog records of the committed events are
   acknowledged: pass the Faust app's producer (``FaustChangelogProducer``) and Faust's commit
   (which awaits ``app.producer.flush()`` before committing) guarantees it, or call
   ``flush()`` before every commit. So the changelog is never behind the committed offset.
3. Replaying records on top of a state that already holds some of them is harmless: upserts
   overwrite, deletes are idempotent; the final value of every entry is its last record.
4. A sweep (``evict``) is one tombstone per entry, so a prefix may hold part of a sweep. Swept
   entries are older than stream time - R, outside every window, so this changes no aggregate;
   the pipeline's restore sweeps them again.

Recovery treats the local RocksDB as a *cache of a changelog prefix*: a checkpoint
``(changelog offset C, applied offset A)`` is written when every record of the events up to
``A`` is acknowledged and lies below ``C`` (``flush``, ``release``, ``stop``, end of
``restore``). On restore, local state is used only if its applied offset still equals ``A``
and no sweep happened since (nothing was written after the checkpoint) and ``C`` does not
exceed the changelog's end; then the changelog tail from ``C`` is replayed on top (fact 3),
which also picks up what another worker wrote while it owned the partition. Otherwise (SIGKILL
after the checkpoint: local may be AHEAD of the changelog with effects nobody else can see; no
data dir; changelog recreated) the local copy is discarded and rebuilt from the changelog
alone. Either way the restored state is the replay of a changelog prefix (fact 1) holding every
event below the committed offset that had a state effect (fact 2), and the applied offset is
the last input offset it covers. The consumer resumes at the committed offset; the pipeline
skips offsets <= applied (events the changelog got ahead of the commit with: nothing counted
twice) and processes the rest (nothing lost). A record below the committed offset whose effect
is missing can only be one without effect (a skipped record whose marker was not sent yet).

Replays write RocksDB without its WAL (a bulk load) and flush the memtable before writing the
checkpoint, so a crash during a replay leaves either no checkpoint or the previous one.

Complexity: ``record`` O(1 + evicted) RocksDB writes and changelog records; ``restore`` O(local
entries + changelog records replayed), plus decoding every restored partial once, which
dominates: ``bench/worker_restore.py`` (10^6 entries, 1000 keys, default aggregations, on a
shared 2-core machine, load average 5-10) measured a changelog-only restore in 24 s wall /
12.6 s CPU with ``MarshalStateCodec`` and 78 s / 18.7 s with a batch-decoding JSON codec; a
restore from the local copy in 10 s / 6.2 s. Memory per retained entry: about 350 B for the
restored ``windows`` lists (marshal-decoded partials of five aggregations), 130 B for the FiBA
index built from them (bench/RESULTS.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import marshal
import shutil
import struct
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from aiokafka import TopicPartition
from aiokafka.errors import OffsetOutOfRangeError
from rocksdict import Options, Rdict, WriteBatch, WriteOptions

from app.settings import Settings
from stores.changelog import (
    APPLIED_KEY,
    UPSERT_HEADER,
    AiokafkaChangelogProducer,
    ChangelogProducer,
    ChangelogTruncated,
    FaustChangelogProducer,
    consumer_for,
    decode_offset,
    encode_offset,
    encode_upsert,
    entry_id_of,
    key_prefix,
    read_to_high_watermark,
)

logger = logging.getLogger(__name__)

_META_APPLIED = b"\x00applied"
"""Local key of the applied input offset (8 bytes: shorter than any 12+-byte entry id)."""
_META_CHECKPOINT = b"\x00ckpt"
"""Local key of the checkpoint: changelog offset C and applied offset A (``>qq``)."""
_CHECKPOINT = struct.Struct(">qq")
_OFFSET = struct.Struct(">q")
_TIME_BIAS = 1 << 63
_MIN_ENTRY_ID = 12
_NO_WAL = WriteOptions()
_NO_WAL.disable_wal = True


class PartialCodec(Protocol):
    """Serialisation of the composed monoid's partials (e.g. their JSON state round trip).

    A codec may also offer ``decode_many(list[bytes]) -> list[partial]``, used by ``restore``.
    """

    def encode(self, partial: Any) -> bytes: ...

    def decode(self, data: bytes) -> Any: ...


class MarshalStateCodec:
    """A fast ``PartialCodec``: ``marshal`` of the monoid's state (``to_state``/``from_state``).

    Decoding every partial dominates a restore; a JSON state parses its floats one by one
    (decoding costs about 2x what ``marshal`` costs in ``bench/worker_restore.py``).
    ``marshal`` round-trips ints, floats (exactly), str, bytes, tuples, lists and dicts, and
    never executes code (unlike pickle). Its data format (version 4) is stable since Python 3.4.
    """

    def __init__(self, monoid: Any) -> None:
        self._to_state = monoid.to_state
        self._from_state = monoid.from_state

    def encode(self, partial: Any) -> bytes:
        return marshal.dumps(self._to_state(partial), 4)

    def decode(self, data: bytes) -> Any:
        return self._from_state(marshal.loads(data))

    def decode_many(self, data: list[bytes]) -> list[Any]:
        from_state, loads = self._from_state, marshal.loads
        return [from_state(loads(d)) for d in data]


@dataclass(frozen=True, slots=True)
class RestoredPartition:
    """The state of one input partition after ``restore``.

    ``windows[key]`` lists that key's ``(time, partial)`` sorted by time; ``applied_offset`` is
    the last input offset whose effect is included (-1: none). ``local_entries_reused`` is
    False when the local copy was absent or discarded and the state came from the changelog
    alone; ``changelog_records`` counts the changelog records replayed.
    """

    partition: int
    applied_offset: int
    windows: dict[str, list[tuple[int, Any]]]
    local_entries_reused: bool = False
    changelog_records: int = 0


@dataclass(slots=True)
class _Standby:
    """A followed partition: local copy == changelog records below ``position``."""

    db: Rdict
    position: int
    applied: int


@dataclass(slots=True)
class _OpenPartition:
    """Bookkeeping of one open partition."""

    db: Rdict
    applied: int
    sent_applied: int
    """Largest applied offset whose changelog records (or marker) were all handed to the
    producer."""
    checkpoint_position: int
    """Changelog offset below which every record of the events up to ``sent_applied`` lies,
    as far as known (the restore's end, then the last delivery's offset + 1)."""
    last_delivery: Awaitable[Any] | None = None
    evictions: int = 0
    """Number of ``evict`` calls: one after a flush's snapshot withholds its checkpoint."""


class WindowStore:
    """Durable per-key window contents of the input partitions this worker owns; see module doc.

    ``producer``: ``FaustChangelogProducer(app.producer)`` inside the worker (Faust's commit then
    flushes the changelog first), any ``ChangelogProducer``, or None: an own aiokafka producer
    (then call ``flush()`` before committing input offsets).
    """

    def __init__(
        self, settings: Settings, codec: PartialCodec, producer: ChangelogProducer | None = None
    ) -> None:
        self.settings = settings
        self.codec = codec
        self.topic = settings.changelog_topic
        self.root = Path(settings.state_dir) / settings.app_id / "window-store"
        self._own_producer: AiokafkaChangelogProducer | None = None
        if producer is None:
            self._own_producer = AiokafkaChangelogProducer(settings)
            producer = self._own_producer
        self._producer: ChangelogProducer = producer
        self._open: dict[int, _OpenPartition] = {}
        self._standbys: dict[int, _Standby] = {}
        self._wanted_standbys: set[int] = set()
        self._follower: asyncio.Task[None] | None = None
        self._follow_lock = asyncio.Lock()
        self._restoring: set[int] = set()
        if settings.standby_replicas > 0 and isinstance(producer, FaustChangelogProducer):
            producer.app.on_partitions_assigned.connect(self._follow_faust_standbys)

    async def _follow_faust_standbys(self, sender: Any, assigned: Any, **kwargs: Any) -> None:
        """``on_partitions_assigned`` receiver: follow the standbys Faust assigned us."""
        await self.follow(faust_standby_partitions(self._producer.app, self.settings.input_topic))

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the own producer (if any) and create the state directory."""
        self.root.mkdir(parents=True, exist_ok=True)
        if self._own_producer is not None:
            await self._own_producer.start()

    async def stop(self) -> None:
        """Stop following; flush, checkpoint and close every open partition; stop the own
        producer."""
        async with self._follow_lock:
            await self._stop_follower()
            for standby in self._standbys.values():
                standby.db.close()
            self._standbys.clear()
        try:
            await self.flush()
        finally:
            for partition in list(self._open):
                self._close(partition)
            if self._own_producer is not None:
                await self._own_producer.stop()

    @property
    def partitions(self) -> frozenset[int]:
        """The partitions restored and not released."""
        return frozenset(self._open)

    def partition_path(self, partition: int) -> Path:
        """Directory of the local RocksDB of ``partition``."""
        return self.root / f"partition-{partition}"

    @property
    def standby_partitions(self) -> frozenset[int]:
        """The partitions followed as standby replicas."""
        return frozenset(self._standbys)

    def standby_position(self, partition: int) -> int:
        """Changelog offset up to which the standby replica of ``partition`` is caught up."""
        return self._standbys[partition].position

    def applied_offset(self, partition: int) -> int:
        """Last input offset of ``partition`` whose effect is in the state (-1: none)."""
        return self._open[partition].applied

    # --- restore / release -----------------------------------------------------------------

    async def restore(self, partition: int) -> RestoredPartition:
        """Open ``partition``: reuse the local copy if it is a clean changelog prefix, replay the
        changelog tail to the Fetch high watermark (from 0 without a usable local copy), and
        return the state. See the module doc for the argument."""
        if partition in self._open or partition in self._restoring:
            raise ValueError(f"partition {partition} is already open")
        self._restoring.add(partition)
        try:
            if partition in self._standbys:
                await self.follow(self._wanted_standbys - {partition})
            return await self._restore(partition)
        finally:
            self._restoring.discard(partition)

    async def _restore(self, partition: int) -> RestoredPartition:
        path = self.partition_path(partition)
        db, start, applied = self._open_local(path)
        reused = start is not None
        tp = TopicPartition(self.topic, partition)
        consumer = consumer_for(self.settings)
        await consumer.start()
        try:
            consumer.assign([tp])
            try:
                applied, replayed = await self._replay(consumer, tp, db, start or 0, applied)
            except ChangelogTruncated:
                # The changelog is shorter than the checkpoint says: it was recreated. The
                # changelog is the truth; the local copy describes another history.
                db.close()
                Rdict.destroy(str(path))
                db, reused = self._fresh_local(path), False
                applied, replayed = await self._replay(consumer, tp, db, 0, -1)
            position = await consumer.position(tp)
        finally:
            await consumer.stop()
        if replayed:
            db.flush(True)  # the replay skipped the WAL: make it durable before the checkpoint
        batch = WriteBatch(raw_mode=True)
        batch.put(_META_APPLIED, _OFFSET.pack(applied))
        batch.put(_META_CHECKPOINT, _CHECKPOINT.pack(position, applied))
        db.write(batch)
        self._open[partition] = _OpenPartition(db, applied, applied, position)
        logger.info(
            "window store partition %d: local copy %s, %d changelog records replayed, "
            "applied offset %d",
            partition,
            "reused" if reused else "rebuilt from the changelog",
            replayed,
            applied,
        )
        return RestoredPartition(partition, applied, self._windows(db), reused, replayed)

    def _windows(self, db: Rdict) -> dict[str, list[tuple[int, Any]]]:
        """``_build_windows`` with the cyclic garbage collector paused: it would rescan the
        growing heap of new tuples again and again (10-25% of the time at 10^6 entries). The
        build is synchronous, so no other code runs meanwhile."""
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._build_windows(db)
        finally:
            if was_enabled:
                gc.enable()

    async def release(self, partition: int) -> None:
        """Partition revoked: make its changelog durable, checkpoint, close its RocksDB."""
        if partition not in self._open:
            return
        try:
            await self.flush()
        finally:
            self._close(partition)
        if partition in self._wanted_standbys:
            await self.follow(self._wanted_standbys)

    # --- standby replicas ------------------------------------------------------------------

    async def follow(self, partitions: Iterable[int]) -> None:
        """Keep standby replicas of ``partitions`` (minus the open ones; replaces the previous
        set): a background task tails their changelog partitions into their local RocksDB,
        checkpointing with every chunk, so a later ``restore`` replays only the short tail.
        Replicas no longer followed keep their last checkpoint on disk; an open partition in
        ``partitions`` is followed once it is released.

        With ``standby_replicas`` > 0 and a ``FaustChangelogProducer``, the store calls this
        itself on every Faust assignment with ``faust_standby_partitions``."""
        async with self._follow_lock:
            self._wanted_standbys = set(partitions)
            wanted = self._wanted_standbys - set(self._open) - self._restoring
            if wanted == set(self._standbys) and (self._follower is not None or not wanted):
                return
            await self._stop_follower()
            for partition in set(self._standbys) - wanted:
                self._standbys.pop(partition).db.close()
            for partition in sorted(wanted - set(self._standbys)):
                db, start, applied = self._open_local(self.partition_path(partition))
                self._standbys[partition] = _Standby(db, start or 0, applied)
            if self._standbys:
                self._follower = asyncio.create_task(self._follow_changelog(), name="standby")

    async def _stop_follower(self) -> None:
        follower, self._follower = self._follower, None
        if follower is not None:
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower

    async def _follow_changelog(self) -> None:
        """Tail the followed partitions until cancelled. A partition whose changelog ends
        before the replica's position (recreated topic) is rebuilt from offset 0."""
        consumer = consumer_for(self.settings, fetch_max_wait_ms=500)
        await consumer.start()
        try:
            tps = {TopicPartition(self.topic, p): p for p in self._standbys}
            consumer.assign(list(tps))
            for tp, partition in tps.items():
                consumer.seek(tp, self._standbys[partition].position)
            while True:
                try:
                    batches = await consumer.getmany(timeout_ms=1000, max_records=50_000)
                except OffsetOutOfRangeError as exc:
                    for tp in exc.args[0] if exc.args else tps:
                        self._reset_standby(tps[tp])
                        consumer.seek(tp, 0)
                    continue
                for tp, records in batches.items():
                    standby = self._standbys.get(tps[tp])
                    if standby is None or not records:
                        continue
                    batch = WriteBatch(raw_mode=True)
                    standby.applied = apply_changelog_records(batch, records, standby.applied)
                    standby.position = records[-1].offset + 1
                    batch.put(_META_APPLIED, _OFFSET.pack(standby.applied))
                    batch.put(_META_CHECKPOINT, _CHECKPOINT.pack(standby.position, standby.applied))
                    standby.db.write(batch)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("standby replica follower of %s stopped", sorted(self._standbys))
        finally:
            await consumer.stop()

    def _reset_standby(self, partition: int) -> None:
        standby = self._standbys[partition]
        standby.db.close()
        path = self.partition_path(partition)
        Rdict.destroy(str(path))
        self._standbys[partition] = _Standby(self._fresh_local(path), 0, -1)

    # --- writes ----------------------------------------------------------------------------

    async def record(
        self,
        partition: int,
        offset: int,
        key: str,
        time: int,
        partial: Any,
        evicted_times: Iterable[int] = (),
    ) -> None:
        """The effect of the accepted input record at ``offset``: ``key``'s entry at ``time``
        is now ``partial`` (the new combined partial there) and its entries at
        ``evicted_times`` (which must not contain ``time``) are gone. O(1 + evicted)."""
        state = self._open[partition]
        if offset <= state.applied:
            raise ValueError(
                f"offset {offset} of partition {partition} is not after the applied offset "
                f"{state.applied}: a redelivered record must be skipped"
            )
        prefix = key_prefix(key)
        eid = entry_id_of(prefix, time)
        data = self.codec.encode(partial)
        evicted = list(evicted_times)
        batch = WriteBatch(raw_mode=True)
        batch.put(eid, _OFFSET.pack(offset) + data)
        for t in evicted:
            batch.delete(entry_id_of(prefix, t))
        batch.put(_META_APPLIED, _OFFSET.pack(offset))
        state.db.write(batch)
        state.applied = offset
        send = self._producer.send
        delivery = await send(self.topic, partition, eid, encode_upsert(offset, evicted, data))
        for t in evicted:
            delivery = await send(self.topic, partition, entry_id_of(prefix, t), None)
        state.last_delivery = delivery
        state.sent_applied = offset

    def record_skipped(self, partition: int, offset: int) -> None:
        """The input record at ``offset`` has no state effect (late, bad input). O(1)."""
        state = self._open[partition]
        if offset <= state.applied:
            raise ValueError(
                f"offset {offset} of partition {partition} is not after the applied offset "
                f"{state.applied}: a redelivered record must be skipped"
            )
        state.db.put(_META_APPLIED, _OFFSET.pack(offset))
        state.applied = offset

    async def evict(self, partition: int, key: str, times: Iterable[int]) -> None:
        """Delete ``key``'s entries at ``times`` (idle-key sweep). O(len(times)).

        The local checkpoint is removed in the same WriteBatch (the next ``flush`` writes it
        again): local deletions whose tombstones may not have reached the changelog make the
        local copy unusable after a crash."""
        state = self._open[partition]
        prefix = key_prefix(key)
        eids = [entry_id_of(prefix, t) for t in times]
        if not eids:
            return
        batch = WriteBatch(raw_mode=True)
        for eid in eids:
            batch.delete(eid)
        batch.delete(_META_CHECKPOINT)
        state.db.write(batch)
        state.evictions += 1
        for eid in eids:
            state.last_delivery = await self._producer.send(self.topic, partition, eid, None)

    async def flush(self) -> None:
        """Hand pending applied markers to the producer, wait until every changelog record sent
        so far is acknowledged, then write each open partition's local checkpoint."""
        snapshot: dict[int, tuple[_OpenPartition, Awaitable[Any] | None, int, int]] = {}
        for partition, state in self._open.items():
            if state.applied > state.sent_applied:
                applied = state.applied
                state.last_delivery = await self._producer.send(
                    self.topic, partition, APPLIED_KEY, encode_offset(applied)
                )
                state.sent_applied = applied
            snapshot[partition] = (state, state.last_delivery, state.sent_applied, state.evictions)
        await self._producer.flush()
        for partition, (state, delivery, sent_applied, evictions) in snapshot.items():
            if self._open.get(partition) is not state or state.evictions != evictions:
                continue
            if delivery is not None:
                metadata = await delivery
                state.checkpoint_position = max(state.checkpoint_position, metadata.offset + 1)
            state.db.put(
                _META_CHECKPOINT, _CHECKPOINT.pack(state.checkpoint_position, sent_applied)
            )

    # --- internals -------------------------------------------------------------------------

    def _close(self, partition: int) -> None:
        state = self._open.pop(partition)
        state.db.close()

    @staticmethod
    def _fresh_local(path: Path) -> Rdict:
        path.parent.mkdir(parents=True, exist_ok=True)
        return Rdict(str(path), options=Options(raw_mode=True))

    def _open_local(self, path: Path) -> tuple[Rdict, int | None, int]:
        """Open the local copy: ``(db, checkpoint position or None if unusable, applied)``.

        An unusable copy (no checkpoint, or written to after it) is destroyed first.
        """
        if path.exists():
            db = Rdict(str(path), options=Options(raw_mode=True))
            checkpoint = db.get(_META_CHECKPOINT)
            applied_raw = db.get(_META_APPLIED)
            if checkpoint is not None and applied_raw is not None:
                position, applied = _CHECKPOINT.unpack(checkpoint)
                if decode_offset(applied_raw) == applied:
                    return db, position, applied
            db.close()
            Rdict.destroy(str(path))
            shutil.rmtree(path, ignore_errors=True)
        return self._fresh_local(path), None, -1

    async def _replay(
        self, consumer: Any, tp: TopicPartition, db: Rdict, start: int, applied: int
    ) -> tuple[int, int]:
        """Apply the changelog records of ``tp`` from ``start`` to the high watermark to ``db``;
        return ``(applied offset, records replayed)``. Entry writes only: the caller writes the
        applied offset and checkpoint afterwards, so an interrupted replay leaves either no
        checkpoint (fresh copy) or the old one, from which a replay is again exact (fact 3).
        The writes skip the WAL (bulk load); the caller flushes before checkpointing."""
        replayed = 0
        async for records in read_to_high_watermark(consumer, tp, start):
            batch = WriteBatch(raw_mode=True)
            applied = apply_changelog_records(batch, records, applied)
            db.write(batch, _NO_WAL)
            replayed += len(records)
        return applied, replayed

    def _build_windows(self, db: Rdict) -> dict[str, list[tuple[int, Any]]]:
        """Every entry of ``db`` grouped by key, each key's list in time order (RocksDB key
        order). O(entries) plus decoding every partial once, in one ``decode_many`` call when
        the codec has it (a batch decode saves the per-call overhead of a JSON parser)."""
        starts: list[tuple[str, int]] = []
        times: list[int] = []
        data: list[bytes] = []
        current_prefix = b""
        from_bytes = int.from_bytes
        for eid, value in db.items():
            if len(eid) < _MIN_ENTRY_ID:
                continue
            prefix = eid[:-8]
            if prefix != current_prefix:
                current_prefix = prefix
                starts.append((prefix[4:].decode(), len(times)))
            times.append(from_bytes(eid[-8:]) - _TIME_BIAS)
            data.append(value[8:])
        decode_many = getattr(self.codec, "decode_many", None)
        if decode_many is not None:
            partials = decode_many(data)
        else:
            decode = self.codec.decode
            partials = [decode(d) for d in data]
        ends = [start for _, start in starts[1:]] + [len(times)] if starts else []
        return {
            key: list(zip(times[start:end], partials[start:end], strict=True))
            for (key, start), end in zip(starts, ends, strict=True)
        }


def apply_changelog_records(batch: WriteBatch, records: Iterable[Any], applied: int) -> int:
    """Add the local writes replaying changelog ``records`` (in order) to ``batch``; return the
    applied offset after them, starting from ``applied``. O(records + deleted times)."""
    unpack_header = UPSERT_HEADER.unpack_from
    header_size = UPSERT_HEADER.size
    for record in records:
        key, value = record.key, record.value
        if key == APPLIED_KEY:
            applied = max(applied, decode_offset(value))
        elif value is None:
            batch.delete(key)
        else:
            # the upsert value minus its deleted times is the local value (offset + partial)
            offset, n_deleted = unpack_header(value)
            end = header_size + 8 * n_deleted
            if n_deleted:
                prefix = key[:-8]
                for i in range(header_size, end, 8):
                    batch.delete(prefix + value[i : i + 8])
            batch.put(key, value[:8] + value[end:])
            if offset > applied:
                applied = offset
    return applied


def faust_standby_partitions(app: Any, topic: str) -> set[int]:
    """The partitions of ``topic`` that Faust's assignor made this worker a standby for.

    Faust's ``PartitionAssignor`` computes standbys (``table_standby_replicas`` of them, on
    other members than the active, preferring to promote a standby to active on takeover) for
    every co-partitioned topic group, tables or not; only table changelogs get them as Kafka
    assignments. For the input topic they name the partitions whose window store this worker
    should ``follow``. Read it in ``on_partitions_assigned``.
    """
    return {tp.partition for tp in app.assignor.assigned_standbys() if tp.topic == topic}
