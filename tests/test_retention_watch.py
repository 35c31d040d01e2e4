"""The worker's check of its output records against their topics' ``retention.ms``
(``agents.retention_watch``): said once per topic, never for records within the retention, and
the retention read from a real broker of each kind (``fiba topics create`` sets it explicitly,
which is all Tansu returns). The worker's log line and metric: tests/test_worker_health.py."""

from __future__ import annotations

import asyncio
import logging

import pytest

from agents.retention_watch import NO_CHECK, RetentionCheck, read_retention
from app.topics import DATA_TOPIC_CONFIGS, create_topics
from tests.test_worker_e2e import make_settings

NOW = 1_800_000_000_000
WEEK = 7 * 86_400_000


def test_a_record_older_than_the_retention_is_said_once(caplog):
    check = RetentionCheck("out", "aggregates")
    check.check(0)  # retention not known yet: nothing checked
    assert check.exceeded_at is None and check.oldest_kept == NO_CHECK
    check.set_retention(WEEK, NOW)
    for ts in (None, NOW - WEEK, NOW):  # the producer's clock, at the limit, recent
        check.check(ts)
    assert check.exceeded_at is None
    with caplog.at_level(logging.WARNING, logger="agents.retention_watch"):
        check.check(NOW - WEEK - 1)
        check.check(NOW - 2 * WEEK)
        check.refresh(NOW + WEEK)
        check.check(NOW)
    assert check.exceeded_at == NOW - WEEK - 1
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1
    assert lines[0].startswith("records written to topic out are older than its retention.ms (7d")
    assert "LogAppendTime" in lines[0]


def test_a_topic_keeping_records_forever_is_not_checked():
    check = RetentionCheck("out", "answers")
    check.set_retention(None, NOW)
    check.check(0)
    assert check.exceeded_at is None


@pytest.mark.kafka
def test_the_retention_is_read_from_the_broker(kafka_bootstrap, embedded_profile, tmp_path):
    settings = make_settings(kafka_bootstrap, embedded_profile, tmp_path, "event")
    asyncio.run(create_topics(settings))
    outputs = [settings.aggregates_topic, settings.answers_topic, settings.dead_letter_topic]
    retention = asyncio.run(read_retention(settings, [*outputs, settings.changelog_topic]))
    assert retention == dict.fromkeys(outputs, int(DATA_TOPIC_CONFIGS["retention.ms"]))
