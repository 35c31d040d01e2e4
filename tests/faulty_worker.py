"""``fiba worker`` with one injected fault, for tests/test_crash_recovery.py (the broker is real).

Run as ``python -m tests.faulty_worker`` with the worker's ``FIBA_*`` environment and
one fault: ``FAULT_PARTITION``/``FAULT_OFFSET`` (the store call recording that input record
raises after queuing its changes, ending the input reader as a bug would), ``FAULT_QUERY_ID``
(handling that query raises, ending the query consumer), ``FAULT_SLOW_CHANGELOG_S`` (every
changelog hand-over waits first: the window in which a SIGKILL repeats outputs under
at-least-once and must not under exactly-once) or ``FAULT_SLOW_OUTPUTS_S`` (outputs are
acknowledged late, which the store must wait for). Details: docs/testing.md.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Iterable
from typing import Any

from agents import batched_send, kafka_changelog, transactions
from agents.batched_send import OutputRecord
from app.settings import load_settings
from app.worker import Worker, build_worker, serve


class InjectedFault(RuntimeError):
    """The fault this worker is built to hit."""


def main() -> None:
    worker = build_worker(load_settings())
    if "FAULT_QUERY_ID" in os.environ:
        inject_query_fault(worker, os.environ["FAULT_QUERY_ID"])
    elif "FAULT_SLOW_CHANGELOG_S" in os.environ:
        delay_changelog(
            worker.fiba.settings.changelog_topic, float(os.environ["FAULT_SLOW_CHANGELOG_S"])
        )
    elif "FAULT_SLOW_OUTPUTS_S" in os.environ:
        settings = worker.fiba.settings
        delay_outputs(
            {settings.aggregates_topic, settings.dead_letter_topic},
            float(os.environ["FAULT_SLOW_OUTPUTS_S"]),
        )
    else:
        inject_input_fault(
            worker, int(os.environ["FAULT_PARTITION"]), int(os.environ["FAULT_OFFSET"])
        )
    serve(worker)


def inject_query_fault(worker: Worker, query_id: str) -> None:
    handle = worker.queries.handle

    async def handle_or_fail(message: Any, send: Any = None) -> None:
        if json.loads(message.value).get("query_id") == query_id:
            raise InjectedFault(f"injected fault at query {query_id}")
        await handle(message, send)

    worker.queries.handle = handle_or_fail  # type: ignore[method-assign]


def delay_outputs(topics: set[str], delay: float) -> None:
    """Records for ``topics`` handed over as whole batches (``agents.batched_send``) go to the
    producer ``delay`` seconds later (in the order handed over); their delivery is that
    later send's. The hand-over itself returns at once, as with a slow broker."""
    send = batched_send.send_output_records

    async def send_late(
        producer: Any, topic: str, partition: int, records: Iterable[OutputRecord]
    ) -> Awaitable[Any] | None:
        if topic not in topics:
            return await send(producer, topic, partition, records)
        late = list(records)

        async def later() -> Any:
            await asyncio.sleep(delay)
            delivery = await send(producer, topic, partition, late)
            return await delivery if delivery is not None else None

        return asyncio.ensure_future(later())

    batched_send.send_output_records = send_late  # type: ignore[assignment]


def delay_changelog(topic: str, delay: float) -> None:
    """Each hand-over of changelog records (to ``topic``) waits ``delay`` seconds first, as on
    a cluster where the changelog's leader is slow: the outputs handed over before it are
    acknowledged (at-least-once) or open in the same transaction (exactly-once) meanwhile, so
    a SIGKILL then finds outputs whose state the changelog does not have yet. It wraps
    ``send_records`` where the changelog links call it (``agents.kafka_changelog``,
    ``agents.transactions``): with native builders it does not go through
    ``send_output_records``."""
    for module in (kafka_changelog, transactions):
        module.send_records = delayed(module.send_records, topic, delay)  # type: ignore[attr-defined]


def delayed(send: Any, topic: str, delay: float) -> Any:
    """``send`` (``agents.batched_send.send_records``) waiting ``delay`` seconds first when
    its topic is ``topic``."""

    async def send_slowly(
        producer: Any, target: str, partition: int, records: Any
    ) -> Awaitable[Any] | None:
        if target == topic:
            await wait(delay)
        return await send(producer, target, partition, records)

    return send_slowly


wait = asyncio.sleep
"""How ``delayed`` waits (a test counts its calls)."""


def inject_input_fault(worker: Worker, fault_partition: int, fault_offset: int) -> None:
    """The store call that records the input record at ``fault_offset`` of ``fault_partition``
    (``record``, or ``record_many`` with its effect among others: ``emit=event`` and
    ``batch``) raises once it has queued its changes."""
    record, record_many = worker.store.record, worker.store.record_many

    def fail(partition: int, offset: int) -> None:
        raise InjectedFault(f"injected fault at offset {offset} of partition {partition}")

    def record_then_fail(partition: int, offset: int, *effect: Any) -> None:
        record(partition, offset, *effect)
        if (partition, offset) == (fault_partition, fault_offset):
            fail(partition, offset)

    def record_many_then_fail(
        partition: int, effects: Iterable[tuple[Any, ...]], encoded: bool = False
    ) -> None:
        effects = list(effects)
        record_many(partition, effects, encoded)
        if partition == fault_partition and any(e[0] == fault_offset for e in effects):
            fail(partition, fault_offset)

    worker.store.record = record_then_fail  # type: ignore[method-assign]
    worker.store.record_many = record_many_then_fail  # type: ignore[method-assign]


if __name__ == "__main__":
    main()
