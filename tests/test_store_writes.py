"""The window store's native write path against its Python path, byte for byte.

``stores._native.write_effects`` / ``write_evictions`` / ``write_expirations`` into a native
``PendingWrites`` (``WindowStore.record_many``, ``evict``, ``expire`` with the native core and
the ``marshal`` codec) and the windows kernel's encoded partials
(``NativeKeyWindows.apply_encoded``) must write exactly what the Python path writes. Hypothesis
drives three stores with the same random programs (effects with and without evicted times,
partials of every built-in aggregation, composes, the codec's state form, shared objects; keys
with non-ASCII characters; times at the ends of int64; evictions, expirations, skipped offsets,
single records, hand-overs, flushes; write-outs at flushes and at a small pending limit): the
Python path, the native path on partial objects and on partials encoded beforehand. It compares
the changelog records, the pending writes and fresh ids after every step, and every local
operation written (and the RocksDB's contents after each piece). Then: coalescing, restarts,
no Python object per effect kept, ``dumps_partial`` against ``marshal.dumps``, the kernel's
encoded effects against ``MarshalStateCodec.encode``.
"""

from __future__ import annotations

import asyncio
import marshal
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import stores
from app.settings import Settings
from stores import window_store
from stores.changelog import entry_id
from stores.key_windows import WindowConfig
from stores.monoids import make_monoid, monoid, monoid_names
from stores.native_fiba import NATIVE_NAMES
from stores.native_windows import NativeKeyWindows
from stores.null_changelog import NullChangelog
from stores.pending_writes import PyPendingWrites, forget
from stores.restored_entries import restored_entries
from stores.window_store import LOCAL_PIECE_OPS, MarshalStateCodec, WindowStore, WriteBatch

pytestmark = pytest.mark.skipif(
    stores.native() is None, reason=f"no native core in this build ({stores.build()})"
)

KEYS = st.sampled_from(["a", "b", "é", "日本", "", "k" * 40, "\u2028"])
TIMES = st.one_of(st.integers(-5, 40), st.sampled_from([-(2**63), 2**63 - 1, 2**31, -(2**31) - 1]))
NUMBERS = st.one_of(
    st.integers(-300, 300),
    st.sampled_from([2**31, -(2**31) - 1, 2**62, -(2**63), 2**63 - 1]),
    st.floats(allow_nan=True, allow_infinity=True),
)
COMPOSES = [
    ("sum", "count", "max"),
    ("count", "sum", "max", "mean", "pop_stddev"),
    ("first", "maxcount", "min", "mincount", "pop_stddev"),
    ("last", "geomean", "sample_stddev", "first", "mean"),
]


class Moments(NamedTuple):
    """A partial marshal refuses (a tuple subclass): written in the codec's state form."""

    n: int
    total: float


MOMENTS = make_monoid(
    Moments(0, 0.0),
    lambda x: Moments(1, float(x)),
    lambda a, b: Moments(a.n + b.n, a.total + b.total),
    lambda a: a.total,
    name="moments",
    to_state=list,
    from_state=lambda state: Moments(*state),
)


@st.composite
def partials(draw: Any) -> Any:
    """A partial of a built-in aggregation (any input it takes), of a compose, of a monoid
    whose partials need the state form, or a tuple sharing one object twice."""
    kind = draw(st.sampled_from(["builtin", "compose", "moments", "shared"]))
    values = draw(st.lists(NUMBERS, min_size=1, max_size=4))
    if kind == "shared":
        x = draw(NUMBERS)
        return (x, x, draw(st.sampled_from([(), (x,), None, True, 7])))
    if kind == "moments":
        m = MOMENTS
    elif kind == "compose":
        names = draw(st.sampled_from(COMPOSES))
        m = WindowConfig.from_settings(replace(Settings(), aggregations=names)).composed
    else:
        m = monoid(draw(st.sampled_from(monoid_names())))
    partial = m.identity
    for i, x in enumerate(values):
        try:
            lifted = m.lift({"value": x, "arg": f"a{i}é"} if "arg" in m.name else x)
        except (TypeError, ValueError):
            continue
        partial = m.combine(partial, lifted)
    return partial


def effects_of(draw: Any, n: int, evictions: bool) -> list[tuple]:
    out = []
    for _ in range(n):
        effect = (0, draw(KEYS), draw(TIMES), draw(partials()))
        if evictions and draw(st.booleans()):
            effect += (draw(st.lists(TIMES, max_size=3)),)
        out.append(effect)
    return out


@st.composite
def programs(draw: Any) -> list[tuple]:
    """Steps; offsets are given in order when the program runs."""
    step = st.one_of(
        st.builds(lambda n, ev: ("many", n, ev), st.integers(0, 70), st.booleans()),
        st.just(("one",)),
        st.just(("skip",)),
        st.builds(lambda k, ts: ("evict", k, ts), KEYS, st.lists(TIMES, max_size=5)),
        st.builds(lambda k, ts: ("expire", k, ts), KEYS, st.lists(TIMES, max_size=5)),
        st.just(("send",)),
        st.just(("flush",)),
    )
    out = []
    for s in draw(st.lists(step, min_size=1, max_size=12)):
        if s[0] == "many":
            out.append(("many", effects_of(draw, s[1], s[2])))
        elif s[0] == "one":
            out.append(("one", effects_of(draw, 1, True)[0]))
        else:
            out.append(s)
    return [*out, ("send",)]


class Recorder(NullChangelog):
    """A ``ChangelogLink`` keeping what is handed over, in order; nothing is read back."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, list[tuple[bytes, bytes | None]]]] = []

    async def send_records(self, topic: str, partition: int, records: Any) -> None:
        self.sent.append((partition, list(records)))


class RecordingBatch:
    """A ``WriteBatch`` keeping its operations in order (``window_store.WriteBatch`` in the
    tests that compare every local operation)."""

    def __init__(self, raw_mode: bool = True) -> None:
        self.batch = WriteBatch(raw_mode=raw_mode)
        self.ops: list[tuple] = []

    def put(self, key: bytes, value: bytes) -> None:
        self.ops.append(("put", key, value))
        self.batch.put(key, value)

    def delete(self, key: bytes) -> None:
        self.ops.append(("delete", key))
        self.batch.delete(key)

    def delete_range(self, begin: bytes, end: bytes) -> None:
        self.ops.append(("delete_range", begin, end))
        self.batch.delete_range(begin, end)

    def __len__(self) -> int:
        return len(self.batch)


class Pieces:
    """The local RocksDB of a partition, keeping its contents after every piece written,
    the operations of each piece (of a ``RecordingBatch``) and counting the operations."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self.states: list[dict[bytes, bytes]] = []
        self.ops: list[list[tuple]] = []
        self.operations = 0

    def write(self, batch: Any, *options: Any) -> None:
        self.operations += len(batch)
        if isinstance(batch, RecordingBatch):
            self.ops.append(batch.ops)
            batch = batch.batch
        self.db.write(batch, *options)
        self.states.append(dict(self.db.items()))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


async def run(program: list[tuple], path: str, state_dir: Path) -> tuple[list, ...]:
    """Run ``program`` on a fresh store on ``path`` (``python``, ``native`` or ``encoded``):
    ``(changelog records handed over, local states after each piece, errors, the pending
    writes, fresh ids and cleared ranges after each step, the local operations of each
    piece)``."""
    settings = Settings(app_id=f"writes-{path}", partitions=1, state_dir=state_dir / path)
    codec = MarshalStateCodec(MOMENTS)  # only the state form reads the monoid
    link = Recorder()
    store = WindowStore(settings, codec, link)  # type: ignore[arg-type]
    if path == "python":
        store._native_writes = None
    await store.start()
    await store.restore(0)
    db = store._open[0].db = Pieces(store._open[0].db)  # type: ignore[assignment]
    with mock.patch.object(window_store, "WriteBatch", RecordingBatch):  # the write-outs'
        return await run_steps(program, path, store, db)


async def run_steps(program: list[tuple], path: str, store: WindowStore, db: Pieces) -> tuple:
    """``run``'s steps on ``store``, then its stop."""
    codec, link = store.codec, store._producer
    offset = 0
    errors = []
    notes = []
    for step in program:
        if step[0] == "many":
            effects = []
            for _, key, t, partial, *evicted in step[1]:
                offset += 1
                data = codec.encode(partial) if path == "encoded" else partial
                effects.append((offset, key, t, data, *evicted))
            store.record_many(0, effects, encoded=path == "encoded")
        elif step[0] == "one":
            _, key, t, partial, *evicted = step[1]
            offset += 1
            store.record(0, offset, key, t, partial, *evicted)
        elif step[0] == "skip":
            offset += 1
            store.record_skipped(0, offset)
        elif step[0] == "evict":
            store.evict(0, step[1], step[2])
        elif step[0] == "expire":
            store.expire(0, step[1], step[2])
        elif step[0] == "flush":
            await store.flush()
        else:
            await store.send_changes(0)
        pending = store._open[0].pending
        notes.append((pending.items(), pending.fresh_ids(), dict(store._open[0].cleared)))
    try:  # a redelivered offset is refused, as on the Python path
        store.record_many(0, [(offset if offset else -1, "a", 0, (1,))], encoded=False)
    except ValueError as error:
        errors.append(str(error))
    records = [r for _, batch in link.sent for r in batch]
    await store.stop()
    return records, db.states, errors, notes, db.ops


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(program=programs(), limit=st.sampled_from([3, 40, window_store.LOCAL_PENDING_LIMIT]))
@example(  # more than a piece of effects with evictions, then one short of a piece
    program=[
        ("many", [(0, "é", t, (t, 1.5), [t - 5]) for t in range(LOCAL_PIECE_OPS)]),
        ("many", [(0, "a", t, (1,)) for t in range(LOCAL_PIECE_OPS - 2)]),
        ("send",),
    ],
    limit=LOCAL_PIECE_OPS,
)
@example(  # an expiration of a fresh entry and one the copy may hold: one range past both
    program=[("many", [(0, "a", 10, (1,))]), ("expire", "a", [5, 10]), ("flush",), ("send",)],
    limit=window_store.LOCAL_PENDING_LIMIT,
)
def test_the_native_writes_are_the_python_ones_byte_for_byte(
    program: list[tuple], limit: int
) -> None:
    """``limit``: the pending limit, so that ``send_changes`` writes out too."""
    results = {}
    with (
        tempfile.TemporaryDirectory() as tmp,
        mock.patch.object(window_store, "LOCAL_PENDING_LIMIT", limit),
    ):
        for path in ("python", "native", "encoded"):
            results[path] = asyncio.run(run(program, path, Path(tmp)))
    python = results["python"]
    assert python[2], "the redelivered offset was not refused"
    for path in ("native", "encoded"):
        records, states, errors, notes, ops = results[path]
        assert records == python[0], path
        for i, (note, want) in enumerate(zip(notes, python[3], strict=True)):
            assert note == want, f"{path}: pending writes after step {i}"
        assert len(states) == len(python[1]), path
        for i, (state, want) in enumerate(zip(states, python[1], strict=True)):
            assert state == want, f"{path}: local piece {i}"
        assert ops == python[4], path
        assert errors == python[2], path


async def backfilling(path: str, effects: list[tuple], state_dir: Path) -> tuple[list, list]:
    """``record_many(effects)`` on ``path`` while a backfill is pending (right after a
    changelog-only restore): ``(changelog records queued, pending local writes)``."""
    settings = Settings(app_id=f"fill-{path}", partitions=1, state_dir=state_dir / path)
    codec = MarshalStateCodec(MOMENTS)
    store = WindowStore(settings, codec, Recorder())  # type: ignore[arg-type]
    if path == "python":
        store._native_writes = None
    await store.start()
    await store.restore(0)
    state = store._open[0]
    state.backfill = window_store._Backfill(store.partition_path(0), restored_entries())
    encoded = path == "encoded"
    store.record_many(
        0,
        [(o, k, t, codec.encode(p) if encoded else p, *ev) for o, k, t, p, *ev in effects],
        encoded,
    )
    queued, since = list(state.queued), state.pending.items()
    await store.send_changes(0)  # no write-out while the backfill is pending
    assert state.pending.items() == since
    assert all(k not in dict(since) for k in state.db.keys())  # noqa: SIM118 (Rdict) nothing written out yet
    state.backfill = None
    await store.stop()
    return queued, since


def test_a_pending_backfill_notes_the_same_writes_on_every_path() -> None:
    """While a backfill is pending, ``record_many`` notes its writes in ``pending``, which
    no write-out takes before the backfill is ingested: the same on the three paths, encoded
    or not."""
    effects = [
        (1, "é", 5, (1, 2.5)),
        (2, "a", 7, (2, 0.5), (5, 6)),
        (3, "é", 9, Moments(3, 1.5), [5]),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        got = {
            p: asyncio.run(backfilling(p, effects, Path(tmp)))
            for p in ("python", "native", "encoded")
        }
    assert dict(got["python"][1])[entry_id("é", 9)][:1] == b"\x00"  # the state form
    assert got["native"] == got["python"]
    assert got["encoded"] == got["python"]


async def open_counted(path: str, state_dir: Path, app_id: str) -> tuple[WindowStore, Pieces]:
    """A store on ``path`` (``python`` or ``native``) with partition 0 restored, its local
    RocksDB counting the operations written."""
    settings = Settings(app_id=app_id, partitions=1, state_dir=state_dir / path)
    store = WindowStore(settings, MarshalStateCodec(MOMENTS), Recorder())  # type: ignore[arg-type]
    if path == "python":
        store._native_writes = None
    await store.start()
    await store.restore(0)
    db = store._open[0].db = Pieces(store._open[0].db)  # type: ignore[assignment]
    return store, db


async def restore_again(settings: Settings, codec: Any) -> Any:
    """Partition 0 restored by a fresh store on ``settings`` (its local copy; the changelog
    keeps nothing), the store stopped again."""
    reopened = WindowStore(settings, codec, Recorder())  # type: ignore[arg-type]
    await reopened.start()
    restored = await reopened.restore(0)
    await reopened.stop()
    return restored


async def coalesced_operations(path: str, state_dir: Path) -> list[int]:
    """RocksDB operations of three write-outs: 10 entries; then 1,000 events each putting an
    entry and deleting the one before (every entry but the first 10 lives one event), and a
    sweep of 9 of the first 10; then one entry rewritten 500 times and a sweep of 3 entries
    the copy does not hold (deleted: it might)."""
    store, db = await open_counted(path, state_dir, f"count-{path}")
    counts = []
    store.record_many(0, [(t, "k", t, (1, 1.5)) for t in range(10)])
    await store.flush()
    counts.append(db.operations)
    for i in range(1000):
        t = 10 + i
        store.record_many(0, [(t, "k", t, (t, 0.5), [t - 1])])
        await store.send_changes(0)
    store.evict(0, "k", range(9))
    await store.flush()
    counts.append(db.operations - sum(counts))
    for i in range(500):
        store.record(0, 1010 + i, "j", 7, (i, 2.5))
    store.evict(0, "k", [1005, 1006, 1007])
    await store.flush()
    counts.append(db.operations - sum(counts))
    await store.stop()
    return counts


def test_entries_put_and_deleted_between_two_write_outs_cost_no_rocksdb_operation() -> None:
    """The local copy gets the latest operation per entry at each write-out: 1,000 entries put
    and deleted before the next write-out cost nothing, an entry rewritten 500 times one put;
    deletions of entries the copy may hold are written. Each write-out adds 2 operations (the
    checkpoint deleted, the applied offset). Writes per event would take 10, 2,009 (1,000
    puts, 1,009 deletes) and 503, plus the applied offsets."""
    with tempfile.TemporaryDirectory() as tmp:
        for path in ("python", "native"):
            counts = asyncio.run(coalesced_operations(path, Path(tmp)))
            # 10 puts; the last entry put, 1 + 9 of the first 10 deleted; 1 put, 3 deletes
            assert counts == [10 + 2, 1 + 10 + 2, 1 + 3 + 2], path


async def expired_operations(path: str, state_dir: Path) -> tuple[list[int], Any]:
    """RocksDB operations of two write-outs: 1,000 entries of each of two keys; then 900 of
    "a" and 10 of "b" expired (held by the copy), and 50 entries of "b" put and 40 of them
    expired before the next write-out (never in the copy); then the windows a clean restart
    restores."""
    store, db = await open_counted(path, state_dir, f"expire-{path}")
    store.record_many(
        0, [(2 * t + i, k, t, (t, 0.5)) for t in range(1000) for i, k in enumerate("ab")]
    )
    await store.flush()
    counts = [db.operations]
    store.expire(0, "a", range(900))
    store.record_many(0, [(2000 + t, "b", 1000 + t, (t, 1.5)) for t in range(50)])
    store.expire(0, "b", range(10))
    await store.send_changes(0)
    store.expire(0, "b", range(10, 1040))
    await store.flush()
    counts.append(db.operations - counts[0])
    await store.stop()
    restored = await restore_again(store.settings, store.codec)
    return counts, restored


def test_expired_entries_cost_one_rocksdb_range_deletion_per_key_and_write_out() -> None:
    """``expire`` (a key's entries up to a time, as the windows evict them): however many
    entries the copy holds, one range deletion per key at the next write-out; those never
    written out cost nothing; the changelog still gets a tombstone each. Point deletions would
    take 900 + 1,030 operations; here 2 ranges, 10 puts, and the checkpoint deleted and the
    applied offset written."""
    with tempfile.TemporaryDirectory() as tmp:
        for path in ("python", "native"):
            counts, restored = asyncio.run(expired_operations(path, Path(tmp)))
            assert counts == [2000 + 2, 2 + 10 + 2], path
            assert restored.local_entries_reused, path
            assert [t for t, _ in restored.windows["a"]] == list(range(900, 1000)), path
            assert [t for t, _ in restored.windows["b"]] == list(range(1040, 1050)), path


@st.composite
def streams(draw: Any) -> list[tuple]:
    """Steps of a stream over 3 keys and times 0-30: events (a put, sometimes deleting some
    of the key's times), sweeps, expirations (of everything of a key up to a time; later
    events at or before it are refused, as the windows refuse them), skipped records, flushes
    and hand-overs."""
    steps = []
    for _ in range(draw(st.integers(1, 120))):
        kind = draw(st.sampled_from(["event"] * 6 + ["sweep", "expire", "skip", "flush", "send"]))
        key = draw(st.sampled_from(["a", "é", "b"]))
        if kind == "event":
            gone = draw(st.lists(st.integers(0, 30), max_size=2))
            steps.append(("event", key, draw(st.integers(0, 30)), draw(st.integers(0, 9)), gone))
        elif kind == "sweep":
            steps.append(("sweep", key, draw(st.lists(st.integers(0, 30), max_size=4))))
        elif kind == "expire":
            steps.append(("expire", key, draw(st.integers(0, 30))))
        else:
            steps.append((kind,))
    return steps


async def restart_from_the_local_copy(path: str, steps: list[tuple], state_dir: Path) -> None:
    """Run ``steps`` on a fresh store on ``path``, stop it cleanly, restore: the local copy is
    reused, and its windows and applied offset are those of the stream."""
    store, _ = await open_counted(path, state_dir, f"restart-{path}")
    codec = store.codec
    model: dict[tuple[str, int], Any] = {}
    expired: dict[str, int] = {}  # per key: the latest time expired
    offset = -1
    for step in steps:
        if step[0] == "event":
            _, key, t, value, gone = step
            if t <= expired.get(key, -1):
                continue  # refused: at or before an expired time
            offset += 1
            gone = sorted(set(gone) - {t})
            store.record_many(0, [(offset, key, t, (value, 0.5), gone)])
            model[(key, t)] = (value, 0.5)
            for g in gone:
                model.pop((key, g), None)
        elif step[0] == "sweep":
            store.evict(0, step[1], step[2])
            for g in step[2]:
                model.pop((step[1], g), None)
        elif step[0] == "expire":
            _, key, upto = step
            times = [t for k, t in sorted(model) if k == key and t <= upto]
            if times:  # all of the key's entries up to a time the windows hold
                store.expire(0, key, times)
                expired[key] = max(expired.get(key, -1), times[-1])
                for t in times:
                    del model[(key, t)]
        elif step[0] == "skip":
            offset += 1
            store.record_skipped(0, offset)
        elif step[0] == "flush":
            await store.flush()
        else:
            await store.send_changes(0)
    await store.stop()
    restored = await restore_again(store.settings, codec)
    assert restored.local_entries_reused and restored.applied_offset == offset
    want: dict[str, list[tuple[int, Any]]] = {}
    for (key, t), partial in sorted(model.items()):
        want.setdefault(key, []).append((t, partial))
    assert restored.windows == want


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=streams(), limit=st.sampled_from([2, 9, window_store.LOCAL_PENDING_LIMIT]))
def test_a_clean_restart_restores_the_windows_from_the_coalesced_local_copy(
    steps: list[tuple], limit: int
) -> None:
    """Whatever the write-outs (at flushes, at a pending ``limit``), a clean stop leaves a
    local copy whose restore (no changelog record to replay) is the stream's windows."""
    with (
        tempfile.TemporaryDirectory() as tmp,
        mock.patch.object(window_store, "LOCAL_PENDING_LIMIT", limit),
    ):
        for path in ("python", "native"):
            asyncio.run(restart_from_the_local_copy(path, steps, Path(tmp)))


async def interrupted_write_out(path: str, state_dir: Path) -> Any:
    """1,000 entries pending over the limit; the background write-out ``send_changes`` starts
    cancelled after its first piece (as closing the store does); then a clean stop and a
    restore."""
    store, db = await open_counted(path, state_dir, f"cut-{path}")
    store.record_many(0, [(t, "k", t, (t, 0.5)) for t in range(1000)])
    with mock.patch.object(window_store, "LOCAL_PENDING_LIMIT", 10):
        await store.send_changes(0)
        writing = store._open[0].writing
        assert writing is not None
        while len(db.states) < 1:
            await asyncio.sleep(0)
        writing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await writing
    assert len(db.states) == 1  # one piece of the write-out written
    await store.stop()  # a flush: the rest is no longer pending, so no checkpoint
    restored = await restore_again(store.settings, store.codec)
    return restored


def test_an_interrupted_write_out_leaves_no_checkpoint() -> None:
    """A write-out cut after its first piece (cancelled) leaves the copy without the rest of
    the pending writes: it must never get a checkpoint again, so the next restore discards it
    (here, with nothing on the changelog, the state is empty) instead of serving a copy
    missing entries."""
    with tempfile.TemporaryDirectory() as tmp:
        for path in ("python", "native"):
            restored = asyncio.run(interrupted_write_out(path, Path(tmp)))
            assert not restored.local_entries_reused, path
            assert restored.windows == {} and restored.applied_offset == -1, path


async def sends_beside_a_write_out(path: str, state_dir: Path) -> dict[str, Any]:
    """1,000 entries pending over the limit (a write-out of six pieces), handed over; ten more
    handed over; a clean stop and a restore: the pieces written and changelog batches handed
    over at each step, and the restored windows."""
    store, db = await open_counted(path, state_dir, f"beside-{path}")
    sent: list = store._producer.sent  # type: ignore[attr-defined]
    before = len(sent)
    seen: dict[str, Any] = {}
    with mock.patch.object(window_store, "LOCAL_PENDING_LIMIT", 100):
        store.record_many(0, [(t, "k", t, (t, 0.5)) for t in range(1000)])
        await store.send_changes(0)
        seen["first"] = (len(db.states), len(sent) - before)
        store.record_many(0, [(1000 + t, "j", t, (t, 0.5)) for t in range(10)])
        await store.send_changes(0)
        seen["second"] = (len(db.states), len(sent) - before)
        await store.stop()
    seen["pieces"] = len(db.states)
    seen["restored"] = await restore_again(store.settings, store.codec)
    return seen


def test_changelog_records_go_while_a_long_write_out_is_written() -> None:
    """A write-out of the pending local writes (here six pieces of ``LOCAL_PIECE_OPS``) runs
    in the background: the ``send_changes`` that starts it, and the next one, hand their
    changelog records over before its pieces are written (the reader's next outputs and
    changelog round no longer wait behind tens of milliseconds of RocksDB writes); the stop's
    flush then completes it, in order, and a clean restart reads the copy back exactly."""
    with tempfile.TemporaryDirectory() as tmp:
        for path in ("python", "native"):
            seen = asyncio.run(sends_beside_a_write_out(path, Path(tmp)))
            assert seen["first"] == (0, 1), path  # handed over, nothing written yet
            assert seen["second"][1] == 2 and seen["second"][0] < 1000 // LOCAL_PIECE_OPS, path
            assert seen["pieces"] > 1000 // LOCAL_PIECE_OPS, path
            restored = seen["restored"]
            assert restored.local_entries_reused and restored.applied_offset == 1009, path
            assert restored.windows == {
                "k": [(t, (t, 0.5)) for t in range(1000)],
                "j": [(t, (t, 0.5)) for t in range(10)],
            }, path


def wal_bytes(path: Path) -> int:
    """Bytes in the write-ahead logs of the RocksDB at ``path``."""
    return sum(f.stat().st_size for f in path.glob("*.log"))


async def write_out_then_wal(path: str, state_dir: Path) -> tuple[int, int]:
    """1,000 entries over the pending limit written out in the background; the partition
    copy's WAL bytes before and after."""
    store, _ = await open_counted(path, state_dir, f"wal-{path}")
    local = store.partition_path(0)
    before = wal_bytes(local)
    with mock.patch.object(window_store, "LOCAL_PENDING_LIMIT", 100):
        store.record_many(0, [(t, "k", t, (t, 0.5)) for t in range(1000)])
        await store.send_changes(0)
        await store._finish_write_out(store._open[0])
    after = wal_bytes(local)
    await store.stop()
    return before, after


def test_the_local_write_outs_skip_rocksdbs_write_ahead_log() -> None:
    """The write-outs' pieces go to the memtables only (``flush`` makes them durable before
    the checkpoint, which is what makes the copy count): 1,000 entries of ~30 bytes each add
    nothing to the WAL."""
    with tempfile.TemporaryDirectory() as tmp:
        for path in ("python", "native"):
            before, after = asyncio.run(write_out_then_wal(path, Path(tmp)))
            assert after - before < 1_000, (path, before, after)


async def crash_after_write_outs(path: str, state_dir: str) -> None:
    """Run in a child that then ends as a SIGKILL would (``os._exit``: no close, the
    memtables lost): 1,000 entries written out and checkpointed (``flush``), then 500 more
    written out in the background with no checkpoint after them."""
    store, _ = await open_counted(path, Path(state_dir), f"crash-{path}")
    store.record_many(0, [(t, "k", t, (t, 0.5)) for t in range(1000)])
    await store.flush()
    with mock.patch.object(window_store, "LOCAL_PENDING_LIMIT", 100):
        store.record_many(0, [(1000 + t, "j", t, (t, 0.5)) for t in range(500)])
        await store.send_changes(0)
        await store._finish_write_out(store._open[0])


async def restore_after_crash(path: str, state_dir: Path) -> Any:
    """``crash_after_write_outs`` in a child killed at its end, then a restore here."""
    code = (
        "import asyncio, os, sys\n"
        "from tests.test_store_writes import crash_after_write_outs\n"
        "asyncio.run(crash_after_write_outs(sys.argv[1], sys.argv[2]))\n"
        "os._exit(0)\n"
    )
    child = subprocess.run(
        [sys.executable, "-c", code, path, str(state_dir)],
        cwd=Path(__file__).parent.parent,
        capture_output=True,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr.decode()
    settings = Settings(app_id=f"crash-{path}", partitions=1, state_dir=state_dir / path)
    return await restore_again(settings, MarshalStateCodec(MOMENTS))


def test_a_checkpoint_survives_a_crash_with_every_entry_it_covers() -> None:
    """A SIGKILL after a checkpoint and a later write-out without one: the copy restores at
    the checkpoint with all its entries, the changelog tail to be replayed on top (the
    WAL-less write-outs before it were flushed before it was written; the later one, lost
    with the memtables, took its delete of the checkpoint with it). Without that flush the
    copy's applied offset is lost and the copy discarded; with the write-outs in the WAL, the
    later one's delete survives and the copy is discarded too: a restore from the changelog
    alone."""
    with tempfile.TemporaryDirectory() as tmp:
        for path in ("python", "native"):
            restored = asyncio.run(restore_after_crash(path, Path(tmp)))
            assert restored.local_entries_reused, path
            assert restored.applied_offset == 999, path
            assert restored.windows == {"k": [(t, (t, 0.5)) for t in range(1000)]}, path


async def after_a_refused_slice(path: str, state_dir: Path) -> Any:
    """A ``record_many`` slice refused at its second effect (a redelivered offset) after its
    first was noted; the entry written out, put again and deleted; a clean restart."""
    store, _ = await open_counted(path, state_dir, f"refused-{path}")
    with pytest.raises(ValueError, match="redelivered"):
        store.record_many(0, [(5, "k", 100, (1, 0.5)), (5, "k", 101, (1, 0.5))])
    await store.flush()  # (k, 100) is in the local copy now
    store.record_many(0, [(6, "k", 100, (2, 0.5))])
    store.evict(0, "k", [100])
    await store.stop()
    restored = await restore_again(store.settings, store.codec)
    return restored


def test_a_refused_slice_keeps_the_horizon_past_what_it_noted() -> None:
    """The effects a refused ``record_many`` noted before its error are in ``pending``: the
    horizon must cover their times, else a later put of one of them counts as fresh and its
    deletion is dropped while the local copy holds it (a clean restart would serve it)."""
    with tempfile.TemporaryDirectory() as tmp:
        for path in ("python", "native"):
            restored = asyncio.run(after_a_refused_slice(path, Path(tmp)))
            assert restored.local_entries_reused and restored.windows == {}, path


LONG_KEYS = st.one_of(KEYS, st.text(max_size=3).map(lambda t: "k" * 40 + t), st.text(max_size=6))


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["put", "put", "evict", "expire"]),
            LONG_KEYS,
            st.lists(TIMES, min_size=1, max_size=3),
        ),
        max_size=60,
    ),
    piece=st.integers(1, 70),
)
def test_the_native_pending_writes_and_write_out_order_are_the_python_ones(
    steps: list[tuple[str, str, list[int]]], piece: int
) -> None:
    """``PendingWrites`` noted by ``write_effects`` / ``write_evictions`` /
    ``write_expirations`` holds what the Python twin's dict and set hold (``items``,
    ``fresh_ids``, the cleared ranges), and its write-out (``take``: ids of keys sharing 40+
    bytes, of other lengths, times over all of int64) is the Python twin's, piece by piece."""
    native = stores.native()
    pending, twin = native.PendingWrites(), PyPendingWrites()  # type: ignore[union-attr]
    cleared: dict[bytes, bytes] = {}
    twin_cleared: dict[bytes, bytes] = {}
    horizon: int | None = None
    twin_horizon: int | None = None
    for offset, (kind, key, times) in enumerate(steps):
        data = offset.to_bytes(2, "big") * (1 + offset % 3)  # rewrites of other lengths
        eids = [entry_id(key, t) for t in times]
        if kind == "put":
            effect = (offset, key, times[0], data, times[1:])
            _, horizon = native.write_effects(  # type: ignore[union-attr]
                [effect], offset - 1, 0, True, None, pending, horizon, []
            )
            if twin_horizon is None or times[0] > twin_horizon:
                twin_horizon = times[0]
                twin.fresh.add(eids[0])
            twin.puts[eids[0]] = data
            for eid in eids[1:]:
                forget(twin.puts, twin.fresh, eid)
        elif kind == "evict":
            native.write_evictions(key, times, pending, [])  # type: ignore[union-attr]
            for eid in eids:
                forget(twin.puts, twin.fresh, eid)
        else:
            native.write_expirations(key, times, pending, cleared, [])  # type: ignore[union-attr]
            held = False
            for eid in eids:
                if eid in twin.fresh:
                    twin.fresh.discard(eid)
                    del twin.puts[eid]
                else:
                    twin.puts.pop(eid, None)
                    held = True
            prefix = eids[0][:-8]
            if held and max(eids) + b"\x00" > twin_cleared.get(prefix, b""):
                twin_cleared[prefix] = max(eids) + b"\x00"
        assert pending.items() == twin.items()
        assert pending.fresh_ids() == twin.fresh_ids()
        assert cleared == twin_cleared
        assert horizon == twin_horizon
    n = len(twin)
    assert len(pending) == n
    items = twin.items()
    want = [("delete", k) if v is None else ("put", k, v) for k, v in items]
    for writes in (pending.take(), twin.take()):
        assert len(writes) == n
        assert [writes[i] for i in range(n)] == items
        ops: list[tuple] = []
        put = lambda k, v, ops=ops: ops.append(("put", k, v))  # noqa: E731
        delete = lambda k, ops=ops: ops.append(("delete", k))  # noqa: E731
        for start in range(0, n, piece):
            assert writes.fill(put, delete, start, start + piece) == min(piece, n - start)
        assert ops == want
    assert len(pending) == len(twin) == 0 and pending.items() == twin.items() == []


def test_the_pending_writes_keep_no_python_object_per_effect() -> None:
    """With the native writes the pending local writes are one native ``PendingWrites``:
    ``record_many`` of 2,000 effects on as many entries (none evicted) keeps no Python object
    per entry, where the Python path (as the native writes into a dict and a set did) keeps an
    entry id ``bytes`` per effect in its dict and set (and its changelog queue's records);
    both note the same writes and hand over the same records."""
    n = 2_000
    codec = MarshalStateCodec(MOMENTS)
    partials = [codec.encode((i, 0.5)) for i in range(n)]
    effects = [(i + 1, "k", i, partials[i]) for i in range(n)]
    with tempfile.TemporaryDirectory() as tmp:
        kept = {p: asyncio.run(blocks_kept(p, effects, Path(tmp))) for p in ("python", "encoded")}
    assert kept["encoded"][1:] == kept["python"][1:]
    assert len(kept["encoded"][2]) == n
    assert kept["python"][0] > 2 * n
    assert kept["encoded"][0] < n // 10


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(-10, 300),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=3),
)
OBJECTS = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4).map(tuple), max_leaves=12)


@settings(max_examples=400, deadline=None)
@given(obj=OBJECTS, share=st.booleans())
def test_dumps_partial_is_marshal_dumps_or_says_it_cannot(obj: Any, share: bool) -> None:
    native = stores.native()
    if share:  # the same objects twice, and an object held elsewhere too
        obj = (obj, obj, 12345.5, [obj][0])
    got = native.dumps_partial(obj)  # type: ignore[union-attr]
    want = marshal.dumps(obj, 4)
    if got is None:  # only for what it leaves to the Python codec
        assert any(
            isinstance(x, str) or (type(x) is int and not -(2**63) <= x < 2**63)
            for x in _leaves(obj)
        )
    else:
        assert got == want


def _leaves(obj: Any) -> list[Any]:
    if isinstance(obj, tuple):
        return [leaf for item in obj for leaf in _leaves(item)]
    return [obj]


KERNEL_VALUES = st.one_of(
    st.integers(-300, 300),
    st.sampled_from([-6, -5, 255, 256, 257]),  # the ends of CPython's cached small ints
    st.sampled_from([2**31, -(2**31) - 1, 2**40, 2**62, -(2**62), -0.0, float("inf"), 0.5]),
    st.floats(-1e6, 1e6),
)
FOREIGN = st.sampled_from([True, None, 2**70])  # taken by the Python path only, or refused


@settings(max_examples=120, deadline=None)
@given(
    names=st.one_of(st.sampled_from([(n,) for n in NATIVE_NAMES]), st.sampled_from(COMPOSES)),
    batches=st.lists(
        st.lists(
            st.tuples(
                st.sampled_from(["a", "é", "b"]),
                st.integers(-20, 300),
                st.one_of(KERNEL_VALUES, KERNEL_VALUES, KERNEL_VALUES, FOREIGN),
            ),
            max_size=20,
        ),
        min_size=1,
        max_size=5,
    ),
)
@example(
    names=("count", "sum", "max", "mean", "pop_stddev"),
    batches=[[("a", 0, 256), ("a", 0, -5), ("é", 1, 2**31), ("b", 2, 0.5), ("b", 3, 257)]],
)
def test_the_kernel_encodes_its_partials_as_the_codec_does(
    names: tuple[str, ...], batches: list[list[tuple[str, int, Any]]]
) -> None:
    config = WindowConfig.from_settings(replace(Settings(), aggregations=names, retention=100))
    codec = MarshalStateCodec(config.composed)
    plain, encoded = NativeKeyWindows(config, "batch"), NativeKeyWindows(config, "batch")
    tag = 0
    for batch in batches:
        tags = list(range(tag, tag + len(batch)))
        tag += len(batch)
        want = plain.apply(batch, tags)
        got = encoded.apply_encoded(batch, tags, codec)
        assert [e[:3] for e in got.effects] == [e[:3] for e in want.effects]
        for (_, _, _, data), (_, _, _, partial) in zip(got.effects, want.effects, strict=True):
            assert data == codec.encode(partial), partial
        assert [(t, r.reason, r.detail) for t, r in got.rejected] == [
            (t, r.reason, r.detail) for t, r in want.rejected
        ]
        assert got.last == want.last
        assert encoded.native == plain.native


async def blocks_kept(path: str, effects: list[tuple], state_dir: Path) -> tuple[int, list, list]:
    """Python memory blocks the store keeps after ``record_many(effects, encoded=True)`` on
    ``path`` (``python`` or ``encoded``), the changelog records it then hands over and its
    pending local writes before."""
    settings = Settings(app_id=f"blocks-{path}", partitions=1, state_dir=state_dir / path)
    link = Recorder()
    store = WindowStore(settings, MarshalStateCodec(MOMENTS), link)  # type: ignore[arg-type]
    if path == "python":
        store._native_writes = None
    await store.start()
    await store.restore(0)
    before = sys.getallocatedblocks()
    store.record_many(0, effects, encoded=True)
    kept = sys.getallocatedblocks() - before
    noted = store._open[0].pending.items()
    await store.send_changes(0)
    await store.stop()
    return kept, [r for _, batch in link.sent for r in batch], noted


def test_the_changelog_records_are_queued_without_a_python_object_each() -> None:
    """With the native writes the changelog queue is one native buffer
    (``ChangelogRecords``): ``record_many`` keeps no Python object per changelog record, where
    a list kept an ``(entry id, value)`` tuple and the upsert's bytes per effect and a tuple
    and the entry id per tombstone (each effect here evicts the previous entry, which was
    never written out, so ``pending`` ends with one entry), and hands over the same records."""
    n = 2_000
    codec = MarshalStateCodec(MOMENTS)
    partials = [codec.encode((i, 0.5)) for i in range(n)]
    effects = [(i + 1, "k", i, partials[i], (i - 1,) if i else ()) for i in range(n)]
    with tempfile.TemporaryDirectory() as tmp:
        kept = {p: asyncio.run(blocks_kept(p, effects, Path(tmp))) for p in ("python", "encoded")}
    assert kept["encoded"][1] == kept["python"][1]
    assert len(kept["encoded"][1]) == 1 + 2 * n - 1  # the restore's shape record first
    assert kept["python"][0] > 4 * n
    assert kept["encoded"][0] < n // 10
