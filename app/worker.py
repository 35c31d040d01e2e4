"""Assemble and run one stream-processing worker: ``run_worker(settings)`` (``fiba worker``).

``build_worker(settings)`` wires the Faust app and topics, the window store (its changelog sent
through the Faust producer), the dead-letter sender, the windows pipeline, the query consumer
and HTTP views, with ``exactly_once`` the per-partition transactions, and the health and
metrics views (``app.health``). ``run_worker`` runs it in the foreground until SIGTERM/SIGINT;
on shutdown the store is flushed and checkpointed after the consumer stopped and before the
producer is flushed. The topics must exist (``fiba topics create``). Running and stopping a
worker: docs/reference/operations.md.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import faust

from agents import retention_watch, windows_hooks
from agents.batched_send import KeyedOutputs
from agents.clients import throttle_failed_metadata_updates
from agents.dead_letters import DeadLetters
from agents.input_reader import InputReader
from agents.kafka_changelog import FaustChangelog
from agents.queries import hooks as query_hooks
from agents.queries.service import QueryService
from agents.retention_watch import RetentionCheck
from agents.supervision import WorkerCrash
from agents.transactions import PartitionTransactions
from agents.windows import WindowsPipeline
from app import health
from app.faust_app import FibaApp, create_app
from app.health import WorkerHealth
from app.settings import Settings
from stores.key_windows import WindowConfig
from stores.state_lock import StateDirLock
from stores.state_shape import StateMismatch, StateShape, check_local_shape
from stores.window_store import MarshalStateCodec, WindowStore, store_root


@dataclass(frozen=True, slots=True)
class Worker:
    """A wired worker: its Faust app, store, pipeline, query service, input reader and the
    handler of its failures."""

    fiba: FibaApp
    store: WindowStore
    pipeline: WindowsPipeline
    queries: QueryService
    reader: InputReader
    crash: WorkerCrash

    @property
    def retention_checks(self) -> list[RetentionCheck]:
        """The output topics' checks against their ``retention.ms`` (``agents.retention_watch``):
        aggregates, dead letters, answers."""
        return [
            self.pipeline.aggregates.retention,
            self.pipeline.dead_letters.outputs.retention,
            self.queries.answers_retention,
        ]


def build_worker(settings: Settings) -> Worker:
    """Create the app and register every agent, timer, view and lifecycle hook (and pace the
    Kafka clients' metadata retries while no broker answers, ``agents.clients``)."""
    throttle_failed_metadata_updates()
    fiba = create_app(settings)
    config = WindowConfig.from_settings(settings)
    transactions = (
        PartitionTransactions(settings, FaustChangelog(fiba)) if settings.exactly_once else None
    )
    store = WindowStore(
        settings, MarshalStateCodec(config.composed), transactions or FaustChangelog(fiba)
    )
    dead_letters = DeadLetters(
        KeyedOutputs(fiba.kafka_producer, settings.dead_letter_topic, "dead_letters")
    )
    pipeline = WindowsPipeline(fiba, store, dead_letters, config)
    crash = WorkerCrash(fiba, pipeline)
    service = QueryService(fiba, pipeline, crash)
    if transactions is not None:
        pipeline.use_transactions(transactions)
        transactions.riders.append(pipeline.send_outputs_of)
        transactions.committed.append(pipeline.outputs_committed)
        transactions.progress = pipeline.progress
        service.transactions = transactions
    reader = InputReader(settings, pipeline, crash)
    windows_hooks.install(fiba, pipeline, reader)
    query_hooks.install(fiba, service)
    worker = Worker(fiba, store, pipeline, service, reader, crash)
    checks = WorkerHealth(worker)
    service.on_answered = checks.observe_query
    health.install(worker, checks)

    @fiba.app.task
    async def watch_output_retention() -> None:
        await retention_watch.watch(settings, worker.retention_checks)

    @fiba.app.on_before_shutdown.connect
    async def stop_store(sender: Any, **kwargs: Any) -> None:
        await reader.stop()  # no record half applied, restores in flight done
        await pipeline.stop()

    return worker


def claim_local_state(settings: Settings) -> StateDirLock:
    """What a worker of ``settings`` checks before it starts: it locks ``state_dir``
    (``StateDirBusy`` if another process holds it; kept until the process ends or the lock is
    released) and compares the shape of the local state with its settings (``StateMismatch``;
    recorded if there is none yet, ``stores.state_shape``)."""
    lock = StateDirLock(settings.state_dir)
    lock.acquire()
    try:
        check_local_shape(store_root(settings), state_shape(settings))
    except BaseException:
        lock.release()
        raise
    return lock


def state_shape(settings: Settings) -> StateShape:
    """The shape of the state a worker of ``settings`` writes (its codec: ``MarshalStateCodec``)."""
    return StateShape.of(settings, MarshalStateCodec.format)


logger = logging.getLogger(__name__)

THREAD_STOP_GRACE_S = 10.0
"""How long a stopped worker waits for the threads Faust left running before it exits anyway."""


def run_worker(settings: Settings) -> None:
    """Run a worker in the foreground until it is told to stop (SIGTERM/SIGINT)."""
    serve(build_worker(settings))


def serve(worker: Worker) -> None:
    """Run an already built worker in the foreground until SIGTERM/SIGINT. A worker that
    stopped because a partition's state has another shape (``StateMismatch``, see
    ``agents.input_reader``) raises it after Faust's shutdown instead of exiting; it stops as
    on SIGTERM (``WorkerCrash.stop_worker``): mode's shutdown then waits for that stop to end
    before it closes the event loop."""
    settings = worker.fiba.settings
    if settings.log_level != "debug":
        # aiokafka logs every request at debug level; building those records is measurable.
        logging.getLogger("aiokafka").setLevel(logging.INFO)
    faust_worker = faust.Worker(
        worker.fiba.app,
        loglevel=settings.log_level,
        quiet=True,
        redirect_stdouts=False,
    )
    worker.crash.stop_worker = lambda: faust_worker._schedule_shutdown(signal.SIGTERM)
    try:
        faust_worker.execute_from_commandline()
    except SystemExit as stopped:
        if isinstance(worker.pipeline.failure, StateMismatch):
            raise worker.pipeline.failure from None
        exit_past_stuck_threads(stopped.code)
        raise


def exit_past_stuck_threads(code: int | str | None, grace_s: float = THREAD_STOP_GRACE_S) -> None:
    """After Faust's shutdown closed the event loop: wait up to ``grace_s`` seconds for the
    other non-daemon threads to end, then, if one still runs, log its name and end the process
    at once with exit status ``code`` (``os._exit``). Faust's consumer thread does not end when
    the broker was unreachable as the worker stopped (it keeps retrying, and rejoins the group
    once the broker is back), and the interpreter would wait for it forever. Nothing is left to
    flush by then: the store and the outputs were stopped on the event loop, and a worker's
    state survives a SIGKILL at any point anyway. O(threads)."""
    deadline = time.monotonic() + grace_s
    others = [
        thread
        for thread in threading.enumerate()
        if thread is not threading.current_thread() and not thread.daemon
    ]
    for thread in others:
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = [thread.name for thread in others if thread.is_alive()]
    if not stuck:
        return
    logger.warning(
        "thread(s) %s did not stop within %gs (the broker unreachable?); exiting anyway",
        ", ".join(stuck),
        grace_s,
    )
    sys.stdout.flush()
    sys.stderr.flush()
    status = code if isinstance(code, int) else (0 if code is None else 1)
    os._exit(status)
