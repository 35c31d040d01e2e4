"""How often a ``fiba worker`` with ``emit=event`` hands over (agents.input_reader): reading a
backlog it applies each fetched chunk at once but hands over about every ``HANDOVER_RECORDS``
records, not after every chunk of ``FETCH_CHUNK`` (each hand-over is a produce round per output
partition, awaiting acknowledgements); caught up, it hands over as soon as a fetch finds nothing
more. The state changes (local writes, changelog) go with a hand-over only every
``STATE_WAIT_S``, and as soon as the input goes idle. The worker is ``tests.counting_worker`` on
a real broker, its time bounds ``HANDOVER_WAIT_S`` and ``STATE_WAIT_S`` lifted so that only the
record bound and the end of the input count.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path
from subprocess import Popen

import pytest
from aiokafka import AIOKafkaProducer

from agents.clients import client_options
from agents.input_reader import FETCH_CHUNK, HANDOVER_RECORDS
from app.demo import log_tail, start_worker, stop_worker
from app.settings import Settings
from app.topics import create_topics
from tests.test_crash_recovery import (
    caught_up,
    check_aggregates,
    make_events,
    wait_until,
    worker_settings,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

BACKLOG = 3 * HANDOVER_RECORDS


async def produce_backlog(settings: Settings, events: list[tuple[str, int, int]]) -> None:
    """Send ``events`` in few large record batches (so that a fetch returns many chunks)."""
    producer = AIOKafkaProducer(
        **client_options(settings), linger_ms=200, max_batch_size=512 * 1024
    )
    await producer.start()
    try:
        deliveries = [
            await producer.send(
                settings.input_topic,
                json.dumps({"ts": ts, "value": value}).encode(),
                key=key.encode(),
                partition=0,
            )
            for key, ts, value in events
        ]
        await asyncio.gather(*deliveries)
    finally:
        await producer.stop()


def noted_lines(log: Path) -> list[dict[str, int]]:
    """Every line of the hand-over log, in order (``tests.counting_worker``)."""
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def hand_overs(log: Path) -> list[int]:
    """The applied offset of partition 0 at each noted hand-over (``tests.counting_worker``;
    the lines noting acknowledgements left out)."""
    return [line.get("0", -1) for line in noted_lines(log) if "acknowledged" not in line]


def counting_worker(
    kafka_bootstrap: str,
    embedded_profile: bool,
    tmp_path: Path,
    backlog: list[tuple[str, int, int]],
    **env: str,
) -> tuple[Settings, Popen, Path, Path]:
    """A ``tests.counting_worker`` (``emit=event``, one partition, no sweep, the time bounds of
    its hand-overs and state hand-overs lifted, ``env`` added) started after ``backlog`` was
    produced: its settings, process, hand-over log and log file."""
    settings = replace(
        worker_settings(kafka_bootstrap, embedded_profile, tmp_path / "state", partitions=1),
        emit="event",
        sweep_interval=3_600_000,  # a sweep hands the state over too: none during the test
    )
    asyncio.run(create_topics(settings))
    asyncio.run(produce_backlog(settings, backlog))
    noted, worker_log = tmp_path / "hand-overs.jsonl", tmp_path / "worker.log"
    worker = start_worker(
        settings,
        worker_log,
        module=("tests.counting_worker",),
        extra_env={
            "HANDOVER_LOG": str(noted),
            "HANDOVER_WAIT_S": "3600",
            "STATE_WAIT_S": "3600",
            **env,
        },
    )
    return settings, worker, noted, worker_log


def state_hand_overs(log: Path) -> list[int]:
    """The applied offset of partition 0 at each noted state hand-over, once it is loaded."""
    if not log.exists():
        return []
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    return [line["applied"] for line in lines if line["state"] == 0 and line["applied"] >= 0]


def test_a_backlog_is_handed_over_in_large_rounds_its_state_when_idle_and_the_last_event_at_once(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path
) -> None:
    events = make_events(BACKLOG + 1, seed=29)
    state_noted = tmp_path / "state-hand-overs.jsonl"
    settings, worker, noted, worker_log = counting_worker(
        kafka_bootstrap,
        embedded_profile,
        tmp_path,
        events[:BACKLOG],
        STATE_LOG=str(state_noted),
    )
    try:
        wait_until(
            lambda: caught_up(settings, [worker], [worker_log], {0: BACKLOG - 1}),
            120,
            "the backlog applied",
        )
        wait_until(lambda: BACKLOG - 1 in hand_overs(noted), 60, "the backlog handed over")
        backlog_rounds = hand_overs(noted)
        # one round per chunk would be BACKLOG / FETCH_CHUNK = 30
        assert len(backlog_rounds) <= BACKLOG // FETCH_CHUNK // 3, (
            backlog_rounds,
            log_tail(worker_log),
        )
        # the outputs went in several rounds, the state changes with none of them: once the
        # input went idle, in one round (the time bound is an hour here)
        assert len(backlog_rounds) >= BACKLOG // HANDOVER_RECORDS, backlog_rounds
        wait_until(
            lambda: BACKLOG - 1 in state_hand_overs(state_noted), 60, "the state handed over"
        )
        assert state_hand_overs(state_noted) == [BACKLOG - 1], (
            state_hand_overs(state_noted),
            backlog_rounds,
        )
        # caught up: the next event is handed over without waiting for more (the time bound
        # is an hour here)
        asyncio.run(produce_backlog(settings, events[BACKLOG:]))
        wait_until(lambda: BACKLOG in hand_overs(noted), 60, "the last event handed over")
        wait_until(lambda: BACKLOG in state_hand_overs(state_noted), 60, "its state handed over")
        check_aggregates(settings, events)
    finally:
        stop_worker(worker)


def test_the_reader_applies_the_next_records_while_a_round_of_outputs_is_in_flight(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path
) -> None:
    """With the state changes left for later (``STATE_WAIT_S``), a hand-over hands its outputs
    to the producer and returns without waiting for their acknowledgement
    (``WindowsPipeline.send_outputs``): the reader applies the next records meanwhile. The
    aggregate batches are acknowledged 3 s late here (``SLOW_AGGREGATES_S``): the second
    round's hand-over comes before the first round's acknowledgement, where a reader waiting
    for each round would note it only after. Every output still arrives, once."""
    events = make_events(BACKLOG, seed=31)
    settings, worker, noted, worker_log = counting_worker(
        kafka_bootstrap, embedded_profile, tmp_path, events, SLOW_AGGREGATES_S="3"
    )
    try:
        wait_until(lambda: BACKLOG - 1 in hand_overs(noted), 120, "the backlog handed over")
        lines = noted_lines(noted)
        first_ack = next(i for i, line in enumerate(lines) if "acknowledged" in line)
        rounds_before = [line for line in lines[:first_ack] if "0" in line]
        assert len(rounds_before) >= 2, (lines, log_tail(worker_log))
        check_aggregates(settings, events)
    finally:
        stop_worker(worker)
