"""``emit=batch``'s work on a partition's share offline, per call: ``python -m bench.batch_share``.

The calls ``agents.windows.WindowsPipeline._process_share`` makes per batch, without Kafka or
JSON parsing: ``bench.worker_harness``'s input (100 keys over 4 partitions, 20 % of the events up
to 5 s late) in batches of ``--batch`` events, applied by the native kernel
(``apply_encoded``), then per touched key ``evict_expired`` and ``lowered_windows``, the
aggregates encoded (``encode_many``), and the window store's ``record_many``, ``expire`` and
``send_changes`` (a real local RocksDB per partition, the changelog records discarded), over
windows pre-filled to each occupancy as in the end-to-end run (``bench.worker_scenarios``).
Prints the CPU microseconds per event of each call (``time.process_time``: RocksDB's background
threads included) and the write-outs, so that what grows with the window size shows. The
store's local write-outs run in background tasks (``WindowStore.send_changes``) that get the
loop's turns only where a call awaits: what of them is left when the events end is finished by
a timed ``flush`` (``write_out_rest``), so every write-out counts in ``total``, and so does
the flush of what the local copies' memtables hold (RocksDB flushes them once full, which a
run this short may never reach). Results go
to stdout only; ``bench/RESULTS.md`` quotes them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import stores
from agents.records import aggregate_encoder
from bench.bench_broker import BenchBroker
from bench.worker_harness import KEYS, event_stream, scenario_settings
from bench.worker_scenarios import prefilled_pairs
from stores.gc_pause import paused_gc
from stores.key_windows import WindowConfig
from stores.native_windows import new_key_windows
from stores.null_changelog import NullChangelog
from stores.window_store import MarshalStateCodec, WindowStore

PARTITIONS = 4


NO_NATIVE = "this build has none (FIBA_PURE_PYTHON=1, or installed without Rust)"


async def run_once(occupancy: int, events: int, batch: int, state_dir: Path) -> dict[str, float]:
    """CPU µs per event of each call over ``events`` events in batches of ``batch``, and the
    write-outs (``write_outs``)."""
    if stores.native() is None:
        raise SystemExit(f"bench.batch_share prices the native kernel's calls: {NO_NATIVE}")
    offline = BenchBroker("127.0.0.1:1", "kafka", "none")  # no broker: settings only
    settings = scenario_settings(offline, occupancy, "batch", state_dir)
    settings = replace(settings, partitions=PARTITIONS)
    config = WindowConfig.from_settings(settings)
    encoder = aggregate_encoder(config.aggregations, config.lowered_is_aggregates)
    codec = MarshalStateCodec(config.composed)
    store = WindowStore(settings, codec, NullChangelog())  # type: ignore[arg-type]
    await store.start()
    windows = {}
    for p in range(PARTITIONS):
        await store.restore(p)
        windows[p] = new_key_windows(config, emit="batch")
        with paused_gc(freeze=True):  # as the worker builds a restored partition
            for k in range(p, KEYS, PARTITIONS):
                windows[p].load(f"key-{k}", prefilled_pairs(config.lift, occupancy))
    stream = []
    for key, value in event_stream(events):
        obj = json.loads(value)
        stream.append((key.decode(), obj["ts"], obj["value"]))
    spent: dict[str, float] = defaultdict(float)
    clock = time.process_time
    offsets = [0] * PARTITIONS
    for lo in range(0, len(stream), batch):
        shares = defaultdict(list)
        for event in stream[lo : lo + batch]:
            shares[int(event[0].removeprefix("key-")) % PARTITIONS].append(event)
        for p, share in shares.items():
            w = windows[p]
            tags = list(range(offsets[p] + 1, offsets[p] + 1 + len(share)))
            offsets[p] += len(share)
            t0 = clock()
            applied = w.apply_encoded(share, tags, codec)
            t1 = clock()
            spent["apply_encoded"] += t1 - t0
            expired, pending = [], []
            for key, (offset, event_ts) in applied.last.items():
                t0 = clock()
                expired.append((key, w.evict_expired(key)))
                t1 = clock()
                lowered = w.lowered_windows(key, event_ts)
                spent["evict_expired"] += t1 - t0
                spent["lowered_windows"] += clock() - t1
                pending.append((key, event_ts, w.stream_time, lowered, p, offset))
            t0 = clock()
            encoder.encode_many(pending)
            t1 = clock()
            store.record_many(p, applied.effects, True)
            t2 = clock()
            for key, times in expired:
                if times:
                    store.expire(p, key, times)
            t3 = clock()
            await store.send_changes(p)
            spent["encode_many"] += t1 - t0
            spent["record_many"] += t2 - t1
            spent["expire"] += t3 - t2
            spent["send_changes"] += clock() - t3
    t0 = clock()
    await store.flush()  # the background write-outs still running, and the last ones
    for state in store._open.values():
        state.db.flush(True)  # what is left in the memtables (RocksDB flushes them when full)
    spent["write_out_rest"] += clock() - t0
    figures = {name: 1e6 * s / len(stream) for name, s in spent.items()}
    figures["total"] = sum(figures.values())
    figures["write_outs"] = sum(s.write_outs for s in store._open.values())
    await store.stop()
    for w in windows.values():
        w.clear()  # unlinks the trees: frozen, they would never be freed otherwise
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--occupancies", default="100,100000")
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--batch", type=int, default=3_600, help="events per batch (all keys)")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}")
    for occupancy in (int(x) for x in args.occupancies.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            figures = asyncio.run(run_once(occupancy, args.events, args.batch, Path(tmp)))
        calls = ", ".join(f"{name} {v:.2f}" for name, v in figures.items() if name != "write_outs")
        print(f"k={occupancy:<6d} µs CPU/event: {calls}; write-outs {figures['write_outs']:.0f}")
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
