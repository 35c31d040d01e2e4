"""``fiba worker`` whose shutdown is slow, for tests/test_state_guards.py: the input reader's
stop (run by the app's ``on_before_shutdown``, before Faust stops its own services, the
consumer's thread among them) first waits ``SLOW_SHUTDOWN_S`` seconds, as a loaded machine
may. A worker that stops with a refusal must still exit with its one line, however long its
shutdown takes.

Run as ``python -m tests.slow_shutdown_worker worker`` with the worker's ``FIBA_*``
environment (the arguments are ``fiba``'s).
"""

from __future__ import annotations

import asyncio
import os

from agents.input_reader import InputReader
from app.cli import main

stop_reader = InputReader.stop


async def slow_stop(self: InputReader) -> None:
    """``InputReader.stop`` after ``SLOW_SHUTDOWN_S`` seconds."""
    await asyncio.sleep(float(os.environ["SLOW_SHUTDOWN_S"]))
    await stop_reader(self)


if __name__ == "__main__":
    InputReader.stop = slow_stop  # type: ignore[method-assign]
    main()
