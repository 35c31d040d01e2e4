"""``fiba status``: the group's progress seen from outside, with or without a worker alive.

Per input partition: its owner, applied offset, end offset, lag and restore state. All but the
restore state comes from the broker, so the view works while no worker answers (a failover);
the workers' ``GET /stats`` adds the freshest applied offsets and the restore state.

- Owner: the answering worker whose ``/stats`` lists the partition (asked: ``--worker`` URLs,
  the group's members by their client id, the last progress committers by their metadata);
  else the group member assigned it, else the last committer, shown as not answering. The
  embedded broker gives no client ids, assignments or commit metadata: only the given URLs.
- End offset: a Fetch response's high watermark (``agents.clients.high_watermarks``).
- Applied offset: the owner's ``/stats``; else the last changelog record naming an input offset
  (``stores.changelog``); else the progress committed under ``<app_id>-input`` minus one.
- Lag: end offset - applied offset - 1 (the whole partition when nothing was applied).

Costs: a few metadata and group requests, one fetch per input partition, a backwards read of
each changelog partition's tail, one HTTP request per member, all concurrent with a timeout.
Reference: docs/reference/cli.md.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.errors import GroupCoordinatorNotAvailableError, NotCoordinatorForGroupError

from agents.clients import client_options, high_watermarks, topic_partitions
from app.settings import WORKER_CLIENT_ID_PREFIX, Settings
from stores.changelog import APPLIED_KEY, UPSERT_HEADER, decode_offset

T = TypeVar("T")

STATS_TIMEOUT_S = 2.0
"""Seconds a worker's ``/stats`` may take before it counts as not answering."""

CHANGELOG_READ_S = 10.0
"""Longest time spent reading back one changelog partition (then its offset counts unknown)."""

CHANGELOG_STEP = 64
"""Records read back from a changelog partition's end first (the step doubles each time)."""

RESTORED, RESTORING = "restored", "restoring"
NO_OWNER, NOT_ANSWERING = "no owner", "owner not answering"


class StatusError(Exception):
    """The status cannot be read (e.g. the input topic is missing); one clear line."""


@dataclass(frozen=True, slots=True)
class Member:
    """A worker in the group: its member id, the host the broker saw and the input partitions
    it owns."""

    member_id: str
    client_host: str
    url: str | None
    """The worker's HTTP URL, from its client id (``Settings.worker_client_id``)."""
    partitions: frozenset[int]

    @property
    def name(self) -> str:
        """How ``fiba status`` names it: its URL, else ``member <id> on <host>``."""
        return self.url or f"member {self.member_id} on {self.client_host or '?'}"


@dataclass(slots=True)
class PartitionStatus:
    """One input partition as ``fiba status`` shows it (see the module doc)."""

    partition: int
    end_offset: int
    owner: str | None = None
    owner_from: str | None = None
    """How the owner is known: ``worker`` (its /stats lists the partition), ``group`` (the
    group's assignment), ``committed`` (it committed the partition's progress last)."""
    owner_answers: bool = False
    restore: str = NO_OWNER
    applied_offset: int | None = None
    applied_from: str | None = None
    applied: dict[str, int | None] = field(default_factory=dict)
    """The applied offset by each source: ``worker``, ``changelog``, ``committed``."""

    @property
    def lag(self) -> int:
        """Input records after the applied offset."""
        done = -1 if self.applied_offset is None else self.applied_offset
        return max(0, self.end_offset - done - 1)

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "owner": self.owner,
            "owner_from": self.owner_from,
            "owner_answers": self.owner_answers,
            "applied_offset": self.applied_offset,
            "applied_from": self.applied_from,
            "end_offset": self.end_offset,
            "lag": self.lag,
            "restore": self.restore,
            "applied_by_source": self.applied,
        }


@dataclass(slots=True)
class GroupStatus:
    """The group's state (``Stable``, ``PreparingRebalance``, ``Empty``, ...), its members and
    every input partition."""

    group: str
    state: str
    members: list[Member]
    partitions: list[PartitionStatus]

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "state": self.state,
            "members": [
                {
                    "member_id": m.member_id,
                    "url": m.url,
                    "client_host": m.client_host,
                    "partitions": sorted(m.partitions),
                }
                for m in self.members
            ],
            "partitions": [p.to_json() for p in self.partitions],
        }


async def read_status(settings: Settings, workers: Iterable[str] = ()) -> GroupStatus:
    """The status of the workers of ``settings`` (see the module doc); ``workers``: more
    worker URLs to ask besides those the broker names. ``StatusError`` when the input topic
    does not exist."""
    consumer = AIOKafkaConsumer(
        **client_options(settings),
        enable_auto_commit=False,
        isolation_level=settings.outputs_isolation_level,
        max_partition_fetch_bytes=64 * 1024,
    )
    await consumer.start()
    try:
        partitions = await topic_partitions(consumer, settings.input_topic)
        if partitions is None:
            raise StatusError(
                f"topic {settings.input_topic!r} does not exist (run `fiba topics create`)"
            )
        inputs = [TopicPartition(settings.input_topic, p) for p in sorted(partitions)]
        consumer.assign(inputs)
        ends = await high_watermarks(consumer, inputs)
        changelog = await changelog_applied(consumer, settings.changelog_topic, partitions)
    finally:
        await consumer.stop()
    state, members = await describe_group(settings)
    committed = await committed_progress(settings, inputs)
    named = {m.url for m in members if m.url} | {u for _, u in committed.values() if u}
    urls = sorted(named | {u.rstrip("/") for u in workers})
    answers = await asyncio.gather(*(asyncio.to_thread(worker_stats, url) for url in urls))
    stats = {url: answer for url, answer in zip(urls, answers, strict=True) if answer}
    rows = []
    for tp in inputs:
        row = PartitionStatus(tp.partition, ends[tp])
        progress, committer = committed.get(tp.partition, (None, None))
        row.applied = {
            "changelog": changelog.get(tp.partition),
            "committed": None if progress is None else progress - 1,
        }
        member = next((m for m in members if tp.partition in m.partitions), None)
        find_owner(row, stats, member, committer)
        for source in ("worker", "changelog", "committed"):
            if row.applied.get(source) is not None:
                row.applied_offset, row.applied_from = row.applied[source], source
                break
        rows.append(row)
    return GroupStatus(settings.app_id, state, members, rows)


def find_owner(
    row: PartitionStatus,
    stats: dict[str, dict[str, Any]],
    member: Member | None,
    committer: str | None,
) -> None:
    """Fill the owner of ``row``: the answering worker that has it assigned; else the group
    member assigned it (``member``); else the worker whose URL the last progress commit names
    (``committer``). The owner's ``/stats`` (``stats``: answering workers by URL) gives the
    restore state and the freshest applied offset."""
    for url, answer in stats.items():
        if row.partition in answer.get("assigned", ()):
            row.owner, row.owner_from, row.owner_answers = url, "worker", True
            loaded = answer.get("partitions", {}).get(str(row.partition))
            if loaded is None:
                row.restore = RESTORING
            else:
                row.restore = RESTORED
                row.applied["worker"] = loaded["applied_offset"]
            return
    if member is not None:
        row.owner, row.owner_from = member.name, "group"
        row.restore = NOT_ANSWERING
    elif committer is not None:
        row.owner, row.owner_from = committer, "committed"
        row.restore = NOT_ANSWERING


async def describe_group(settings: Settings) -> tuple[str, list[Member]]:
    """The state and members of the workers' group (``app_id``); ``("Dead", [])`` when the
    group does not exist, ``("unknown", [])`` when the broker has no group coordinator
    (``coordinated``)."""
    admin = AIOKafkaAdminClient(**client_options(settings))
    await admin.start()
    try:
        answer = await coordinated(admin.describe_consumer_groups([settings.app_id]))
    finally:
        await admin.close()
    if answer is None:
        return "unknown", []
    (group,) = answer[0].groups
    error_code, _, state, _, _, members = group[:6]
    if error_code != 0:
        return "Dead", []
    return state, [_member(settings, m) for m in members]


async def coordinated(request: Awaitable[T]) -> T | None:
    """The result of a group request, or None when the broker has no coordinator for the
    group (Apache Kafka before its offsets topic exists, e.g. just after it started)."""
    try:
        return await request
    except (GroupCoordinatorNotAvailableError, NotCoordinatorForGroupError):
        return None


def _member(settings: Settings, entry: tuple[Any, ...]) -> Member:
    """A group member from its DescribeGroups entry (id, client id, host, metadata,
    assignment): the input partitions it owns are the assignment-topic partitions assigned
    to it."""
    member_id, client_id, host, _, assignment = entry[:5]
    url = None
    if client_id and client_id.startswith(WORKER_CLIENT_ID_PREFIX):
        url = client_id.removeprefix(WORKER_CLIENT_ID_PREFIX)
    owned: set[int] = set()
    if assignment:
        decoded = ConsumerProtocolMemberAssignment.decode(assignment)
        for topic, numbers in decoded.assignment:
            if topic == settings.assignment_topic:
                owned.update(numbers)
    return Member(member_id, host.lstrip("/"), url, frozenset(owned))


async def committed_progress(
    settings: Settings, partitions: list[TopicPartition]
) -> dict[int, tuple[int, str | None]]:
    """The input progress committed under ``<app_id>-input`` (applied offset + 1) and the URL
    of the worker that committed it (the commit's metadata), per partition that has one."""
    admin = AIOKafkaAdminClient(**client_options(settings))
    await admin.start()
    try:
        offsets = await coordinated(
            admin.list_consumer_group_offsets(settings.input_progress_group, partitions=partitions)
        )
    finally:
        await admin.close()
    return {
        tp.partition: (meta.offset, meta.metadata or None)
        for tp, meta in (offsets or {}).items()
        if meta.offset >= 0
    }


async def changelog_applied(
    consumer: AIOKafkaConsumer, topic: str, partitions: set[int]
) -> dict[int, int | None]:
    """Per partition of the window-store changelog ``topic`` (co-partitioned with the input),
    the input offset its latest upsert or applied marker covers; None when it has none (or the
    topic is missing). Reads back from the end, ``CHANGELOG_STEP`` records first, doubling."""
    present = await topic_partitions(consumer, topic)
    if not present:
        return {}
    tps = [TopicPartition(topic, p) for p in sorted(partitions & present)]
    consumer.assign([*consumer.assignment(), *tps])
    ends = await high_watermarks(consumer, tps)
    return {tp.partition: await _last_applied(consumer, tp, ends[tp]) for tp in tps}


async def _last_applied(consumer: AIOKafkaConsumer, tp: TopicPartition, end: int) -> int | None:
    """The input offset of the last offset-bearing record of ``tp`` below ``end``."""
    upper, step = end, CHANGELOG_STEP
    deadline = time.monotonic() + CHANGELOG_READ_S
    while upper > 0 and time.monotonic() < deadline:
        lower = max(0, upper - step)
        consumer.seek(tp, lower)
        found: int | None = None
        # read_committed stops at the last stable offset (nothing of an open transaction)
        while await consumer.position(tp) < upper and time.monotonic() < deadline:
            batch = (await consumer.getmany(tp, timeout_ms=200)).get(tp, [])
            for record in batch:
                if record.offset < upper and (offset := _input_offset(record)) is not None:
                    found = offset if found is None else max(found, offset)
            stable = consumer.last_stable_offset(tp)
            if not batch and stable is not None and await consumer.position(tp) >= stable:
                break
        if found is not None:
            return found
        upper, step = lower, step * 2
    return None


def _input_offset(record: Any) -> int | None:
    """The input offset an upsert or applied marker record carries, else None."""
    if record.value is None or record.key is None:
        return None
    if record.key == APPLIED_KEY:
        return decode_offset(record.value)
    if len(record.key) >= 12 and len(record.value) >= UPSERT_HEADER.size:
        return int(UPSERT_HEADER.unpack_from(record.value)[0])
    return None


def worker_stats(url: str, timeout: float = STATS_TIMEOUT_S) -> dict[str, Any] | None:
    """A worker's ``GET /stats`` answer, or None when it does not answer in ``timeout`` s."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/stats", timeout=timeout) as response:
            answer = json.loads(response.read())
    except (OSError, urllib.error.URLError, ValueError):
        return None
    return answer if isinstance(answer, dict) else None
