"""Rejected input -> the dead-letter topic, counted by reason.

Kafka Connect DLQ convention (``agents.records``): a dead letter's key and value are the
ORIGINAL bytes of the rejected record, and its headers carry the reason code, a human detail
and the source topic, partition and offset, once as ``fiba.error.*`` and once as Kafka
Connect's own ``__connect.errors.*`` (with its exception class name and stage). Nothing is
dropped: every rejected record, whatever the reason (bad JSON, missing fields, NaN, late,
future, oversize, bad queries), becomes one dead letter. The first rejection of each reason
is logged as a warning with its detail, the others at debug level; ``counts`` (reason ->
number) is served by ``GET /stats`` and ``GET /metrics``.
"""

from __future__ import annotations

import logging
from collections import Counter

import faust

from agents.records import dead_letter_headers

logger = logging.getLogger(__name__)


class DeadLetters:
    """Sends dead letters to ``topic`` and counts them per reason code."""

    def __init__(self, topic: faust.TopicT) -> None:
        self.topic = topic
        self.counts: Counter[str] = Counter()

    async def send(
        self,
        reason: str,
        detail: str,
        source_topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
    ) -> None:
        """Publish one dead letter (original ``key``/``value``) and count it."""
        self.counts[reason] += 1
        level = logging.WARNING if self.counts[reason] == 1 else logging.DEBUG
        logger.log(
            level,
            "dead letter (%s) from %s[%d]@%d: %s",
            reason,
            source_topic,
            partition,
            offset,
            detail,
        )
        await self.topic.send(
            key=key,
            value=value,
            headers=dead_letter_headers(reason, detail, source_topic, partition, offset),
        )
