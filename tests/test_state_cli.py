"""``fiba state reset`` and ``fiba state reset-stream-time`` through the CLI, on real workers:
a changelog reset rebuilds the state from the input under new settings, and a partition whose
stream time one far-future timestamp moved centuries ahead accepts events again after its
stream time is reset, and with ``max_wall_clock_skew`` the same mistake is a dead letter."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from agents.records import DLQ_DETAIL, DLQ_REASON
from app.cli import cli
from app.demo import settings_environ, start_worker, stop_worker
from app.settings import Settings
from app.topics import create_topics
from tests.test_crash_recovery import (
    BASE,
    caught_up,
    check_aggregates,
    make_events,
    produce,
    wait_until,
    worker_settings,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]


def fiba_state(settings: Settings, *args: str, answer: str | None = None):
    """``fiba state ARGS`` in-process with ``settings`` in the environment; the click Result."""
    return CliRunner().invoke(
        cli, ["state", *args], env=settings_environ(settings), input=answer, catch_exceptions=False
    )


def run_until_caught_up(settings: Settings, last: dict[int, int], log: Path) -> None:
    """A worker of ``settings`` until it applied every offset of ``last``, then stopped."""
    worker = start_worker(settings, log)
    try:
        wait_until(lambda: caught_up(settings, [worker], [log], last), 120, "caught up")
    finally:
        stop_worker(worker)


def test_reset_with_changelog_rebuilds_the_state_from_the_input_under_new_settings(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path
) -> None:
    settings = worker_settings(kafka_bootstrap, embedded_profile, tmp_path / "s", partitions=2)
    asyncio.run(create_topics(settings))
    events = make_events(1_500, seed=3)
    last = asyncio.run(produce(settings, events))
    run_until_caught_up(settings, last, tmp_path / "w1.log")
    local = settings.state_dir / settings.app_id
    assert local.is_dir()

    reordered = replace(settings, aggregations=("sum", "count"))
    declined = fiba_state(reordered, "reset", "--changelog", answer="n\n")
    assert declined.exit_code == 1 and local.is_dir()  # nothing deleted without a yes
    done = fiba_state(reordered, "reset", "--changelog", answer="y\n")
    assert done.exit_code == 0, done.output
    assert "deleted the local state" in done.stdout and not local.exists()

    worker = start_worker(reordered, tmp_path / "w2.log")  # reads the input from the start
    try:
        wait_until(
            lambda: caught_up(reordered, [worker], [tmp_path / "w2.log"], last), 120, "rebuilt"
        )
        check_aggregates(reordered, events)
    finally:
        stop_worker(worker)


POISON_TS = BASE * 100  # year 5357


def test_reset_stream_time_repairs_a_partition_poisoned_by_a_far_future_timestamp(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path
) -> None:
    # a worker without the clock rule: one event centuries ahead (a time in a wrong unit, still
    # within the years 1-9999 that the parser takes) makes every later one late
    unguarded = replace(
        worker_settings(kafka_bootstrap, embedded_profile, tmp_path / "s", partitions=1),
        max_wall_clock_skew=None,
    )
    asyncio.run(create_topics(unguarded))
    poison = [("key-0", POISON_TS, 1)]
    last = asyncio.run(produce(unguarded, poison + make_events(200, seed=5)))
    run_until_caught_up(unguarded, last, tmp_path / "w1.log")

    settings = replace(unguarded, max_wall_clock_skew=86_400_000)
    result = fiba_state(settings, "reset-stream-time", "--partition", "0", "--yes")
    assert result.exit_code == 0, result.output
    assert "1 entry later than" in result.stdout
    assert f"stream time {POISON_TS} -> None" in result.stdout

    # with the clock rule, the same mistake is a dead letter and moves no stream time
    later = make_events(300, seed=6)
    last = asyncio.run(produce(settings, poison + later))
    worker = start_worker(settings, tmp_path / "w2.log")
    try:
        wait_until(lambda: caught_up(settings, [worker], [tmp_path / "w2.log"], last), 120, "up")
        check_aggregates(settings, later)  # accepted again (the 200 before stay dead letters)
    finally:
        stop_worker(worker)
    tail = CliRunner().invoke(
        cli,
        ["tail", "--topic", "dead-letters", "--from-beginning", "--idle-timeout", "3s"],
        env=settings_environ(settings),
    )
    futures = [
        r for r in map(json.loads, tail.stdout.splitlines()) if r["headers"][DLQ_REASON] == "future"
    ]
    assert len(futures) == 1 and "max_wall_clock_skew" in futures[0]["headers"][DLQ_DETAIL]
    assert futures[0]["value"]["ts"] == POISON_TS
