"""What the broker holds: ``fiba topics list`` and ``fiba topics describe NAME``.

Topics are listed from one metadata answer for every topic and described only once that list
shows them, so no request ever names a missing topic (which auto-creates it on some brokers).
End offsets are Fetch high watermarks (``agents.clients.high_watermarks``), correct on every
broker; configs are those DescribeConfigs returns (``KEY_CONFIGS`` unless all are asked for; the
embedded broker returns only the configs set at creation).
"""

from __future__ import annotations

from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from agents.clients import client_options, high_watermarks
from app.settings import Settings

INTERNAL_PREFIX = "__"
"""Topics of the broker itself (``__consumer_offsets``, ``__transaction_state``)."""


KEY_CONFIGS = (
    "cleanup.policy",
    "retention.ms",
    "retention.bytes",
    "message.timestamp.type",
    "max.message.bytes",
    "min.insync.replicas",
)
"""The configs that decide what the topic keeps and accepts, shown by default."""


class UnknownTopic(Exception):
    """The topic to describe does not exist; ``str(exc)`` is one clear line."""


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition: its leader broker, replicas, in-sync replicas and end offset."""

    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    end_offset: int


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A described topic: its partitions and configs."""

    name: str
    partitions: tuple[PartitionInfo, ...]
    configs: dict[str, str]

    @property
    def records(self) -> int:
        """Sum of the end offsets (records ever written, retention and compaction aside)."""
        return sum(p.end_offset for p in self.partitions)


async def list_topics(settings: Settings, internal: bool = False) -> dict[str, int]:
    """Every topic's partition count, by name (the broker's own ``__`` topics only with
    ``internal``). One metadata request."""
    consumer = AIOKafkaConsumer(**client_options(settings), enable_auto_commit=False)
    await consumer.start()
    try:
        cluster = await consumer._client.fetch_all_metadata()
    finally:
        await consumer.stop()
    return {
        name: len(cluster.partitions_for_topic(name) or ())
        for name in sorted(cluster.topics())
        if internal or not name.startswith(INTERNAL_PREFIX)
    }


async def describe_topic(settings: Settings, name: str, all_configs: bool = False) -> TopicInfo:
    """Partitions (leader, replicas, ISR, end offset) and configs (``KEY_CONFIGS``, or every
    one the broker returns) of the existing topic ``name``; ``UnknownTopic`` when the broker's
    topic list does not show it."""
    if name not in await list_topics(settings, internal=True):
        raise UnknownTopic(f"topic {name!r} does not exist (`fiba topics list` shows them all)")
    admin = AIOKafkaAdminClient(**client_options(settings))
    await admin.start()
    try:
        (described,) = await admin.describe_topics([name])
        (answer,) = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
    finally:
        await admin.close()
    configs = {
        entry[0]: entry[1]
        for resource in answer.resources
        for entry in resource[4]
        if entry[1] is not None and (all_configs or entry[0] in KEY_CONFIGS)
    }
    consumer = AIOKafkaConsumer(
        **client_options(settings), enable_auto_commit=False, max_partition_fetch_bytes=1024
    )
    await consumer.start()
    try:
        tps = [TopicPartition(name, p["partition"]) for p in described["partitions"]]
        consumer.assign(tps)
        ends = await high_watermarks(consumer, tps)
    finally:
        await consumer.stop()
    partitions = tuple(
        PartitionInfo(
            p["partition"],
            p["leader"],
            tuple(p["replicas"]),
            tuple(p["isr"]),
            ends[TopicPartition(name, p["partition"])],
        )
        for p in sorted(described["partitions"], key=lambda p: p["partition"])
    )
    return TopicInfo(name, partitions, dict(sorted(configs.items())))
