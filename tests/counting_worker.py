"""``fiba worker`` that notes its hand-overs, for tests/test_handover_pacing.py (the broker is
real).

Run as ``python -m tests.counting_worker`` with the worker's ``FIBA_*`` environment and
``HANDOVER_LOG``: each ``WindowsPipeline.hand_over`` that follows newly applied input records
appends one line to that file (the applied offsets, as JSON), and each state hand-over of a
partition (``WindowStore.send_changes``) one line ``{"state": partition, "applied": offset}``
to ``STATE_LOG``, if given. ``HANDOVER_WAIT_S`` and ``STATE_WAIT_S``, if given, replace
``agents.input_reader``'s, so that a loaded machine's pace cannot decide how many records a
hand-over carries or whether its state changes go with it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from agents import input_reader
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


def main() -> None:
    for name in ("HANDOVER_WAIT_S", "STATE_WAIT_S"):
        if name in os.environ:
            setattr(input_reader, name, float(os.environ[name]))
    worker = build_worker(load_settings())
    note_hand_overs(worker, Path(os.environ["HANDOVER_LOG"]))
    if "STATE_LOG" in os.environ:
        note_state_hand_overs(worker, Path(os.environ["STATE_LOG"]))
    serve(worker)


if __name__ == "__main__":
    main()
