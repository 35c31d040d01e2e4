"""Reads the input partitions this worker owns and hands their records to the windows pipeline.

An own aiokafka consumer in the worker's event loop, not a Faust stream (Faust's per-record
machinery cost more than the whole window update); Faust keeps the consumer group, its
assignor (through the empty assignment topic ``<app_id>-assignment``, co-partitioned with the
input), rebalance signals, timers and the producer. Each newly owned partition is restored in
the background and then read from the record after its state's applied offset, so every
restart or takeover resumes exactly where the durable state ends. Progress is committed under
``<app_id>-input`` for monitoring only (metadata: the worker's ``web_url``, for ``fiba
status``), never read back. Revoked partitions stop at once
(epochs keep records of an earlier assignment from being applied); a failed restore is
retried, one refused for its shape stops the worker. The consumer hands each partition's
fetched records over as one chunk (``agents.fetched_input``: on the native build decoded from
the Fetch response's bytes, no Python object per record). Design: docs/design/delivery.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import IllegalStateError

from agents.clients import RepeatedFailures, client_options, fetch
from agents.config import WorkerSettings
from agents.fetched_input import InputChunk, native_fetches
from agents.supervision import OnFailure, watched
from stores.state_shape import StateMismatch

if TYPE_CHECKING:
    from agents.windows import WindowsPipeline

logger = logging.getLogger(__name__)

FETCH_WAIT_MS = 100
"""Longest wait of an input fetch on the broker. Kafka answers as soon as records arrive; the
embedded broker only when the wait expires, so this bounds how late a new event is seen by a
caught-up worker there."""

FETCH_PARTITION_BYTES = 256 * 1024
"""Largest fetched chunk per partition (aiokafka ``max_partition_fetch_bytes``)."""

FETCH_CHUNK = 100
"""Most records one ``getmany`` returns, unless they are decoded natively under ``emit=batch``
(then up to the batch's remaining room: aiokafka builds its records in one synchronous
step, the native decoder a whole response in one short call)."""

HANDOVER_RECORDS = 1000
"""``emit=event``/``changes``: most records applied between two hand-overs while a backlog is
read (each hand-over is a produce round per output partition and the changelog's, awaiting
acknowledgements; the broker's cost per event halves from 100 to 1,000 records per request)."""

HANDOVER_WAIT_S = 0.005
"""``emit=event``/``changes``: longest time from the first record applied after a hand-over to
the next hand-over while a backlog is read (a caught-up reader hands over after each chunk)."""

STATE_WAIT_S = 0.05
"""``emit=event``/``changes``: a hand-over delivers the outputs but leaves the state changes
(local writes, changelog records) queued unless they last went this many seconds ago
(``WindowsPipeline.hand_over``); they also go as soon as a fetch waits in vain (input idle).
The outputs then go without the local writes and a changelog produce round in the same cycle,
and seldom wait behind such a round (aiokafka keeps one produce request in flight per broker);
in exchange a crash re-applies up to this much more input (its outputs repeated:
at-least-once)."""

RESTORE_RETRY_S = 5.0
"""Seconds before a failed restore of an owned partition is tried again."""

COMMIT_INTERVAL_S = 5.0
"""Seconds between two commits of the input progress (monitoring only, see the module doc)."""


class InputReader:
    """Reads the owned input partitions from their applied offsets into ``pipeline``.

    ``on_failure`` is called with the exception if the reading (or progress-committing) task
    ends with one (``agents.supervision``: the worker must not stay up without reading).
    """

    def __init__(
        self,
        settings: WorkerSettings,
        pipeline: WindowsPipeline,
        on_failure: OnFailure,
    ) -> None:
        self.settings = settings
        self.pipeline = pipeline
        self.on_failure = on_failure
        self._consumer: AIOKafkaConsumer | None = None
        self._owned: set[int] = set()
        """Partitions owned now (by the latest assignment)."""
        self._reading: set[int] = set()
        """Owned partitions whose state is restored and which the consumer reads."""
        self._restores: dict[int, asyncio.Task[None]] = {}
        self._epochs: dict[int, int] = {}
        """Per partition, how many times reading it (re)started: records fetched in an earlier
        epoch are never applied (the new epoch re-reads from the applied offset)."""
        self._loop_task: asyncio.Task[None] | None = None
        self._committer: AIOKafkaConsumer | None = None
        self._commit_task: asyncio.Task[None] | None = None
        self._committed: dict[int, int] = {}
        self._assigned = False
        """True once a first assignment arrived (owning no partition is then a state)."""
        self._native = False
        """The consumer's chunks are decoded natively (``agents.fetched_input``)."""
        self.restore_began: dict[int, float] = {}
        """Per owned partition whose restore is in flight, when it began (monotonic s)."""
        self.restore_seconds: dict[int, float] = {}
        """Per partition, how long its latest finished restore took (s)."""

    @property
    def owned(self) -> set[int]:
        """The partitions owned by the latest assignment."""
        return set(self._owned)

    @property
    def reading(self) -> set[int]:
        """The owned partitions restored and being read."""
        return set(self._reading)

    def not_ready(self) -> str | None:
        """Why this reader is not serving every owned partition yet (None when it is): no
        assignment received yet, or partitions still restoring. O(owned partitions)."""
        if not self._assigned:
            return "no partition assignment received yet"
        restoring = sorted(self._owned - self._reading)
        if restoring:
            return f"restoring partition(s) {', '.join(map(str, restoring))}"
        return None

    def input_lag(self) -> dict[int, int]:
        """Per partition being read whose log end is known (the high watermark of the latest
        fetch, right on every broker): records after the applied offset. O(partitions)."""
        consumer = self._consumer
        if consumer is None:
            return {}
        topic = self.settings.input_topic
        lags = {}
        for partition in sorted(self._reading):
            try:
                end = consumer.highwater(TopicPartition(topic, partition))
            except IllegalStateError:  # left the assignment since
                continue
            if end is not None:
                lags[partition] = max(0, end - self.pipeline.applied_offset(partition) - 1)
        return lags

    async def follow(self, partitions: Iterable[int]) -> None:
        """Own exactly ``partitions``: stop reading the others, restore and then read the new
        ones (each from its applied offset + 1, once its restore is done)."""
        owned = set(partitions)
        self.pause(self._owned - owned)
        self._owned = owned
        self._assigned = True
        await self._ensure_started()
        for partition in sorted(owned - self._reading):
            task = self._restores.get(partition)
            if task is None or task.done():
                self._restores[partition] = asyncio.create_task(
                    self._restore_then_read(partition), name=f"fiba-restore-{partition}"
                )

    def pause(self, partitions: Iterable[int]) -> None:
        """Stop reading ``partitions`` at once (revoked): they leave the consumer's assignment,
        their epochs end (records of them fetched before are never applied) and the pipeline
        halts them (a record being applied completes, no further one is)."""
        gone = set(partitions)
        if not gone:
            return
        self._owned -= gone
        self._reading -= gone
        for partition in gone:
            self._epochs[partition] = self._epochs.get(partition, 0) + 1
        self.pipeline.halt(gone)
        self._assign()

    async def stop(self) -> None:
        """Stop reading and close the consumer: the reading loop is cancelled between two
        records (``halt`` first), restores in flight are awaited (they are not cancelled
        midway: a restore holds its RocksDB open). A task that failed was reported to
        ``on_failure`` already: its exception is not raised again here."""
        self.pause(set(self._owned))
        for task in (self._loop_task, self._commit_task):
            if task is not None:
                task.cancel()
                await asyncio.wait([task])
        self._loop_task = self._commit_task = None
        if self._committer is not None:
            await self._committer.stop()
            self._committer = None
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
            isolation_level=self.settings.isolation_level,
        )
        await consumer.start()
        self._native = native_fetches(consumer)
        self._consumer = consumer
        self._loop_task = watched(self._read(consumer), "fiba-input-reader", self.on_failure)
        if self.settings.exactly_once:
            return  # the progress is committed inside the transactions (agents.transactions)
        committer = AIOKafkaConsumer(
            **client_options(self.settings),
            group_id=self.settings.input_progress_group,
            enable_auto_commit=False,
        )
        await committer.start()
        self._committer = committer
        self._commit_task = watched(
            self._commit_progress(committer), "fiba-input-progress", self.on_failure
        )

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
        began = self.restore_began[partition] = time.monotonic()
        try:
            while partition in self._owned:
                try:
                    state = await self.pipeline.state(partition)
                except StateMismatch as refused:  # written with other settings: never serve it
                    logger.error("partition %d refused: %s", partition, refused)
                    self.on_failure(refused)
                    return
                except Exception:
                    logger.exception(
                        "restore of partition %d failed; retrying in %.0f s",
                        partition,
                        RESTORE_RETRY_S,
                    )
                    await asyncio.sleep(RESTORE_RETRY_S)
                    continue
                self.restore_seconds[partition] = time.monotonic() - began
                if partition in self._owned and self._consumer is not None:
                    self.pipeline.resume(state.partition)
                    self._epochs[partition] = self._epochs.get(partition, 0) + 1
                    self._reading.add(partition)
                    self._assign()
                return
        finally:
            self.restore_began.pop(partition, None)

    async def _commit_progress(self, committer: AIOKafkaConsumer) -> None:
        """Every ``COMMIT_INTERVAL_S``: commit applied offset + 1 of each partition being read
        whose applied offset moved (monitoring only; a failure is logged, the next round
        retries)."""
        topic = self.settings.input_topic
        while True:
            await asyncio.sleep(COMMIT_INTERVAL_S)
            offsets = {}
            for partition in sorted(self._reading):
                position = self.pipeline.applied_offset(partition) + 1
                if position > 0 and self._committed.get(partition) != position:
                    offsets[TopicPartition(topic, partition)] = (position, self.settings.web_url)
            if not offsets:
                continue
            try:
                tps = list(offsets)
                if set(committer.assignment()) != set(tps):
                    committer.assign(tps)
                    committer.pause(*tps)  # it only commits: never fetch
                await committer.commit(offsets)
            except Exception:
                logger.exception("committing the input progress failed")
                continue
            for tp, (position, _) in offsets.items():
                self._committed[tp.partition] = position

    async def _read(self, consumer: AIOKafkaConsumer) -> None:
        """Fetch in chunks of at most ``FETCH_CHUNK`` records (building a chunk's records is
        one synchronous step; decoded natively under ``emit=batch``, up to the batch's room),
        giving the loop its turns in between. ``emit=event``/``changes``
        applies each chunk at once and hands over when a fetch without waiting finds nothing
        more (caught up: no added latency), ``HANDOVER_RECORDS`` were applied or
        ``HANDOVER_WAIT_S`` passed since the first of them, its state changes at most every
        ``STATE_WAIT_S`` and when input goes idle; ``batch`` gathers chunks and
        applies them in one go when nothing more is buffered, ``batch_max_records`` are there
        or ``batch_max_wait`` has passed since the first. A failed fetch counts as nothing
        more."""
        settings = self.settings
        emit_batch = settings.emit == "batch"
        most = settings.batch_max_records if emit_batch else HANDOVER_RECORDS
        wait = settings.batch_max_wait / 1000 if emit_batch else HANDOVER_WAIT_S
        state_wait = 0.0 if emit_batch else STATE_WAIT_S
        chunk_records = min(FETCH_CHUNK, most) if emit_batch else FETCH_CHUNK
        native_batch = emit_batch and self._native
        pipeline = self.pipeline
        turns = pipeline.turns
        epochs = self._epochs
        pending: dict[tuple[int, int], list[InputChunk]] = {}
        failures = RepeatedFailures("fetching input records")
        gathered = 0
        """Records gathered (``batch``) or applied (else) since the last hand-over."""
        first_at = 0.0
        while True:
            if not self._reading:
                if gathered and not emit_batch:
                    await pipeline.hand_over()
                pending.clear()
                gathered = 0
                await asyncio.sleep(0.05)
                continue
            if time.perf_counter() >= turns.deadline:
                await turns.take()
            chunk = await fetch(
                consumer,
                failures,
                timeout_ms=0 if gathered else FETCH_WAIT_MS,
                max_records=max(1, most - gathered) if native_batch else chunk_records,
            )
            # the records match the consumer's positions now: tag them with the epochs now
            fetched = [
                ((tp.partition, epochs.get(tp.partition, 0)), rs)
                for tp, rs in (chunk or {}).items()
            ]
            if not fetched and not gathered and pipeline.state_pending:
                await pipeline.hand_over()  # input idle: the state changes left queued
            if fetched and not gathered:
                first_at = time.perf_counter()
            for tag, chunk in fetched:
                gathered += len(chunk)
                if emit_batch:
                    pending.setdefault(tag, []).append(chunk)
                elif epochs.get(tag[0]) == tag[1]:
                    await pipeline.process_records(tag[0], [chunk])
            if gathered and (
                not fetched or gathered >= most or time.perf_counter() - first_at >= wait
            ):
                batch, pending, gathered = pending, {}, 0
                for (partition, epoch), chunks in batch.items():
                    if epochs.get(partition) == epoch:
                        await pipeline.process_records(partition, chunks)
                await pipeline.hand_over(state_wait)
