"""``fiba demo`` that sends itself a SIGTERM at an awkward instant, for tests/test_cli.py.

Run as ``python -m tests.terminated_demo demo ...`` (the arguments are ``fiba``'s) with
``SIGTERM_AT``:

- ``lost``: as the results are being reported, from inside a ``__del__``, where the
  ``KeyboardInterrupt`` of the demo's handler is ignored (as it would be in any finalizer
  that the garbage collector happens to run then): the demo runs on to its end;
- ``stopping``: as the demo starts stopping the worker (its final phase).
"""

from __future__ import annotations

import os
import signal
from typing import Any

from app import demo
from app.cli import main


def sigterm_self() -> None:
    """Send this process a SIGTERM (its Python handler runs before ``os.kill`` returns)."""
    os.kill(os.getpid(), signal.SIGTERM)


class TermOnFinalize:
    """An object whose finalizer sends the SIGTERM."""

    def __del__(self) -> None:
        sigterm_self()


def report_after_lost_sigterm(*args: Any) -> None:
    """``demo.report``, after a SIGTERM handled inside a finalizer."""
    TermOnFinalize()
    report(*args)


def stop_worker_after_sigterm(*args: Any) -> None:
    """``demo.stop_worker``, after a SIGTERM."""
    sigterm_self()
    stop_worker(*args)


report, stop_worker = demo.report, demo.stop_worker

if __name__ == "__main__":
    if os.environ["SIGTERM_AT"] == "lost":
        demo.report = report_after_lost_sigterm
    else:
        demo.stop_worker = stop_worker_after_sigterm
    main()
