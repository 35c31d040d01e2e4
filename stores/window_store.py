"""Durable, changelog-backed contents of the per-key windows of the input partitions a worker owns.

Entries ``(key, time) -> partial`` live in one local RocksDB per input partition
(``<state_dir>/<app_id>/window-store/partition-<i>``), mirrored to partition ``i`` of the
compacted changelog ``<app_id>-windows-changelog`` (format: ``stores.changelog``), with the
partition's applied input offset stored in the same records. The in-memory FiBAs are only an
index, rebuilt from ``restore`` in O(n). ``record`` queues the effect of ONE accepted input
record (one upsert carrying its evictions, plus a tombstone per evicted entry): O(1 + evicted),
amortized O(1); its local writes are coalesced per entry in memory and written out at
checkpoints or past a bound; ``send_changes`` hands the changelog records over as whole record
batches once the owner's outputs barrier returned; ``restore`` replays a local
copy (if its checkpoint still holds) plus the changelog tail, or the changelog alone: the state
is always the replay of a changelog prefix, so the worker resumes at applied + 1 with nothing
lost or counted twice, after a SIGKILL at any instant, with or without the data dir. Methods of
one partition run from one task at a time. Design, proof and restore path:
docs/design/window-store.md; figures: docs/benchmarks.md ("Restore").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import marshal
import shutil
import struct
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from aiokafka import TopicPartition
from aiokafka.errors import OffsetOutOfRangeError
from rocksdict import (
    IngestExternalFileOptions,
    Options,
    Rdict,
    SstFileWriter,
    WriteBatch,
    WriteOptions,
)

import stores
from stores.changelog import (
    APPLIED_KEY,
    SHAPE_KEY,
    UPSERT_HEADER,
    ChangelogLink,
    ChangelogReading,
    ChangelogTruncated,
    decode_offset,
    encode_offset,
    encode_upsert,
    entry_id_of,
    key_prefix,
    replay_changelog,
)
from stores.gc_pause import paused_gc
from stores.pending_writes import PyPendingWrites, forget
from stores.restored_entries import (
    MARSHAL_FORMAT,
    RestoredEntries,
    replay_batches,
    restored_entries,
)
from stores.state_shape import ShapeSettings, StateMismatch, StateShape

logger = logging.getLogger(__name__)

_META_APPLIED = b"\x00applied"
"""Local key of the applied input offset (8 bytes: shorter than any 12+-byte entry id)."""
_META_CHECKPOINT = b"\x00ckpt:2"
"""Local key of the checkpoint: changelog offset C and applied offset A (``>qq``). The suffix
is the local format version (2: values are bare partials): a copy of another version has no
checkpoint under this key, so it is discarded and rebuilt from the changelog."""
_CHECKPOINT = struct.Struct(">qq")
_OFFSET = struct.Struct(">q")
_NO_WAL = WriteOptions()
_NO_WAL.disable_wal = True
LOCAL_PIECE_OPS = 192
"""Operations per piece of a local write-out: one RocksDB WriteBatch each, about a quarter of
a millisecond of writing, the event loop getting a turn between two."""
LOCAL_PENDING_LIMIT = 1 << 18
"""Entries whose latest local operation the store holds in memory (``pending``), over all its
open partitions, before a ``send_changes`` starts writing a partition's out in the background
(each open partition may hold its share; twice it while that write-out is still running makes
the next ``send_changes`` wait for it): with the native writes about 40 bytes each plus the
partial's bytes (``stores._native.PendingWrites``), in Python about 134 (half puts, half
deletes), 34 MB in all, twice that at most during write-outs. A partition whose windows hold
fewer than about half its share of entries is written out only at checkpoints (its pending map
holds at most its live entries' puts and its copy's deletes)."""
WRITE_OUT_PAUSE_S = 0.0005
"""Pause of a background write-out after each piece while nothing waits for it (a ``flush``,
or a ``send_changes`` past twice the pending share): the piece's quarter millisecond of writing
then takes at most about a third of the event loop while the reader is busy, so a 2^16-entry
write-out (tens of milliseconds of RocksDB writes) never holds the outputs back."""
_BACKFILL_CHUNK = 20_000
"""Entries the background backfill writes between two event-loop turns."""
_BACKFILL_IDLE_S = 10.0
"""The backfill starts at the partition's first write or flush, or after this many seconds."""


Effect = tuple[int, str, int, Any] | tuple[int, str, int, Any, Iterable[int]]
"""A state change ``record_many`` takes: ``(offset, key, time, partial[, evicted_times])``."""


class PartialCodec(Protocol):
    """Serialisation of the composed monoid's partials (e.g. their JSON state round trip).

    A codec may also offer ``decode_many(list[bytes]) -> list[partial]``, used by ``restore``.
    ``format`` names the byte format (with its version): part of the state's shape.
    """

    format: str

    def encode(self, partial: Any) -> bytes: ...

    def decode(self, data: bytes) -> Any: ...


class MarshalStateCodec:
    """A fast ``PartialCodec``: the partial itself in ``marshal`` form, else its monoid state.

    Format of one partial: ``marshal.dumps(partial, 4)`` when marshal can represent it, else
    ``b"\\x00" + marshal.dumps(monoid.to_state(partial), 4)`` (decoded through ``from_state``).
    ``marshal`` accepts only exact built-in types (int, float, str, bytes, bool, None, tuple,
    list, dict, set, frozenset; never a subclass such as a namedtuple, never another object) and
    gives back an equal object of the same types (floats bit for bit), so the first form is
    exact whenever it is chosen; 0x00 is no marshal type code, so the forms cannot be confused.
    The first form needs no Python-level conversion: decoding the default aggregations'
    partial is one ``marshal.loads`` call, several times cheaper than
    ``from_state(loads(...))``, and decoding dominated a restore (``bench/worker_restore.py``).
    ``marshal`` never executes code (unlike pickle); its data format 4 is stable since Python
    3.4.
    """

    format = "marshal-state/1"

    def __init__(self, monoid: Any) -> None:
        self._to_state = monoid.to_state
        self._from_state = monoid.from_state

    def encode(self, partial: Any) -> bytes:
        try:
            return marshal.dumps(partial, 4)
        except ValueError:  # not made of built-in types only
            return _STATE_FORM + marshal.dumps(self._to_state(partial), 4)

    def decode(self, data: bytes) -> Any:
        if data[:1] == _STATE_FORM:
            return self._from_state(marshal.loads(data[1:]))
        return marshal.loads(data)

    def decode_many(self, data: list[bytes]) -> list[Any]:
        """``[decode(d) for d in data]``; one C-level pass when no partial is in state form."""
        try:
            return list(map(marshal.loads, data))
        except ValueError:  # a state form (or corrupt data, which ``decode`` reports)
            return [self.decode(d) for d in data]


_STATE_FORM = b"\x00"


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
class _Backfill:
    """The entries of a changelog-only restore that the (empty) local copy still lacks. No
    write-out happens until they are ingested (they would shadow it): the writes since the
    restore wait in ``pending``."""

    path: Path
    entries: RestoredEntries
    """After ``windows``: ``sorted_items`` gives them in entry id order."""
    wanted: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


@dataclass(frozen=True, slots=True)
class _TakenWrites:
    """The local writes one write-out takes (``WindowStore._take_writes``)."""

    cleared: dict[bytes, bytes]
    pending: Any
    """A ``PendingWrites`` (or its Python twin) no longer written to: ``take()`` sorts it."""
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
    queued_upto: int = -1
    """Largest applied offset whose upsert is queued or handed over (markers aside)."""
    horizon: int | None = None
    """The largest entry time put in the local copy or ``pending`` since it was opened (None:
    none): an entry at a later time is in neither."""
    local_applied: int = -1
    """The applied offset the local copy holds (``_META_APPLIED``)."""
    pending: Any = field(default_factory=PyPendingWrites)
    """The local writes since the last write-out, coalesced: per entry id its latest partial
    bytes or a delete, and which ids are *fresh* (first put at a time after ``horizon``: not in
    the local copy, so deleting one drops it instead of queueing a RocksDB delete). A
    ``stores._native.PendingWrites`` with the native writes (no Python object per entry),
    else its Python twin ``stores.pending_writes.PyPendingWrites`` (``_new_pending``)."""
    cleared: dict[bytes, bytes] = field(default_factory=dict)
    """The local copy's expirations since the last write-out (``expire``): a key's prefix ->
    the end (exclusive) of the range of its entry ids to delete, everything of the key up to
    its latest expired entry; one RocksDB range deletion each, written before ``pending``."""
    write_out_wanted: bool = False
    """Set by ``flush``: its ``send_changes`` writes ``pending`` out, whatever its size."""
    write_outs: int = 0
    """Number of write-outs begun: one after a flush's snapshot withholds its checkpoint."""
    writing: asyncio.Task[None] | None = None
    """The background write-out started by ``send_changes`` (``_write_out_later``), until a
    later call collects it (and its error, if it failed)."""
    sending: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held by ``send_changes``: one call per partition at a time, so pieces land in order."""
    queued: Any = field(default_factory=list)
    """Changelog records ``(key, value or None)`` not yet handed to the producer, in order: a
    list, or with the native writes a ``stores._native.ChangelogRecords`` (each record
    encoded once as it is queued, no Python object per record; ``_new_queue``)."""
    last_delivery: Awaitable[Any] | None = None
    backfill: _Backfill | None = None
    """Set while the local copy is being written after a changelog-only restore."""
    local_complete: bool = True
    """False until that write succeeded: no checkpoint before."""


class StoreSettings(ShapeSettings, Protocol):
    """The settings a window store reads (``app.settings.Settings`` is one)."""

    app_id: str
    state_dir: Path
    standby_replicas: int

    @property
    def changelog_topic(self) -> str: ...


class WindowStore:
    """Durable per-key window contents of the input partitions this worker owns; see module doc.

    ``producer``: the ``ChangelogLink`` to the changelog topic: ``FaustChangelog(fiba)`` inside
    the worker (the Faust app's producer, which also carries the aggregates, and its standby
    assignments), or ``KafkaChangelog(settings)``, an own aiokafka producer (then call
    ``flush()`` before committing input offsets); both in ``agents.kafka_changelog``.
    """

    def __init__(
        self, settings: StoreSettings, codec: PartialCodec, producer: ChangelogLink
    ) -> None:
        self.settings = settings
        self.codec = codec
        self.shape = StateShape.of(settings, codec.format)
        self.topic = settings.changelog_topic
        self.root = store_root(settings)
        self._producer = producer
        self._native_writes = _native_writes(codec)
        self._open: dict[int, _OpenPartition] = {}
        self._standbys: dict[int, _Standby] = {}
        self._wanted_standbys: set[int] = set()
        self._follower: asyncio.Task[None] | None = None
        self._follow_lock = asyncio.Lock()
        self._restoring: set[int] = set()
        self._abandoned = False
        self._write_slot = asyncio.Lock()
        """Held by a background write-out: one partition's at a time (each sorts its pending
        map in one step, so several at once would add up to one long pause)."""
        self._hurried = 0
        """Callers waiting for a background write-out: while any does, its pieces (and those
        of the one holding ``_write_slot``) go without ``WRITE_OUT_PAUSE_S``."""
        self.before_changelog: Callable[[], Awaitable[None]] | None = None
        """Awaited by ``send_changes`` before it hands changelog records over: the owner's
        outputs barrier (``agents.windows.WindowsPipeline.deliver_outputs``), which returns once
        every output of the records queued so far is acknowledged."""
        self.hand_over: Callable[[int], Awaitable[None]] = self.send_changes
        """What ``flush`` calls per open partition: ``send_changes``, or the owner's call of it
        while no record of the partition is being applied (exactly-once: the changelog records
        and the outputs queued with them go in one transaction, ``agents.transactions``)."""
        if settings.standby_replicas > 0:
            producer.on_standbys(self.follow)

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the changelog link and create the state directory."""
        self.root.mkdir(parents=True, exist_ok=True)
        await self._producer.start()

    async def stop(self) -> None:
        """Stop following; flush, checkpoint and close every open partition (after
        ``abandon``: close them as they are on disk); stop the changelog link."""
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
            await self._producer.stop()

    def abandon(self) -> None:
        """A failure may have left a record half queued: from now on nothing queued is written
        locally or handed over, and no checkpoint is written (``send_changes`` and ``flush``,
        hence ``release`` and ``stop``, do nothing of theirs), so every partition closes as it
        is on disk, as after a crash, and the next restore proceeds as after a crash."""
        self._abandoned = True

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
        # every entry, entry id -> partial bytes: the local copy's, then the changelog's
        entries = restored_entries()
        if reused:
            entries.extend(db.items())
            entries.delete(_META_APPLIED)
            entries.delete(_META_CHECKPOINT)
        async with self._producer.reader() as reader:
            try:
                applied, replayed = await _replay(
                    reader, tp, start or 0, entries, applied, db if reused else None
                )
            except ChangelogTruncated:
                # The changelog is shorter than the checkpoint says: it was recreated. The
                # changelog is the truth; the local copy describes another history.
                db.close()
                Rdict.destroy(str(path))
                db, reused, entries = self._fresh_local(path), False, restored_entries()
                applied, replayed = await _replay(reader, tp, 0, entries, -1, None)
            position = reader.position
        shape_delivery = await self._check_shape(partition, entries.pop(SHAPE_KEY), db)
        windows = self._windows(entries)
        if reused and replayed:
            db.flush(True)  # the replay skipped the WAL: make it durable before the checkpoint
        state = _OpenPartition(
            db,
            applied,
            applied,
            position,
            queued_upto=applied,
            pending=self._new_pending(),
            queued=self._new_queue(),
        )
        state.local_applied = applied
        state.horizon = max((times[-1][0] for times in windows.values() if times), default=None)
        state.last_delivery = shape_delivery  # the next checkpoint lies after it
        batch = WriteBatch(raw_mode=True)
        batch.put(_META_APPLIED, _OFFSET.pack(applied))
        batch.put(SHAPE_KEY, self.shape.encode())
        if reused or not len(entries):
            batch.put(_META_CHECKPOINT, _CHECKPOINT.pack(position, applied))
        else:
            fill = state.backfill = _Backfill(path, entries)
            state.local_complete = False
            fill.task = asyncio.create_task(
                self._backfill(state, fill), name=f"window-store-backfill-{partition}"
            )
        db.write(batch)
        self._open[partition] = state
        logger.info(
            "window store partition %d: local copy %s, %d changelog records replayed, "
            "applied offset %d",
            partition,
            "reused" if reused else "rebuilt from the changelog",
            replayed,
            applied,
        )
        return RestoredPartition(partition, applied, windows, reused, replayed)

    async def _check_shape(
        self, partition: int, stored: bytes | None, db: Rdict
    ) -> Awaitable[Any] | None:
        """Refuse (``StateMismatch``, ``db`` closed) a partition whose state has another shape
        than ``self.shape`` (``stored``: the last shape record of its local copy and changelog);
        with none recorded, hand this one to the producer, for the changelog, so that a worker
        with other settings finds it (``stores.state_shape``), and return its delivery."""
        try:
            self.shape.check(stored, f"partition {partition} of {self.topic}")
        except StateMismatch:
            db.close()
            raise
        if stored is not None:
            return None
        return await self._producer.send_records(
            self.topic, partition, [(SHAPE_KEY, self.shape.encode())]
        )

    def _windows(self, entries: RestoredEntries) -> dict[str, list[tuple[int, Any]]]:
        """``entries`` grouped by key, each key's ``(time, partial)`` list in time order
        (``RestoredEntries.windows``: one sort, every partial decoded once), with the cyclic
        garbage collector paused: it would rescan the growing heap of new tuples again and
        again. The
        build is synchronous, so no other code runs meanwhile. Its result is frozen before the
        collector resumes (``paused_gc(freeze=True)``): else the next allocation would start a
        young collection over all of it."""
        with paused_gc(freeze=True):
            return entries.windows(self.codec.decode, self.codec.format == MARSHAL_FORMAT)

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

        With ``standby_replicas`` > 0 the store calls this itself on every assignment of
        standbys its ``ChangelogLink`` reports (``on_standbys``)."""
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
        consumer = self._producer.consumer(fetch_max_wait_ms=500)
        try:
            # started inside: a rebalance may cancel the follower while it starts
            await consumer.start()
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
                    standby.applied, _ = replay_changelog(
                        records, standby.applied, batch.put, batch.delete
                    )
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

    def _new_queue(self) -> Any:
        """An empty changelog queue: native with the native writes, else a list."""
        writes = self._native_writes
        return [] if writes is None else writes.ChangelogRecords()

    def _new_pending(self) -> Any:
        """Empty pending local writes: native with the native writes, else in Python."""
        writes = self._native_writes
        return PyPendingWrites() if writes is None else writes.PendingWrites()

    def record(
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
        ``evicted_times`` (which must not contain ``time``) are gone. Its local writes (entry,
        deletions) go into ``pending`` (see ``send_changes``), its changelog records (the
        upsert, then one tombstone per evicted entry) are queued for the next
        ``send_changes``. O(1 + evicted): ``record_many`` of this one effect."""
        self.record_many(partition, [(offset, key, time, partial, list(evicted_times))])

    def record_many(self, partition: int, effects: Iterable[Effect], encoded: bool = False) -> None:
        """``record(partition, offset, key, time, partial[, evicted_times])`` for each effect
        ``(offset, key, time, partial)`` or ``(offset, key, time, partial, evicted_times)`` of
        ``effects`` in order (offsets increasing), with the same ``pending`` writes and
        changelog records. ``encoded``: each partial is already the codec's bytes of it
        (``NativeKeyWindows.apply_encoded``; a native ``Effects`` buffer of such effects,
        ``NativeKeyWindows.apply_fetched``'s, is read without a Python object each).
        O(len(effects) + evicted).

        With the native core and the ``marshal`` codec, one native call
        (``stores._native.write_effects``) makes the entry ids, partial bytes, ``pending``
        writes, upserts and tombstones, byte for byte the Python path's
        (tests/test_store_writes.py); else the Python loop below does."""
        state = self._open[partition]
        if state.backfill is not None:
            state.backfill.wanted.set()
        writes = self._native_writes
        if writes is None:
            self._record_many_python(state, partition, effects, encoded)
            return
        if not isinstance(effects, list | writes.Effects):
            effects = list(effects)
        try:
            applied, state.horizon = writes.write_effects(
                effects,
                state.applied,
                partition,
                encoded,
                self.codec.encode,
                state.pending,
                state.horizon,
                state.queued,
            )
        except BaseException:
            # some effects may be in ``pending``: a horizon past all their times stays true
            state.horizon = _horizon_past(effects, state.horizon)
            raise
        if applied > state.applied:
            state.applied = state.queued_upto = applied

    def _record_many_python(
        self,
        state: _OpenPartition,
        partition: int,
        effects: Iterable[Effect],
        encoded: bool,
    ) -> None:
        """``record_many`` in Python: one key prefix per key."""
        encode, pack_header = self.codec.encode, UPSERT_HEADER.pack
        append = state.queued.append
        pending, fresh, horizon = state.pending.puts, state.pending.fresh, state.horizon
        prefixes: dict[str, bytes] = {}
        applied = state.applied
        try:
            for effect in effects:
                if len(effect) == 4:
                    offset, key, time, partial = effect
                    evicted: Iterable[int] = ()
                else:
                    offset, key, time, partial, evicted = effect
                if offset <= applied:
                    raise ValueError(
                        f"offset {offset} of partition {partition} is not after the applied "
                        f"offset {applied}: a redelivered record must be skipped"
                    )
                prefix = prefixes.get(key)
                if prefix is None:
                    prefix = prefixes[key] = key_prefix(key)
                eid = entry_id_of(prefix, time)
                data = partial if encoded else encode(partial)
                if horizon is None or time > horizon:
                    horizon = time
                    fresh.add(eid)
                pending[eid] = data
                if evicted:
                    evicted = list(evicted)
                    evicted_ids = [entry_id_of(prefix, t) for t in evicted]
                    for evicted_id in evicted_ids:
                        forget(pending, fresh, evicted_id)
                    append((eid, encode_upsert(offset, evicted, data)))
                    state.queued.extend(zip(evicted_ids, repeat(None)))
                else:
                    append((eid, pack_header(offset, 0) + data))
                applied = offset
        finally:
            state.horizon = horizon  # also when an effect fails: its puts are in ``pending``
        if applied > state.applied:
            state.applied = state.queued_upto = applied

    def record_skipped(self, partition: int, offset: int) -> None:
        """The input record at ``offset`` has no state effect (late, bad input): its applied
        offset is queued for the next ``send_changes`` (and the next write-out). O(1)."""
        state = self._open[partition]
        if offset <= state.applied:
            raise ValueError(
                f"offset {offset} of partition {partition} is not after the applied offset "
                f"{state.applied}: a redelivered record must be skipped"
            )
        state.applied = offset
        if state.backfill is not None:
            state.backfill.wanted.set()

    def evict(self, partition: int, key: str, times: Iterable[int]) -> None:
        """Delete ``key``'s entries at ``times``, any of them (``fiba state``; expired entries
        go through ``expire``): the deletions go into ``pending``, one tombstone per entry is
        queued for the next ``send_changes``. O(len(times)); with the native core one call
        (``stores._native.write_evictions``)."""
        state = self._open[partition]
        if state.backfill is not None:
            state.backfill.wanted.set()
        if self._native_writes is not None:
            self._native_writes.write_evictions(key, times, state.pending, state.queued)
            return
        prefix = key_prefix(key)
        eids = [entry_id_of(prefix, t) for t in times]
        pending, fresh = state.pending.puts, state.pending.fresh
        for eid in eids:
            forget(pending, fresh, eid)
        state.queued.extend(zip(eids, repeat(None)))

    def expire(self, partition: int, key: str, times: Iterable[int]) -> None:
        """Delete ``key``'s expired entries at ``times``: all of its entries up to the latest
        of them, none of which is put again (the windows evict a key's oldest entries and
        admit no event at or before an evicted time: ``emit=batch``'s expired entries, the
        idle-key sweep). As ``evict`` (one tombstone per entry queued), but the local copy
        gets ONE range deletion per key and write-out however many entries it held: the
        fresh ones are dropped from ``pending``, the others noted in ``cleared``.
        O(len(times)); with the native core one call (``stores._native.write_expirations``)."""
        state = self._open[partition]
        if state.backfill is not None:
            state.backfill.wanted.set()
        if self._native_writes is not None:
            self._native_writes.write_expirations(
                key, times, state.pending, state.cleared, state.queued
            )
            return
        prefix = key_prefix(key)
        eids = [entry_id_of(prefix, t) for t in times]
        pending, fresh = state.pending.puts, state.pending.fresh
        held = False  # an entry the copy may hold
        for eid in eids:
            if eid in fresh:
                fresh.discard(eid)
                del pending[eid]
            else:
                pending.pop(eid, None)
                held = True
        if held:
            end = max(eids) + b"\x00"  # just past the latest expired id, before any later one
            if end > state.cleared.get(prefix, b""):
                state.cleared[prefix] = end
        state.queued.extend(zip(eids, repeat(None)))

    async def send_changes(self, partition: int) -> None:
        """Hand ``partition``'s queued changelog records to the producer, in order, as whole
        record batches (``agents.batched_send``), followed by an applied marker if records
        without effect (``record_skipped``) came after the last upsert, so that a restore does
        not read them again (their dead letters are not repeated after a crash). O(records)
        C-level appends plus O(1) Python per batch; one compacted marker (``APPLIED_KEY``)
        however many records without effect it covers.

        First the local write-out (``_write_out``: ``pending`` written to the local copy, in
        pieces), unless a backfill runs: when ``flush`` wants it, here and now (after the
        background one, if any); when ``pending`` holds the partition's share of
        ``LOCAL_PENDING_LIMIT`` entries, in the background (``_write_out_later``), paced so
        that the reader's outputs and changelog records keep going out while it writes (a
        write-out of 2^16 entries is tens of milliseconds of RocksDB writes); past twice the
        share while one still runs, this call waits for it first. A failed background
        write-out raises here, at the next call. The local copy is only a cache of a
        changelog prefix, usable only with its checkpoint, which a write-out removes first
        (see the module doc), so it need not follow every event: an entry put and deleted
        between two write-outs costs no RocksDB operation, one put several times costs one.
        Calls for one partition run one at a time (``sending``) and a write-out begins only
        after the previous one ended, so newer pieces never land before older ones.

        Before the changelog records go, ``before_changelog`` is awaited (the outputs of the
        records taken are acknowledged: outputs before the state that makes a redelivery skip
        them); if it fails, the store is abandoned, since the records taken would otherwise
        leave a gap in the changelog. A crash after a write-out began leaves a local copy
        without checkpoint, which the restore discards (it may be ahead of the changelog); a
        crash before leaves the copy at its checkpoint, the changelog tail replayed on top (see
        the module doc). Nothing after ``abandon``."""
        if self._abandoned:
            return
        state = self._open[partition]
        async with state.sending:
            if self._abandoned or self._open.get(partition) is not state:
                return  # abandoned, or released (and flushed) while this call waited
            if state.writing is not None and state.writing.done():
                await self._finish_write_out(state)  # its error, if it failed
            records, state.queued = state.queued, self._new_queue()
            applied = state.applied
            if applied > state.queued_upto:
                records.append((APPLIED_KEY, encode_offset(applied)))
                state.queued_upto = applied
            if state.backfill is None:
                share = LOCAL_PENDING_LIMIT // max(1, len(self._open))
                held = len(state.pending) + len(state.cleared)
                if state.write_out_wanted or (state.writing is not None and held >= 2 * share):
                    await self._finish_write_out(state)
                if self._abandoned:
                    return
                if state.write_out_wanted:
                    await self._write_out(state)
                elif held >= share and state.writing is None:
                    taken = self._take_writes(state)
                    if taken is not None:
                        state.writing = asyncio.create_task(
                            self._write_out_later(partition, state, taken),
                            name=f"fiba-write-out-{partition}",
                        )
                if self._abandoned:
                    return
            if records:
                await self._outputs_delivered()
                if self._abandoned:
                    return
                try:
                    state.last_delivery = await self._producer.send_records(
                        self.topic, partition, records
                    )
                except BaseException:
                    # the records taken would leave a gap (exactly-once: the transaction
                    # carrying them and their outputs was aborted)
                    logger.error("window store: changelog not sent; nothing more is written")
                    self.abandon()
                    raise
            state.sent_applied = applied

    async def _write_out_later(
        self, partition: int, state: _OpenPartition, taken: _TakenWrites
    ) -> None:
        """``_write_pieces`` of ``taken`` in the background (``send_changes``): once no other
        partition's background write-out runs (``_write_slot``), unless the partition was
        released or the store abandoned meanwhile; paced (``WRITE_OUT_PAUSE_S``). Cut before
        its end (cancelled), it leaves the copy without checkpoint for good."""
        try:
            async with self._write_slot:
                if self._abandoned or self._open.get(partition) is not state:
                    state.local_complete = False
                    return
                await self._write_pieces(state, taken, paced=True)
        except BaseException:
            state.local_complete = False
            raise

    async def _finish_write_out(self, state: _OpenPartition) -> None:
        """Wait for ``state``'s background write-out, if any, its pieces (and those of the one
        ahead of it) going without pause meanwhile; raise its error, if it failed (one
        cancelled, by ``_close``, left the copy without checkpoint: nothing to raise)."""
        writing = state.writing
        if writing is None:
            return
        if not writing.done():
            self._hurried += 1
            try:
                await asyncio.wait([writing])  # a cancelled caller leaves it running
            finally:
                self._hurried -= 1
        state.writing = None
        if not writing.cancelled():
            writing.result()

    def _take_writes(self, state: _OpenPartition) -> _TakenWrites | None:
        """The local writes of ``state`` for a write-out (None: nothing to write), taken:
        ``pending`` and ``cleared`` start anew at once (the ids taken lie at or below
        ``horizon``: none is fresh) and the write-out counts as begun. O(1)."""
        state.write_out_wanted = False
        applied = state.applied
        if not state.pending and not state.cleared and applied == state.local_applied:
            return None
        taken = _TakenWrites(state.cleared, state.pending, applied)
        state.pending, state.cleared = self._new_pending(), {}
        state.write_outs += 1
        return taken

    async def _write_out(self, state: _OpenPartition) -> None:
        """The local write-out of ``state`` now (``_take_writes``, ``_write_pieces``)."""
        taken = self._take_writes(state)
        if taken is not None:
            await self._write_pieces(state, taken)

    async def _write_pieces(
        self, state: _OpenPartition, taken: _TakenWrites, paced: bool = False
    ) -> None:
        """Write ``taken.cleared`` (range deletions, first: every put of ``pending`` lies
        above its key's range), ``taken.pending`` and the applied offset to the local copy: in
        entry id order (RocksDB inserts sorted keys into its memtable about twice as fast), as
        WriteBatches of ``LOCAL_PIECE_OPS`` operations, the event loop getting a turn between
        two (``paced``: a pause of ``WRITE_OUT_PAUSE_S`` while nothing waits for it, see
        ``_finish_write_out``); the first deletes the checkpoint, the last writes the applied
        offset. An interrupted write-out (abandon, cancellation, error) leaves the copy without
        checkpoint for good: ``local_complete`` is cleared. The pieces skip RocksDB's WAL
        (``_NO_WAL``): the copy counts only with a checkpoint, which ``flush`` writes after
        flushing the memtables; a crash before loses a suffix of the pieces (RocksDB persists
        the writes of one column family in order), so the copy is at its old checkpoint (the
        suffix took the checkpoint's delete with it) or has none. O(p log p) to sort, then
        O(pending + cleared) RocksDB operations."""
        applied = taken.applied
        cleared = sorted(taken.cleared.items())
        items = taken.pending.take()  # sorted here, in the background task
        db = state.db
        total = len(cleared) + len(items)
        try:
            for start in range(0, max(1, total), LOCAL_PIECE_OPS):
                if start:
                    # the event loop's turn between two writes
                    await asyncio.sleep(WRITE_OUT_PAUSE_S if paced and not self._hurried else 0)
                    if self._abandoned:
                        state.local_complete = False
                        return
                batch = WriteBatch(raw_mode=True)
                if not start:
                    batch.delete(_META_CHECKPOINT)
                stop = start + LOCAL_PIECE_OPS
                for begin, end in cleared[start:stop]:  # ranges first: every put is above
                    batch.delete_range(begin, end)
                if stop > len(cleared):
                    lo = max(0, start - len(cleared))
                    items.fill(batch.put, batch.delete, lo, stop - len(cleared))
                if stop >= total:
                    batch.put(_META_APPLIED, _OFFSET.pack(applied))
                db.write(batch, _NO_WAL)
        except BaseException:
            state.local_complete = False
            raise
        state.local_applied = applied

    async def _outputs_delivered(self) -> None:
        """Await ``before_changelog`` (if set); on its failure (or cancellation) abandon the
        store and raise."""
        if self.before_changelog is None:
            return
        try:
            await self.before_changelog()
        except BaseException:
            logger.error("window store: outputs not delivered; nothing more is written")
            self.abandon()
            raise

    async def flush(self) -> None:
        """Hand every open partition's queued changes over (``send_changes``, its local
        write-out included), wait until every changelog record handed over so far is
        acknowledged, then write each open partition's local checkpoint (after its backfill, if
        one is running) unless a write-out began meanwhile. Nothing after ``abandon``."""
        if self._abandoned:
            return
        for state in list(self._open.values()):
            if state.backfill is not None and state.backfill.task is not None:
                state.backfill.wanted.set()
                await asyncio.wait([state.backfill.task])  # it logs its own failure
        snapshot: dict[int, tuple[_OpenPartition, Awaitable[Any] | None, int, int]] = {}
        for partition, state in list(self._open.items()):
            state.write_out_wanted = True
            await self.hand_over(partition)
            snapshot[partition] = (state, state.last_delivery, state.sent_applied, state.write_outs)
        await self._producer.flush()
        for partition, (state, delivery, sent_applied, write_outs) in snapshot.items():
            if (
                self._open.get(partition) is not state
                or state.write_outs != write_outs  # written to after the snapshot
                or state.local_applied != sent_applied  # not written out to it
                or not state.local_complete  # restored during this flush, or a write failed
            ):
                continue
            if delivery is not None:
                metadata = await delivery
                state.checkpoint_position = max(state.checkpoint_position, metadata.offset + 1)
            state.db.flush(True)  # the write-outs skipped the WAL: durable before the checkpoint
            state.db.put(
                _META_CHECKPOINT, _CHECKPOINT.pack(state.checkpoint_position, sent_applied)
            )

    # --- internals -------------------------------------------------------------------------

    def _close(self, partition: int) -> None:
        state = self._open.pop(partition)
        if state.writing is not None:
            state.writing.cancel()  # (flushed: done) a write-out cut: no checkpoint any more
        if state.backfill is not None and state.backfill.task is not None:
            state.backfill.task.cancel()  # no checkpoint: the copy will be discarded
        state.db.close()

    async def _backfill(self, state: _OpenPartition, fill: _Backfill) -> None:
        """Write the restored entries into the empty local copy of ``state`` once the partition
        is in use (first write or flush) or idle for ``_BACKFILL_IDLE_S``: one SST file, built
        ``_BACKFILL_CHUNK`` entries per event-loop turn, ingested at once (cheaper than
        WriteBatches: no memtable, no WAL). The writes made since the restore wait in
        ``pending`` meanwhile (no write-out before the ingestion, which would shadow it).
        Until it is done, ``flush`` writes no checkpoint: a crash before leaves a copy without
        one, which the next restore discards; so does a failure here (logged; the partition then
        gets no checkpoint while it stays open). O(entries) SST writes."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(fill.wanted.wait(), _BACKFILL_IDLE_S)
        sst = fill.path.with_name(fill.path.name + ".sst")
        try:
            writer = SstFileWriter(options=Options(raw_mode=True))
            writer.open(str(sst))
            put, entries = writer.__setitem__, fill.entries
            for start in range(0, len(entries), _BACKFILL_CHUNK):
                for eid, data in entries.sorted_items(start, start + _BACKFILL_CHUNK):
                    put(eid, data)
                await asyncio.sleep(0)
            writer.finish()
            options = IngestExternalFileOptions()
            options.set_move_files(True)
            state.db.ingest_external_file([str(sst)], options)
            state.local_complete = True
        except Exception:
            logger.exception(
                "window store: local copy of %s not written; the next restore rebuilds it from "
                "the changelog",
                fill.path.name,
            )
        finally:
            state.backfill = None
            sst.unlink(missing_ok=True)

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


def _horizon_past(effects: list[Effect], horizon: int | None) -> int | None:
    """``horizon``, or the largest time of ``effects`` if larger (a bound for the times of the
    effects a failed ``write_effects`` call put in ``pending``)."""
    times = [e[2] for e in effects if len(e) >= 3 and isinstance(e[2], int)]
    if horizon is not None:
        times.append(horizon)
    return max(times, default=None)


def _native_writes(codec: PartialCodec) -> ModuleType | None:
    """The native core when it writes ``codec``'s bytes (the ``marshal`` format), else None."""
    native = stores.native()
    return native if native is not None and codec.format == MARSHAL_FORMAT else None


def store_root(settings: StoreSettings) -> Path:
    """The directory of a worker's window store: ``<state_dir>/<app_id>/window-store``."""
    return Path(settings.state_dir) / settings.app_id / "window-store"


async def _replay(
    reader: ChangelogReading,
    tp: TopicPartition,
    start: int,
    entries: RestoredEntries,
    applied: int,
    db: Rdict | None,
) -> tuple[int, int]:
    """Apply the changelog records of ``tp`` from ``start`` to its end to ``entries`` (and, if
    given, to the local copy ``db``); return ``(applied offset, records replayed)``.

    Without ``db`` each fetched record batch is replayed in one call where ``entries`` can
    (``stores.restored_entries.replay_batches``). ``db`` gets entry writes only, without the
    WAL: the caller flushes and then writes the applied offset and checkpoint, so an
    interrupted replay leaves the old checkpoint, from which a replay is again exact (fact 3).
    Each fetched response is applied while the reader fetches the next one. O(records replayed
    + deleted times)."""
    replayed = 0
    async with contextlib.aclosing(reader.read(tp, start)) as responses:
        async for batches in responses:
            if db is None:
                applied, count = replay_batches(entries, batches, applied)
                replayed += count
                continue
            local = WriteBatch(raw_mode=True)
            put, delete = _entry_writers(entries, local)
            for batch in batches:
                applied, count = replay_changelog(batch, applied, put, delete)
                replayed += count
            db.write(local, _NO_WAL)
    return applied, replayed


def _entry_writers(
    entries: RestoredEntries, local: WriteBatch
) -> tuple[Callable[[bytes, bytes], object], Callable[[bytes], object]]:
    """``(put, delete)`` writing entries to ``entries`` and to ``local`` as well."""
    put_entry, delete_entry = entries.put, entries.delete

    def put_both(key: bytes, value: bytes) -> None:
        put_entry(key, value)
        local.put(key, value)

    def delete_both(key: bytes) -> None:
        delete_entry(key)
        local.delete(key)

    return put_both, delete_both
