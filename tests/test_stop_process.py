"""``app.brokers.process.stop_process``, the stop of the brokers, the demo's worker and the
benchmark workers: SIGTERM, then SIGKILL for a process that outlives the timeout."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from app.brokers.process import stop_process

SLEEPER = "import signal, sys, time; {}; print('ready', flush=True); time.sleep(60)"


@contextmanager
def started(setup: str) -> Iterator[subprocess.Popen[bytes]]:
    """A Python child that runs ``setup``, then sleeps once it has said so; killed at the end
    whatever the test did."""
    proc = subprocess.Popen([sys.executable, "-c", SLEEPER.format(setup)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        yield proc
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]


def test_a_process_is_terminated_and_one_ignoring_sigterm_killed() -> None:
    with started("pass") as polite:
        stop_process(polite, timeout=30)
        assert polite.returncode == -signal.SIGTERM
    with started("signal.signal(signal.SIGTERM, signal.SIG_IGN)") as stubborn:
        stop_process(stubborn, timeout=0.5)
        assert stubborn.returncode == -signal.SIGKILL
