"""Input records -> per-key windows -> aggregates, with exactly-once state under at-least-once.

One ``WindowsPipeline`` per worker holds, for every input partition it owns, its windows
(``stores.native_windows.new_key_windows``: the native kernel, or ``KeyWindows``) and the
partition's applied offset, restored from the ``WindowStore``. Per record, in offset order: an
offset at or below the applied one is a redelivery and skipped; a rejected event becomes a dead
letter; an accepted one queues its aggregate record (``emit`` = ``event``/``changes``) and its
state change. ``emit = "event"`` applies a fetched chunk in slices of about ``SLICE_TIME``, one
kernel call each (every event as ``apply_one``, its record encoded in the kernel; natively
fetched records parsed there too: ``apply_fetched_events``); ``changes`` one record at a time;
``batch`` columnar, in slices, one record per touched key. After each fetched chunk the outputs
are handed to the producer and acknowledged before the store hands over the changelog records
that mark their offsets applied (at-least-once output by construction); with exactly-once both
go in one transaction per partition (``agents.transactions``). Long synchronous stretches give
the event loop a turn about every 0.5 ms (``agents.loop_turns``); ``agents.windows_hooks``
registers it on the Faust app, with a timer that sweeps idle keys. Design:
docs/design/delivery.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import ConsumerRecord
from faust.exceptions import ConsumerNotStarted

from agents.batched_send import BatchDelivery, KeyedOutputs
from agents.config import FaustWorker
from agents.dead_letters import DeadLetters
from agents.emit_latency import EmitLatency
from agents.events import BadEvent, EventParser, ParsedEvent
from agents.fetched_input import InputChunk
from agents.loop_turns import LoopTurns
from agents.records import aggregate_encoder, encode_aggregate
from agents.transactions import Transactions
from stores.gc_pause import PacedYoungCollections, paused_gc
from stores.key_windows import KeyAggregates, KeyWindows, Rejected, WindowConfig
from stores.native_windows import FetchedEvents, NativeKeyWindows, new_key_windows
from stores.state_shape import RESET_HINT, StateMismatch
from stores.window_store import WindowStore

logger = logging.getLogger(__name__)

MAX_SLICE = 1024
"""Largest number of records ``emit=batch`` applies to the windows in one synchronous step."""

SLICE_TIME = 0.005
"""Seconds one synchronous ``emit=batch`` step (parse and ``KeyWindows.apply`` of a slice)
aims at: a FiBA bulk insert costs far fewer combines per event with tens of events per key
than with one or two, so slices hold a whole batch share where that fits, while a range query
waits at most about this long for the step to end (bench/RESULTS.md, issue 20: the columnar
emit=batch path)."""

STORE_SLICE = 128
"""Accepted records ``emit=batch`` hands to the store in one synchronous step."""


@dataclass(slots=True)
class PartitionState:
    """What this worker holds for one input partition it owns."""

    partition: int
    windows: KeyWindows | NativeKeyWindows
    applied_offset: int
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    halted: bool = False
    """Revoked: no record of the partition is applied until it is owned again."""


class WindowsPipeline:
    """The per-partition window state of one worker and the processing of input records."""

    def __init__(
        self, fiba: FaustWorker, store: WindowStore, dead_letters: DeadLetters, config: WindowConfig
    ) -> None:
        self.fiba = fiba
        self.settings = fiba.settings
        self.store = store
        self.dead_letters = dead_letters
        self.config = config
        self.parser = EventParser(fiba.settings)
        self.counts: Counter[str] = Counter()
        self._states: dict[int, PartitionState] = {}
        self._restoring: dict[int, asyncio.Lock] = {}
        """One lock per partition ever restored (created before its state is published)."""
        self._store_started = False
        self.turns = LoopTurns()
        self.young_collections = PacedYoungCollections()
        """Young collections after every few hundred records, at hand-overs (see there)."""
        self.aggregates = KeyedOutputs(
            fiba.kafka_producer, fiba.settings.aggregates_topic, "aggregates"
        )
        """Aggregate records queued during a chunk, handed over at its end."""
        self.latency = EmitLatency()
        """The event-to-aggregate latency of the aggregate records acknowledged (the input
        timestamps of the queued ones noted beside them, observed once acknowledged)."""
        self._in_transaction: dict[int, list[int]] = {}
        """Exactly-once: per input partition, the input timestamps of the aggregate records in
        its open transaction (observed by ``outputs_committed``)."""
        self._encoder = (
            aggregate_encoder(config.aggregations, config.lowered_is_aggregates)
            if fiba.settings.emit != "changes"
            else None
        )
        """``emit=event``'s and ``batch``'s encoder: each record's bytes straight from its
        windows (``emit=changes`` builds the records, to compare them with the last ones)."""
        self._delivering = asyncio.Lock()
        """Held by ``deliver_outputs`` and ``send_outputs``: one delivery round at a time."""
        self._round: list[BatchDelivery] = []
        """The deliveries of the round ``send_outputs`` handed over without waiting for them
        (awaited by the next round's call)."""
        store.before_changelog = self.deliver_outputs
        self._slice = 64
        """Records per synchronous windows step: one ``apply`` (``emit=batch``) or
        ``apply_events`` (``emit=event``) call (``_fit_slice``)."""
        self.failure: BaseException | None = None
        """Set by ``fail``: no queued output is handed over any more (and the store is
        abandoned)."""
        self.transactions: Transactions | None = None
        """Set by ``use_transactions`` (exactly-once)."""
        self.state_pending = False
        """True while state changes are queued that a ``hand_over`` left for a later one
        (its ``state_wait``)."""
        self._state_handed_at = 0.0
        """When a ``hand_over`` last handed the state changes over (``perf_counter``)."""

    def use_transactions(self, transactions: Transactions) -> None:
        """Exactly-once output (``agents.transactions``): a partition is claimed before its
        restore and released with its state; the outputs queued for a partition are sent by
        ``send_outputs_of`` inside the transaction that carries its changelog records (the
        store's producer is ``transactions``), so the at-least-once barrier goes, and the
        store's ``flush`` hands a partition over only while none of its records is being
        applied (``_hand_over_held``: the outputs and changelog records it sends together
        belong to the same records)."""
        self.transactions = transactions
        self.store.before_changelog = None
        self.store.hand_over = self._hand_over_held

    # --- partitions ---------------------------------------------------------------------------

    async def state(self, partition: int) -> PartitionState:
        """The state of an owned ``partition``, restored from the store on first use."""
        state = self._states.get(partition)
        if state is not None:
            return state
        lock = self._restoring.setdefault(partition, asyncio.Lock())
        async with lock:
            state = self._states.get(partition)
            if state is None:
                if not self._store_started:
                    await self.store.start()
                    self._store_started = True
                if self.transactions is not None:
                    await self.transactions.claim(partition)  # fences the previous owner
                restored = await self.store.restore(partition)
                windows = new_key_windows(self.config, emit=self.settings.emit)
                # paused: about half the build's time otherwise; then frozen out of every later
                # collection, before the collector resumes (stores.gc_pause)
                with paused_gc(freeze=True):
                    try:
                        for key, pairs in restored.windows.items():
                            windows.load(key, pairs)
                            # a large state takes seconds to index: let heartbeats and queries
                            await asyncio.sleep(0)
                    except (ValueError, TypeError, IndexError) as exc:
                        # partials of other aggregations, in a state that records no shape
                        raise StateMismatch(
                            f"the state of partition {partition} cannot be read with these "
                            f"settings ({exc}): {RESET_HINT}"
                        ) from exc
                state = PartitionState(partition, windows, restored.applied_offset)
                async with state.lock:
                    for key, times in windows.sweep():
                        self.store.expire(partition, key, times)
                    await self.store.send_changes(partition)
                    self._states[partition] = state
                logger.info(
                    "partition %d restored: %d keys, stream time %s, applied offset %d",
                    partition,
                    len(windows),
                    windows.stream_time,
                    restored.applied_offset,
                )
        return state

    @property
    def partitions(self) -> list[int]:
        """The partitions whose state is loaded."""
        return sorted(self._states)

    def loaded_windows(self) -> dict[int, KeyWindows | NativeKeyWindows]:
        """The window state of each loaded partition (for metrics: read, never change)."""
        return {partition: state.windows for partition, state in self._states.items()}

    def applied_offset(self, partition: int) -> int:
        """The last input offset of the loaded ``partition`` whose effect is in its state."""
        return self._states[partition].applied_offset

    def halt(self, partitions: Iterable[int]) -> None:
        """Stop applying records of ``partitions`` (revoked): ``process_records`` applies none
        of theirs from its next record on (a batch step in progress completes)."""
        for partition in partitions:
            state = self._states.get(partition)
            if state is not None:
                state.halted = True

    def resume(self, partition: int) -> None:
        """Apply records of the loaded ``partition`` again (owned again, after ``halt``)."""
        self._states[partition].halted = False

    async def wait_idle(self) -> None:
        """Wait until no record is being applied (each partition's lock taken once)."""
        for state in list(self._states.values()):
            async with state.lock:
                pass

    async def keep_only(self, partitions: Iterable[int]) -> None:
        """Release the state of every loaded partition not in ``partitions`` (reassigned),
        after waiting for any restore of it in flight (which would otherwise publish the state
        of a partition this worker no longer owns)."""
        keep = set(partitions)
        for partition in sorted(set(self._restoring) - keep):
            async with self._restoring[partition]:
                state = self._states.get(partition)
                if state is None:
                    continue
                async with state.lock:
                    del self._states[partition]
                    await self._free(state.windows)
                    await self.store.release(partition)
            logger.info("partition %d released", partition)
        if self.transactions is not None:
            await self.transactions.keep_only(keep)

    async def _free(self, windows: KeyWindows | NativeKeyWindows) -> None:
        """Free a released partition's windows now, key by key (``KeyWindows.forget``), the
        event loop getting its turns, O(entries) in all. Left to the
        collector instead, the dropped trees (reference cycles) would never be freed once
        frozen."""
        for key in list(windows):
            windows.forget(key)
            if time.perf_counter() >= self.turns.deadline:
                await self.turns.take()

    def fail(self, error: BaseException) -> None:
        """A task of the worker failed with ``error`` (``agents.supervision``; a bug, or an
        error the clients gave up on), possibly with a record half applied: from now on
        nothing queued is handed over or flushed, and ``stop`` closes the store as a crash
        would (``WindowStore.abandon``; a restart resumes from the durable state, which ends
        at the last hand-over)."""
        self.failure = error
        self.store.abandon()

    async def stop(self) -> None:
        """Hand over what is queued, then stop the store (flush, checkpoint, close; after
        ``fail``, neither: it closes as a crash would). The reader must be stopped first."""
        await self.hand_over()
        await self.store.stop()

    # --- records ------------------------------------------------------------------------------

    async def process_records(self, partition: int, chunks: Sequence[InputChunk]) -> None:
        """Apply the records of ``chunks`` (``agents.fetched_input``), fetched in offset order
        from the input ``partition``, unless the partition is not loaded or halted (revoked);
        the records are read from the chunks by column (offsets, timestamps; parsed in one
        call per slice), a ``ConsumerRecord`` made only for a dead letter (and per record
        under ``emit=changes``). ``emit=event``: one kernel call per slice
        (``_process_events``, a halt taking effect at the next slice); ``changes``: one record
        at a time, the event loop getting a turn once ~0.5 ms of work has passed (a halt
        takes effect at the next record); ``batch``: as one batch (``_process_share``). Their
        outputs and state changes stay queued until ``hand_over``."""
        state = self._states.get(partition)
        if state is None or state.halted:
            return
        await self.aggregates.start()
        async with state.lock:
            if state.halted or self._states.get(partition) is not state:
                return
            fetched = sum(map(len, chunks))
            self.young_collections.add(fetched)
            fresh = [c for c in (c.after(state.applied_offset) for c in chunks) if len(c)]
            self.counts["redelivered_skipped"] += fetched - sum(map(len, fresh))
            if self.settings.emit == "batch":
                await self._process_share(state, fresh)
            elif self._encoder is not None:  # emit=event
                await self._process_events(state, fresh)
            else:  # emit=changes: each record compared with the key's last one
                await self._process_changes(state, fresh)

    async def _process_changes(self, state: PartitionState, fresh: list[InputChunk]) -> None:
        """``emit=changes``: one record at a time, the event loop getting a turn once ~0.5 ms
        of work has passed (a halt takes effect at the next record)."""
        turns = self.turns
        for chunk in fresh:
            for record, parsed in zip(chunk, self.parser.parse_many(chunk), strict=True):
                await self._process_one(state, record, parsed)
                if time.perf_counter() >= turns.deadline:
                    await turns.take()
                    if state.halted:
                        return

    async def deliver_outputs(self) -> None:
        """Hand the queued outputs (aggregate records, dead letters) to the producer and wait
        until they are acknowledged (the producer's acks=all: by every in-sync replica). One
        round at a time, so that when a call returns, every output queued before it started is
        acknowledged (a call during another one's round waits for it, then delivers what was
        queued since). ``WindowStore`` awaits it (``before_changelog``) before it hands
        changelog records over. A failed delivery raises (the store then stops writing, see
        ``send_changes``). Per round one batch per output partition and one round trip.
        Exactly-once: nothing (``send_outputs_of`` sends them in their transactions)."""
        if self.transactions is not None:
            return
        async with self._delivering:
            for delivery in await self._next_round():
                await delivery

    async def send_outputs(self) -> None:
        """``deliver_outputs`` without waiting for this round's acknowledgement: the reader's
        hand-overs that leave the state changes queued (``hand_over``'s ``state_wait``), so
        that it applies the next records while the round is in flight instead of after it.
        The previous round is awaited first (at most one in flight: the producer's buffer
        stays bounded, a failed delivery raises one round later), and ``deliver_outputs``,
        which every changelog hand-over awaits first, awaits it too: outputs still go before
        the state that makes a redelivery skip them."""
        if self.transactions is not None:
            return
        async with self._delivering:
            self._round = await self._next_round()

    async def _next_round(self) -> list[BatchDelivery]:
        """Await the round ``send_outputs`` left in flight (if any), then hand the queued
        outputs over: their deliveries, whose records' latencies are observed as soon as the
        last of them is acknowledged (``EmitLatency.observe_when_delivered``)."""
        for delivery in self._round:  # kept until all are done: a cancelled call leaves it
            await delivery
        self._round = []
        handed = self.latency.take()  # exactly the records the next line takes
        deliveries = await self.aggregates.send() + await self.dead_letters.outputs.send()
        self.latency.observe_when_delivered(handed, deliveries)
        return deliveries

    async def send_outputs_of(self, partition: int, producer: Any) -> None:
        """Hand the outputs queued for input ``partition`` (its aggregate records and dead
        letters) to ``producer``, the transactional producer of the partition's transaction
        (exactly-once; its commit waits for their acknowledgement; ``outputs_committed``
        observes their latency then)."""
        self._in_transaction[partition] = self.latency.take(partition)
        await self.aggregates.send(partition, producer)
        await self.dead_letters.outputs.send((self.settings.input_topic, partition), producer)

    def outputs_committed(self, partition: int) -> None:
        """The transaction of input ``partition`` committed (exactly-once): observe the
        latency of the aggregate records ``send_outputs_of`` sent in it."""
        self.latency.observe(self._in_transaction.pop(partition, ()))

    def progress(self, partition: int) -> int | None:
        """The input position of a loaded ``partition`` (applied offset + 1), None if not
        loaded: what exactly-once commits to the monitoring group."""
        state = self._states.get(partition)
        return None if state is None else state.applied_offset + 1

    async def _hand_over_held(self, partition: int) -> None:
        """``store.send_changes(partition)`` while no record of the partition is being applied
        (its lock held, if it is loaded)."""
        state = self._states.get(partition)
        if state is None:
            await self.store.send_changes(partition)
            return
        async with state.lock:
            await self.store.send_changes(partition)

    async def hand_over(self, state_wait: float = 0.0) -> None:
        """Hand the outputs and state changes queued since the last call to the producer:
        the outputs first, awaiting their acknowledgement (``deliver_outputs``), then per
        loaded partition its local writes and changelog records (``WindowStore.send_changes``):
        outputs before the state that makes a redelivery skip them (at-least-once output;
        exactly-once: per partition one transaction with both, ``use_transactions``). The
        reader calls it after one or more fetched chunks (``agents.input_reader``), whatever
        their partitions: fewer, larger record batches, and one wait for acknowledgements per
        call. Nothing after ``fail``.

        ``state_wait`` (at-least-once only): the state changes stay queued (``state_pending``)
        unless they were last handed over at least that many seconds ago, so that the
        outputs, which a reader of the aggregates waits for, go without the local writes and
        changelog round behind them, and without waiting for their own acknowledgement
        (``send_outputs``: the next records are applied meanwhile); the next call with a
        shorter wait takes them. A crash
        then re-applies the records of up to ``state_wait`` more (their outputs repeated).

        First, when due, a young collection of the cyclic collector (``PacedYoungCollections``):
        here it runs between two chunks, and the event loop gets its turn right after it."""
        if self.failure is not None:
            return
        self.young_collections.collect_if_due()
        turns = self.turns
        if time.perf_counter() >= turns.deadline:
            await turns.take()
        if self.transactions is not None:
            # one transaction per partition, on producers of their own: all in flight at once
            await asyncio.gather(*(self._send_changes(s) for s in list(self._states.values())))
            return
        now = time.perf_counter()
        if state_wait and now - self._state_handed_at < state_wait:
            await self.send_outputs()
            self.state_pending = True
            return
        await self.deliver_outputs()
        self._state_handed_at, self.state_pending = now, False
        for state in list(self._states.values()):
            if time.perf_counter() >= turns.deadline:
                await turns.take()
            await self._send_changes(state)

    async def _send_changes(self, state: PartitionState) -> None:
        """``store.send_changes`` of a loaded partition, under its lock (if still loaded)."""
        async with state.lock:
            if self._states.get(state.partition) is state:
                await self.store.send_changes(state.partition)

    async def _process_one(
        self, state: PartitionState, record: ConsumerRecord, parsed: ParsedEvent | BadEvent
    ) -> None:
        """Handle one input record (``emit=changes``), after the applied offset, ``parsed``
        being its ``EventParser.parse_many`` outcome."""
        offset = record.offset
        if isinstance(parsed, BadEvent):
            await self._reject(state, record, parsed.reason, parsed.detail)
            return
        windows = state.windows
        try:
            outcome = windows.apply_one(*parsed)
        except Rejected as rejected:
            await self._reject(state, record, rejected.reason, rejected.detail)
            return
        self.counts["accepted"] += 1
        key, event_ts = outcome.key, parsed[1]
        # the record decides whether anything changed
        self._emit(windows.record_of(key, event_ts), key, state.partition, offset, record.timestamp)
        self.store.record(
            state.partition,
            offset,
            outcome.key,
            outcome.time,
            outcome.partial,
            outcome.evicted,
        )
        state.applied_offset = offset

    async def _process_events(self, state: PartitionState, fresh: list[InputChunk]) -> None:
        """One partition's share of a chunk under ``emit=event`` (``fresh``: its records after
        the applied offset): parsed and applied in slices sized to take about ``SLICE_TIME``
        each (``_fit_slice``), every event as ``apply_one`` and its record encoded, in the
        kernel on the native build: natively fetched records in one ``apply_fetched_events``
        call per slice (no Python object per event but its record's bytes, event time and
        input timestamp), else ``parse_many`` and one ``apply_events`` call (also for the
        rest of a slice the native call leaves). Per slice the records are queued and the
        input timestamps noted in bulk, then the store's writes (evictions included) and the
        dead letters in offset order. The event loop gets a turn between slices once the
        budget is spent; a halt (revoked) takes effect at the next slice."""
        turns = self.turns
        windows = state.windows
        native_parser = self.parser.native_parser if isinstance(windows, NativeKeyWindows) else None
        codec = self.store.codec
        for piece in self._pieces(fresh):
            if state.halted:
                return
            started = time.perf_counter()
            rest: InputChunk | None = piece
            if native_parser is not None:
                taken = windows.apply_fetched_events(  # type: ignore[union-attr]
                    piece, native_parser, codec, state.partition, self._encoder
                )
                if taken is not None:
                    await self._queue_fetched_events(state, piece, taken)
                    rest = None if taken.rest is None else piece.after(taken.rest - 1)
                    self.counts["taken_natively"] += len(piece) - (0 if rest is None else len(rest))
            if rest is not None:
                await self._apply_parsed_events(state, rest)
            self._fit_slice(time.perf_counter() - started)
            if time.perf_counter() >= turns.deadline:
                await turns.take()

    async def _queue_fetched_events(
        self, state: PartitionState, piece: InputChunk, taken: FetchedEvents
    ) -> None:
        """Queue the records of ``apply_fetched_events``' outcome ``taken`` for ``piece``
        and note their input timestamps, then the store's writes (its ``Effects`` buffer, the
        partials encoded) and the dead letters of its malformed and refused records, in
        offset order."""
        partition = state.partition
        refused = [(piece.record_at(o), b.reason, b.detail) for o, b in taken.bad]
        refused.extend((piece.record_at(o), r.reason, r.detail) for o, r in taken.rejected)
        self.counts["aggregates"] += len(taken.records)
        self.aggregates.add_records(taken.records, source=partition)
        self.latency.add_many(partition, taken.input_ts)
        await self._record_in_order(state, [taken.effects], refused, encoded=True)

    async def _apply_parsed_events(self, state: PartitionState, piece: InputChunk) -> None:
        """``piece`` parsed (``parse_many``) and applied in one ``apply_events`` call, its
        records queued and input timestamps noted, then the store's writes and the dead
        letters in offset order."""
        partition = state.partition
        refused: list[tuple[ConsumerRecord, str, str]] = []
        parsed, offsets = _parsed_events(self.parser.parse_many, piece, refused)
        applied = state.windows.apply_events(parsed, offsets, partition, self._encoder)
        effects = applied.effects
        if len(effects) == len(piece):
            stamps = piece.timestamps()
        else:
            stamps = [piece.timestamp_at(effect[0]) for effect in effects]
            refused.extend((piece.record_at(o), r.reason, r.detail) for o, r in applied.rejected)
        self.counts["aggregates"] += len(effects)
        self.aggregates.add_many(applied.keys, applied.records, applied.event_ts, source=partition)
        self.latency.add_many(partition, stamps)
        await self._record_in_order(state, [effects], refused)

    async def _record_in_order(
        self,
        state: PartitionState,
        parts: list[Sequence[Any]],
        refused: list[tuple[ConsumerRecord, str, str]],
        encoded: bool = False,
    ) -> None:
        """The store's records of accepted effects (``parts``: sequences of them, lists or
        native ``Effects``, together in offset order; ``encoded``: their partials are the
        store codec's bytes) and the dead letters and ``record_skipped`` of ``refused``
        records, interleaved in offset order."""
        dead = sorted(refused, key=_offset_of_refused)
        i = 0
        for effects in parts:
            done = 0
            while i < len(dead) and len(effects) and dead[i][0].offset < effects[-1][0]:
                message, reason, detail = dead[i]
                upto = bisect_left(effects, message.offset, done, key=_offset_of_effect)
                await self._record_effects(state, effects[done:upto], encoded)
                await self._reject(state, message, reason, detail)
                done, i = upto, i + 1
            await self._record_effects(state, effects[done:], encoded)
        for message, reason, detail in dead[i:]:
            await self._reject(state, message, reason, detail)

    async def _process_share(self, state: PartitionState, fresh: list[InputChunk]) -> None:
        """One partition's share of a batch (``fresh``: its records after the applied offset),
        columnar: parsed and applied
        (``KeyWindows.apply``; natively fetched records on the native kernel in one
        ``apply_fetched`` call, no Python object per event but its effect) in slices sized to
        take about ``SLICE_TIME`` each (the state
        between slices is the one after the records applied so far, expired entries left for
        later), then per touched key its eviction and its record, then the store calls in
        offset order (outputs before the state that makes a redelivery skip them: at-least-once
        output). The event loop gets a turn whenever the budget is spent."""
        windows = state.windows
        turns = self.turns
        parse_many = self.parser.parse_many
        # on the native kernel the effects carry the store's bytes of each partial
        encoded = isinstance(windows, NativeKeyWindows)
        codec = self.store.codec
        effects: list[Sequence[Any]] = []
        """The effects of each slice (a list, or the kernel's ``Effects`` buffer)."""
        refused: list[tuple[ConsumerRecord, str, str]] = []
        last: dict[str, tuple[int, int]] = {}
        native_parser = self.parser.native_parser if encoded else None
        for piece in self._pieces(fresh):
            started = time.perf_counter()
            # natively fetched records: parsed and applied in one kernel call
            taken = None
            if native_parser is not None:
                taken = windows.apply_fetched(piece, native_parser, codec)  # type: ignore[union-attr]
            if taken is not None:
                applied, bad = taken
                self.counts["taken_natively"] += len(piece)
                refused.extend((piece.record_at(o), b.reason, b.detail) for o, b in bad)
            else:
                parsed, offsets = _parsed_events(parse_many, piece, refused)
                if encoded:
                    applied = windows.apply_encoded(parsed, offsets, codec)  # type: ignore[union-attr, arg-type]
                else:
                    applied = windows.apply(parsed, offsets)
            effects.append(applied.effects)
            refused.extend((piece.record_at(o), r.reason, r.detail) for o, r in applied.rejected)
            last.update(applied.last)
            self._fit_slice(time.perf_counter() - started)
            if time.perf_counter() >= turns.deadline:
                await turns.take()
        evicted = []
        partition = state.partition
        stream_time: int = windows.stream_time  # type: ignore[assignment]  # set by apply
        pending: list[tuple[str, int, int, Any, int, int]] = []
        for key, (offset, event_ts) in last.items():
            evicted.append((key, windows.evict_expired(key)))
            lowered = windows.lowered_windows(key, event_ts)
            pending.append((key, event_ts, stream_time, lowered, partition, offset))
            if time.perf_counter() >= turns.deadline:
                self._queue_encoded(pending, partition, fresh)
                await turns.take()
        self._queue_encoded(pending, partition, fresh)
        await self._record_in_order(state, effects, refused, encoded)
        for key, times in evicted:
            if times:
                self.store.expire(state.partition, key, times)
                if time.perf_counter() >= turns.deadline:
                    await turns.take()

    def _queue_encoded(
        self,
        pending: list[tuple[str, int, int, Any, int, int]],
        partition: int,
        chunks: list[InputChunk],
    ) -> None:
        """Encode the ``AggregateEncoder.encode`` arguments in ``pending`` in one call
        (``encode_many``), queue the records (each answering the input record of its offset
        among ``chunks``) and empty ``pending``."""
        encoded = self._encoder.encode_many(pending)  # type: ignore[union-attr]  # emit=batch
        for (key, event_ts, _, _, _, offset), data in zip(pending, encoded, strict=True):
            input_ts = _timestamp_at(chunks, offset)
            self._queue_aggregate(key, data, event_ts, partition, input_ts)
        pending.clear()

    def _pieces(self, chunks: list[InputChunk]) -> Iterator[InputChunk]:
        """``chunks`` in slices of ``self._slice`` records (as it is when each is taken;
        none spans two chunks)."""
        for chunk in chunks:
            lo = 0
            while lo < len(chunk):
                piece = chunk[lo : lo + self._slice]
                lo += len(piece)
                yield piece

    def _fit_slice(self, elapsed: float) -> None:
        """Adapt the slice size to ``elapsed`` seconds the last slice took: halve it
        above ``SLICE_TIME``, double it below a quarter of it."""
        if elapsed > SLICE_TIME:
            self._slice = max(1, self._slice // 2)
        elif elapsed < SLICE_TIME / 4:
            self._slice = min(MAX_SLICE, self._slice * 2)

    async def _record_effects(
        self, state: PartitionState, effects: Sequence[Any], encoded: bool = False
    ) -> None:
        """Queue the store's records of accepted ``(offset, key, time, partial)`` effects, or
        ``(..., evicted_times)`` (``WindowStore.record_many``; ``encoded``: the partials are
        the store codec's bytes), ``STORE_SLICE`` at a time, the event loop getting a turn in
        between once the budget is spent (HTTP queries)."""
        turns = self.turns
        record_many = self.store.record_many
        partition = state.partition
        for lo in range(0, len(effects), STORE_SLICE):
            piece = effects[lo : lo + STORE_SLICE]
            record_many(partition, piece, encoded)
            self.counts["accepted"] += len(piece)
            state.applied_offset = piece[-1][0]
            if time.perf_counter() >= turns.deadline:
                await turns.take()

    async def _reject(
        self, state: PartitionState, message: ConsumerRecord, reason: str, detail: str
    ) -> None:
        await self.dead_letters.add(
            reason,
            detail,
            message.topic,
            message.partition,
            message.offset,
            message.key,
            message.value,
            message.timestamp,
        )
        self.store.record_skipped(state.partition, message.offset)
        state.applied_offset = message.offset

    def _emit(
        self,
        record: KeyAggregates | None,
        key: str,
        partition: int,
        offset: int,
        input_ts: int,
    ) -> None:
        """Queue ``record``, answering input record ``offset`` of ``partition`` (Kafka
        timestamp ``input_ts``), for the aggregates topic (handed over after the chunk), its
        event time as its Kafka timestamp."""
        if record is None:
            self.counts["suppressed"] += 1
            return
        data = encode_aggregate(record, partition, offset)
        self._queue_aggregate(key, data, record.event_ts, partition, input_ts)

    def _queue_aggregate(
        self, key: str, data: bytes, event_ts: int, partition: int, input_ts: int
    ) -> None:
        """Queue the aggregate record ``data`` of ``key`` for the aggregates topic, its event
        time as its Kafka timestamp, answering an input record of ``partition`` with Kafka
        timestamp ``input_ts`` (its latency is observed once it is acknowledged), and count
        it."""
        self.counts["aggregates"] += 1
        self.aggregates.add(key.encode(), data, event_ts, source=partition)
        self.latency.add(partition, input_ts)

    # --- maintenance --------------------------------------------------------------------------

    async def sweep(self) -> int:
        """Evict expired entries of idle keys in every loaded partition; entries evicted."""
        evicted = 0
        for state in list(self._states.values()):
            async with state.lock:
                if self._states.get(state.partition) is not state:
                    continue
                for key, times in state.windows.sweep():
                    evicted += len(times)
                    self.store.expire(state.partition, key, times)
                    if time.perf_counter() >= self.turns.deadline:
                        await self.turns.take()
                await self.store.send_changes(state.partition)
        self.counts["swept"] += evicted
        return evicted

    def stats(self) -> dict[str, Any]:
        """Counters, the input partitions assigned to this worker and the state of the loaded
        ones, as served by ``GET /stats``. Before Faust's consumer has started, nothing is
        assigned yet."""
        try:
            assignment = self.fiba.app.consumer.assignment()
        except ConsumerNotStarted:
            assignment = set()
        return {
            "assigned": sorted(self.fiba.owned_partitions(assignment)),
            "counts": dict(self.counts),
            "dead_letters": dict(self.dead_letters.counts),
            "partitions": {
                str(p): {
                    "stream_time": s.windows.stream_time,
                    "keys": len(s.windows),
                    "applied_offset": s.applied_offset,
                }
                for p, s in sorted(self._states.items())
            },
        }


def _parsed_events(
    parse_many: Callable[[InputChunk], list[ParsedEvent | BadEvent]],
    piece: InputChunk,
    refused: list[tuple[ConsumerRecord, str, str]],
) -> tuple[list[ParsedEvent], list[int]]:
    """The events parsed from ``piece`` (``parse_many``) that are well formed, with their
    offsets; each malformed record is appended to ``refused`` with its reason and detail."""
    parsed = parse_many(piece)
    offsets = piece.offsets()
    good = [i for i, outcome in enumerate(parsed) if not isinstance(outcome, BadEvent)]
    if len(good) == len(piece):
        return parsed, offsets  # type: ignore[return-value]  # no BadEvent among them
    refused.extend(
        (piece.record_at(offset), outcome.reason, outcome.detail)
        for offset, outcome in zip(offsets, parsed, strict=True)
        if isinstance(outcome, BadEvent)
    )
    return [parsed[i] for i in good], [offsets[i] for i in good]  # type: ignore[misc]


def _offset_of_refused(refused: tuple[ConsumerRecord, str, str]) -> int:
    return refused[0].offset


def _offset_of_effect(effect: tuple[Any, ...]) -> int:
    return effect[0]


def _timestamp_at(chunks: list[InputChunk], offset: int) -> int:
    """The Kafka timestamp of the record at ``offset`` among ``chunks`` (in offset order,
    one of them holding ``offset``). O(chunks + log records)."""
    for chunk in chunks:
        if offset <= chunk.last_offset:
            return chunk.timestamp_at(offset)
    raise KeyError(offset)
