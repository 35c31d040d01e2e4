"""One process per state directory: an exclusive ``flock`` on ``<state_dir>/fiba.lock``.

Two workers on one ``state_dir`` would open the same RocksDB copies; RocksDB's own lock then
fails on every restore, again and again. ``StateDirLock.acquire`` takes the lock at start and
refuses at once (``StateDirBusy``, naming the holder's pid) when another process holds it. The
lock is held until ``release`` or the end of the process: the kernel drops a ``flock`` when its
holder dies, even by SIGKILL, so a crashed worker never leaves a stale lock behind (the file
stays; only the lock on it counts). The ``fiba state`` commands take the same lock, so they
never change the state under a running worker. O(1).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType

LOCK_FILE = "fiba.lock"


class StateDirBusy(Exception):
    """The state directory is locked by another process (``holder``: its pid as written in the
    lock file); ``str(exc)`` is one line for a second worker."""

    def __init__(self, state_dir: Path, holder: str) -> None:
        super().__init__(
            f"state_dir {state_dir} is in use by another process (pid {holder}): "
            "one worker per state_dir (give this one its own --state-dir)"
        )
        self.state_dir = state_dir
        self.holder = holder


class StateDirUnusable(Exception):
    """The state directory cannot be created, or its lock file not opened (a path under a
    file, no permission, a read-only file system); ``str(exc)`` is one line."""


class StateDirLock:
    """The exclusive lock of one state directory (created if missing); see the module doc."""

    def __init__(self, state_dir: Path) -> None:
        self.path = Path(state_dir) / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock without waiting and write this process's pid into the lock file;
        ``StateDirBusy`` if another process holds it, ``StateDirUnusable`` if the directory
        cannot be created or the lock file not opened."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StateDirUnusable(
                f"state_dir {self.path.parent} cannot be used: {exc.strerror}"
                + (f" ({exc.filename})" if exc.filename else "")
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise StateDirBusy(self.path.parent, holder) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        """Drop the lock (the file stays)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> StateDirLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()
