"""The app's topics and their idempotent, explicit creation (``fiba topics create``).

Every topic a worker uses (input, queries, aggregates, answers, dead letters, the changelog,
the assignment topic and Faust's leader topic) is created explicitly with ``partitions``
partitions, ``replication_factor`` and explicit ``retention.ms``, ``retention.bytes`` and
``cleanup.policy`` (the changelog compacted, the others deleted after 7 days), never by broker
auto-creation, which would break the co-partitioning of the input with the queries, changelog
and assignment topics. Creating again is a no-op; an existing topic with another partition
count is an error (``TopicMismatch``). Every topic and its configs: docs/reference/operations.md.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAuthorizationFailedError

from agents.clients import client_options, topic_refused
from app.settings import Settings
from app.wording import counted

DATA_RETENTION_MS = 7 * 24 * 3_600_000
"""How long the input and output topics keep records (``retention.ms``)."""

DATA_TOPIC_CONFIGS: Mapping[str, str] = {
    "cleanup.policy": "delete",
    "retention.ms": str(DATA_RETENTION_MS),
    "retention.bytes": "-1",
}
CHANGELOG_TOPIC_CONFIGS: Mapping[str, str] = {
    "cleanup.policy": "compact",
    "retention.ms": "-1",
    "retention.bytes": "-1",
}

_NO_ERROR = 0
_TOPIC_ALREADY_EXISTS = 36
METADATA_WAIT_S = 30.0
"""Seconds an existing or just created topic may take to appear complete in metadata."""


class TopicError(Exception):
    """A topic could not be created as specified; ``str(exc)`` is one clear line."""


class TopicMismatch(TopicError):
    """A topic exists with another partition count than the settings require."""


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """What a topic must look like: name, partition count, replication factor, configs."""

    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TopicOutcome:
    """The result of creating one topic: ``created`` is False when it already existed."""

    name: str
    partitions: int
    created: bool


def topic_specs(settings: Settings) -> list[TopicSpec]:
    """Every topic the app uses, in creation order (the input first)."""
    data_topics = (
        settings.input_topic,
        settings.queries_topic,
        settings.aggregates_topic,
        settings.answers_topic,
        settings.dead_letter_topic,
        settings.assignment_topic,
        settings.leader_topic,
    )
    specs = [
        TopicSpec(name, settings.partitions, settings.replication_factor, DATA_TOPIC_CONFIGS)
        for name in data_topics
    ]
    specs.append(
        TopicSpec(
            settings.changelog_topic,
            settings.partitions,
            settings.replication_factor,
            CHANGELOG_TOPIC_CONFIGS,
        )
    )
    return specs


def named_topic_specs(
    settings: Settings, names: Sequence[str], compacted: Sequence[str] = ()
) -> list[TopicSpec]:
    """Specs of topics named by the user (``fiba topics create --topic``, e.g. a Faust app of
    their own): ``names`` as data topics, ``compacted`` as changelogs, all with
    ``settings.partitions`` partitions and ``replication_factor``."""
    return [
        TopicSpec(name, settings.partitions, settings.replication_factor, DATA_TOPIC_CONFIGS)
        for name in dict.fromkeys(names)
    ] + [
        TopicSpec(name, settings.partitions, settings.replication_factor, CHANGELOG_TOPIC_CONFIGS)
        for name in dict.fromkeys(compacted)
    ]


async def create_topics(
    settings: Settings, specs: Sequence[TopicSpec] | None = None
) -> list[TopicOutcome]:
    """Create ``specs`` (default: ``topic_specs(settings)``) idempotently; see the module doc.

    One CreateTopics request, then metadata requests until every topic shows all its partitions.
    Raises ``TopicMismatch`` or ``TopicError``, ``TopicAuthorizationFailedError`` when the ACLs
    deny creating a topic; connection failures propagate from aiokafka.
    """
    wanted = list(specs if specs is not None else topic_specs(settings))
    admin = AIOKafkaAdminClient(**client_options(settings))
    await admin.start()
    try:
        response = await admin.create_topics(
            [
                NewTopic(s.name, s.partitions, s.replication_factor, topic_configs=dict(s.configs))
                for s in wanted
            ]
        )
        errors = {topic: (code, message) for topic, code, message, *_ in response.topic_errors}
        existing = []
        for spec in wanted:
            code, message = errors.get(spec.name, (_NO_ERROR, None))
            if code == _TOPIC_ALREADY_EXISTS:
                existing.append(spec)
            elif code == TopicAuthorizationFailedError.errno:
                raise TopicAuthorizationFailedError(spec.name)
            elif code != _NO_ERROR:
                raise TopicError(
                    f"cannot create topic {spec.name!r}: {message or f'error code {code}'}"
                )
        counts = await _partition_counts(admin, [s.name for s in wanted])
    finally:
        await admin.close()
    for spec in existing:
        if counts[spec.name] != spec.partitions:
            raise TopicMismatch(
                f"topic {spec.name!r} already exists with"
                f" {counted(counts[spec.name], 'partition')}, "
                f"but the settings need {spec.partitions} (the input, queries and changelog "
                "topics must be co-partitioned): set partitions accordingly or recreate it"
            )
    return [TopicOutcome(s.name, s.partitions, s not in existing) for s in wanted]


async def missing_or_mismatched(settings: Settings) -> list[str]:
    """What keeps a worker of ``settings`` from starting safely: one line per topic that is
    missing or has another partition count (empty when all is well).

    Reads the full topic list first and describes only existing topics, so nothing is
    auto-created. Outside the embedded profile a topic absent from the list is asked for by
    name without auto-creation: ``TopicAuthorizationFailedError`` when the ACLs deny it.
    """
    wanted = topic_specs(settings)
    admin = AIOKafkaAdminClient(**client_options(settings))
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        if not settings.embedded:
            for spec in wanted:
                if spec.name not in existing and await topic_refused(admin._client, spec.name):
                    raise TopicAuthorizationFailedError(spec.name)
        counts = await _partition_counts(admin, [s.name for s in wanted if s.name in existing])
    finally:
        await admin.close()
    problems = []
    for spec in wanted:
        if spec.name not in counts:
            problems.append(f"topic {spec.name!r} is missing")
        elif counts[spec.name] != spec.partitions:
            problems.append(
                f"topic {spec.name!r} has {counted(counts[spec.name], 'partition')},"
                f" not {spec.partitions}"
            )
    return problems


async def _partition_counts(
    admin: AIOKafkaAdminClient, names: list[str], timeout: float = METADATA_WAIT_S
) -> dict[str, int]:
    """Partition count of each named topic, all known to exist: described again every 0.1 s
    while one comes back with an error or a partition without a leader (metadata not yet
    updated), for at most ``timeout`` seconds, then ``TopicError``."""
    if not names:
        return {}
    deadline = time.monotonic() + timeout
    while True:
        described = await admin.describe_topics(names)
        pending = [t["topic"] for t in described if not _complete(t)]
        if not pending:
            return {t["topic"]: len(t["partitions"]) for t in described}
        if time.monotonic() > deadline:
            raise TopicError(
                f"topics {pending} not complete in the broker's metadata after {timeout:.0f} s"
            )
        await asyncio.sleep(0.1)


def _complete(described: Mapping) -> bool:
    """A described topic without error whose partitions all have a leader."""
    partitions = described["partitions"]
    return (
        described["error_code"] == _NO_ERROR
        and bool(partitions)
        and all(p["error_code"] == _NO_ERROR and p["leader"] >= 0 for p in partitions)
    )
