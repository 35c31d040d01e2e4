"""Rejected input -> the dead-letter topic, counted by reason.

Kafka Connect's DLQ convention: a dead letter's key, value and timestamp are the rejected
record's, and its headers carry the reason code, a detail and the source topic, partition and
offset, as ``fiba.error.*`` and as Kafka Connect's ``__connect.errors.*``. Every rejected
record, whatever the reason, becomes one dead letter, queued with the outputs of its chunk.
The headers and reason codes: docs/reference/records.md.
"""

from __future__ import annotations

import logging
from collections import Counter

from agents.batched_send import KeyedOutputs
from agents.records import dead_letter_headers

logger = logging.getLogger(__name__)


class DeadLetters:
    """Queues dead letters in ``outputs`` (the dead-letter topic's) and counts them per
    reason code."""

    def __init__(self, outputs: KeyedOutputs) -> None:
        self.outputs = outputs
        self.counts: Counter[str] = Counter()

    async def add(
        self,
        reason: str,
        detail: str,
        source_topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        timestamp: int | None,
    ) -> None:
        """Queue one dead letter (original ``key``/``value``, Kafka ``timestamp`` in epoch ms)
        and count it. O(1) after the first call (which learns the topic's partitions)."""
        await self.outputs.start()
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
        self.outputs.add(
            key,
            value,
            timestamp,
            dead_letter_headers(reason, detail, source_topic, partition, offset),
            partition=partition,
            source=(source_topic, partition),
        )
