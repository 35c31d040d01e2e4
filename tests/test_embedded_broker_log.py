"""The embedded broker's log (issue 16.7): ``fiba broker`` left a ``tansu-*.log`` in the temp
directory on every run; its temporary log is now deleted when it is stopped, a log path the
caller chose is kept, and so is the log of a broker that died by itself (it says why)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.brokers.process import free_port, wait_for_port
from app.brokers.tansu import EmbeddedBroker

pytestmark = pytest.mark.timeout(120)


def test_fiba_broker_leaves_no_log_in_the_temp_directory(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIBA_")}
    env["TMPDIR"] = str(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "broker", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
    )
    try:
        assert wait_for_port("127.0.0.1", port, 30), "the broker did not start"
        deadline = time.monotonic() + 10
        while not list(tmp_path.glob("embedded-broker-*.log")):
            assert time.monotonic() < deadline, "no log while running"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=30)
    finally:  # on a failed assertion too: SIGTERM stops the broker child, a SIGKILL would not
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, output
    assert b"embedded broker on" in output
    assert not list(tmp_path.glob("embedded-broker-*.log"))


def test_a_chosen_log_path_is_kept(tmp_path: Path) -> None:
    log = tmp_path / "broker.log"
    with EmbeddedBroker(log_path=log):
        pass
    assert log.exists()


def test_the_log_of_a_broker_that_died_is_kept() -> None:
    broker = EmbeddedBroker().start()
    try:
        os.kill(broker._proc.pid, signal.SIGKILL)  # a crash, not a stop
        broker._proc.wait(10)
    finally:
        broker.stop()
    try:
        assert broker.log_path.exists()
    finally:
        broker.log_path.unlink()
