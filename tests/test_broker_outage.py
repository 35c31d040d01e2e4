"""The outage report of the CLI (``app.broker_outage``), on a clock of the test's own: one line
when the broker stops answering, one per interval while it does not, one when it answers, and
aiokafka's per-retry records dropped. (A real outage under ``fiba produce``:
tests/test_broker_faults.py.)"""

from __future__ import annotations

import logging
from types import SimpleNamespace

from app.broker_outage import REPORT_INTERVAL_S, OutageReport

CLIENT = SimpleNamespace(hosts=[("127.0.0.1", 9092, 0)])


def record(level: int, message: str) -> logging.LogRecord:
    return logging.LogRecord("aiokafka.client", level, __file__, 1, message, (), None)


def test_one_line_per_interval_of_an_outage_and_one_when_it_ends():
    now = [100.0]
    said: list[str] = []
    report = OutageReport(said.append, clock=lambda: now[0])
    report.on_update(CLIENT, True)  # the broker answers: nothing to say
    assert said == []
    for step in range(251):  # a failed update every 0.1 s for 25 s
        now[0] = 100.0 + step / 10
        report.on_update(CLIENT, False)
    report.on_answer()
    report.on_answer()
    assert said == [
        "no answer from the broker (127.0.0.1:9092); retrying with backoff until it is back"
        " (Ctrl-C stops)",
        "still no answer from the broker after 10 s (101 attempts failed)",
        "still no answer from the broker after 20 s (201 attempts failed)",
        "the broker answers again (after 25 s)",
    ]
    assert REPORT_INTERVAL_S == 10.0


def test_aiokafka_records_of_an_outage_are_dropped_and_others_kept():
    report = OutageReport(lambda line: None, clock=lambda: 0.0)
    unreachable = record(logging.ERROR, "Unable to update metadata from [1]")
    refused = record(logging.ERROR, "Unable connect to node with id 1: [Errno 111] refused")
    failed_fetch = record(logging.WARNING, "Failed fetch messages from 1: NotLeaderForPartition")
    info = record(logging.INFO, "Discovered coordinator")
    retried = record(
        logging.WARNING,
        "Got error produce response on topic-partition TopicPartition(topic='t', partition=1),"
        " retrying. Error: <class 'aiokafka.errors.NotLeaderForPartitionError'>",
    )
    assert not report.filter(unreachable) and not report.filter(refused)
    assert not report.filter(retried)
    assert report.filter(failed_fetch) and report.filter(info)
    report.on_update(CLIENT, False)  # an outage: its consequences are dropped too
    assert not report.filter(failed_fetch) and report.filter(info)
    report.on_answer()
    assert report.filter(failed_fetch)
