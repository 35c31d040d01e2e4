"""The children the worker benchmarks measure, one per subprocess (``bench.worker_harness``).

``python -m bench.worker_scenarios SCENARIO OCCUPANCY`` runs one with its settings in ``FIBA_*``
variables.

``event``/``batch``: the real worker (``app.worker``, window store included) over windows
pre-filled to ``OCCUPANCY`` events per key (``event-python``/``batch-python``: on the Python
``KeyWindows`` instead of the native kernel; ``event-eager-state``: its state changes with
every hand-over; ``event-per-chunk``: handing over after every
fetched chunk); ``floor``, ``emit-floor`` and ``batch-floor``: the
input read (and, for the latter two, an output produced or a durable store written) with no
window work (``aiokafka-`` before a floor or emit mode: the same with aiokafka's record
batches); ``bare``/``bare-batch``: a Faust agent that only consumes the input. Each serves
``GET /stats`` with its counts. Methods: docs/bench-methods.md.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from agents.clients import client_options
from app.settings import Settings, load_settings
from bench.worker_harness import (
    AIOKAFKA_BATCHES,
    EAGER_STATE,
    KEYS,
    PER_CHUNK,
    PYTHON_WINDOWS,
    SPACING_MS,
    T0,
    serve_stats,
)


def run_bare(settings: Settings, batched: bool) -> None:
    """A Faust agent that only consumes the input topic (the framework's floor): one event at a
    time (``stream.events()``), or in batches like ``emit=batch`` (``stream.take_events``)."""
    import faust

    from app.faust_app import create_app

    fiba = create_app(settings)
    counts = {"accepted": 0}

    @fiba.app.agent(fiba.input_topic, name="bare")
    async def consume(stream: faust.StreamT) -> None:
        if batched:
            within = settings.batch_max_wait / 1000
            async for events in stream.take_events(settings.batch_max_records, within):
                counts["accepted"] += len(events)
        else:
            async for _ in stream.events():
                counts["accepted"] += 1

    @fiba.app.page("/stats")
    async def stats(web: Any, request: Any) -> Any:
        return web.json({"counts": counts})

    faust.Worker(fiba.app, loglevel=settings.log_level, quiet=True).execute_from_commandline()


def run_floor(
    settings: Settings, produce: bool = False, durable: bool = False, bulk: bool = True
) -> None:
    """A bare aiokafka consumer that reads every partition of the input topic from its start
    and only counts the records, fetching as ``agents.input_reader.InputReader`` does; serves
    the count as ``GET /stats`` (``{"counts": {"accepted": n}}``) on ``web_port`` until
    SIGTERM. ``produce`` (the ``emit-floor`` scenario): also, per record, one aggregate record
    as ``emit=event`` writes it, queued as the worker queues it (``KeyedOutputs``) and, after
    each chunk, produced with the worker's producer settings and its acknowledgement awaited
    (``emit_chunk``; ``bulk`` as there): the least ``emit=event`` can cost. ``durable`` (the
    ``batch-floor`` scenario): everything ``emit=batch`` does but the window work
    (``DurableFloor``): the least ``emit=batch`` can cost while every accepted event is
    durable."""
    import signal

    from agents.input_reader import FETCH_CHUNK, FETCH_WAIT_MS

    counts = {"accepted": 0}
    server = serve_stats(settings.web_port, {"counts": counts, "assigned": [0]})

    async def consume() -> None:
        async with floor_clients(settings) as (consumer, outputs):
            encode = emit_floor_encoder(settings)
            stop = asyncio.Event()
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
            if durable:
                async with DurableFloor(settings, outputs, encode, bulk) as floor:
                    while not stop.is_set():
                        counts["accepted"] += await floor.next_batch(consumer)
                return
            while not stop.is_set():
                chunk = await consumer.getmany(timeout_ms=FETCH_WAIT_MS, max_records=FETCH_CHUNK)
                if produce:
                    await emit_chunk(outputs, encode, chunk, bulk)
                counts["accepted"] += sum(map(len, chunk.values()))

    try:
        asyncio.run(consume())
    finally:
        server.shutdown()


@asynccontextmanager
async def floor_clients(settings: Settings) -> AsyncIterator[tuple[AIOKafkaConsumer, Any]]:
    """The floor scenarios' clients: a consumer assigned every input partition from its
    start, fetching as ``agents.input_reader.InputReader`` does, and the aggregates topic's
    ``KeyedOutputs`` (started) on a producer with the worker's settings (acks=all, its batch
    size); both stopped on exit."""
    from agents.batched_send import KeyedOutputs
    from agents.input_reader import FETCH_PARTITION_BYTES, FETCH_WAIT_MS
    from app.faust_app import PRODUCER_MAX_BATCH_BYTES

    consumer = AIOKafkaConsumer(
        **client_options(settings),
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=FETCH_WAIT_MS,
        max_partition_fetch_bytes=FETCH_PARTITION_BYTES,
    )
    producer = AIOKafkaProducer(
        **client_options(settings), acks="all", max_batch_size=PRODUCER_MAX_BATCH_BYTES
    )
    await consumer.start()
    await producer.start()
    try:
        tps = [TopicPartition(settings.input_topic, p) for p in range(settings.partitions)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        outputs = KeyedOutputs(lambda: producer, settings.aggregates_topic)
        await outputs.start()
        yield consumer, outputs
    finally:
        await producer.stop()
        await consumer.stop()


async def emit_chunk(outputs: Any, encode: Any, chunk: dict[Any, list[Any]], bulk: bool) -> None:
    """``emit-floor``'s work on one fetched chunk (``getmany``'s): per input record one
    aggregate record (``encode``, ``emit_floor_encoder``'s), keyed and timestamped as the
    input, queued in ``outputs`` (``KeyedOutputs``) by input partition, a partition's in one
    ``add_many`` (``bulk``) or one ``add`` per record; then all handed over and their
    acknowledgements awaited."""
    for tp, records in chunk.items():
        p = tp.partition
        if bulk:
            keys = [r.key for r in records]
            times = [r.timestamp for r in records]
            values = [encode(r.key.decode(), r.timestamp, r.offset, p) for r in records]
            outputs.add_many(keys, values, times, source=p)
            continue
        for record in records:
            value = encode(record.key.decode(), record.timestamp, record.offset, p)
            outputs.add(record.key, value, record.timestamp, source=p)
    for delivery in await outputs.send():
        await delivery


class DurableFloor:
    """The ``batch-floor`` scenario's work: ``emit=batch`` without the windows. Batches
    gathered as the input reader gathers them (chunks of ``FETCH_CHUNK`` records up to
    ``batch_max_records``), parsed (``EventParser.parse_many``) and lifted; per event the
    window store's upsert (``WindowStore.record_many``: local write and changelog record; with
    the native core written natively, the lifted partial marshalled there, where ``emit=batch``
    hands the kernel's partials already encoded) and
    one eviction (``WindowStore.evict``: the entry one retention older, as a full window
    evicts one entry per event); per key of a batch one aggregate record of the worker's
    shape (``emit_floor_encoder``; a batch's in one ``add_many``, or with ``bulk`` False one
    ``add`` per record); then, as ``WindowsPipeline.hand_over`` does, the outputs'
    acknowledgement awaited and the store's changes handed over."""

    def __init__(self, settings: Settings, outputs: Any, encode: Any, bulk: bool = True) -> None:
        from agents.events import BadEvent, EventParser
        from agents.kafka_changelog import KafkaChangelog
        from stores.key_windows import WindowConfig
        from stores.window_store import MarshalStateCodec, WindowStore

        config = WindowConfig.from_settings(settings)
        self.settings = settings
        self.outputs = outputs
        self.encode = encode
        self.bulk = bulk
        self.parser = EventParser(settings)
        self.lift = config.lift
        self.bad_event = BadEvent
        self.store = WindowStore(
            settings, MarshalStateCodec(config.composed), KafkaChangelog(settings)
        )

    async def __aenter__(self) -> DurableFloor:
        await self.store.start()
        for partition in range(self.settings.partitions):
            await self.store.restore(partition)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.store.stop()

    async def next_batch(self, consumer: AIOKafkaConsumer) -> int:
        """Fetch, apply and hand over one batch; the number of events it accepted."""
        from agents.input_reader import FETCH_CHUNK, FETCH_WAIT_MS

        batch: dict[int, list[Any]] = {}
        gathered = 0
        while gathered < self.settings.batch_max_records:
            chunk = await consumer.getmany(
                timeout_ms=0 if gathered else FETCH_WAIT_MS, max_records=FETCH_CHUNK
            )
            if not chunk:
                break
            for tp, records in chunk.items():
                batch.setdefault(tp.partition, []).extend(records)
                gathered += len(records)
        accepted = 0
        retention = self.settings.retention
        for partition, records in batch.items():
            effects = []
            last: dict[str, tuple[int, int]] = {}
            expired: dict[str, list[int]] = {}
            for record, event in zip(records, self.parser.parse_many(records), strict=True):
                if isinstance(event, self.bad_event):
                    continue
                key, ts, value = event
                effects.append((record.offset, key, ts, self.lift(value)))
                last[key] = (record.offset, ts)
                expired.setdefault(key, []).append(ts - retention)
            self.store.record_many(partition, effects)
            for key, times in expired.items():
                self.store.evict(partition, key, times)
            if self.bulk:
                keys = [key.encode() for key in last]
                values = [
                    self.encode(key, ts, offset, partition) for key, (offset, ts) in last.items()
                ]
                times = [ts for _, ts in last.values()]
                self.outputs.add_many(keys, values, times, source=partition)
            else:
                for key, (offset, ts) in last.items():
                    data = self.encode(key, ts, offset, partition)
                    self.outputs.add(key.encode(), data, ts, source=partition)
            accepted += len(effects)
        for delivery in await self.outputs.send():
            await delivery
        for partition in batch:
            await self.store.send_changes(partition)
        return accepted


def emit_floor_encoder(settings: Settings) -> Any:
    """``encode(key, event_ts, offset, partition) -> bytes``: an aggregate record of the
    worker's shape and size under ``settings`` (every window, every aggregation, values of a
    full window), answering input record ``offset`` of ``partition``, written by
    ``emit=event``'s own encoder (``agents.records.AggregateEncoder``), without any window
    work: what ``emit-floor`` produces per event."""
    from agents.records import AggregateEncoder
    from stores.key_windows import WindowConfig

    config = WindowConfig.from_settings(settings)
    composed = config.composed
    full = composed.identity
    for j in range(1000):
        full = composed.combine(full, composed.lift(round(j * 0.731 % 200 - 100, 3)))
    lowered = composed.lower(full)
    encoder = AggregateEncoder(config.aggregations, config.lowered_is_aggregates)
    spans = [(spec.name, spec.size_ms) for spec in config.windows]

    def encode(key: str, event_ts: int, offset: int, partition: int) -> bytes:
        windows = [(name, event_ts - size, event_ts, lowered) for name, size in spans]
        return encoder.encode(key, event_ts, event_ts, windows, partition, offset)

    return encode


def prefilled_pairs(lift: Any, n: int) -> list[tuple[int, Any]]:
    """What every key's windows are pre-filled with (end to end and in ``micro``): ``n``
    sorted ``(time, partial)`` pairs, one every ``SPACING_MS`` up to just before the stream
    starts, values 0-6 lifted by ``lift``."""
    start = T0 - n * SPACING_MS
    return [(start + j * SPACING_MS, lift(float(j % 7))) for j in range(n)]


def run_prefilled_worker(settings: Settings, occupancy: int) -> None:
    """The real worker; every assigned partition's windows pre-filled with ``occupancy`` events
    per key (times just before the stream starts) when the first record arrives."""
    from agents.windows import PartitionState
    from app.faust_app import FibaApp
    from app.worker import build_worker, serve
    from stores.gc_pause import paused_gc

    worker = build_worker(settings)
    pipeline = worker.pipeline
    restore = pipeline.state
    filled: set[int] = set()
    prefilling = asyncio.Lock()

    async def state_with_prefill(partition: int) -> PartitionState:
        # the first restore pre-fills every owned partition, so that no pre-filling happens
        # while records are applied (the measured part of the run)
        fiba = worker.fiba
        owned = fiba.owned_partitions(fiba.app.consumer.assignment())
        async with prefilling:  # the reader restores its partitions concurrently
            for p in sorted((owned | {partition}) - filled):
                filled.add(p)
                state = await restore(p)
                windows = state.windows
                windows.clear()
                with paused_gc(freeze=True):  # as a restore builds (agents.windows)
                    for key, pairs in prefill(fiba, p, occupancy):
                        windows.load(key, pairs)
                        # 10^5 events per key take ~0.3 s to build: keep heartbeats going
                        await asyncio.sleep(0)
                windows.sweep()
        return await restore(partition)

    pipeline.state = state_with_prefill  # type: ignore[method-assign]

    def prefill(fiba: FibaApp, partition: int, n: int) -> Iterator[tuple[str, list]]:
        """``(key, n sorted (time, partial) pairs)`` for each key of ``partition``, one key
        at a time (10^5 events per key and 100 keys take ~5 GB)."""
        for k in range(KEYS):
            key = f"key-{k}"
            if fiba.key_partition(key.encode()) == partition:
                yield key, prefilled_pairs(pipeline.config.lift, n)

    serve(worker)


def use_python_windows() -> None:
    """Make the worker build the Python ``KeyWindows`` for every partition (the
    ``event-python``/``batch-python`` scenarios: the path before the native kernel)."""
    import agents.windows
    from stores.key_windows import KeyWindows

    def python_windows(config: Any, emit: str = "event") -> KeyWindows:
        return KeyWindows(config, emit=emit)

    agents.windows.new_key_windows = python_windows  # type: ignore[assignment]


def hand_over_per_chunk() -> None:
    """Make the worker's input reader hand over after every fetched chunk, its state changes
    with each (the ``event-per-chunk`` scenario: the reader before it paced its hand-overs)."""
    import agents.input_reader

    agents.input_reader.HANDOVER_RECORDS = 1
    agents.input_reader.STATE_WAIT_S = 0.0


def hand_over_state_eagerly() -> None:
    """Make the worker's input reader hand the state changes over with every hand-over (the
    ``event-eager-state`` scenario: the reader before it left them for every
    ``STATE_WAIT_S``)."""
    import agents.input_reader

    agents.input_reader.STATE_WAIT_S = 0.0


def use_aiokafka_batches() -> None:
    """Make ``agents.batched_send`` queue output records in ``ListQueue``s and build their
    batches with aiokafka's ``BatchBuilder`` (the ``aiokafka-`` scenarios: the produce path
    before the native record batches)."""
    import agents.batched_send

    agents.batched_send.native_builder = lambda producer: None  # type: ignore[assignment]
    agents.batched_send.new_output_queue = agents.batched_send.ListQueue  # type: ignore[assignment]


def main() -> None:
    """``python -m bench.worker_scenarios SCENARIO OCCUPANCY``: run one child on the settings
    of the ``FIBA_*`` environment."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario")
    parser.add_argument("occupancy", type=int)
    args = parser.parse_args()
    settings = load_settings()
    scenario = args.scenario.removeprefix(AIOKAFKA_BATCHES)
    if scenario != args.scenario:
        use_aiokafka_batches()
    if scenario in ("floor", "emit-floor", "batch-floor"):
        run_floor(
            settings,
            produce=scenario == "emit-floor",
            durable=scenario == "batch-floor",
            bulk=scenario == args.scenario,
        )
    elif args.scenario.startswith("bare"):
        run_bare(settings, batched=args.scenario == "bare-batch")
    else:
        if args.scenario.endswith(PYTHON_WINDOWS):
            use_python_windows()
        if args.scenario.endswith(PER_CHUNK):
            hand_over_per_chunk()
        if args.scenario.endswith(EAGER_STATE):
            hand_over_state_eagerly()
        run_prefilled_worker(settings, args.occupancy)


if __name__ == "__main__":
    main()
