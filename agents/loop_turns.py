"""Time-based cooperative scheduling: the event-loop turns of a task that rarely suspends.

The windows pipeline applies records synchronously for long stretches; ``LoopTurns`` lets it
give the event loop a turn about every ``TURN_BUDGET`` seconds of work, so that HTTP queries,
the query consumer and Faust's own tasks are served in between. Cost: one clock read per unit
of work, one ``asyncio.sleep(0)`` (or a few) per turn. Design: docs/design/delivery.md.
"""

from __future__ import annotations

import asyncio
import time

TURN_BUDGET = 0.0005
"""Seconds of work after which the pipeline gives the event loop a turn (HTTP, query consumer)."""

MAX_EXTRA_TURNS = 8
"""Further turns a ``LoopTurns.take`` gives while other callbacks are ready."""


class LoopTurns:
    """Time-based cooperative scheduling for a task that rarely suspends by itself.

    The task checks ``time.perf_counter() >= turns.deadline`` between units of work (cheaper
    than a call) and then awaits ``take()``, which gives the event loop one turn and sets the
    next deadline ``budget`` seconds later. Time spent suspended elsewhere is not subtracted,
    so at worst a turn is given that was not needed.
    """

    __slots__ = ("budget", "deadline")

    def __init__(self, budget: float = TURN_BUDGET) -> None:
        self.budget = budget
        self.deadline = time.perf_counter() + budget

    async def take(self) -> None:
        """Give the event loop a turn, and more turns while other callbacks are ready (up to
        ``MAX_EXTRA_TURNS``): a request served in between usually needs a few loop iterations
        (read, handler steps, write), each of which would otherwise wait for the next turn.
        The next deadline is ``budget`` seconds from now."""
        await asyncio.sleep(0)
        ready = getattr(asyncio.get_running_loop(), "_ready", None)  # CPython's ready queue
        extra = MAX_EXTRA_TURNS
        while ready and extra:
            await asyncio.sleep(0)
            extra -= 1
        self.deadline = time.perf_counter() + self.budget
