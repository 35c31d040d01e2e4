"""A small synchronous Kafka reader for the data source, over aiokafka on a private event loop.

Spark calls the data source from plain threads and Python worker processes, so each
``KafkaReader`` owns an asyncio loop running aiokafka. Ends are the Fetch responses' high
watermark (or last stable offset with ``read_committed``), never ListOffsets(latest), which the
embedded broker gets wrong; the earliest offset comes from ListOffsets(earliest). Reference:
docs/reference/spark.md.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from agents.clients import topic_partitions
from agents.connection import SOURCE_OPTIONS, KafkaConnection, driver_refusal
from spark_bridge.decode import KafkaRecord

BOOTSTRAP_OPTIONS = ("kafka.bootstrap.servers", "bootstrap")
SECURITY_OPTIONS = SOURCE_OPTIONS

ISOLATION_LEVEL_OPTION = "kafka.isolation.level"
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
"""Values of ``ISOLATION_LEVEL_OPTION`` (default ``read_uncommitted``, as Kafka's clients)."""


class KafkaSourceError(RuntimeError):
    """The topic or an offset range could not be read; ``str(exc)`` says why in one line."""


def bootstrap_servers(options: Mapping[str, str]) -> list[str]:
    """The ``host:port`` list of the options (``kafka://`` prefixes and blanks removed)."""
    for name in BOOTSTRAP_OPTIONS:
        if options.get(name):
            servers = [s.strip().removeprefix("kafka://") for s in options[name].split(",")]
            return [s for s in servers if s]
    raise KafkaSourceError("option kafka.bootstrap.servers (host:port[,host:port]) is required")


def client_options(options: Mapping[str, str]) -> dict[str, Any]:
    """aiokafka keyword arguments of the data source options (servers, isolation level,
    security: ``agents.connection.KafkaConnection``); ``KafkaSourceError`` for an unknown
    isolation level, ``ValueError`` (one line, ``driver_refusal``) for a connector-only
    security option (e.g. a JAAS config or a JKS store given to engine jvm)."""
    lowered = {k.lower(): v for k, v in options.items()}
    refusal = driver_refusal(lowered)
    if refusal:
        raise ValueError(refusal)
    connection = KafkaConnection.from_options(lowered, bootstrap_servers(options))
    kwargs = connection.aiokafka_options()
    level = options.get(ISOLATION_LEVEL_OPTION)
    if level:
        if level.lower() not in ISOLATION_LEVELS:
            raise KafkaSourceError(
                f"option {ISOLATION_LEVEL_OPTION} must be one of {', '.join(ISOLATION_LEVELS)}, "
                f"not {level!r}"
            )
        kwargs["isolation_level"] = level.lower()
    return kwargs


class KafkaReader:
    """Synchronous, group-less access to one topic: partitions, offsets, record ranges.

    Use as a context manager (``with KafkaReader(options, topic) as reader``); it starts an
    aiokafka consumer on a private event loop and stops both on exit. Nothing is committed.
    """

    def __init__(self, options: Mapping[str, str], topic: str, *, timeout: float = 30.0) -> None:
        self.topic = topic
        self.timeout = timeout
        self._kwargs = client_options(options)
        self._loop = asyncio.new_event_loop()
        self._consumer: AIOKafkaConsumer | None = None

    def __enter__(self) -> KafkaReader:
        try:
            self._consumer = self._run(self._start())
        except BaseException:
            self._loop.close()
            raise
        return self

    async def _start(self) -> AIOKafkaConsumer:
        consumer = AIOKafkaConsumer(
            **self._kwargs,
            enable_auto_commit=False,
            auto_offset_reset="none",
            fetch_max_wait_ms=100,
            max_partition_fetch_bytes=4 * 1024 * 1024,
            fetch_max_bytes=16 * 1024 * 1024,
        )
        await consumer.start()
        return consumer

    def __exit__(self, *exc_info: object) -> None:
        try:
            if self._consumer is not None:
                self._run(self._consumer.stop())
        finally:
            self._loop.close()

    def _run(self, coro: Any) -> Any:
        return self._loop.run_until_complete(coro)

    @property
    def consumer(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            raise RuntimeError("KafkaReader used outside its `with` block")
        return self._consumer

    def partitions(self) -> list[int]:
        """The topic's partition numbers, sorted; ``KafkaSourceError`` if it does not exist.

        From metadata of every topic (``agents.clients.topic_partitions``): a metadata request
        naming a missing topic would auto-create it on some brokers.
        """
        partitions = self._run(topic_partitions(self.consumer, self.topic))
        if partitions is None:
            raise KafkaSourceError(f"topic {self.topic!r} does not exist")
        return sorted(partitions)

    def earliest_offsets(self, partitions: Sequence[int]) -> dict[int, int]:
        """Offset of the first retained record of each partition (ListOffsets earliest)."""
        tps = [TopicPartition(self.topic, p) for p in partitions]
        found = self._run(self.consumer.beginning_offsets(tps))
        return {tp.partition: int(offset) for tp, offset in found.items()}

    def latest_offsets(self, partitions: Sequence[int]) -> dict[int, int]:
        """ListOffsets(latest) of each partition: only to check a broker's answer against
        ``high_watermarks`` (wrong on the embedded broker, see the module docstring)."""
        tps = [TopicPartition(self.topic, p) for p in partitions]
        found = self._run(self.consumer.end_offsets(tps))
        return {tp.partition: int(offset) for tp, offset in found.items()}

    def high_watermarks(self, partitions: Sequence[int]) -> dict[int, int]:
        """The end of each partition from Fetch responses: the high watermark (offset after the
        last record), or with ``read_committed`` the last stable offset.

        Fetches from the earliest offset of each partition until every response has been seen
        (records fetched on the way are discarded). One Fetch round trip in the usual case.
        """
        return dict(self._run(self._high_watermarks(partitions))) if partitions else {}

    async def _high_watermarks(self, partitions: Sequence[int]) -> dict[int, int]:
        tps = [TopicPartition(self.topic, p) for p in partitions]
        consumer = self.consumer
        committed = self._kwargs.get("isolation_level") == "read_committed"
        end = consumer.last_stable_offset if committed else consumer.highwater
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + self.timeout
        while any(end(tp) is None for tp in tps):
            if time.monotonic() > deadline:
                raise KafkaSourceError(f"no end offset for {self.topic} from the broker")
            await consumer.getmany(*tps, timeout_ms=100, max_records=1)
        return {tp.partition: int(end(tp)) for tp in tps}

    def bounds(self) -> tuple[list[int], dict[int, int], dict[int, int]]:
        """(partitions, earliest offsets, high watermarks) of the topic now."""
        partitions = self.partitions()
        return partitions, self.earliest_offsets(partitions), self.high_watermarks(partitions)

    def read(
        self, partition: int, start: int, end: int, *, chunk: int = 50_000
    ) -> Iterator[list[KafkaRecord]]:
        """The records of ``partition`` with ``start <= offset < end``, in chunks, in order.

        Ends when the consumer's position reaches ``end`` (offsets may have gaps: transaction
        markers, compaction). Raises ``KafkaSourceError`` when no progress is made for
        ``timeout`` seconds (e.g. ``end`` beyond the high watermark) or when ``start`` is no
        longer retained (the broker answers OffsetOutOfRange: records were lost).
        """
        tp = TopicPartition(self.topic, partition)
        self._run(self._seek(tp, start))
        position = start
        last_progress = time.monotonic()
        pending: list[KafkaRecord] = []
        while position < end:
            try:
                records, new_position = self._run(self._fetch(tp))
            except Exception as exc:  # aiokafka raises OffsetOutOfRangeError and friends
                raise KafkaSourceError(
                    f"cannot read {self.topic}[{partition}] from offset {position}: {exc!r}"
                ) from exc
            pending.extend(
                KafkaRecord(r.topic, r.partition, r.offset, r.timestamp, r.value, r.key)
                for r in records
                if r.offset < end
            )
            if new_position > position:
                position = new_position
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > self.timeout:
                raise KafkaSourceError(
                    f"{self.topic}[{partition}] stalled at offset {position} before {end}"
                )
            if len(pending) >= chunk or (pending and position >= end):
                yield pending
                pending = []
        if pending:
            yield pending

    async def _seek(self, tp: TopicPartition, offset: int) -> None:
        self.consumer.assign([tp])
        self.consumer.seek(tp, offset)

    async def _fetch(self, tp: TopicPartition) -> tuple[list[Any], int]:
        batches = await self.consumer.getmany(tp, timeout_ms=200)
        return batches.get(tp, []), await self.consumer.position(tp)
