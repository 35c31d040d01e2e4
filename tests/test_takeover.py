"""Two ``fiba worker`` subprocesses in one group split the input partitions, each keeping a
standby replica of the other's window store (``standby_replicas=1``); when one is SIGKILLed
the survivor takes its partitions over and every key's aggregate equals the oracle, under
either processing guarantee.
"""

from __future__ import annotations

import asyncio
import urllib.error
from dataclasses import replace
from pathlib import Path
from subprocess import Popen

import pytest

from app.brokers.process import free_port
from app.demo import log_tail, start_worker, stop_worker
from app.settings import Settings
from app.topics import create_topics
from tests.test_crash_recovery import (
    applied_offsets,
    caught_up,
    check_aggregates,
    http_get,
    make_events,
    produce,
    wait_until,
    worker_settings,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]


def assigned_partitions(settings: Settings, worker: Popen[bytes], log: Path) -> set[int]:
    """The input partitions assigned to the worker (restored on assignment)."""
    assert worker.poll() is None, "the worker exited:\n" + log_tail(log)
    try:
        return set(http_get(settings, "/stats")["assigned"])
    except (OSError, urllib.error.URLError):
        return set()


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_survivor_takes_over_from_its_standby_replicas(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path, guarantee: str
) -> None:
    if embedded_profile and guarantee == "exactly_once":
        pytest.skip("the embedded broker (Tansu) has no transactions")
    first = replace(
        worker_settings(kafka_bootstrap, embedded_profile, tmp_path / "w1", partitions=4),
        standby_replicas=1,
        processing_guarantee=guarantee,
    )
    second = replace(first, state_dir=tmp_path / "w2", web_port=free_port())
    asyncio.run(create_topics(first))
    events = make_events(6_000, seed=11)
    before, after = events[:3_500], events[3_500:]
    last = asyncio.run(produce(first, before))
    logs = [tmp_path / "w1.log", tmp_path / "w2.log"]
    workers = [start_worker(first, logs[0])]
    try:
        wait_until(lambda: len(applied_offsets(first, workers[0], logs[0])) == 4, 90, "w1 owns all")
        workers.append(start_worker(second, logs[1]))
        settings = [first, second]

        def split_and_caught_up() -> bool:
            assigned = [
                assigned_partitions(s, w, g)
                for s, w, g in zip(settings, workers, logs, strict=True)
            ]
            return (
                len(assigned[0]) == 2
                and len(assigned[1]) == 2
                and caught_up(first, workers[:1], logs[:1], {p: last[p] for p in assigned[0]})
            )

        wait_until(split_and_caught_up, 90, "the workers split the partitions")
        # w2 keeps standby replicas of w1's partitions (its own are restored on assignment)
        replicas = {f"partition-{p}" for p in assigned_partitions(first, workers[0], logs[0])}
        store_dir = second.state_dir / second.app_id / "window-store"
        wait_until(
            # the store's folder appears with w2's first restore, which runs in the background
            lambda: store_dir.is_dir() and replicas <= {p.name for p in store_dir.iterdir()},
            30,
            "w2 keeps standby replicas of w1's partitions",
        )

        workers[0].kill()  # SIGKILL
        workers[0].wait(10)
        last = asyncio.run(produce(first, after))
        wait_until(
            lambda: caught_up(second, workers[1:], logs[1:], last), 120, "w2 took everything over"
        )
        check_aggregates(second, events)
    finally:
        for worker in workers:
            stop_worker(worker)
