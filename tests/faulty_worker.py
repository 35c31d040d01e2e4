"""``fiba worker`` with one injected fault, for tests/test_crash_recovery.py (the broker is real).

Run as ``python -m tests.faulty_worker`` with the worker's ``FIBA_*`` environment and

- ``FAULT_PARTITION`` and ``FAULT_OFFSET``: the store call of the accepted input record at that
  offset raises right after queuing its changes, so the record is half applied (its changes
  queued, the pipeline's applied offset not moved) and the exception ends the input reader's
  task, as a bug would; or
- ``FAULT_QUERY_ID``: handling the query record with that id raises, which ends the query
  consumer's task.
"""

from __future__ import annotations

import json
import os
from typing import Any

from app.settings import load_settings
from app.worker import Worker, build_worker, serve


class InjectedFault(RuntimeError):
    """The fault this worker is built to hit."""


def main() -> None:
    worker = build_worker(load_settings())
    if "FAULT_QUERY_ID" in os.environ:
        inject_query_fault(worker, os.environ["FAULT_QUERY_ID"])
    else:
        inject_input_fault(
            worker, int(os.environ["FAULT_PARTITION"]), int(os.environ["FAULT_OFFSET"])
        )
    serve(worker)


def inject_query_fault(worker: Worker, query_id: str) -> None:
    handle = worker.queries.handle

    async def handle_or_fail(message: Any) -> None:
        if json.loads(message.value).get("query_id") == query_id:
            raise InjectedFault(f"injected fault at query {query_id}")
        await handle(message)

    worker.queries.handle = handle_or_fail  # type: ignore[method-assign]


def inject_input_fault(worker: Worker, fault_partition: int, fault_offset: int) -> None:
    record = worker.store.record

    def record_then_fail(partition: int, offset: int, *effect: Any) -> None:
        record(partition, offset, *effect)
        if (partition, offset) == (fault_partition, fault_offset):
            raise InjectedFault(f"injected fault at offset {offset} of partition {partition}")

    worker.store.record = record_then_fail  # type: ignore[method-assign]


if __name__ == "__main__":
    main()
