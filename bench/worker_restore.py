"""Window-store restore: 10^6 retained entries from the changelog, from local RocksDB, rebuild.

``python -m bench.worker_restore [--entries N] [--keys K] [--churn F] [--codec C] [--quick]
[--broker-kind embedded|kafka]`` writes one changelog partition of ``entries`` retained entries
(plus ``churn`` of history to drop) and times the restore from the changelog alone, from the
local copy, the index build after each and the time until the partition is ready, plus memory
per entry. Writes ``bench/results/worker_restore_<codec>.json`` (docs/benchmarks.md,
"Restore"); each timed step: docs/bench-methods.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import random
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from agents.clients import client_options
from agents.kafka_changelog import KafkaChangelog
from app.settings import Settings
from app.topics import CHANGELOG_TOPIC_CONFIGS, TopicSpec, create_topics
from bench.bench_broker import BenchBroker, add_broker_kind_option, bench_broker, results_path
from stores.changelog import encode_upsert, entry_id
from stores.gc_pause import paused_gc
from stores.key_windows import KeyWindows, PartialJsonCodec, WindowConfig
from stores.window_store import MarshalStateCodec, WindowStore

RESULTS = Path(__file__).parent / "results"
T0 = 1_700_000_000_000
TARGET_S = 10.0


@contextlib.contextmanager
def broker_bootstrap(kind: str) -> Iterator[BenchBroker]:
    """``KAFKA_BOOTSTRAP`` if set (kind ``external``, profile ``kafka``), else a fresh broker
    of ``kind``."""
    external = os.environ.get("KAFKA_BOOTSTRAP")
    if external:
        yield BenchBroker(external, "kafka", "external")
        return
    with bench_broker(kind) as broker:
        yield broker


async def write_changelog(
    settings: Settings,
    codec: PartialJsonCodec,
    config: WindowConfig,
    entries: int,
    keys: int,
    churn: float,
    seed: int,
) -> int:
    """Produce the changelog partition 0; return the number of records written."""
    rng = random.Random(seed)
    lift = config.composed.lift
    producer = AIOKafkaProducer(**client_options(settings), linger_ms=20, max_batch_size=1 << 20)
    await producer.start()
    topic = settings.changelog_topic
    sent = 0
    try:
        history = int(entries * churn)
        # evicted history first: upserts, later their tombstones
        for i in range(history):
            key, t = f"key-{i % keys}", T0 - 1 - i // keys
            value = encode_upsert(i, [], codec.encode(lift(rng.uniform(0, 100))))
            await producer.send(topic, value, key=entry_id(key, t), partition=0)
        for i in range(history):
            key, t = f"key-{i % keys}", T0 - 1 - i // keys
            await producer.send(topic, None, key=entry_id(key, t), partition=0)
        for i in range(entries):
            key, t = f"key-{i % keys}", T0 + i // keys
            value = encode_upsert(history + i, [], codec.encode(lift(rng.uniform(0, 100))))
            await producer.send(topic, value, key=entry_id(key, t), partition=0)
        sent = 2 * history + entries
        await producer.flush()
    finally:
        await producer.stop()
    return sent


class BatchJsonCodec(PartialJsonCodec):
    """The worker's JSON codec plus ``decode_many``: one JSON parse for all partials."""

    def decode_many(self, data: list[bytes]) -> list[Any]:
        from_state = self._from_state
        return [from_state(state) for state in json.loads(b"[" + b",".join(data) + b"]")]


CODECS = {"worker": PartialJsonCodec, "batch": BatchJsonCodec, "marshal": MarshalStateCodec}


class Clock:
    """Wall and CPU seconds (of this process) since the last ``lap``."""

    def __init__(self) -> None:
        self._wall, self._cpu = time.perf_counter(), time.process_time()

    def lap(self) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        elapsed = (wall - self._wall, cpu - self._cpu)
        self._wall, self._cpu = wall, cpu
        return elapsed


async def timed_restore(
    settings: Settings, codec: PartialJsonCodec, config: WindowConfig
) -> tuple[dict[str, tuple[float, float]], Any]:
    """Restore partition 0, build the index, stop the store: ``(phases, restored)`` with
    ``(wall s, CPU s)`` per phase: ``restore``, ``index`` and ``stop`` (flush and close, which
    waits for the local copy a changelog-only restore writes after it returns)."""
    store = WindowStore(settings, codec, KafkaChangelog(settings))
    await store.start()
    phases = {}
    try:
        clock = Clock()
        restored = await store.restore(0)
        phases["restore"] = clock.lap()
        built_index(config, restored.windows)
        phases["index"] = clock.lap()
    finally:
        clock = Clock()
        await store.stop()
        phases["stop"] = clock.lap()
    return phases, restored


async def restored_partition(settings: Settings, codec: PartialJsonCodec) -> Any:
    """Partition 0 as a fresh store restores it (the store stopped again)."""
    store = WindowStore(settings, codec, KafkaChangelog(settings))
    await store.start()
    try:
        return await store.restore(0)
    finally:
        await store.stop()


@contextlib.contextmanager
def traced_growth(out: list[int]) -> Iterator[None]:
    """Append to ``out`` the bytes still allocated at the end of the block (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        yield
        gc.collect()
        out.append(tracemalloc.get_traced_memory()[0] - before)
    finally:
        tracemalloc.stop()


def built_index(config: WindowConfig, windows: dict[str, list[tuple[int, Any]]]) -> KeyWindows:
    """The pipeline's index build (``WindowsPipeline.state``): one ``KeyWindows.load`` (FiBA
    bulk build) per key, with the cyclic garbage collector paused, the result frozen."""
    index = KeyWindows(config, emit="event")
    with paused_gc(freeze=True):
        for key, pairs in windows.items():
            index.load(key, pairs)
    return index


async def run(
    entries: int, keys: int, churn: float, seed: int, codec_name: str, broker_kind: str
) -> dict[str, Any]:
    with (
        broker_bootstrap(broker_kind) as broker,
        tempfile.TemporaryDirectory(prefix="bench-restore-") as tmp,
    ):
        settings = replace(
            Settings(),
            broker=broker.bootstrap,
            broker_profile=broker.profile,
            app_id=f"bench-restore-{uuid.uuid4().hex[:8]}",
            partitions=1,
            state_dir=Path(tmp),
        )
        config = WindowConfig.from_settings(settings)
        codec = CODECS[codec_name](config.composed)
        load_before = os.getloadavg()[0]
        await create_topics(
            settings, [TopicSpec(settings.changelog_topic, 1, 1, CHANGELOG_TOPIC_CONFIGS)]
        )
        start = time.perf_counter()
        records = await write_changelog(settings, codec, config, entries, keys, churn, seed)
        write_s = time.perf_counter() - start

        changelog, restored = await timed_restore(settings, codec, config)
        (changelog_s, changelog_cpu), (index_s, index_cpu) = (
            changelog["restore"],
            changelog["index"],
        )
        assert not restored.local_entries_reused
        assert restored.changelog_records == records
        retained = sum(len(pairs) for pairs in restored.windows.values())
        assert retained == entries, (retained, entries)
        del restored

        local, again = await timed_restore(settings, codec, config)
        (local_s, local_cpu), (local_index_s, local_index_cpu) = local["restore"], local["index"]
        assert again.local_entries_reused and again.changelog_records == 0
        del again

        # memory, untimed: the restored windows lists, then the FiBA index built from them
        grown: list[int] = []
        with traced_growth(grown):
            kept = await restored_partition(settings, codec)
        with traced_growth(grown):
            index = built_index(config, kept.windows)
        windows_bytes, index_bytes = grown
        del index, kept
    return {
        "broker": broker.kind,
        "codec": codec_name,
        "load_average_1m": [load_before, os.getloadavg()[0]],
        "entries": entries,
        "keys": keys,
        "churn": churn,
        "changelog_records": records,
        "write_s": write_s,
        "restore_changelog_s": changelog_s,
        "restore_changelog_cpu_s": changelog_cpu,
        "restore_changelog_records_per_s": records / changelog_s,
        "index_after_changelog_s": index_s,
        "index_after_changelog_cpu_s": index_cpu,
        "ready_from_changelog_s": changelog_s + index_s,
        "ready_from_changelog_cpu_s": changelog_cpu + index_cpu,
        "stop_after_changelog_s": changelog["stop"][0],
        "stop_after_changelog_cpu_s": changelog["stop"][1],
        "restore_local_s": local_s,
        "restore_local_cpu_s": local_cpu,
        "index_after_local_s": local_index_s,
        "index_after_local_cpu_s": local_index_cpu,
        "ready_from_local_s": local_s + local_index_s,
        "ready_from_local_cpu_s": local_cpu + local_index_cpu,
        "windows_bytes_per_entry": windows_bytes / entries,
        "index_bytes_per_entry": index_bytes / entries,
        "target_met": changelog_s + index_s <= TARGET_S,
    }


def markdown(results: list[dict[str, Any]]) -> str:
    lines = [
        "| entries | keys | codec | changelog records | store restore from changelog (CPU) "
        "| + index = ready (CPU) | local copy written after (CPU) "
        "| store restore from local RocksDB (CPU) | + index = ready (CPU) "
        "| windows B/entry | FiBA B/entry | load avg |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        lines.append(
            f"| {r['entries']:,} | {r['keys']:,} | {r['codec']} | {r['changelog_records']:,} "
            f"| {r['restore_changelog_s']:.1f} s ({r['restore_changelog_cpu_s']:.1f} s) "
            f"| {r['index_after_changelog_s']:.1f} s = **{r['ready_from_changelog_s']:.1f} s** "
            f"({r['ready_from_changelog_cpu_s']:.1f} s) "
            f"| {r['stop_after_changelog_s']:.1f} s ({r['stop_after_changelog_cpu_s']:.1f} s) "
            f"| {r['restore_local_s']:.1f} s ({r['restore_local_cpu_s']:.1f} s) "
            f"| {r['index_after_local_s']:.1f} s = {r['ready_from_local_s']:.1f} s "
            f"({r['ready_from_local_cpu_s']:.1f} s) "
            f"| {r['windows_bytes_per_entry']:.0f} | {r['index_bytes_per_entry']:.0f} "
            f"| {r['load_average_1m'][0]:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--churn", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--codec", choices=sorted(CODECS), default="worker")
    parser.add_argument("--quick", action="store_true", help="10^5 entries")
    add_broker_kind_option(parser)
    args = parser.parse_args()
    entries = 100_000 if args.quick else args.entries
    result = asyncio.run(
        run(entries, args.keys, args.churn, args.seed, args.codec, args.broker_kind)
    )
    print(json.dumps(result), flush=True)
    path = results_path(
        (RESULTS / "quick" if args.quick else RESULTS) / f"worker_restore_{args.codec}.json",
        args.broker_kind,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([result], indent=2) + "\n")
    print(markdown([result]))


if __name__ == "__main__":
    main()
