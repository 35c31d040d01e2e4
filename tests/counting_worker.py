"""``fiba worker`` that notes its hand-overs, for tests/test_handover_pacing.py (the broker is
real).

Run as ``python -m tests.counting_worker`` with the worker's ``FIBA_*`` environment and
``HANDOVER_LOG``: each ``WindowsPipeline.hand_over`` that follows newly applied input records
appends one line to that file (the applied offsets, as JSON), and each state hand-over of a
partition (``WindowStore.send_changes``) one line ``{"state": partition, "applied": offset}``
to ``STATE_LOG``, if given. ``HANDOVER_WAIT_S`` and ``STATE_WAIT_S``, if given, replace
``agents.input_reader``'s, so that a loaded machine's pace cannot decide how many records a
hand-over carries or whether its state changes go with it. ``SLOW_AGGREGATES_S``, if given,
delays each aggregate record batch's acknowledgement by that many seconds, each noted in
``HANDOVER_LOG`` as a line ``{"acknowledged": partition}`` when it comes.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

from agents import batched_send, input_reader
from agents.batched_send import BatchDelivery
from app.settings import load_settings
from app.worker import Worker, build_worker, serve


def note_hand_overs(worker: Worker, log: Path) -> None:
    """Wrap ``worker.pipeline.hand_over``: a line in ``log`` per call after newly applied
    records."""
    pipeline = worker.pipeline
    hand_over = pipeline.hand_over
    noted: list[dict[str, int]] = [{}]

    async def noting_hand_over(state_wait: float = 0.0) -> None:
        applied = {p: s["applied_offset"] for p, s in pipeline.stats()["partitions"].items()}
        if applied != noted[0]:
            noted[0] = applied
            with log.open("a") as out:
                out.write(json.dumps(applied) + "\n")
        await hand_over(state_wait)

    pipeline.hand_over = noting_hand_over  # type: ignore[method-assign]


def note_state_hand_overs(worker: Worker, log: Path) -> None:
    """Wrap ``worker.pipeline.store.send_changes``: a line in ``log`` per call, with the
    partition's applied offset in the pipeline (-1 before its state is loaded)."""
    pipeline = worker.pipeline
    send_changes = pipeline.store.send_changes

    async def noting_send_changes(partition: int) -> None:
        loaded = partition in pipeline.partitions
        applied = pipeline.applied_offset(partition) if loaded else -1
        with log.open("a") as out:
            out.write(json.dumps({"state": partition, "applied": applied}) + "\n")
        await send_changes(partition)

    pipeline.store.send_changes = noting_send_changes  # type: ignore[method-assign]


class SlowDelivery:
    """A record batch's delivery that completes ``later`` (see ``slow_aggregates``)."""

    def __init__(self, delivery: BatchDelivery, later: asyncio.Future[None]) -> None:
        self.delivery = delivery
        self.later = later

    def __await__(self) -> Generator[Any, None, Any]:
        yield from self.later.__await__()
        return (yield from self.delivery.__await__())

    def add_done_callback(self, callback: Callable[[asyncio.Future[Any]], object]) -> None:
        self.later.add_done_callback(callback)


def slow_aggregates(topic: str, delay: float, log: Path) -> None:
    """Wrap ``agents.batched_send.send_output_records``: each record batch of ``topic``
    counts as acknowledged ``delay`` seconds after the broker acknowledged it, and then a line
    ``{"acknowledged": partition}`` goes to ``log``."""
    send = batched_send.send_output_records

    async def slow_send(producer: Any, to: str, partition: int, records: Any) -> Any:
        delivery = await send(producer, to, partition, records)
        if delivery is None or to != topic:
            return delivery
        loop = asyncio.get_running_loop()
        later: asyncio.Future[None] = loop.create_future()

        def settle(future: asyncio.Future[Any]) -> None:
            with log.open("a") as out:
                out.write(json.dumps({"acknowledged": partition}) + "\n")
            if future.cancelled():
                later.cancel()
            elif future.exception() is not None:
                later.set_exception(future.exception())  # type: ignore[arg-type]
            else:
                later.set_result(None)

        delivery.add_done_callback(lambda future: loop.call_later(delay, settle, future))
        return SlowDelivery(delivery, later)

    batched_send.send_output_records = slow_send  # type: ignore[assignment]


def main() -> None:
    for name in ("HANDOVER_WAIT_S", "STATE_WAIT_S"):
        if name in os.environ:
            setattr(input_reader, name, float(os.environ[name]))
    settings = load_settings()
    if "SLOW_AGGREGATES_S" in os.environ:
        delay = float(os.environ["SLOW_AGGREGATES_S"])
        slow_aggregates(settings.aggregates_topic, delay, Path(os.environ["HANDOVER_LOG"]))
    worker = build_worker(settings)
    note_hand_overs(worker, Path(os.environ["HANDOVER_LOG"]))
    if "STATE_LOG" in os.environ:
        note_state_hand_overs(worker, Path(os.environ["STATE_LOG"]))
    serve(worker)


if __name__ == "__main__":
    main()
