"""Exactly-once output on a broker with transactions (``processing_guarantee``, issue 19).

The proof: ``bench.chaos`` with two workers SIGKILLed at random points (with and without their
data dir, and once while the other one joins the group), a generated out-of-order stream with
late, future and malformed records and queries flowing, and every output topic read
``read_committed`` and checked against the brute-force oracle: one aggregate record per accepted
event, equal to the oracle's; one dead letter per rejected record; one answer per query. The
workers are ``tests.faulty_worker`` with a slow changelog (``FAULT_SLOW_CHANGELOG_S``): each
hand-over waits a little between its outputs and its changelog records, so a kill usually lands
there. Under at-least-once (the twin) that repeats outputs: the test can fail.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from app.broker import free_port
from app.demo import settings_environ
from app.settings import Settings
from bench.chaos import Outcome, parse_args, run

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(400)]

CHAOS = [
    "--events", "3000", "--kills", "3", "--wipe-every", "2", "--queries", "6",
    "--rate", "500", "--max-delay", "0.5", "--rebalance-kill",
]  # fmt: skip
SLOW_CHANGELOG = {"FAULT_SLOW_CHANGELOG_S": "0.05"}
FAULTY_WORKER = ("tests.faulty_worker",)


def chaos(guarantee: str, bootstrap: str, root: Path) -> Outcome:
    args = parse_args([*CHAOS, "--guarantee", guarantee])
    outcome = run(args, bootstrap, False, root, FAULTY_WORKER, SLOW_CHANGELOG)
    print(outcome.summary())
    assert outcome.kills == 5 and outcome.events == 3000 and outcome.queries == 6
    return outcome


def test_sigkills_under_exactly_once_leave_every_output_exactly_once(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path
) -> None:
    if embedded_profile:
        pytest.skip("the embedded broker (Tansu) has no transactions")
    outcome = chaos("exactly_once", kafka_bootstrap, tmp_path)
    assert outcome.exact, outcome.summary()
    assert outcome.duplicates == 0, outcome.summary()


def test_the_same_kills_under_at_least_once_repeat_outputs(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path
) -> None:
    if embedded_profile:
        pytest.skip("the twin of the exactly-once test, which needs transactions")
    outcome = chaos("at_least_once", kafka_bootstrap, tmp_path)
    assert outcome.exact, outcome.summary()
    assert outcome.duplicates > 0, outcome.summary()


def test_exactly_once_on_a_broker_without_transactions_stops_the_worker_at_start(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path
) -> None:
    if not embedded_profile:
        pytest.skip("Apache Kafka has transactions")
    settings = replace(
        Settings(),
        broker=kafka_bootstrap,
        broker_profile="embedded",
        app_id="eos-refused",
        state_dir=tmp_path / "state",
        web_port=free_port(),
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIBA_")}
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "worker", "--processing-guarantee", "exactly_once"],
        env=env | settings_environ(settings),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "exactly_once needs a broker with transactions" in lines[0], lines
    assert "InitProducerId" in lines[0], lines
