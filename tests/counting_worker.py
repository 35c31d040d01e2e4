"""``fiba worker`` that notes its hand-overs, for tests/test_handover_pacing.py (the broker is
real).

Run as ``python -m tests.counting_worker`` with the worker's ``FIBA_*`` environment and
``HANDOVER_LOG``: each ``WindowsPipeline.hand_over`` that follows newly applied input records
appends one line to that file (the applied offsets, as JSON). ``HANDOVER_WAIT_S``, if given,
replaces ``agents.input_reader.HANDOVER_WAIT_S``, so that a loaded machine's pace cannot decide
how many records a hand-over carries.
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

    async def noting_hand_over() -> None:
        applied = {p: s["applied_offset"] for p, s in pipeline.stats()["partitions"].items()}
        if applied != noted[0]:
            noted[0] = applied
            with log.open("a") as out:
                out.write(json.dumps(applied) + "\n")
        await hand_over()

    pipeline.hand_over = noting_hand_over  # type: ignore[method-assign]


def main() -> None:
    if "HANDOVER_WAIT_S" in os.environ:
        input_reader.HANDOVER_WAIT_S = float(os.environ["HANDOVER_WAIT_S"])
    worker = build_worker(load_settings())
    note_hand_overs(worker, Path(os.environ["HANDOVER_LOG"]))
    serve(worker)


if __name__ == "__main__":
    main()
