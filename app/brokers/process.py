"""What the brokers the project starts share: a child process on loopback, and its errors.

``BrokerProcess`` runs a broker whose output goes to ``log_path``; ``start()`` waits until the
broker is ready (a port that accepts connections, or more in a subclass) and ``stop()`` ends it
(SIGTERM, then SIGKILL), also when used as a context manager. Its kinds: Tansu
(``app.brokers.tansu``) and Apache Kafka (``app.brokers.apache_kafka``), built by name with
``app.brokers.kinds.make_broker``. ``free_port``, ``wait_for_port`` and ``stop_process`` serve
the demo, the benchmarks and the tests too. ``BrokerError`` is one clear line;
``BrokerSetupError`` (a missing ``java``/``mvn``, unresolvable jars) makes the CLI exit 2.
Reference: docs/reference/operations.md.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType


class BrokerError(RuntimeError):
    """A broker could not be found, resolved or started; ``str(exc)`` is one clear line."""


class BrokerSetupError(BrokerError):
    """What a broker needs is missing on this machine (``java``, ``mvn``) or could not be
    resolved (the Kafka jars): not fixable by retrying, the CLI exits with code 2."""


PORT_ATTEMPTS = 3
"""Starts of a broker on ports it chose itself: a port free when chosen can be taken before
the broker binds it (by another process's client connection, or another broker started at the
same time), and then the broker exits at start; it is started again on fresh ports."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(host: str, port: int) -> bool:
    """Whether a listener could bind ``host:port`` right now (as a broker binds it,
    ``SO_REUSEADDR``: only another listener makes it taken)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def wait_for_port(host: str, port: int, timeout: float) -> bool:
    """Poll until ``host:port`` accepts a TCP connection; ``False`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def stop_process(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM ``proc`` and wait up to ``timeout`` seconds for it to exit, then SIGKILL it and
    wait as long again (``Popen`` signals no process that has exited)."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout)


STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


@contextlib.contextmanager
def stop_signals_held() -> Iterator[None]:
    """SIGTERM and SIGINT held (blocked in this thread) for the block, delivered after it: a
    stop signal whose handler raises (``fiba broker``'s) cannot interrupt ``Popen`` after the
    child started but before its handle is kept, which left the broker running and its log
    behind."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def release_stop_signals() -> None:
    """In the broker's child process before it runs the broker: the stop signals
    ``stop_signals_held`` blocked are unblocked again (a child inherits the mask)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


class BrokerProcess:
    """A broker child process on ``host:port`` (a free port when ``port`` is 0).

    ``bootstrap`` is the ``host:port`` string for Kafka clients and ``profile`` the
    ``broker_profile`` they use with it. Output goes to ``log_path``; when none is given, to a
    temporary ``<kind>-broker-*.log`` that ``stop`` deletes unless the broker failed (it did not
    start, or exited by itself: the log says why). Subclasses give the command line and may
    prepare files first, wait for more than an open port and clean up after the process ends.
    """

    kind = ""
    profile = "kafka"

    def __init__(
        self,
        port: int = 0,
        host: str = "127.0.0.1",
        log_path: str | os.PathLike[str] | None = None,
        start_timeout: float = 20.0,
    ) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.ports_chosen = not port
        """The ports were chosen here (none given): ``start`` may choose others."""
        self.start_timeout = start_timeout
        self.log_path = (
            Path(log_path)
            if log_path
            else Path(tempfile.mkstemp(prefix=f"{self.kind}-broker-", suffix=".log")[1])
        )
        self._owns_log = not log_path
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The broker process's id while it runs (its CPU time for the benchmarks), else None."""
        return self._proc.pid if self.running else None

    def prepare(self) -> None:
        """Everything the process needs before it starts (nothing by default)."""

    def command(self) -> list[str]:
        """The broker's command line."""
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        """The broker's environment (this process's by default)."""
        return dict(os.environ)

    def wait_ready(self, deadline: float) -> bool:
        """Wait until the broker serves clients or ``time.monotonic()`` passes ``deadline``;
        by default until its port accepts connections."""
        return wait_for_port(self.host, self.port, deadline - time.monotonic())

    def cleanup(self) -> None:
        """Remove what ``prepare`` made for this run only (nothing by default)."""

    def choose_ports(self) -> None:
        """Choose fresh free ports for the ones this broker chose itself (``ports_chosen``);
        a given port is kept."""
        if self.ports_chosen:
            self.port = free_port(self.host)

    def may_start_again(self) -> bool:
        """Whether a start whose broker exited before it was ready is worth another on fresh
        ports (``choose_ports``): the ports were chosen here."""
        return self.ports_chosen

    def start(self) -> BrokerProcess:
        """Start the broker and wait until it is ready; raise ``BrokerError`` if not (within
        ``start_timeout`` seconds per attempt, preparation excluded). A broker on ports it
        chose itself that exits before it is ready is started again on fresh ports, up to
        ``PORT_ATTEMPTS`` times in all (a chosen port can be taken before the broker binds
        it; ``may_start_again``); a given port is never changed."""
        if self.running:
            return self
        for attempt in range(1, PORT_ATTEMPTS + 1):
            self.prepare()
            with open(self.log_path, "ab") as log, stop_signals_held():
                self._proc = subprocess.Popen(
                    self.command(),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=self.environment(),
                    start_new_session=True,
                    preexec_fn=release_stop_signals,
                )
            ready = self.wait_ready(time.monotonic() + self.start_timeout)
            if ready and self.running:
                return self
            exited = not self.running
            self.stop(keep_log=True)
            if not (exited and self.may_start_again()) or attempt == PORT_ATTEMPTS:
                break
            self.choose_ports()
        raise BrokerError(
            f"{self.kind} broker did not start on {self.bootstrap}; see {self.log_path}"
        )

    def stop(self, timeout: float = 10.0, keep_log: bool = False) -> None:
        """Terminate the broker (SIGTERM, then SIGKILL after ``timeout`` seconds), clean up, and
        delete its temporary log unless ``keep_log`` or the broker had exited by itself."""
        proc, self._proc = self._proc, None
        running = proc is not None and proc.poll() is None
        if running:
            stop_process(proc, timeout)
        self.cleanup()
        if running and self._owns_log and not keep_log:
            self.log_path.unlink(missing_ok=True)

    def kill(self, timeout: float = 10.0) -> None:
        """SIGKILL the broker, as a crash would, and wait for it to exit; nothing is cleaned up
        (a broker with its log on disk can ``start()`` again on it, on the same port)."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout)

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
