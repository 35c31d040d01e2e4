"""While the broker is away, a command says so once per interval, not once per retry.

``watch_broker_outages(say)`` (the CLI's, process-wide, idempotent): the clients retry with a
growing backoff (``agents.clients``); aiokafka's per-attempt log records (``OUTAGE_MESSAGES``,
warnings of a request it retries, any aiokafka warning during an outage) are dropped, and
``say`` gets one line when the broker stops answering, one per ``REPORT_INTERVAL_S`` while it
does not, and one at its next answer to any request. O(1) per record and per request.
Lines and rules: docs/reference/operations.md.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from aiokafka.client import AIOKafkaClient

from agents.clients import on_metadata_update, throttle_failed_metadata_updates
from app.wording import counted

REPORT_INTERVAL_S = 10.0
"""At most one "still no answer" line per this many seconds of an outage."""

OUTAGE_MESSAGES = (
    "Unable to update metadata",
    "Unable to request metadata",
    "Unable connect to node",
    "KafkaConnectionError",
    "NodeNotReadyError",
)
"""Parts of the aiokafka log messages that only say the broker does not answer."""

RETRYING = ", retrying"
"""The part of aiokafka's warnings of a request it retries."""


class OutageReport(logging.Filter):
    """The state of the current outage (if any) and the filter of aiokafka's records."""

    def __init__(
        self,
        say: Callable[[str], None],
        interval_s: float = REPORT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.say = say
        self.interval_s = interval_s
        self.clock = clock
        self.began: float | None = None
        """When the outage began (``clock``), None while the broker answers."""
        self.reported_at = 0.0
        self.attempts = 0

    def on_update(self, client: AIOKafkaClient, updated: bool) -> None:
        """Account for one metadata update of ``client`` (``agents.clients`` listener)."""
        if updated:
            self.on_answer()
        else:
            self.on_failure(client)

    def on_answer(self) -> None:
        """The broker answered a request: the end of the outage, if one is going on."""
        if self.began is not None:
            self.say(f"the broker answers again (after {self.clock() - self.began:.0f} s)")
            self.began = None

    def on_failure(self, client: AIOKafkaClient) -> None:
        """A metadata update of ``client`` failed: no broker answered it."""
        now = self.clock()
        if self.began is None:
            self.began = self.reported_at = now
            self.attempts = 1
            servers = ",".join(f"{host}:{port}" for host, port, *_ in client.hosts)
            self.say(
                f"no answer from the broker ({servers}); retrying with backoff until it is"
                " back (Ctrl-C stops)"
            )
            return
        self.attempts += 1
        if now - self.reported_at >= self.interval_s:
            self.reported_at = now
            self.say(
                f"still no answer from the broker after {now - self.began:.0f} s"
                f" ({counted(self.attempts, 'attempt')} failed)"
            )

    def filter(self, record: logging.LogRecord) -> bool:
        """False for the records the outage lines replace (module doc)."""
        message = record.getMessage()
        if any(part in message for part in OUTAGE_MESSAGES):
            return False
        if record.levelno == logging.WARNING and RETRYING in message:
            return False
        return self.began is None or record.levelno < logging.WARNING


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler writing to the ``sys.stderr`` of the moment (as Python's last-resort handler
    does), so that a replaced ``sys.stderr`` (click's test runner) is honoured."""

    def __init__(self) -> None:
        super().__init__()

    @property  # type: ignore[override]
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _: TextIO) -> None:
        """Ignored: the stream is always the current ``sys.stderr``."""


_watching: OutageReport | None = None


def _hear_answers(report: OutageReport) -> None:
    """Make every answered request of every ``AIOKafkaClient`` call ``report.on_answer()``
    (O(1) per request)."""
    send = AIOKafkaClient.send

    async def send_and_hear(client: AIOKafkaClient, *args: Any, **kwargs: Any) -> Any:
        answer = await send(client, *args, **kwargs)
        report.on_answer()
        return answer

    AIOKafkaClient.send = send_and_hear  # type: ignore[method-assign]


def watch_broker_outages(say: Callable[[str], None]) -> OutageReport:
    """Install the report (once per process; later calls return the first one)."""
    global _watching
    if _watching is None:
        report = OutageReport(say)
        throttle_failed_metadata_updates()
        on_metadata_update(report.on_update)
        _hear_answers(report)
        handler = _StderrHandler()
        handler.setLevel(logging.WARNING)
        handler.addFilter(report)
        aiokafka_log = logging.getLogger("aiokafka")
        aiokafka_log.addHandler(handler)
        aiokafka_log.propagate = False
        _watching = report
    return _watching
