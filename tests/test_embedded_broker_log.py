"""The embedded broker's log (issue 16.7): ``fiba broker`` left a ``tansu-*.log`` in the temp
directory on every run; its temporary log is now deleted when it is stopped, a log path the
caller chose is kept, and so is the log of a broker that died by itself (it says why)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
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


def test_a_stop_signal_while_the_broker_starts_stops_it_and_removes_its_log(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``fiba broker``'s SIGTERM handler raises ``SystemExit``; a SIGTERM arriving while
    ``Popen`` starts the broker (the child running, its handle not yet kept) used to leave the
    broker running and its log behind. Here it arrives exactly then: the broker is stopped by
    the caller's ``stop`` and its temporary log deleted."""
    real_popen = subprocess.Popen
    children: list[subprocess.Popen] = []

    def popen_then_sigterm(*args, **kwargs):  # type: ignore[no-untyped-def]
        child = real_popen(*args, **kwargs)
        children.append(child)
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGTERM)
        return child

    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    monkeypatch.setattr("app.brokers.process.subprocess.Popen", popen_then_sigterm)
    broker = EmbeddedBroker(port=free_port())
    try:
        with pytest.raises(SystemExit):
            try:
                broker.start()
            finally:
                broker.stop()  # as `fiba broker` does in its `finally`
    finally:
        signal.signal(signal.SIGTERM, previous)
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
                pytest.fail("the broker was left running")
    assert children and not broker.log_path.exists()
