"""Crash exactness of a real ``fiba worker`` subprocess: SIGKILL it mid-stream, restart it with
its data dir, SIGKILL it again, restart it without its data dir; at the end every key's
aggregate over its whole retained range equals the oracle (nothing lost, nothing counted twice).

All events of a key stay inside the retention, none is late, so the oracle of a key is simply
the count and the sum of its values. Values are distinct small integers per event, so a lost or
doubled event changes the sum even when another error kept the count.

A worker whose input reader or query consumer fails (a fault injected by
``tests.faulty_worker``) must stop with an error rather than stay up without reading; the
restarted worker applies every record once and answers the query that was being handled.
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from subprocess import Popen, TimeoutExpired

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from agents.clients import client_options
from app.brokers.process import free_port
from app.demo import log_tail, start_worker, stop_worker
from app.settings import Settings, WindowSpec
from app.topics import create_topics

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

BASE = 1_700_000_000_000
KEYS = [f"key-{i}" for i in range(12)]


WORKER_SESSION_TIMEOUT_MS = 6_000


def worker_settings(bootstrap: str, embedded: bool, state_dir: Path, partitions: int) -> Settings:
    suffix = uuid.uuid4().hex[:8]
    return replace(
        Settings(),
        broker=bootstrap,
        broker_profile="embedded" if embedded else "kafka",
        # Apache Kafka's smallest accepted session timeout: a restart after SIGKILL waits that
        # long for the dead member to leave (Faust's default is 60 s)
        session_timeout=None if embedded else WORKER_SESSION_TIMEOUT_MS,
        app_id=f"crash-{suffix}",
        input_topic=f"crash-{suffix}-events",
        aggregates_topic=f"crash-{suffix}-aggregates",
        queries_topic=f"crash-{suffix}-queries",
        answers_topic=f"crash-{suffix}-answers",
        dead_letter_topic=f"crash-{suffix}-dlq",
        partitions=partitions,
        retention=3_600_000,
        windows=(WindowSpec("1m", 60_000), WindowSpec("1h", 3_600_000)),
        aggregations=("count", "sum"),
        state_dir=state_dir,
        web_port=free_port(),
        sweep_interval=60_000,
    )


def make_events(n: int, seed: int) -> list[tuple[str, int, int]]:
    """``(key, ts, value)``: out of order by up to 2 s, all within one hour."""
    rng = random.Random(seed)
    return [(rng.choice(KEYS), BASE + 10 * i + rng.randint(-2_000, 0), i + 1) for i in range(n)]


async def produce(settings: Settings, events: list[tuple[str, int, int]]) -> dict[int, int]:
    """Send ``events`` (key = aggregation key); return the last offset of each partition."""
    producer = AIOKafkaProducer(**client_options(settings), linger_ms=5)
    await producer.start()
    last: dict[int, int] = {}
    try:
        deliveries = [
            await producer.send(
                settings.input_topic,
                json.dumps({"ts": ts, "value": value}).encode(),
                key=key.encode(),
            )
            for key, ts, value in events
        ]
        for delivery in deliveries:
            metadata = await delivery
            last[metadata.partition] = max(last.get(metadata.partition, -1), metadata.offset)
    finally:
        await producer.stop()
    return last


def oracle(events: list[tuple[str, int, int]]) -> dict[str, tuple[int, int]]:
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for key, _, value in events:
        totals[key][0] += 1
        totals[key][1] += value
    return {key: (count, total) for key, (count, total) in totals.items()}


def http_get(settings: Settings, path: str) -> dict:
    url = f"http://127.0.0.1:{settings.web_port}{path}"
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def applied_offsets(settings: Settings, worker: Popen[bytes], log: Path) -> dict[int, int]:
    """The worker's applied offset per loaded partition ({} while its web server is down)."""
    assert worker.poll() is None, "the worker exited:\n" + log_tail(log)
    try:
        stats = http_get(settings, "/stats")
    except (OSError, urllib.error.URLError):
        return {}
    return {int(p): s["applied_offset"] for p, s in stats["partitions"].items()}


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting until {what}")


def processed(settings: Settings, worker: Popen[bytes], log: Path) -> int:
    """Input records covered by the worker's applied offsets."""
    return sum(o + 1 for o in applied_offsets(settings, worker, log).values())


def caught_up(settings, workers, logs, last: dict[int, int]) -> bool:
    offsets: dict[int, int] = {}
    for worker, log in zip(workers, logs, strict=True):
        offsets.update(applied_offsets(settings, worker, log))
    return all(offsets.get(p, -1) >= o for p, o in last.items())


def check_aggregates(settings: Settings, events: list[tuple[str, int, int]]) -> None:
    """Every key's aggregate over all time equals the oracle (asked over HTTP)."""
    query = urllib.parse.urlencode({"from": 0, "to": BASE * 2})
    for key, (count, total) in sorted(oracle(events).items()):
        answer = http_get(settings, f"/windows/{key}?{query}")
        assert (answer["count"], answer["result"]["sum"]) == (count, total), key


@pytest.mark.parametrize("emit", ["event", "batch"])
def test_sigkill_mid_stream_with_and_without_data_dir(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path, emit: str
) -> None:
    state_dir = tmp_path / "state"
    settings = worker_settings(kafka_bootstrap, embedded_profile, state_dir, partitions=3)
    settings = replace(settings, emit=emit)
    asyncio.run(create_topics(settings))
    events = make_events(9_000, seed=7)
    last = asyncio.run(produce(settings, events))
    logs = [tmp_path / f"worker-{i}.log" for i in range(3)]

    worker = start_worker(settings, logs[0])
    try:
        wait_until(
            lambda: processed(settings, worker, logs[0]) >= 2_500, 120, "first third processed"
        )
        worker.kill()  # SIGKILL mid-stream; the data dir stays
        worker.wait(10)

        worker = start_worker(settings, logs[1])
        wait_until(
            lambda: processed(settings, worker, logs[1]) >= 5_500, 120, "second third processed"
        )
        worker.kill()
        worker.wait(10)
        shutil.rmtree(state_dir)  # SIGKILL, and the data dir is lost as well

        worker = start_worker(settings, logs[2])
        wait_until(
            lambda: caught_up(settings, [worker], [logs[2]], last), 120, "everything processed"
        )
        check_aggregates(settings, events)
    finally:
        stop_worker(worker)


def run_faulty_worker(settings: Settings, log: Path, **fault: str) -> str:
    """Run ``tests.faulty_worker`` with ``fault`` (its environment variables) until it exits,
    which it must do with an error within 120 s; its log."""
    faulty = start_worker(settings, log, module=("tests.faulty_worker",), extra_env=fault)
    try:
        faulty.wait(120)
    except TimeoutExpired:
        stop_worker(faulty)
        raise AssertionError("the worker did not stop:\n" + log_tail(log)) from None
    assert faulty.returncode != 0, log_tail(log)
    return log.read_text(errors="replace")


def test_a_failing_input_reader_stops_the_worker_and_a_restart_resumes_exactly(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path
) -> None:
    """A bug that kills the input reader mid-record (``tests.faulty_worker``) is logged and
    stops the worker with an error instead of leaving it up and idle; a restart with the same
    data dir applies every record once, the half-applied one included."""
    settings = worker_settings(kafka_bootstrap, embedded_profile, tmp_path / "state", 2)
    asyncio.run(create_topics(settings))
    events = make_events(2_000, seed=11)
    last = asyncio.run(produce(settings, events))
    partition = min(last)
    log = run_faulty_worker(
        settings,
        tmp_path / "faulty.log",
        FAULT_PARTITION=str(partition),
        FAULT_OFFSET=str(last[partition] // 2),
    )
    assert "fiba-input-reader failed" in log and "InjectedFault" in log, log[-4000:]

    worker_log = tmp_path / "worker.log"
    worker = start_worker(settings, worker_log)
    try:
        wait_until(
            lambda: caught_up(settings, [worker], [worker_log], last), 120, "everything processed"
        )
        check_aggregates(settings, events)
    finally:
        stop_worker(worker)


async def send_query(settings: Settings, query: dict) -> None:
    producer = AIOKafkaProducer(**client_options(settings))
    await producer.start()
    try:
        await producer.send_and_wait(
            settings.queries_topic, json.dumps(query).encode(), key=query["key"].encode()
        )
    finally:
        await producer.stop()


async def answers_with_id(settings: Settings, query_id: str, timeout: float) -> list[dict]:
    """The answer records with ``query_id`` on the answers topic, once at least one is there
    (or ``timeout`` seconds passed)."""
    consumer = AIOKafkaConsumer(
        settings.answers_topic, **client_options(settings), auto_offset_reset="earliest"
    )
    await consumer.start()
    answers: list[dict] = []
    try:
        deadline = time.monotonic() + timeout
        while not answers and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                decoded = (json.loads(r.value) for r in records)
                answers += [a for a in decoded if a["query_id"] == query_id]
    finally:
        await consumer.stop()
    return answers


def test_a_failing_query_consumer_stops_the_worker_and_the_query_is_answered_after(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path
) -> None:
    """A bug that kills the query consumer stops the worker with an error (instead of leaving
    queries unanswered for good); the query's offset was not committed, so the restarted
    worker answers it."""
    settings = worker_settings(kafka_bootstrap, embedded_profile, tmp_path / "state", 2)
    asyncio.run(create_topics(settings))
    query = {"query_id": "boom", "key": KEYS[0], "from": 0, "to": BASE * 2}
    asyncio.run(send_query(settings, query))
    log = run_faulty_worker(settings, tmp_path / "faulty.log", FAULT_QUERY_ID="boom")
    assert "fiba-query-consumer failed" in log and "InjectedFault" in log, log[-4000:]

    worker_log = tmp_path / "worker.log"
    worker = start_worker(settings, worker_log)
    try:
        answers = asyncio.run(answers_with_id(settings, "boom", 120))
        assert answers, "the query was never answered:\n" + log_tail(worker_log)
        assert answers[0]["key"] == KEYS[0] and answers[0]["count"] == 0
    finally:
        stop_worker(worker)
