"""The outage report of the CLI (``app.broker_outage``), on a clock of the test's own: one line
when the broker stops answering, one per interval while it does not, one when it answers, and
aiokafka's per-retry records dropped. (A real outage under ``fiba produce``:
tests/test_broker_faults.py.)"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from subprocess import PIPE, Popen
from types import SimpleNamespace

import pytest

from app.broker_outage import REPORT_INTERVAL_S, OutageReport
from app.brokers.kinds import make_broker, options_keeping_old_records
from app.brokers.process import free_port
from app.demo import settings_environ
from app.topics import create_topics
from tests.conftest import broker_kinds_under_test
from tests.test_crash_recovery import BASE, produce, worker_settings

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


@pytest.mark.kafka
@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", [k for k in broker_kinds_under_test() if k != "external"])
def test_tail_rides_out_a_broker_restart_saying_so_once_per_interval(kind, tmp_path):
    """A consumer's command (``fiba tail``) through a stop and restart of a broker of the
    test's own: one line when the broker goes, one per interval, one when it is back, none of
    aiokafka's per-retry lines (it printed about 40 a second), and the records written after
    the restart are shown (Tansu comes back empty: the topics are created again). A tail whose
    ``--idle-timeout`` ends during the outage stops cleanly (it printed a traceback)."""
    options = options_keeping_old_records(kind)
    if kind == "kafka":
        options["data_dir"] = tmp_path / "kafka"
    broker = make_broker(kind, port=free_port(), **options)
    broker.start()
    tail = idle = None
    try:
        settings = worker_settings(broker.bootstrap, kind == "embedded", tmp_path / "state", 1)
        asyncio.run(create_topics(settings))
        env = {**os.environ, **settings_environ(settings)}
        command = [sys.executable, "-m", "app.cli", "tail", "--topic", "input"]
        tail = Popen([*command, "--limit", "5"], env=env, stdout=PIPE, stderr=PIPE)
        idle = Popen([*command, "--idle-timeout", "14s"], env=env, stdout=PIPE, stderr=PIPE)
        # both tails at the end of the topic: their start (imports, bootstrap, the seek to the
        # end) took over 3 s in a loaded CI run, and an outage during it is a failed start
        # (exit 1, "Unable to get cluster metadata"), not the ride-out this test is about; the
        # idle one's 14 s end during the outage
        time.sleep(10)
        broker.stop()
        down_at = time.monotonic()
        idled = idle.communicate(timeout=60)[1].decode()  # its time is up during the outage
        time.sleep(3)
        broker.start()
        if kind == "embedded":
            asyncio.run(create_topics(settings))
        outage = time.monotonic() - down_at
        asyncio.run(produce(settings, [("k", BASE + i, i) for i in range(5)]))
        out, err = tail.communicate(timeout=120)
    finally:
        for process in (tail, idle):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
        broker.stop()
    assert idle.returncode == 0 and "Traceback" not in idled, idled
    lines = err.decode().splitlines()
    print(f"outage {outage:.1f} s; tail said:", *lines, sep="\n")
    assert tail.returncode == 0, lines
    assert 1 <= len(lines) - 1 <= 1 + outage / REPORT_INTERVAL_S, lines
    assert "no answer from the broker" in lines[0], lines
    assert lines[-1].startswith("fiba: the broker answers again"), lines
    assert all("still no answer" in line for line in lines[1:-1]), lines
    shown = [json.loads(line)["value"]["value"] for line in out.decode().splitlines()]
    assert shown == list(range(5))
