"""At-least-once outputs by construction: an input offset is marked applied on the changelog only
after every output it caused (aggregate, dead letter) is acknowledged, and every output carries
the event time as its Kafka timestamp.

The worker (``tests.faulty_worker`` with ``FAULT_SLOW_OUTPUTS_S``) gets its outputs acknowledged
seconds after it hands them over, as on a cluster where their partitions' leader is another
(slower) broker than the changelog's. It is SIGKILLed as soon as the changelog shows the whole
input applied; a restarted worker resumes after that offset, so an output not acknowledged by
then would be lost for good. Every aggregate and every dead letter must be on its topic.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from agents.clients import client_options, read_to_end
from agents.records import DLQ_OFFSET, DLQ_PARTITION, DLQ_REASON, EVENT_TS, KEY, REASON_LATE
from agents.records import REASON_MALFORMED_JSON as MALFORMED
from app.demo import start_worker, stop_worker
from app.settings import Settings
from app.topics import create_topics
from stores.window_store import replay_changelog
from tests.test_crash_recovery import BASE, caught_up, wait_until, worker_settings

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

SLOW_OUTPUTS_S = 4.0
QUERY_TS = BASE - 123_456


def input_records(n: int) -> list[tuple[bytes, bytes, int, str | None]]:
    """``(key, value, Kafka timestamp, dead-letter reason or None)``: distinct event times
    (the Kafka timestamp is the event time, minus 7 ms so that a wall clock or the event time
    of the value cannot pass for it), every 7th record malformed, every 11th late."""
    records = []
    for i in range(n):
        key = f"key-{i % 5}".encode()
        ts = BASE + 3_600_000 * 2 + 1_000 * i
        if i % 7 == 3:
            records.append((key, b'{"ts": 1, "val', ts - 7, MALFORMED))
        elif i % 11 == 5:
            late = json.dumps({"ts": BASE, "value": i}).encode()
            records.append((key, late, BASE - 7, REASON_LATE))
        else:
            records.append((key, json.dumps({"ts": ts, "value": i}).encode(), ts - 7, None))
    return records


async def produce(settings: Settings, records, topic: str) -> list[tuple[int, int]]:
    """Send ``records`` one by one; where each landed: ``(partition, offset)``."""
    producer = AIOKafkaProducer(**client_options(settings), acks="all")
    await producer.start()
    try:
        placed = []
        for key, value, timestamp, _ in records:
            metadata = await producer.send_and_wait(topic, value, key=key, timestamp_ms=timestamp)
            placed.append((metadata.partition, metadata.offset))
    finally:
        await producer.stop()
    return placed


def changelog_applied(settings: Settings) -> dict[int, int]:
    """The applied input offset each changelog partition records (-1: none)."""
    applied = dict.fromkeys(range(settings.partitions), -1)
    for record in asyncio.run(read_to_end(settings, settings.changelog_topic)):
        applied[record.partition], _ = replay_changelog(
            [record], applied[record.partition], lambda k, v: None, lambda k: None
        )
    return applied


def test_outputs_are_acknowledged_before_their_offsets_are_marked_applied(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path
) -> None:
    settings = worker_settings(kafka_bootstrap, embedded_profile, tmp_path / "state", 2)
    asyncio.run(create_topics(settings))
    records = input_records(120)
    placed = asyncio.run(produce(settings, records, settings.input_topic))
    last: dict[int, int] = {}
    for partition, offset in placed:
        last[partition] = max(last.get(partition, -1), offset)

    slow_log = tmp_path / "slow.log"
    worker = start_worker(
        settings,
        slow_log,
        module=("tests.faulty_worker",),
        extra_env={"FAULT_SLOW_OUTPUTS_S": str(SLOW_OUTPUTS_S)},
    )
    try:
        wait_until(
            lambda: all(changelog_applied(settings)[p] >= o for p, o in last.items()),
            180,
            "the changelog shows every input record applied",
        )
        worker.kill()  # as soon as the offsets are marked applied
        worker.wait(10)
    finally:
        stop_worker(worker)

    log = tmp_path / "worker.log"
    worker = start_worker(settings, log)
    try:
        wait_until(lambda: caught_up(settings, [worker], [log], last), 120, "restored")
        asyncio.run(produce(settings, [query_record()], settings.queries_topic))
        answers = wait_for_records(settings, settings.answers_topic, 1)
    finally:
        stop_worker(worker)

    accepted = {(k.decode(), json.loads(v)["ts"]) for k, v, _, reason in records if not reason}
    aggregates = asyncio.run(read_to_end(settings, settings.aggregates_topic))
    emitted = [json.loads(r.value) for r in aggregates]
    missing = accepted - {(a[KEY], a[EVENT_TS]) for a in emitted}
    assert not missing, f"{len(missing)} of {len(accepted)} aggregates lost: {sorted(missing)}"
    # the event time is the Kafka timestamp
    assert [r.timestamp for r in aggregates] == [a[EVENT_TS] for a in emitted]

    rejected = {
        (partition, offset): (timestamp, reason)
        for (_, _, timestamp, reason), (partition, offset) in zip(records, placed, strict=True)
        if reason
    }
    dead = {
        (int(headers[DLQ_PARTITION]), int(headers[DLQ_OFFSET])): (
            record.timestamp,
            headers[DLQ_REASON].decode(),
        )
        for record in asyncio.run(read_to_end(settings, settings.dead_letter_topic))
        for headers in [dict(record.headers)]
    }
    lost = sorted(set(rejected) - set(dead))
    assert not lost, f"{len(lost)} of {len(rejected)} dead letters lost: {lost}"
    assert dead == rejected  # with the input record's Kafka timestamp

    assert [a.timestamp for a in answers] == [QUERY_TS]


def query_record() -> tuple[bytes, bytes, int, None]:
    query = {"query_id": "ts", "key": "key-1", "window": "1m"}
    return b"key-1", json.dumps(query).encode(), QUERY_TS, None


def wait_for_records(settings: Settings, topic: str, n: int, timeout: float = 60) -> list:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = asyncio.run(read_to_end(settings, topic))
        if len(got) >= n:
            return got
        time.sleep(0.3)
    raise AssertionError(f"fewer than {n} records on {topic}")
