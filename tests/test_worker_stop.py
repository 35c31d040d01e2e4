"""A ``fiba worker`` told to stop (SIGTERM) while its broker is down ends instead of waiting for
the broker forever: Faust's consumer thread, stuck retrying the unreachable broker, is left
behind after a grace period (``app.worker.exit_past_stuck_threads``).

Each broker kind with a broker of the test's own (it is stopped under the worker); not with
an external cluster, which a test cannot stop.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
from pathlib import Path

import pytest

from app.brokers.kinds import make_broker, options_keeping_old_records
from app.brokers.process import free_port
from app.demo import log_tail, start_worker, stop_worker
from app.topics import create_topics
from app.worker import THREAD_STOP_GRACE_S
from tests.conftest import broker_kinds_under_test
from tests.test_crash_recovery import wait_until, worker_settings
from tests.test_worker_health import wait_ready

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

FAUST_STOP_TIMEOUT_S = 60.0
"""How long Faust waits for a child service to stop before it gives up on it."""


@pytest.mark.parametrize("kind", [k for k in broker_kinds_under_test() if k != "external"])
def test_a_worker_stops_on_sigterm_while_its_broker_is_down(kind: str, tmp_path: Path) -> None:
    broker = make_broker(kind, port=free_port(), **options_keeping_old_records(kind))
    broker.start()
    worker = None
    log = tmp_path / "worker.log"
    try:
        settings = worker_settings(broker.bootstrap, kind == "embedded", tmp_path / "state", 2)
        asyncio.run(create_topics(settings))
        worker = start_worker(settings, log)
        wait_ready(settings.web_port, worker)
        broker.stop()
        # the consumer has noticed: its group coordinator is gone (Faust's consumer thread
        # then retries, and rejoins the group for ever)
        wait_until(
            lambda: "Marking the coordinator dead" in log.read_text(errors="replace"),
            90,
            "the worker lost its group coordinator",
        )
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=FAUST_STOP_TIMEOUT_S + THREAD_STOP_GRACE_S + 15)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the worker did not stop:\n{log_tail(log, 30)}") from None
        assert worker.returncode == 0, log_tail(log, 30)
    finally:
        if worker is not None:
            stop_worker(worker, timeout=5)
        broker.stop()
