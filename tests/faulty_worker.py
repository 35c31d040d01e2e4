"""``fiba worker`` with one injected fault, for tests/test_crash_recovery.py (the broker is real).

Run as ``python -m tests.faulty_worker`` with the worker's ``FIBA_*`` environment,
``FAULT_PARTITION`` and ``FAULT_OFFSET``: the store call of the accepted input record at that
offset raises right after queuing its changes, so the record is half applied (its changes
queued, the pipeline's applied offset not moved) and the exception ends the input reader's
task, as a bug would.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from app.settings import load_settings
from app.worker import build_worker, serve


class InjectedFault(RuntimeError):
    """The fault this worker is built to hit."""


def main() -> None:
    fault = (int(os.environ["FAULT_PARTITION"]), int(os.environ["FAULT_OFFSET"]))
    worker = build_worker(load_settings())
    record = worker.store.record

    def record_then_fail(
        partition: int,
        offset: int,
        key: str,
        time: int,
        partial: Any,
        evicted_times: Iterable[int] = (),
    ) -> None:
        record(partition, offset, key, time, partial, evicted_times)
        if (partition, offset) == fault:
            raise InjectedFault(f"injected fault at offset {offset} of partition {partition}")

    worker.store.record = record_then_fail  # type: ignore[method-assign]
    serve(worker)


if __name__ == "__main__":
    main()
