"""Saying once when the records a worker writes are older than their topic's ``retention.ms``.

Every output record carries the event time it stands for as its Kafka timestamp, so an output
topic's time-based retention follows event time: a replay of last month's events into topics
keeping 7 days loses its outputs at Kafka's next retention check. The worker does not rewrite
timestamps; it says so once per topic and process: one WARNING line and the gauge
``fiba_output_older_than_retention{topic}`` at 1. The ways out (a longer ``retention.ms``, or
``message.timestamp.type=LogAppendTime`` on the output topics): docs/reference/records.md.

``RetentionCheck`` is one topic's check: the writer compares each record's timestamp with
``oldest_kept`` (O(1); ``-1`` while nothing is to be checked) and calls ``exceeded`` for an
older one. ``watch`` reads the topics' ``retention.ms`` (DescribeConfigs) at start and moves
``oldest_kept`` with the clock every ``REFRESH_S``. A topic whose ``retention.ms`` the broker
does not return (Tansu returns only explicit configs), ``-1``, or a failed DescribeConfigs
(logged once) leave a topic unchecked: advice, never a reason to stop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from agents.clients import client_options
from agents.config import WorkerSettings
from stores.durations import format_duration

logger = logging.getLogger(__name__)

RETENTION_MS = "retention.ms"
REFRESH_S = 60.0
"""How often ``watch`` moves each check's ``oldest_kept`` with the clock."""

NO_CHECK = -1
"""``oldest_kept`` of a topic not (or no longer) checked: no Kafka timestamp is below it."""


class RetentionCheck:
    """Whether the records written to output ``topic`` are older than its ``retention.ms``.

    ``name`` labels it in the metrics (``aggregates``, ``answers``, ``dead_letters``).
    ``exceeded_at`` is the timestamp of the first record found older (None: none yet)."""

    __slots__ = ("exceeded_at", "name", "oldest_kept", "retention_ms", "topic")

    def __init__(self, topic: str, name: str) -> None:
        self.topic = topic
        self.name = name
        self.retention_ms: int | None = None
        self.oldest_kept = NO_CHECK
        self.exceeded_at: int | None = None

    def set_retention(self, retention_ms: int | None, now_ms: int) -> None:
        """The topic keeps records ``retention_ms`` (None: forever, or not known)."""
        self.retention_ms = retention_ms
        self.refresh(now_ms)

    def refresh(self, now_ms: int) -> None:
        """Move ``oldest_kept`` to ``now_ms - retention.ms`` (unless unchecked or said)."""
        retention = self.retention_ms
        unchecked = retention is None or self.exceeded_at is not None
        self.oldest_kept = NO_CHECK if unchecked else now_ms - retention  # type: ignore[operator]

    def check(self, timestamp: int | None) -> None:
        """Look at one record's Kafka timestamp (None: the producer's clock). O(1)."""
        if timestamp is not None and timestamp < self.oldest_kept:
            self.exceeded(timestamp)

    def exceeded(self, timestamp: int) -> None:
        """A record timestamped ``timestamp``, older than the retention, is being written:
        say so (once) and stop checking."""
        self.exceeded_at = timestamp
        self.oldest_kept = NO_CHECK
        age = time.time_ns() // 1_000_000 - timestamp
        logger.warning(
            "records written to topic %s are older than its retention.ms (%s; one is %.1f days "
            "old): Apache Kafka deletes them at its next retention check, since output records "
            "carry their event time as timestamp. Give the topic a longer retention.ms, or "
            "message.timestamp.type=LogAppendTime (timestamps become append times: read the "
            "event time from the value). Said once; metric fiba_output_older_than_retention",
            self.topic,
            format_duration(self.retention_ms or 0),
            age / 86_400_000,
        )


async def read_retention(settings: WorkerSettings, topics: Sequence[str]) -> dict[str, int]:
    """``retention.ms`` of each of ``topics`` the broker reports with a limit (DescribeConfigs;
    absent: ``-1``, unknown, or not returned, as Tansu does for configs not set explicitly).
    Every config of the topics is asked for (a few dozen each on Apache Kafka): the embedded
    broker (Tansu) closes the connection on a request naming configs."""
    admin = AIOKafkaAdminClient(**client_options(settings))
    await admin.start()
    try:
        responses = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic) for topic in topics]
        )
    finally:
        await admin.close()
    found: dict[str, int] = {}
    for response in responses:
        for error_code, _, _, name, entries, *_ in response.resources:
            for entry in entries if error_code == 0 else ():
                if entry[0] == RETENTION_MS and entry[1] is not None and int(entry[1]) > 0:
                    found[name] = int(entry[1])
    return found


async def watch(settings: WorkerSettings, checks: Sequence[RetentionCheck]) -> None:
    """Forever: set each check's retention (read once), then move them with the clock every
    ``REFRESH_S``. A failed read is logged once and leaves the topics unchecked."""
    retention: Mapping[str, int] = {}
    try:
        retention = await read_retention(settings, [c.topic for c in checks])
    except Exception as exc:  # advice only: the worker runs on without it
        logger.warning("could not read the output topics' retention.ms (%r): not checked", exc)
    now = time.time_ns() // 1_000_000
    for check in checks:
        check.set_retention(retention.get(check.topic), now)
    while True:
        await asyncio.sleep(REFRESH_S)
        now = time.time_ns() // 1_000_000
        for check in checks:
            check.refresh(now)
