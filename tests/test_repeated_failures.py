"""A fetch that fails at every retry is logged once in full, then once in a while, not ten
times a second (``agents.clients.RepeatedFailures``, ``fetch``).

Seen on a topic written with lz4 while the codec was missing: every fetch raised
``UnsupportedCodecError``, and the worker logged its traceback at each retry (7,398 log lines in
30 s). The clock is a fake one; the consumer a stand-in whose ``getmany`` raises or answers (the
helper's contract, not Kafka's, is under test: the worker end to end on compressed input is in
tests/test_worker_e2e.py).
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiokafka.errors import UnsupportedCodecError

from agents import clients
from agents.clients import FAILURE_REPORT_S, RepeatedFailures, fetch


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, bool]]:
    """The logged messages, each with whether it carries a traceback; then forgotten."""
    got = [(r.getMessage(), r.exc_info is not None) for r in caplog.records]
    caplog.clear()
    return got


def test_a_failure_repeated_at_every_retry_is_one_line_per_interval(caplog) -> None:
    caplog.set_level(logging.INFO, logger=clients.__name__)
    clock = Clock()
    failures = RepeatedFailures("fetching input records", clock)
    codec = UnsupportedCodecError("Libraries for lz4 compression codec not found")
    failures.failed(codec)
    assert lines(caplog) == [("fetching input records failed; retrying", True)]
    for _ in range(299):  # 30 s of retries every 0.1 s: nothing more
        clock.now += 0.1
        failures.failed(codec)
    assert lines(caplog) == []
    clock.now += 0.1
    failures.failed(codec)
    assert lines(caplog) == [
        (
            "fetching input records still failing (UnsupportedCodecError, 300 times in "
            f"{FAILURE_REPORT_S:.0f} s): {codec}",
            False,
        )
    ]
    failures.failed(ValueError("another"))  # another failure: in full
    assert lines(caplog) == [("fetching input records failed; retrying", True)]
    failures.succeeded()
    failures.succeeded()
    assert lines(caplog) == [
        ("fetching input records works again after 302 failed attempts", False)
    ]
    failures.failed(codec)  # after a success: in full again
    assert lines(caplog) == [("fetching input records failed; retrying", True)]


class StandIn:
    """A consumer whose ``getmany`` raises ``errors`` in turn, then answers ``{}``."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)

    async def getmany(self, **_: object) -> dict:
        if self.errors:
            raise self.errors.pop(0)
        return {}


def test_fetch_retries_after_a_pause_and_reports_to_its_failures(caplog, monkeypatch) -> None:
    caplog.set_level(logging.INFO, logger=clients.__name__)
    monkeypatch.setattr(clients, "FETCH_RETRY_S", 0.0)
    consumer = StandIn(UnsupportedCodecError("x"), UnsupportedCodecError("x"))
    failures = RepeatedFailures("fetching input records")

    async def three() -> list:
        return [await fetch(consumer, failures, timeout_ms=0) for _ in range(3)]  # type: ignore[arg-type]

    assert asyncio.run(three()) == [None, None, {}]
    assert lines(caplog) == [
        ("fetching input records failed; retrying", True),
        ("fetching input records works again after 2 failed attempts", False),
    ]
