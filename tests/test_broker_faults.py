"""Faults only a real broker has, end to end on an Apache Kafka broker of the tests' own, each
checked against the brute-force oracle as lost and doubled event counts (tests.exactness):

- the broker is SIGKILLed mid-stream and restarted on its log dir (same port) while the worker
  runs: the worker rides it out in the same process and ends exact;
- the changelog is really compacted by the log cleaner (tiny ``segment.ms``,
  ``min.cleanable.dirty.ratio``, ``delete.retention.ms``), then a worker without its data dir
  restores from it: exact;
- three workers with standby replicas scale 1 -> 3 -> 1 during the stream: exact;
- ``fiba produce`` runs through a broker SIGKILL and restart: it waits with backoff, says so
  once per interval, and the topic ends with every event exactly once.

The broker (module-scoped: one JVM start for the three tests) runs with a fast log cleaner;
the kill test restarts it. Only on the ``kafka`` broker kind: Tansu keeps no log on disk and
never compacts, and an external cluster cannot be killed by a test.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from subprocess import DEVNULL, Popen

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition

from agents.clients import client_options, end_offsets, read_to_end
from agents.kafka_changelog import consumer_for
from app.broker_outage import REPORT_INTERVAL_S
from app.brokers.apache_kafka import KafkaBroker
from app.brokers.process import free_port
from app.demo import log_tail, settings_environ, start_worker, stop_worker
from app.generator import generate_events
from app.settings import Settings
from app.topics import CHANGELOG_TOPIC_CONFIGS, TopicSpec, create_topics
from stores.changelog import SHAPE_KEY
from tests.conftest import broker_kinds_under_test
from tests.exactness import (
    Exactness,
    answers_exactness,
    oracles,
    sample_ranges,
    state_exactness,
)
from tests.test_crash_recovery import (
    BASE,
    KEYS,
    applied_offsets,
    caught_up,
    make_events,
    processed,
    produce,
    wait_until,
    worker_settings,
)
from tests.test_takeover import assigned_partitions

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.timeout(300),
    pytest.mark.skipif(
        "kafka" not in broker_kinds_under_test(),
        reason="needs the kafka broker kind: the tests start, SIGKILL and restart an Apache "
        "Kafka of their own with a fast log cleaner (Tansu never compacts, keeps no log)",
    ),
]

CLEANER_CONFIG = {
    "log.cleaner.backoff.ms": "200",
    "log.cleaner.dedupe.buffer.size": str(16 << 20),
}
"""Broker settings: the log cleaner looks for work every 0.2 s (15 s by default), with a
buffer that fits the broker's small heap."""

FAST_COMPACTION = {
    "segment.ms": "100",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "100",
    "min.compaction.lag.ms": "0",
}
"""Changelog topic settings: a new segment 0.1 s after the last one began, compacted as soon
as anything is dirty, tombstones dropped 0.1 s after their cleaning."""

MAX_METADATA_RETRIES_PER_S = 100
"""Failed metadata updates a worker may log per second of a broker outage: its handful of
clients retry every 0.1 s (aiokafka's own busy loop logs far more, see agents.clients)."""

SPAN = (0, BASE * 2)
"""A range covering every event time."""


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """An Apache Kafka broker of this module on a fixed port, its log in a kept directory (so
    that a test can kill and restart it)."""
    root = tmp_path_factory.mktemp("faults-broker")
    broker = KafkaBroker(
        data_dir=root / "data", log_path=root / "broker.log", extra_config=CLEANER_CONFIG
    )
    with broker:
        yield broker


@pytest.fixture
def running(broker: KafkaBroker) -> KafkaBroker:
    """The module's broker, (re)started if a test before left it down."""
    return broker.start()


def assert_exact(what: str, exactness: Exactness) -> None:
    print(f"{what}: {exactness}")
    assert exactness.exact, f"{what} not exact: {exactness}"


def check_state_and_answers(
    settings: Settings, events: list[tuple[str, int, int]], seed: int
) -> None:
    """The worker of ``settings`` holds exactly ``events`` (all retained) and answers range
    queries over the query topic exactly."""
    expected = oracles(events)
    assert_exact("state", state_exactness(settings, expected, SPAN))
    ranges = sample_ranges(expected, per_key=3, seed=seed)
    assert_exact("answers", answers_exactness(settings, expected, ranges))


def test_the_worker_rides_out_a_broker_sigkill_and_restart(
    running: KafkaBroker, tmp_path: Path
) -> None:
    """SIGKILL the broker mid-stream, restart it on the same log and port: the worker (same
    process, never stopping) resumes and its state and answers are exact."""
    settings = worker_settings(running.bootstrap, False, tmp_path / "state", partitions=3)
    asyncio.run(create_topics(settings))
    # a backlog the worker takes a while over (the native worker applies 6,000 records in
    # about 0.1 s: a smaller one was done before the first progress check)
    events = make_events(42_000, seed=21)
    before, after = events[:40_000], events[40_000:]
    asyncio.run(produce(settings, before))
    log = tmp_path / "worker.log"
    worker = start_worker(settings, log)
    try:
        wait_until(lambda: processed(settings, worker, log) >= 1_000, 120, "some processed")
        at_kill = processed(settings, worker, log)
        running.kill()
        assert at_kill < len(before), "not mid-stream: the worker was done before the kill"
        down_at = time.monotonic()
        time.sleep(3)  # the worker's fetches, commits and heartbeats fail meanwhile
        assert worker.poll() is None, "the worker exited with the broker:\n" + log_tail(log)
        running.start()
        outage = time.monotonic() - down_at
        last = asyncio.run(produce(settings, after))
        wait_until(lambda: caught_up(settings, [worker], [log], last), 120, "all processed")
        check_state_and_answers(settings, events, seed=21)
        assert worker.poll() is None, log_tail(log)
        text = log.read_text(errors="replace")
        assert "the worker stops" not in text
        # its clients retried at their pace, not in a busy loop (agents.clients)
        retries = text.count("Unable to update metadata")
        print(f"killed at {at_kill} records applied; outage {outage:.1f} s: {retries} failed")
        assert retries < MAX_METADATA_RETRIES_PER_S * outage, f"{retries} in {outage:.1f} s"
    finally:
        stop_worker(worker)


PRODUCED = 3_000
PRODUCE_RATE = 300
"""``fiba produce`` of the outage test: events, and events per second (a 10 s run)."""


def test_fiba_produce_waits_out_a_broker_sigkill_and_sends_every_event_once(
    running: KafkaBroker, tmp_path: Path
) -> None:
    """SIGKILL the broker under a ``fiba produce``, restart it: the command waits (it used to
    busy-loop, logging "Unable to update metadata" 2,000 times a second), says so once per
    interval, says when the broker is back, and the topic holds every generated event exactly
    once (its idempotent producer: a batch retried after the restart is not written twice)."""
    settings = worker_settings(running.bootstrap, False, tmp_path / "state", partitions=2)
    asyncio.run(create_topics(settings))
    start = int(time.time() * 1000)
    flags = ["--generate", str(PRODUCED), "--rate", str(PRODUCE_RATE), "--seed", "9"]
    command = [sys.executable, "-m", "app.cli", "produce", *flags, "--start", str(start)]
    stderr = tmp_path / "produce.err"
    with stderr.open("wb") as err:
        env = {**os.environ, **settings_environ(settings)}
        producer = Popen(command, env=env, stdout=DEVNULL, stderr=err)
    try:
        wait_until(lambda: len(input_records(settings)) >= PRODUCED // 5, 60, "some sent")
        running.kill()
        down_at = time.monotonic()
        time.sleep(3)  # the producer's requests and metadata updates fail meanwhile
        assert producer.poll() is None, "produce gave up:\n" + stderr.read_text()
        running.start()
        outage = time.monotonic() - down_at
        producer.wait(timeout=120)
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.wait()
    text = stderr.read_text()
    print(f"outage {outage:.1f} s; produce said:\n{text}")
    assert producer.returncode == 0, text
    sent = Counter(
        (r.key.decode(), json.loads(r.value)["ts"], json.loads(r.value)["value"])
        for r in input_records(settings)
    )
    events = generate_events(PRODUCED, seed=9, start_ms=start)
    assert sent == Counter((e.key, e.ts, e.value) for e in events)
    lines = text.splitlines()
    waiting = [line for line in lines if "no answer from the broker" in line]
    back = [line for line in lines if "the broker answers again" in line]
    assert 1 <= len(waiting) <= 1 + outage / REPORT_INTERVAL_S, text
    assert len(back) == 1, text
    assert lines == [*waiting, *back, f"sent {PRODUCED} records to {settings.input_topic}"], text


def input_records(settings: Settings) -> list:
    """Every record of the input topic of ``settings``."""
    return asyncio.run(read_to_end(settings, settings.input_topic))


def changelog_records(settings: Settings) -> tuple[int, int]:
    """``(records left, end offsets)`` summed over the changelog's partitions."""

    async def count() -> tuple[int, int]:
        consumer = consumer_for(settings)
        await consumer.start()
        try:
            tps = [TopicPartition(settings.changelog_topic, p) for p in range(settings.partitions)]
            consumer.assign(tps)
            ends = await end_offsets(consumer, tps, settings)
            await consumer.seek_to_beginning(*tps)
            left = 0
            while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    left += len(records)
            return left, sum(ends.values())
        finally:
            await consumer.stop()

    return asyncio.run(count())


def roll_active_segments(settings: Settings) -> None:
    """Append each changelog partition's shape record again (the same value: the restore keeps
    the last one), ``segment.ms`` after the worker's last write, so that the segment holding
    that write is rolled: the log cleaner never compacts a partition's active segment."""
    time.sleep(0.5)

    async def append() -> None:
        shapes = {
            r.partition: r.value
            for r in await read_to_end(settings, settings.changelog_topic)
            if r.key == SHAPE_KEY
        }
        producer = AIOKafkaProducer(**client_options(settings))
        await producer.start()
        try:
            for partition, shape in shapes.items():
                await producer.send_and_wait(
                    settings.changelog_topic, shape, key=SHAPE_KEY, partition=partition
                )
        finally:
            await producer.stop()

    asyncio.run(append())


def two_phases(seed: int) -> tuple[list, list]:
    """Events at one moment (phase A), then the same keys two hours later (phase B, beyond the
    one-hour retention): each key's phase-B events evict all its phase-A entries, so the
    changelog holds their upserts, then their tombstones, and the state phase B alone."""
    phase_a = make_events(3_000, seed=seed)
    phase_b = [(key, ts + 2 * 3_600_000, value + 10_000) for key, ts, value in phase_a]
    assert {key for key, _, _ in phase_b} == set(KEYS)
    return phase_a, phase_b


def test_a_worker_without_its_data_dir_restores_exactly_from_a_compacted_changelog(
    running: KafkaBroker, tmp_path: Path
) -> None:
    settings = replace(
        worker_settings(running.bootstrap, False, tmp_path / "state", partitions=2),
        max_future_skew=3 * 3_600_000,  # phase B is two hours after phase A
    )
    changelog = TopicSpec(
        settings.changelog_topic,
        settings.partitions,
        1,
        {**CHANGELOG_TOPIC_CONFIGS, **FAST_COMPACTION},
    )
    asyncio.run(create_topics(settings, [changelog]))
    asyncio.run(create_topics(settings))
    phase_a, phase_b = two_phases(seed=31)
    log = tmp_path / "worker.log"
    worker = start_worker(settings, log)
    try:
        last = asyncio.run(produce(settings, phase_a))
        wait_until(lambda: caught_up(settings, [worker], [log], last), 120, "phase A processed")
        last = asyncio.run(produce(settings, phase_b))
        wait_until(lambda: caught_up(settings, [worker], [log], last), 120, "phase B processed")
    finally:
        stop_worker(worker)
    assert worker.returncode == 0, log_tail(log)

    roll_active_segments(settings)
    written = changelog_records(settings)[1]
    sizes: list[tuple[int, int]] = []

    def compacted() -> bool:
        sizes.append(changelog_records(settings))
        return sizes[-1][0] * 2 < written  # most of phase A's upserts and tombstones gone

    try:  # the cleaner runs every 0.2 s, but a loaded 2-core machine delays its passes
        wait_until(compacted, 180, "the log cleaner compacted the changelog")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {written} written, (left, end) {sizes[-3:]}") from None
    print(f"changelog: {written} records written, {sizes[-1][0]} left after compaction")

    shutil.rmtree(settings.state_dir)
    fresh = replace(settings, web_port=free_port())
    log = tmp_path / "restored.log"
    worker = start_worker(fresh, log)
    try:
        wait_until(lambda: caught_up(fresh, [worker], [log], last), 120, "restored")
        check_state_and_answers(fresh, phase_b, seed=31)
    finally:
        stop_worker(worker)


def test_three_workers_scale_1_3_1_with_standbys_exactly(
    running: KafkaBroker, tmp_path: Path
) -> None:
    """One worker, then three (standby replicas on), then one again, the stream flowing all
    along: the survivor's state and answers are exact."""
    first = replace(
        worker_settings(running.bootstrap, False, tmp_path / "w0", partitions=6),
        standby_replicas=1,
    )
    settings = [first] + [
        replace(first, state_dir=tmp_path / f"w{i}", web_port=free_port()) for i in (1, 2)
    ]
    asyncio.run(create_topics(first))
    events = make_events(9_000, seed=41)
    parts = [events[:3_000], events[3_000:6_000], events[6_000:]]
    logs = [tmp_path / f"w{i}.log" for i in range(3)]
    workers: list[Popen[bytes]] = []
    try:
        workers.append(start_worker(first, logs[0]))
        asyncio.run(produce(first, parts[0]))
        wait_until(lambda: processed(first, workers[0], logs[0]) >= 1_000, 90, "w0 reads")
        # scale up mid-stream: w0 is still applying part 0
        workers += [start_worker(s, g) for s, g in zip(settings[1:], logs[1:], strict=True)]

        def owned() -> list[set[int]]:
            return [
                assigned_partitions(s, w, g)
                for s, w, g in zip(settings, workers, logs, strict=True)
            ]

        wait_until(lambda: all(owned()), 120, "the three workers share the partitions")
        last = asyncio.run(produce(first, parts[1]))

        def all_caught_up() -> bool:
            offsets: dict[int, int] = {}
            for s, w, g in zip(settings, workers, logs, strict=True):
                offsets.update(applied_offsets(s, w, g))
            return all(offsets.get(p, -1) >= o for p, o in last.items())

        wait_until(all_caught_up, 120, "three workers caught up")
        shares = [len(o) for o in owned()]
        last = asyncio.run(produce(first, parts[2]))
        for worker in workers[1:]:  # scale down mid-stream: they are applying part 2
            stop_worker(worker)
        wait_until(
            lambda: len(assigned_partitions(first, workers[0], logs[0])) == 6, 120, "w0 owns all"
        )
        wait_until(lambda: caught_up(first, workers[:1], logs[:1], last), 120, "all processed")
        print(f"partitions per worker while three ran: {shares}")
        check_state_and_answers(first, events, seed=41)
        assert workers[0].poll() is None, log_tail(logs[0])
    finally:
        for worker in workers:
            stop_worker(worker)
