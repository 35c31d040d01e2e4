"""The changelog in chunks: what one record per key per batch can save.

``python -m bench.changelog_chunks [--occupancies 1000,10000] [--batches N] [--rounds R]`` runs
offline (no broker) on the worker benchmark's input shape and measures, in CPU microseconds per
event, the ``emit=batch`` store path of today against a changelog of one record per key and
batch, to tell whether the latter is worth its format change. Prints a Markdown table of the
medians; each variant: docs/bench-methods.md. ``--native`` measures both layouts encoded
natively instead (``stores._native.bench_changelog_layouts``: Kafka record batches with their
CRC, snapshots bounding the chunks under compaction, the compacted log replayed), writing
``bench/results/changelog_layouts_native.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import marshal
import statistics
import struct
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

from aiokafka.producer.message_accumulator import BatchBuilder
from rocksdict import Options, Rdict, WriteBatch

from app.settings import Settings
from bench.run_frame import announce, load_after, write_json
from stores.changelog import (
    APPLIED_KEY,
    UPSERT_HEADER,
    encode_offset,
    encode_upsert,
    entry_id_of,
    key_prefix,
)
from stores.key_windows import WindowConfig
from stores.null_changelog import NullChangelog
from stores.window_store import MarshalStateCodec, WindowStore, replay_changelog

KEYS = 100
BATCH = 1_000
STORE_SLICE = 128
T0 = 1_700_000_000_000
SPACING_MS = 100
SNAPSHOT_PART_BYTES = 900_000
_TIME = struct.Struct(">Q")
_BIAS = 1 << 63


class Rec(NamedTuple):
    """A changelog record as the replay reads it."""

    offset: int
    key: bytes
    value: bytes | None


def append_all(records: Iterable[tuple[bytes, bytes | None]]) -> None:
    """Append ``records`` to aiokafka record batches of 1 MiB, as ``send_records`` does."""
    builder = BatchBuilder(1 << 20, 0, is_transactional=False)
    for key, value in records:
        if builder.append(key=key, value=value, timestamp=None, headers=[]) is None:
            builder.close()
            builder = BatchBuilder(1 << 20, 0, is_transactional=False)
            builder.append(key=key, value=value, timestamp=None, headers=[])
    builder.close()


def partial_of(i: int) -> tuple[float | int, ...]:
    """A composed partial (count, sum, max, mean's triple) of event ``i``."""
    return (1 + i % 3, 3.0 + i, 0.5 * i, 1, 3.0 + i, 0, 1, 3.0, 0.25 * i)


class Workload:
    """``batches`` batches of ``BATCH`` effects ``(offset, key, time, partial)`` with their
    encoded partials, and per batch and key the times it evicts, after a pre-fill of
    ``occupancy`` entries per key (times below the first batch's)."""

    def __init__(self, occupancy: int, batches: int) -> None:
        self.occupancy = occupancy
        self.keys = [f"key-{k}" for k in range(KEYS)]
        self.effects: list[list[tuple[int, str, int, Any]]] = []
        self.data: list[list[bytes]] = []
        self.ids: list[list[bytes]] = []
        """Entry ids of the effects: the local RocksDB writes need them in either format."""
        self.evicted: list[dict[str, list[int]]] = []
        per_key = BATCH // KEYS
        for b in range(batches):
            effects = []
            for j in range(BATCH):
                k, n = j % KEYS, occupancy + b * per_key + j // KEYS
                effects.append((b * BATCH + j, self.keys[k], T0 + n * SPACING_MS, partial_of(n)))
            self.effects.append(effects)
            self.data.append([marshal.dumps(e[3], 4) for e in effects])
            self.ids.append([entry_id_of(key_prefix(e[1]), e[2]) for e in effects])
            first = b * per_key
            self.evicted.append(
                {
                    key: [T0 + n * SPACING_MS for n in range(first, first + per_key)]
                    for key in self.keys
                }
            )

    def prefill(self) -> dict[str, dict[int, bytes]]:
        """Each key's retained entries before the first batch: time -> partial bytes."""
        return {
            key: {
                T0 + n * SPACING_MS: marshal.dumps(partial_of(n), 4) for n in range(self.occupancy)
            }
            for key in self.keys
        }


class BatchingLink(NullChangelog):
    """A ``ChangelogLink`` that appends what the store hands over to record batches, as the
    real link does before sending, and sends nothing (nothing to read back either)."""

    async def send_records(
        self, topic: str, partition: int, records: Sequence[tuple[bytes, bytes | None]]
    ) -> None:
        append_all(records)


async def time_store(work: Workload, state_dir: Path) -> float:
    """CPU seconds of the store path over every batch."""
    settings = Settings(app_id="chunks-bench", partitions=1, state_dir=state_dir)
    codec = MarshalStateCodec(WindowConfig.from_settings(settings).composed)
    store = WindowStore(settings, codec, BatchingLink())
    await store.start()
    await store.restore(0)
    cpu = 0.0
    try:
        for effects, evicted in zip(work.effects, work.evicted, strict=True):
            started = time.process_time()
            for lo in range(0, len(effects), STORE_SLICE):
                store.record_many(0, effects[lo : lo + STORE_SLICE])
            for key, times in evicted.items():
                store.evict(0, key, times)
            await store.send_changes(0)
            cpu += time.process_time() - started
    finally:
        await store.stop()
    return cpu


def per_entry_records(work: Workload, b: int) -> list[tuple[bytes, bytes | None]]:
    """Batch ``b``'s changelog records in today's format, as ``record_many`` and ``evict``
    queue them (the entry ids of the upserts made beforehand: the local writes need them in
    either format)."""
    records: list[tuple[bytes, bytes | None]] = []
    header = UPSERT_HEADER.pack
    for (offset, _, _, _), eid, data in zip(
        work.effects[b], work.ids[b], work.data[b], strict=True
    ):
        records.append((eid, header(offset, 0) + data))
    for key, times in work.evicted[b].items():
        prefix = key_prefix(key)  # once per key and batch, as ``evict`` does
        records.extend((entry_id_of(prefix, t), None) for t in times)
    records.append((APPLIED_KEY, encode_offset(work.effects[b][-1][0])))
    return records


class ChunkWriter:
    """The least a chunked changelog writer does (see the module doc): per key and batch the
    final partial bytes by time and the evicted times, one record keyed by the key's prefix and
    a per-key sequence; with ``snapshots``, a key whose live chunks hold more than ``factor``
    times its retained bytes is written whole and its older chunks tombstoned."""

    def __init__(
        self, retained: dict[str, dict[int, bytes]], snapshots: bool, factor: float = 2.0
    ) -> None:
        self.retained = retained
        self.factor = factor
        self.snapshots = snapshots
        self.prefixes = {key: key_prefix(key) for key in retained}
        self.seq = dict.fromkeys(retained, 0)
        self.low = dict.fromkeys(retained, 0)
        self.live = dict.fromkeys(retained, 0.0)
        self.untimed = 0.0
        """CPU seconds of ``_keep`` so far."""
        self.size = {key: sum(map(len, e.values())) + 8 * len(e) for key, e in retained.items()}

    def initial_records(self) -> list[tuple[bytes, bytes | None]]:
        """A snapshot of every key's retained entries (the state before the first batch);
        then, as in a steady state, each key's live chunks are set between one and ``factor`` times
        its retained bytes, so that snapshots come at every phase."""
        records: list[tuple[bytes, bytes | None]] = []
        for i, key in enumerate(self.retained):
            self._snapshot(key, records)
            self.live[key] = self._bytes(key) * (1 + (self.factor - 1) * i / len(self.retained))
        return records

    def _bytes(self, key: str) -> int:
        """Bytes of ``key``'s retained entries (partials and 8-byte times)."""
        return self.size[key]

    def batch_records(self, work: Workload, b: int) -> list[tuple[bytes, bytes | None]]:
        """Batch ``b``'s records: a chunk per key, snapshots due, the marker, their tombstones."""
        chunks: dict[str, dict[int, bytes]] = {}
        for (_, key, t, _), data in zip(work.effects[b], work.data[b], strict=True):
            chunk = chunks.get(key)
            if chunk is None:
                chunk = chunks[key] = {}
            chunk[t] = data
        records: list[tuple[bytes, bytes | None]] = []
        tombstones: list[tuple[bytes, None]] = []
        for key, chunk in chunks.items():
            evicted = work.evicted[b].get(key, [])
            value = marshal.dumps((list(chunk.items()), evicted), 4)
            records.append((self._chunk_key(key), value))
            if not self.snapshots:
                continue
            started = time.process_time()
            self._keep(key, chunk, evicted)
            self.untimed += time.process_time() - started
            self.live[key] += len(value)
            if self.live[key] > self.factor * self._bytes(key):
                tombstones.extend(self._snapshot(key, records))
        records.append((APPLIED_KEY, encode_offset(work.effects[b][-1][0])))
        return records + tombstones

    def _keep(self, key: str, chunk: dict[int, bytes], evicted: list[int]) -> None:
        """Apply a chunk to the writer's copy of ``key``'s retained entries and their bytes:
        it stands for the local RocksDB copy, which the store writes anyway, so its time is
        left out (``untimed``): the snapshot is priced as a read of the local copy."""
        entries, size = self.retained[key], self.size[key]
        for t, data in chunk.items():
            old = entries.get(t)
            size += len(data) + 8 if old is None else len(data) - len(old)
            entries[t] = data
        for t in evicted:
            old = entries.pop(t, None)
            if old is not None:
                size -= 8 + len(old)
        self.size[key] = size

    def _chunk_key(self, key: str) -> bytes:
        seq = self.seq[key]
        self.seq[key] = seq + 1
        return b"\x01" + self.prefixes[key] + _TIME.pack(seq)

    def _snapshot(
        self, key: str, records: list[tuple[bytes, bytes | None]]
    ) -> list[tuple[bytes, None]]:
        """Append ``key``'s snapshot records; return the tombstones of its older chunks."""
        first = self.seq[key]
        part: list[tuple[int, bytes]] = []
        size, live = 0, 0
        for t, data in self.retained[key].items():
            part.append((t, data))
            size += len(data) + 12
            if size >= SNAPSHOT_PART_BYTES:
                value = marshal.dumps(part, 4)
                records.append((self._chunk_key(key), value))
                live += len(value)
                part, size = [], 0
        value = marshal.dumps(part, 4)
        records.append((self._chunk_key(key), value))
        self.live[key] = live + len(value)
        prefix = b"\x01" + self.prefixes[key]
        doomed = [(prefix + _TIME.pack(s), None) for s in range(self.low[key], first)]
        self.low[key] = first
        return doomed


def time_records(
    make: Callable[[int], list[tuple[bytes, bytes | None]]], batches: int, local: Path | None
) -> float:
    """CPU seconds of making the records of batches ``0 .. batches - 1`` (``make(b)``) and
    appending them to record batches; with ``local``, also of writing them to a RocksDB there,
    one WriteBatch per batch (without the WAL, as the store's pieces are not), as a local copy
    keyed as the changelog is."""
    db = None if local is None else Rdict(str(local), options=Options(raw_mode=True))
    cpu = 0.0
    try:
        for b in range(batches):
            started = time.process_time()
            records = make(b)
            append_all(records)
            if db is not None:
                batch = WriteBatch(raw_mode=True)
                for key, value in records:
                    if value is None:
                        batch.delete(key)
                    else:
                        batch.put(key, value)
                db.write(batch)
            cpu += time.process_time() - started
    finally:
        if db is not None:
            db.close()
    return cpu


def compacted_bytes(records: Iterable[tuple[bytes, bytes | None]]) -> int:
    """Bytes (keys and values) a compacted topic keeps of ``records``."""
    last: dict[bytes, bytes | None] = {}
    for key, value in records:
        last[key] = value
    return sum(len(k) + len(v) for k, v in last.items() if v is not None)


def replay_chunks(records: Iterable[Rec], entries: dict[bytes, bytes]) -> None:
    """The least a chunk replay does: each chunk's entries into ``entries`` by entry id."""
    for record in records:
        if record.value is None or record.key == APPLIED_KEY:
            continue
        prefix = record.key[1:-8]
        loaded = marshal.loads(record.value)
        pairs, evicted = loaded if isinstance(loaded, tuple) else (loaded, ())
        for t in evicted:
            entries.pop(entry_id_of(prefix, t), None)
        entries.update((entry_id_of(prefix, t), data) for t, data in pairs)


def time_replay(records: list[Rec], chunked: bool) -> float:
    entries: dict[bytes, bytes] = {}
    started = time.process_time()
    if chunked:
        replay_chunks(records, entries)
    else:
        replay_changelog(records, -1, entries.__setitem__, lambda k: entries.pop(k, None))
    return time.process_time() - started


def as_recs(batches: Iterable[list[tuple[bytes, bytes | None]]]) -> list[Rec]:
    return [Rec(i, k, v) for i, (k, v) in enumerate(r for batch in batches for r in batch)]


def run(occupancy: int, batches: int, rounds: int, factor: float) -> dict[str, Any]:
    work = Workload(occupancy, batches)
    events = batches * BATCH
    cpu: dict[str, list[float]] = {}
    variants = [
        "store",
        "per-entry",
        "chunks",
        "chunks+snapshots",
        "per-entry+local",
        "chunks+local",
    ]
    for r in range(rounds):
        for name in variants[r % len(variants) :] + variants[: r % len(variants)]:
            with tempfile.TemporaryDirectory() as tmp:
                local = Path(tmp) / "local" if name.endswith("+local") else None
                if name == "store":
                    seconds = asyncio.run(time_store(work, Path(tmp)))
                elif name.startswith("per-entry"):
                    seconds = time_records(partial(per_entry_records, work), batches, local)
                else:
                    writer = ChunkWriter(work.prefill(), name == "chunks+snapshots", factor)
                    writer.initial_records()
                    seconds = time_records(partial(writer.batch_records, work), batches, local)
                    seconds -= writer.untimed
            cpu.setdefault(name, []).append(seconds / events * 1e6)
    per_entry = [per_entry_records(work, b) for b in range(batches)]
    writer = ChunkWriter(work.prefill(), True, factor)
    chunked = [writer.initial_records()] + [writer.batch_records(work, b) for b in range(batches)]
    retained = sum(writer._bytes(key) for key in work.keys)
    replay = {"per-entry": [], "chunks+snapshots": []}
    recs = {"per-entry": as_recs(per_entry), "chunks+snapshots": as_recs(chunked[1:])}
    for _ in range(rounds):
        for name, records in recs.items():
            replay[name].append(time_replay(records, name != "per-entry") / events * 1e6)
    prefill = [
        (entry_id_of(key_prefix(key), t), encode_upsert(-1, (), data))
        for key, entries in work.prefill().items()
        for t, data in entries.items()
    ]
    return {
        "occupancy": occupancy,
        "events": events,
        "cpu_us_per_event": {k: statistics.median(v) for k, v in cpu.items()},
        "replay_us_per_event": {k: statistics.median(v) for k, v in replay.items()},
        "records_per_batch": {
            "per-entry": len(per_entry[-1]),
            "chunks+snapshots": statistics.mean(map(len, chunked[1:])),
        },
        "compacted_bytes_per_retained_byte": {
            "per-entry": compacted_bytes(prefill + [r for b in per_entry for r in b]) / retained,
            "chunks+snapshots": compacted_bytes(r for b in chunked for r in b) / retained,
        },
    }


def native_layouts(occupancies: list[int], rounds: int, factor: float) -> list[dict[str, Any]]:
    """Medians over ``rounds`` of ``stores._native.bench_changelog_layouts`` per occupancy,
    with enough batches for every key to go through its snapshot cycle twice."""
    from stores import native

    core = native()
    if core is None:
        raise SystemExit("the native core is not installed: make install (cargo on PATH)")
    rows = []
    for occupancy in occupancies:
        per_key = BATCH // KEYS
        batches = max(60, int(2 * factor * occupancy / per_key) + 1)
        runs = [
            core.bench_changelog_layouts(KEYS, occupancy, batches, BATCH, factor)
            for _ in range(rounds)
        ]
        row: dict[str, Any] = {"occupancy": occupancy, "batches": batches, "keys": KEYS}
        for layout in ("per_entry", "chunks"):
            row[layout] = {
                name: statistics.median(r[layout][name] for r in runs) for name in runs[0][layout]
            }
        rows.append(row)
    return rows


def main_native(args: argparse.Namespace) -> None:
    command = (
        f"python -m bench.changelog_chunks --native --occupancies {args.occupancies} "
        f"--rounds {args.rounds} --snapshot-factor {args.snapshot_factor}"
    )
    run = announce(command)
    rows = native_layouts(
        list(map(int, args.occupancies.split(","))), args.rounds, args.snapshot_factor
    )
    print(
        "\n| events/key retained | layout | encode ns/event | records/event | bytes/event "
        "| compacted bytes/entry | replay ns/entry |"
    )
    print("|" + " --- |" * 7)
    for row in rows:
        for layout in ("per_entry", "chunks"):
            r = row[layout]
            print(
                f"| {row['occupancy']:,} | {layout} | {r['encode_ns_per_event']:.0f} "
                f"| {r['records_per_event']:.2f} | {r['bytes_per_event']:.1f} "
                f"| {r['compacted_bytes_per_entry']:.1f} | {r['replay_ns_per_entry']:.0f} |"
            )
    print()
    document = {
        "command": command,
        "date": run["machine"]["date"],
        "machine": run["machine"],
        "load_after": load_after(),
        "snapshot_factor": args.snapshot_factor,
        "events_per_batch": BATCH,
        "results": rows,
    }
    write_json(Path(__file__).parent / "results" / "changelog_layouts_native.json", document)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--occupancies", default="1000,10000")
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--snapshot-factor", type=float, default=2.0)
    parser.add_argument("--native", action="store_true", help="both layouts encoded natively")
    args = parser.parse_args()
    if args.native:
        main_native(args)
        return
    announce(
        f"python -m bench.changelog_chunks --occupancies {args.occupancies} "
        f"--batches {args.batches} --rounds {args.rounds} --snapshot-factor {args.snapshot_factor}"
    )
    print()
    print(
        "| events/key retained | store today | changelog per-entry | chunks | chunks + snapshots "
        "| per-entry + local | chunks + local | replay per-entry | replay chunks + snapshots "
        "| records/batch per-entry | chunks | compacted/retained bytes per-entry | chunks |"
    )
    print("|" + " --- |" * 13)
    for occupancy in map(int, args.occupancies.split(",")):
        r = run(occupancy, args.batches, args.rounds, args.snapshot_factor)
        c, p = r["cpu_us_per_event"], r["replay_us_per_event"]
        n, s = r["records_per_batch"], r["compacted_bytes_per_retained_byte"]
        print(
            f"| {occupancy:,} | {c['store']:.2f} | {c['per-entry']:.2f} | {c['chunks']:.2f} | "
            f"{c['chunks+snapshots']:.2f} | {c['per-entry+local']:.2f} | "
            f"{c['chunks+local']:.2f} | {p['per-entry']:.2f} | {p['chunks+snapshots']:.2f} | "
            f"{n['per-entry']:,} | {n['chunks+snapshots']:,.0f} | {s['per-entry']:.2f} | "
            f"{s['chunks+snapshots']:.2f} |"
        )
    print(f"\nload average after: {Path('/proc/loadavg').read_text().split()[:3]}")


if __name__ == "__main__":
    main()
