"""Background tasks of a worker that must not end unnoticed, and what stops the worker then.

The input reader, the query consumer and the answers reader each run a loop forever in their
own task; errors they expect (a fetch failing during a rebalance, bad input) are handled inside
the loop. Anything else ending such a task (a bug, or an error a Kafka client gave up on) would
leave the worker up but deaf. ``watched`` logs that exception with its traceback and hands it
to ``WorkerCrash``, which stops the whole worker: the process exits with the error and its
supervisor restarts it, from the durable state, which is exact after a crash at any point.
A refusal (``StateMismatch``: a partition's state written with other settings) is no crash:
the worker stops in order, as on SIGTERM, so that no Faust service is left mid-way (a crash
marks the consumer's thread crashed too, which closes its event loop before the worker
stops it: "Event loop is closed").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from stores.state_shape import StateMismatch

if TYPE_CHECKING:
    from agents.config import FaustWorker
    from agents.windows import WindowsPipeline

logger = logging.getLogger(__name__)

OnFailure = Callable[[BaseException], None]


def watched(
    work: Coroutine[Any, Any, None], name: str, on_failure: OnFailure
) -> asyncio.Task[None]:
    """Run ``work`` as a task named ``name``; if it ends with an exception, log it with its
    traceback and call ``on_failure`` with it. Cancellation and a normal return are not
    failures."""

    def ended(task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is None:
            return
        error = task.exception()
        logger.critical(
            "%s failed; the worker stops (its durable state is exact: a restart resumes from it)",
            name,
            exc_info=error,
        )
        on_failure(error)

    task = asyncio.create_task(work, name=name)
    task.add_done_callback(ended)
    return task


class WorkerCrash:
    """``on_failure`` of a worker's watched tasks: ``pipeline.fail`` (nothing queued is handed
    over any more: a record may be half applied), then the Faust app crashes (it stops, and
    the process exits with the error); a ``StateMismatch`` instead calls ``stop_worker`` if
    set (the running worker's orderly stop; the failure stays in ``pipeline.failure``)."""

    def __init__(self, fiba: FaustWorker, pipeline: WindowsPipeline) -> None:
        self.fiba = fiba
        self.pipeline = pipeline
        self.stop_worker: Callable[[], None] | None = None
        self._crashing: list[asyncio.Future[None]] = []

    def __call__(self, error: BaseException) -> None:
        self.pipeline.fail(error)
        if isinstance(error, StateMismatch) and self.stop_worker is not None:
            self.stop_worker()
            return
        self._crashing.append(asyncio.ensure_future(self.fiba.app.crash(error)))
