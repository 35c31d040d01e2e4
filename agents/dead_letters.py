"""Rejected input -> the dead-letter topic, counted by reason.

Kafka Connect DLQ convention (``agents.records``): a dead letter's key and value are the
ORIGINAL bytes of the rejected record, its Kafka timestamp is the rejected record's, and its
headers carry the reason code, a human detail and the source topic, partition and offset, once
as ``fiba.error.*`` and once as Kafka Connect's own ``__connect.errors.*`` (with its exception
class name and stage). Nothing is dropped: every rejected record, whatever the reason (bad JSON,
missing fields, NaN, late, future, oversize, bad queries), becomes one dead letter. Dead letters
are queued (``agents.batched_send.KeyedOutputs``: on the partition of their key, or of their
source partition when they have none; grouped by their source topic and partition, so that
exactly-once sends each with the transaction of its source) and handed over with the other
outputs of the worker
(``agents.windows.WindowsPipeline.deliver_outputs``), acknowledged before the state that makes
a redelivery skip their record. The first rejection of each reason is logged as a warning with
its detail, the others at debug level; ``counts`` (reason -> number) is served by
``GET /stats`` and ``GET /metrics``.
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
