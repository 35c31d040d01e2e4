"""Faust's end of table recovery with the stream partitions sought right before they resume.

faust-streaming 0.15.3 resumes the stream partitions before seeking them to their committed
offsets after a recovery, so records fetched meanwhile are dropped and committed past, or
processed twice. ``seek_before_resume(app)`` replaces that step on ``app``'s recovery with the
same steps in a safe order: read the committed offsets, seek every stream partition, resume
it, then empty the queues and resume the flow, with nothing in between that lets another task
run. Cost: one more offsets request per recovery. The race in detail:
docs/design/faust-api.md.
"""

from __future__ import annotations

import asyncio
from types import MethodType
from typing import Any

import faust


def seek_before_resume(app: faust.App) -> None:
    """Make ``app``'s table recovery seek its stream partitions before resuming them (see the
    module doc). Idempotent; other apps in the process keep Faust's method."""
    recovery = app.tables.recovery
    recovery.on_recovery_completed = MethodType(_on_recovery_completed, recovery)


async def _on_recovery_completed(self: Any, generation_id: int = 0) -> None:
    """faust-streaming 0.15.3's ``Recovery.on_recovery_completed`` with the stream partitions
    sought right before ``resume_partitions`` (see the module doc), nothing else changed."""
    app = self.app
    consumer = app.consumer
    self.log.info("Restore complete!")
    await app.on_rebalance_complete.send()
    self._set_recovery_ended()
    callbacks = [
        asyncio.ensure_future(
            table.on_recovery_completed(
                self.actives_for_table[table], self.standbys_for_table[table]
            )
        )
        for table in self.tables.values()
    ]
    if callbacks:
        await asyncio.wait(callbacks)
    assignment = consumer.assignment()
    if app.consumer_generation_id != generation_id:
        self.log.warning(
            "Recovery rebalancing again app id %r param %r",
            app.consumer_generation_id,
            generation_id,
        )
        return
    stream_tps = {tp for tp in assignment if not self._is_changelog_tp(tp)}
    if assignment:
        self.log.info("Seek stream partitions to committed offsets.")
        await self._wait(consumer.perform_seek(), timeout=app.conf.broker_request_timeout)
    starts = await _start_offsets(app, consumer, stream_tps)
    if app.consumer_generation_id != generation_id:
        return  # a rebalance started: the next recovery completes instead
    # From here to resume_flow nothing suspends (the thread-delegate consumer's seek is a
    # plain call): each stream partition starts at its committed offset, whatever a fetch
    # took meanwhile, and nothing reaches a queue before the queues are emptied.
    for tp, offset in starts.items():
        await consumer.seek(tp, offset)
    consumer.resume_partitions(stream_tps)
    self.completed.set()
    app.flow_control.resume()
    consumer.resume_flow()
    await app._fetcher.maybe_start()
    self.tables.on_actives_ready()
    if not app.assignor.assigned_standbys():
        self.tables.on_standbys_ready()
    app.on_rebalance_end()
    self.log.info("Worker ready")


async def _start_offsets(app: faust.App, consumer: Any, tps: set) -> dict:
    """Where each of ``tps`` starts: the committed offset ``perform_seek`` read, or for a
    partition with none, its earliest offset or its end (``consumer_auto_offset_reset``)."""
    committed = {tp: consumer._read_offset.get(tp) for tp in tps}
    unset = [tp for tp, offset in committed.items() if offset is None]
    if unset:
        earliest = app.conf.consumer_auto_offset_reset == "earliest"
        ends = await (consumer.earliest_offsets if earliest else consumer.highwaters)(*unset)
        committed.update({tp: ends[tp] for tp in unset})
    return committed
