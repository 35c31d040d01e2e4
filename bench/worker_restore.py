"""Window-store restore: 10^6 retained entries from the changelog, from local RocksDB, rebuild.

``python -m bench.worker_restore [--entries N] [--keys K] [--aggregations A] [--churn F]
[--codec C] [--impl native,python] [--quick] [--broker-kind kafka|embedded]`` writes one
changelog partition of ``entries`` retained entries (plus ``churn`` of history to drop), then
per restore implementation (``stores.restored_entries``: native, Python) times the restore
from the changelog alone, from the local copy, the index build after each, and each phase of
the changelog restore on its own (fetch, record decode, replay, sort, grouping, partial
decode, load), plus memory per entry. Writes ``bench/results/worker_restore_<codec>.json``
(``_<kind>`` for a broker other than the embedded one; docs/benchmarks.md, "Restore"); each
timed step: docs/bench-methods.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import random
import shutil
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from dataclasses import replace
from itertools import groupby, repeat
from operator import itemgetter, sub
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition

from agents.clients import client_options
from agents.kafka_changelog import ChangelogReader, KafkaChangelog
from app.settings import Settings
from app.topics import CHANGELOG_TOPIC_CONFIGS, TopicSpec, create_topics
from bench.bench_broker import (
    BenchBroker,
    add_broker_kind_option,
    announce_run,
    bench_broker,
    write_results,
)
from stores import native, window_store
from stores.changelog import SHAPE_KEY, encode_upsert, entry_id, replay_changelog
from stores.gc_pause import paused_gc
from stores.key_windows import KeyWindows, PartialJsonCodec, WindowConfig
from stores.restored_entries import MARSHAL_FORMAT, PyEntries, replay_batches, restored_entries
from stores.window_store import MarshalStateCodec, WindowStore, store_root

RESULTS = Path(__file__).parent / "results"
T0 = 1_700_000_000_000
TARGET_S = 3.0


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


async def fetched_batches(settings: Settings) -> list[Any]:
    """Every record batch of changelog partition 0, as ``ChangelogReader`` hands them over
    (CRC checked, records not yet parsed)."""
    tp = TopicPartition(settings.changelog_topic, 0)
    async with ChangelogReader(settings) as reader:
        return [batch async for batches in reader.read(tp, 0) for batch in batches]


async def phase_times(
    settings: Settings, codec: Any, config: WindowConfig, impl: str
) -> dict[str, tuple[float, float]]:
    """``(wall s, CPU s)`` of each phase of a restore from the changelog alone, each run on its
    own over the previous phase's result (the store interleaves fetching with the replay), the
    cyclic collector paused from the record decode on (the store's replay lets records go at
    once; held here they would be collected again and again): ``fetch`` (Fetch responses,
    batches' CRC), then for ``python`` ``record decode`` (aiokafka's C parser), ``replay``
    (into a dict), ``sort``, ``group`` (per key: times and partial bytes), ``partial decode``
    (``decode_many`` per key), and for ``native`` ``replay`` (record decode included) and
    ``windows`` (sort, group and partial decode in one call); then ``load`` (the index:
    ``KeyWindows.load`` per key)."""
    phases = {}
    clock = Clock()
    batches = await fetched_batches(settings)
    phases["fetch"] = clock.lap()
    with paused_gc():
        if impl == "native":
            entries = restored_entries()
            replay_batches(entries, batches, -1)
            phases["replay"] = clock.lap()
            entries.pop(SHAPE_KEY)
            windows = entries.windows(codec.decode, codec.format == MARSHAL_FORMAT)
            phases["windows"] = clock.lap()
        else:
            records = [list(batch) for batch in batches]
            phases["record decode"] = clock.lap()
            found: dict[bytes, bytes] = {}
            for batch_records in records:
                replay_changelog(batch_records, -1, found.__setitem__, lambda k: found.pop(k, None))
            phases["replay"] = clock.lap()
            found.pop(SHAPE_KEY, None)
            ids = sorted(found)
            phases["sort"] = clock.lap()
            groups = []
            for prefix, group in groupby(ids, itemgetter(slice(None, -8))):
                eids = list(group)
                # as PyEntries.windows does it: C-level maps
                times = map(
                    sub,
                    map(int.from_bytes, map(itemgetter(slice(len(prefix), None)), eids)),
                    repeat(1 << 63),
                )
                groups.append(
                    (prefix[4:].decode(), list(times), list(map(found.__getitem__, eids)))
                )
            phases["group"] = clock.lap()
            decode_many = getattr(codec, "decode_many", None) or (
                lambda data: list(map(codec.decode, data))
            )
            windows = {
                key: list(zip(times, decode_many(data), strict=True)) for key, times, data in groups
            }
            phases["partial decode"] = clock.lap()
    built_index(config, windows)
    phases["load"] = clock.lap()
    return phases


@contextlib.contextmanager
def restore_impl(impl: str) -> Iterator[None]:
    """The window store restoring with the ``impl`` entries (``native``: the default when the
    native core is installed; ``python``: ``PyEntries``)."""
    if impl == "native":
        if native() is None:
            raise SystemExit("the native core is not installed: make install (cargo on PATH)")
        yield
        return
    original = window_store.restored_entries
    window_store.restored_entries = PyEntries
    try:
        yield
    finally:
        window_store.restored_entries = original


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


async def run_impl(
    settings: Settings,
    codec: Any,
    config: WindowConfig,
    impl: str,
    counts: tuple[int, int],
    memory: bool,
) -> dict[str, Any]:
    """Every measurement of one restore implementation over the written changelog of
    ``counts`` = (retained entries, changelog records); memory per entry if ``memory``."""
    entries, records = counts
    load_before = os.getloadavg()[0]
    with restore_impl(impl):
        phases = await phase_times(settings, codec, config, impl)
        gc.collect()
        changelog, restored = await timed_restore(settings, codec, config)
        (changelog_s, changelog_cpu), (index_s, index_cpu) = (
            changelog["restore"],
            changelog["index"],
        )
        assert not restored.local_entries_reused
        # plus the shape record, which the first restore of the run wrote
        assert restored.changelog_records in (records, records + 1)
        retained = sum(len(pairs) for pairs in restored.windows.values())
        assert retained == entries, (retained, entries)
        del restored
        gc.collect()

        local, again = await timed_restore(settings, codec, config)
        (local_s, local_cpu), (local_index_s, local_index_cpu) = local["restore"], local["index"]
        assert again.local_entries_reused and again.changelog_records == 0
        del again
        shutil.rmtree(store_root(settings))  # the next implementation starts without a copy
        gc.collect()

        grown: list[int] = []
        if memory:  # untimed: the restored windows lists, then the FiBA index built from them
            with traced_growth(grown):
                kept = await restored_partition(settings, codec)
            with traced_growth(grown):
                index = built_index(config, kept.windows)
            del index, kept
            shutil.rmtree(store_root(settings))
    return {
        "impl": impl,
        "load_average_1m": [load_before, os.getloadavg()[0]],
        "phases": {name: list(times) for name, times in phases.items()},
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
        **(
            {
                "windows_bytes_per_entry": grown[0] / entries,
                "index_bytes_per_entry": grown[1] / entries,
            }
            if grown
            else {}
        ),
        "target_met": changelog_s + index_s <= TARGET_S,
    }


async def run(
    entries: int,
    keys: int,
    aggregations: tuple[str, ...],
    churn: float,
    seed: int,
    codec_name: str,
    impls: list[str],
    broker_kind: str,
) -> list[dict[str, Any]]:
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
            aggregations=aggregations,
        )
        config = WindowConfig.from_settings(settings)
        codec = CODECS[codec_name](config.composed)
        await create_topics(
            settings, [TopicSpec(settings.changelog_topic, 1, 1, CHANGELOG_TOPIC_CONFIGS)]
        )
        start = time.perf_counter()
        records = await write_changelog(settings, codec, config, entries, keys, churn, seed)
        write_s = time.perf_counter() - start
        results = []
        for index, impl in enumerate(impls):
            result = await run_impl(
                settings, codec, config, impl, (entries, records), memory=index == 0
            )
            results.append(
                {
                    "broker": broker.kind,
                    "codec": codec_name,
                    "aggregations": ",".join(aggregations),
                    "entries": entries,
                    "keys": keys,
                    "churn": churn,
                    "changelog_records": records,
                    "write_s": write_s,
                    **result,
                }
            )
            print(json.dumps(results[-1]), flush=True)
    return results


def markdown(results: list[dict[str, Any]]) -> str:
    lines = [
        "| entries | keys | impl | changelog records | store restore from changelog (CPU) "
        "| + index = ready (CPU) | local copy written after (CPU) "
        "| store restore from local RocksDB (CPU) | + index = ready (CPU) "
        "| phases from the changelog, wall (CPU) | load avg |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        phases = ", ".join(
            f"{name} {wall:.2f} ({cpu:.2f})" for name, (wall, cpu) in r["phases"].items()
        )
        lines.append(
            f"| {r['entries']:,} | {r['keys']:,} | {r['impl']} | {r['changelog_records']:,} "
            f"| {r['restore_changelog_s']:.2f} s ({r['restore_changelog_cpu_s']:.2f} s) "
            f"| {r['index_after_changelog_s']:.2f} s = **{r['ready_from_changelog_s']:.2f} s** "
            f"({r['ready_from_changelog_cpu_s']:.2f} s) "
            f"| {r['stop_after_changelog_s']:.2f} s ({r['stop_after_changelog_cpu_s']:.2f} s) "
            f"| {r['restore_local_s']:.2f} s ({r['restore_local_cpu_s']:.2f} s) "
            f"| {r['index_after_local_s']:.2f} s = {r['ready_from_local_s']:.2f} s "
            f"({r['ready_from_local_cpu_s']:.2f} s) | {phases} "
            f"| {r['load_average_1m'][0]:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--aggregations", default="sum,count,max")
    parser.add_argument("--churn", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--codec", choices=sorted(CODECS), default="marshal")
    parser.add_argument(
        "--impl",
        default="native,python",
        help="restore implementations to time, in order (native, python)",
    )
    parser.add_argument("--quick", action="store_true", help="10^5 entries")
    add_broker_kind_option(parser, default="kafka")
    args = parser.parse_args()
    impls = args.impl.split(",")
    if not set(impls) <= {"native", "python"}:
        parser.error(f"--impl: native or python, not {args.impl}")
    run_facts = announce_run("bench.worker_restore")
    entries = 100_000 if args.quick else args.entries
    results = asyncio.run(
        run(
            entries,
            args.keys,
            tuple(args.aggregations.split(",")),
            args.churn,
            args.seed,
            args.codec,
            impls,
            args.broker_kind,
        )
    )
    path = (RESULTS / "quick" if args.quick else RESULTS) / f"worker_restore_{args.codec}.json"
    write_results(results, path, args.broker_kind, run_facts)
    print(markdown(results))


if __name__ == "__main__":
    main()
