"""Faust's end of table recovery with the stream partitions sought before they are resumed.

faust-streaming 0.15.3's ``Recovery.on_recovery_completed`` resumes the stream (non-changelog)
partitions, then awaits ``consumer.perform_seek()`` (a seek to the committed offsets, one
broker round trip per partition), then resumes flow control, which empties every stream's
queue. After a recovery that read changelog records, Faust's fetcher is already running, so
the stream records fetched during that seek reach the agents: those still queued are dropped
when the queues are emptied (never processed, yet Faust's offset gaps let it commit past
them: events lost, at-least-once broken), and the seek makes the consumer fetch the processed
ones again, all of which Faust then drops except the last one processed (its read-offset test
is ``>=``), which is processed twice. A worker restarted with a backlog after a crash hits it.

``seek_before_resume(app)`` replaces that method on ``app``'s recovery only, with the same
steps in a safe order: seek, then resume the stream partitions, empty the queues and resume
the flow with no await in between. No stream record is fetched for the agents before the seek,
so each record from the committed offset on reaches them once. Cost: none per event.
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
    """faust-streaming 0.15.3's ``Recovery.on_recovery_completed`` with ``perform_seek``
    moved before ``resume_partitions``, and nothing else changed."""
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
    if assignment:
        self.log.info("Seek stream partitions to committed offsets.")
        await self._wait(consumer.perform_seek(), timeout=app.conf.broker_request_timeout)
    # From here to resume_flow, no await: nothing reaches a queue before it is emptied.
    consumer.resume_partitions({tp for tp in assignment if not self._is_changelog_tp(tp)})
    self.completed.set()
    app.flow_control.resume()
    consumer.resume_flow()
    await app._fetcher.maybe_start()
    self.tables.on_actives_ready()
    if not app.assignor.assigned_standbys():
        self.tables.on_standbys_ready()
    app.on_rebalance_end()
    self.log.info("Worker ready")
