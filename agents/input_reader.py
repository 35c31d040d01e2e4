"""Reads the input partitions this worker owns and hands their records to the windows pipeline.

Why not a Faust stream: Faust turns every fetched record into a stream event (a consumer
thread, a message handler, a channel queue, acknowledgement bookkeeping), and on this project's
machine that machinery alone costs about 200 µs per record: a Faust agent that only consumes
the input tops out near 2,800 records/s (``bench/worker_pipeline.py``, scenario ``bare``),
which is more than the whole window update. So the input is read by an own aiokafka consumer
in the worker's event loop (fetched batches handed over as they are, no per-record tasks),
while Faust keeps what it does well: the consumer group, its assignor (sticky assignments,
standby replicas), rebalance signals, the web server, timers and the producer.

Which partitions: Faust's consumer subscribes to the *assignment topic*
``<app_id>-assignment`` (``Settings.assignment_topic``), an empty topic with as many partitions
as the input, co-partitioned with it; owning its partition ``i`` means owning input partition
``i`` (and query partition ``i``). On assignment the reader restores each new partition's state
(``WindowsPipeline.state``, in a background task per partition) and then reads it from the
record after the state's *applied offset*. The position lives with the state, in the same
changelog prefix (``stores.window_store``), so a new owner, a restart with or without the data
dir, and a crash at any instant all resume exactly where the durable state ends: nothing is
lost, nothing counted twice. No input offset is committed; the state is the only truth.

On revocation the reader stops reading the revoked partitions before Faust's revocation ends:
``pause`` drops them from the consumer's assignment, and records of a partition no longer owned
that were fetched before are discarded (``WindowsPipeline.process_records`` checks ownership
under the partition's lock). A restore that fails is retried after ``RESTORE_RETRY_S`` while
the partition is still owned.

Cost per record: the aiokafka fetch (C record parser) and a list slot; the pipeline gives the
event loop a turn once about 1 ms of work has passed (``agents.windows.LoopTurns``), so HTTP
queries, the query consumer and Faust's heartbeats are served in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaConsumer, TopicPartition

from app.clients import client_options
from app.settings import Settings

if TYPE_CHECKING:
    from agents.windows import WindowsPipeline

logger = logging.getLogger(__name__)

FETCH_WAIT_MS = 100
"""Longest wait of an input fetch on the broker. Kafka answers as soon as records arrive; the
embedded broker only when the wait expires, so this bounds how late a new event is seen by a
caught-up worker there."""

FETCH_PARTITION_BYTES = 256 * 1024
"""Largest fetched chunk per partition (aiokafka ``max_partition_fetch_bytes``)."""

EVENT_MODE_RECORDS = 500
"""Records per ``getmany`` in ``emit=event``/``changes`` (``batch_max_records`` in batch)."""

RESTORE_RETRY_S = 5.0


class InputReader:
    """Reads the owned input partitions from their applied offsets into ``pipeline``."""

    def __init__(self, settings: Settings, pipeline: WindowsPipeline) -> None:
        self.settings = settings
        self.pipeline = pipeline
        self._consumer: AIOKafkaConsumer | None = None
        self._owned: set[int] = set()
        """Partitions owned now (by the latest assignment)."""
        self._reading: set[int] = set()
        """Owned partitions whose state is restored and which the consumer reads."""
        self._restores: dict[int, asyncio.Task[None]] = {}
        self._loop_task: asyncio.Task[None] | None = None
        self._max_records = (
            settings.batch_max_records if settings.emit == "batch" else EVENT_MODE_RECORDS
        )

    @property
    def reading(self) -> frozenset[int]:
        """The input partitions being read now."""
        return frozenset(self._reading)

    async def follow(self, partitions: Iterable[int]) -> None:
        """Own exactly ``partitions``: stop reading the others, restore and then read the new
        ones (each from its applied offset + 1, once its restore is done)."""
        owned = set(partitions)
        self.pause(self._owned - owned)
        self._owned = owned
        await self._ensure_started()
        for partition in sorted(owned - self._reading):
            task = self._restores.get(partition)
            if task is None or task.done():
                self._restores[partition] = asyncio.create_task(
                    self._restore_then_read(partition), name=f"fiba-restore-{partition}"
                )

    def pause(self, partitions: Iterable[int]) -> None:
        """Stop reading ``partitions`` at once (revoked): records of them still in flight are
        discarded by the pipeline, which checks ownership before applying a record."""
        gone = set(partitions)
        if not gone:
            return
        self._owned -= gone
        self._reading -= gone
        self.pipeline.halt(gone)
        self._assign()

    def owns(self, partition: int) -> bool:
        """True when ``partition`` is owned by the latest assignment."""
        return partition in self._owned

    async def stop(self) -> None:
        """Stop reading and close the consumer: the reading loop is cancelled between two
        records (``halt`` first), restores in flight are awaited (they are not cancelled
        midway: a restore holds its RocksDB open)."""
        self.pause(set(self._owned))
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
            self._loop_task = None
        await asyncio.gather(*self._restores.values(), return_exceptions=True)
        self._restores.clear()
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None

    # --- internals ----------------------------------------------------------------------------

    async def _ensure_started(self) -> None:
        if self._consumer is not None:
            return
        consumer = AIOKafkaConsumer(
            **client_options(self.settings),
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=FETCH_WAIT_MS,
            max_partition_fetch_bytes=FETCH_PARTITION_BYTES,
        )
        await consumer.start()
        self._consumer = consumer
        self._loop_task = asyncio.create_task(self._read(consumer), name="fiba-input-reader")

    def _assign(self) -> None:
        """Assign the partitions being read, each positioned after its applied offset (an
        assignment forgets the positions; records already fetched past that point are
        fetched again and skipped by the pipeline as redeliveries)."""
        if self._consumer is None:
            return
        topic = self.settings.input_topic
        tps = {p: TopicPartition(topic, p) for p in sorted(self._reading)}
        self._consumer.assign(list(tps.values()))
        for partition, tp in tps.items():
            self._consumer.seek(tp, self.pipeline.applied_offset(partition) + 1)

    async def _restore_then_read(self, partition: int) -> None:
        while partition in self._owned:
            try:
                state = await self.pipeline.state(partition)
            except Exception:
                logger.exception(
                    "restore of partition %d failed; retrying in %.0f s", partition, RESTORE_RETRY_S
                )
                await asyncio.sleep(RESTORE_RETRY_S)
                continue
            if partition in self._owned and self._consumer is not None:
                self.pipeline.resume(state.partition)
                self._reading.add(partition)
                self._assign()
            return

    async def _read(self, consumer: AIOKafkaConsumer) -> None:
        emit_batch = self.settings.emit == "batch"
        timeout_ms = self.settings.batch_max_wait if emit_batch else FETCH_WAIT_MS
        pipeline = self.pipeline
        while True:
            if not self._reading:
                await asyncio.sleep(0.05)
                continue
            try:
                batches = await consumer.getmany(
                    timeout_ms=timeout_ms, max_records=self._max_records
                )
            except Exception:
                # e.g. a partition unassigned while its fetch was in flight
                logger.exception("fetching input records failed; retrying")
                await asyncio.sleep(0.1)
                continue
            for tp, records in batches.items():
                if tp.partition in self._reading:
                    await pipeline.process_records(tp.partition, records)
