"""The Kafka side of the CLI tools and the demo: send input records, tail a topic, range queries.

All functions are coroutines over aiokafka clients built from ``Settings``
(``agents.clients.client_options``), so they work on the embedded broker and on a real cluster;
"the end of a topic" is taken with ``agents.clients.end_offsets`` (Fetch high watermark in the
embedded profile). Consumers here join no group and commit nothing: they are read-only views.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaTimeoutError, TopicAuthorizationFailedError
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.structs import ConsumerRecord

from agents.batched_send import kafka_timestamp
from agents.clients import client_options, end_offsets, topic_refused
from agents.records import QUERY_ID, RangeQuery, dumps
from app.generator import Event
from app.settings import Settings

MAX_RECORD_BYTES = 1_048_576
"""The largest record (as aiokafka sizes it in a batch) the producers of the CLI send: Apache
Kafka's default ``message.max.bytes`` (a broker or topic setting, ``max.message.bytes``), so a
larger one is refused before the broker sees it."""

InputRecord = tuple[bytes, bytes, int | None]
"""An input-topic record: Kafka key, value, timestamp (ms, or None for the producer's clock)."""


class MissingTopic(Exception):
    """A topic a command names does not exist; ``str(exc)`` is one clear line."""

    def __init__(self, topic: str) -> None:
        super().__init__(f"topic {topic!r} does not exist (run `fiba topics create`)")
        self.topic = topic


class BadInputLine(ValueError):
    """A line of an input file that is not a JSON object with a string key, or holds a number
    that is not finite; ``sent`` is how many records before it were sent (set by
    ``send_records``)."""

    sent: int = 0


class NoAnswer(TimeoutError):
    """No answer to a range query arrived in time."""


def event_record(event: Event, settings: Settings) -> InputRecord:
    """The input record of a generated ``event`` with the configured field names.

    Value ``{"<ts_field>": ts, "<value_field>": value}`` (plus ``key_field`` when set); the
    Kafka key is the aggregation key and the Kafka timestamp the event time.
    """
    value: dict[str, Any] = {settings.ts_field: event.ts, settings.value_field: event.value}
    if settings.key_field:
        value[settings.key_field] = event.key
    return event.key.encode(), dumps(value), event.ts


def file_records(lines: Iterable[bytes], settings: Settings) -> Iterator[InputRecord]:
    """Input records of JSON-lines text (the lines as bytes, as read from a file opened in
    binary mode); blank lines are skipped.

    Each line is UTF-8 text of a JSON object whose key field (``key_field``, else ``"key"``)
    holds the aggregation key as a string; with ``key_field`` unset that member is removed from
    the value. An integer event time becomes the Kafka timestamp (``send_records`` keeps it
    within what a broker accepts). Raises ``BadInputLine`` (with the line number) at the first
    line that is not such an object: not UTF-8, not JSON, no string key, a key that is no
    Unicode text (a lone surrogate, ``"\\ud800"``), a number that is not finite, or a record
    larger than ``MAX_RECORD_BYTES``.
    """
    key_field = settings.key_field or "key"
    for number, raw in enumerate(lines, 1):
        try:
            line = raw.decode()
        except UnicodeDecodeError as exc:
            raise BadInputLine(f"line {number}: not UTF-8 text ({exc.reason})") from None
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BadInputLine(f"line {number}: not JSON ({exc.msg})") from None
        if not isinstance(obj, dict) or not isinstance(obj.get(key_field), str):
            raise BadInputLine(f"line {number}: not a JSON object with a string {key_field!r}")
        key = obj[key_field] if settings.key_field else obj.pop(key_field)
        try:
            key_bytes = key.encode()
        except UnicodeEncodeError:
            raise BadInputLine(f"line {number}: the {key_field!r} is not valid Unicode") from None
        ts = obj.get(settings.ts_field)
        timestamp = ts if isinstance(ts, int) and not isinstance(ts, bool) and ts >= 0 else None
        try:
            value = dumps(obj)
        except ValueError:  # NaN, Infinity, or a number beyond the double range (1e400)
            raise BadInputLine(
                f"line {number}: a number that is not finite (NaN, Infinity or beyond 1.8e308)"
            ) from None
        size = DefaultRecordBatchBuilder.estimate_size_in_bytes(key_bytes, value, [])
        if size > MAX_RECORD_BYTES:
            raise BadInputLine(
                f"line {number}: {size} bytes as a Kafka record, over the {MAX_RECORD_BYTES}"
                " bytes one record may have (Kafka's default message.max.bytes, which fiba's"
                " producer keeps): split the event (the worker would dead-letter a value over"
                f" max_value_bytes, {settings.max_value_bytes} bytes, anyway)"
            )
        yield key_bytes, value, timestamp


async def start_producer(settings: Settings) -> AIOKafkaProducer:
    """A started aiokafka producer for ``settings`` (acks=all, small linger), idempotent but
    with the embedded profile (its broker has no idempotence): such a producer retries a
    batch until the broker takes it, and the broker drops a retry of a batch it already has,
    so a broker outage neither loses nor doubles a record. Without idempotence a batch that
    cannot be delivered within ``request_timeout_ms`` (40 s) fails."""
    producer = AIOKafkaProducer(
        **client_options(settings),
        acks="all",
        linger_ms=5,
        max_request_size=MAX_RECORD_BYTES,
        enable_idempotence=not settings.embedded,
    )
    await producer.start()
    return producer


async def require_access(settings: Settings, client: AIOKafkaClient, topic: str) -> None:
    """``TopicAuthorizationFailedError`` when the broker's ACLs deny ``topic`` to ``client``
    (a started client's aiokafka client); checked outside the embedded profile only, whose
    broker would auto-create the topic named (``agents.clients.topic_refused``)."""
    if not settings.embedded and await topic_refused(client, topic):
        raise TopicAuthorizationFailedError(topic)


async def existing_partitions(
    settings: Settings, client: AIOKafkaClient, topics: Iterable[str]
) -> dict[str, set[int]]:
    """The partition numbers of each of ``topics``: the one check, shared by every command
    that names a topic, that they exist before anything is sent to or read from them.

    One metadata request for every topic (never one naming a topic, which would auto-create
    it on some brokers and make a producer wait ``request_timeout_ms`` for it on others).
    ``MissingTopic`` for the first one absent; outside the embedded profile a topic absent from
    the answer is first asked for by name without auto-creation
    (``TopicAuthorizationFailedError`` when the ACLs hide it). ``client`` is a started client.
    """
    cluster = await client.fetch_all_metadata()
    found = {}
    for topic in topics:
        if topic not in cluster.topics():
            await require_access(settings, client, topic)
            raise MissingTopic(topic)
        found[topic] = set(cluster.partitions_for_topic(topic) or ())
    return found


async def require_topics(settings: Settings, topics: Iterable[str]) -> None:
    """``existing_partitions`` with a client of its own (closed before returning)."""
    client = AIOKafkaClient(**client_options(settings))
    await client.bootstrap()
    try:
        await existing_partitions(settings, client, topics)
    finally:
        await client.close()


async def send_one(
    producer: AIOKafkaProducer, topic: str, key: bytes, value: bytes, timestamp_ms: int | None
) -> asyncio.Future[Any]:
    """``producer.send(...)``: the future of the record's delivery. A send refused because the
    record's partition still has a full batch waiting for the broker (``KafkaTimeoutError``
    after ``request_timeout_ms``: the record was not taken) is tried again, for as long as it
    takes: the wait of a broker outage (but not when the topic left the metadata)."""
    while True:
        try:
            return await producer.send(topic, value, key=key, timestamp_ms=timestamp_ms)
        except KafkaTimeoutError:
            if producer.client.cluster.partitions_for_topic(topic) is None:
                raise  # not an outage: the topic is gone from the metadata


async def send_records(
    settings: Settings,
    records: Iterable[InputRecord],
    *,
    topic: str | None = None,
    total: int | None = None,
    rate: float | None = None,
    progress: bool = True,
    chunk: int = 1000,
) -> int:
    """Send ``records`` to ``topic`` (default: the input topic); returns how many were sent.

    Each record's Kafka timestamp is its own made acceptable to any broker
    (``agents.batched_send.kafka_timestamp``): a time ahead of this machine's clock is sent as
    the clock's time (Apache Kafka refuses a batch with one more than an hour ahead, and a
    time beyond 64 bits cannot be sent at all), a negative one or None as the producer's clock.
    ``rate`` caps the records per second; ``progress`` shows a tqdm bar on stderr when it is a
    terminal (elsewhere, a log or a pipe, each redraw would be one more copy of the bar).
    ``TopicAuthorizationFailedError`` before the first send when the ACLs deny ``topic``
    (checked outside the embedded profile). Deliveries
    are awaited every ``chunk`` records, so memory stays bounded and a failed delivery stops
    the run with its exception. While the broker does not answer, a send waits for it
    (``send_one``), and with the idempotent producer (``start_producer``) nothing sent is
    lost or doubled.
    """
    from tqdm import tqdm

    target = topic or settings.input_topic
    producer = await start_producer(settings)
    sent = 0
    pending: list[asyncio.Future[Any]] = []
    began = time.monotonic()
    try:
        await require_access(settings, producer.client, target)
        with tqdm(
            total=total,
            unit="ev",
            desc="produce",
            file=sys.stderr,
            disable=not (progress and sys.stderr.isatty()),
        ) as bar:
            try:
                for key, value, timestamp in records:
                    if rate is not None:
                        ahead = began + sent / rate - time.monotonic()
                        if ahead > 0:
                            await asyncio.sleep(ahead)
                    pending.append(
                        await send_one(producer, target, key, value, kafka_timestamp(timestamp))
                    )
                    sent += 1
                    if len(pending) >= chunk:
                        await asyncio.gather(*pending)
                        bar.update(len(pending))
                        pending.clear()
            except BadInputLine as exc:  # raised by file_records, the source of records
                exc.sent = sent
                raise
            await asyncio.gather(*pending)
            bar.update(len(pending))
    finally:
        await producer.stop()
    return sent


async def start_consumer(settings: Settings, topic: str) -> AIOKafkaConsumer:
    """A started, group-less consumer assigned every partition of the existing ``topic``,
    reading ``settings.outputs_isolation_level`` (``read_committed`` but on the embedded
    profile: an aborted exactly-once transaction is never shown).

    The topic's existence is checked first (``existing_partitions``: ``MissingTopic``,
    ``TopicAuthorizationFailedError``).
    """
    consumer = AIOKafkaConsumer(
        **client_options(settings),
        enable_auto_commit=False,
        isolation_level=settings.outputs_isolation_level,
    )
    await consumer.start()
    try:
        partitions = (await existing_partitions(settings, consumer._client, [topic]))[topic]
        consumer.assign([TopicPartition(topic, p) for p in sorted(partitions)])
    except BaseException:
        await stop_consumer(consumer)
        raise
    return consumer


async def stop_consumer(consumer: AIOKafkaConsumer) -> None:
    """``consumer.stop()``, also while the broker does not answer: aiokafka's fetcher then
    cancels a fetch waiting out its retry backoff and re-raises that task's
    ``CancelledError`` from ``stop`` (``fiba tail --idle-timeout`` ending during an outage
    printed it as a traceback). A cancellation of the caller's own task still propagates."""
    try:
        await consumer.stop()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise


async def seek_to_end(consumer: AIOKafkaConsumer, settings: Settings) -> None:
    """Position every assigned partition after its last record (profile-aware end offsets)."""
    offsets = await end_offsets(consumer, list(consumer.assignment()), settings)
    for tp, offset in offsets.items():
        consumer.seek(tp, offset)


def _finite_float(text: str) -> float:
    """A JSON number's float; ``ValueError`` beyond the double range (``1e400``)."""
    number = float(text)
    if math.isinf(number):
        raise ValueError(f"{text} is beyond the double range")
    return number


def _no_constant(name: str) -> float:
    """``ValueError`` for ``NaN``, ``Infinity`` and ``-Infinity``, which JSON does not have."""
    raise ValueError(f"{name} is not JSON")


def record_as_dict(record: ConsumerRecord) -> dict[str, Any]:
    """A consumed record as a JSON-friendly dict: partition, offset, timestamp, key, value and,
    when present, headers. A value that is not strict JSON (not JSON, ``NaN``, ``Infinity``, a
    number beyond the double range) or JSON nested too deeply for the decoder stays a (UTF-8,
    replaced) string: a dead letter's original bytes may be anything, and the dict must dump
    as strict JSON."""
    value = record.value
    try:
        shown: Any = (
            None
            if value is None
            else json.loads(value, parse_float=_finite_float, parse_constant=_no_constant)
        )
    except (UnicodeDecodeError, ValueError, RecursionError):  # JSONDecodeError: a ValueError
        shown = value.decode("utf-8", "replace")
    out: dict[str, Any] = {
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": record.key.decode("utf-8", "replace") if record.key is not None else None,
        "value": shown,
    }
    if record.headers:
        out["headers"] = {
            name: data.decode("utf-8", "replace") if data is not None else None
            for name, data in record.headers
        }
    return out


async def tail_topic(
    settings: Settings,
    topic: str,
    show: Callable[[dict[str, Any]], None],
    *,
    from_beginning: bool = False,
    limit: int | None = None,
    idle_timeout_ms: int | None = None,
) -> int:
    """Pass each record of ``topic`` (``record_as_dict``) to ``show``; returns how many.

    Starts at the end of every partition, or at the beginning; stops after ``limit`` records
    or ``idle_timeout_ms`` without a record, else follows the topic until cancelled.
    """
    consumer = await start_consumer(settings, topic)
    shown = 0
    try:
        if from_beginning:
            await consumer.seek_to_beginning()
        else:
            await seek_to_end(consumer, settings)
        idle_since = time.monotonic()
        while limit is None or shown < limit:
            batches = await consumer.getmany(timeout_ms=200)
            for records in batches.values():
                for record in records[: None if limit is None else limit - shown]:
                    show(record_as_dict(record))
                    shown += 1
            if batches:
                idle_since = time.monotonic()
            elif idle_timeout_ms is not None and (
                (time.monotonic() - idle_since) * 1000 >= idle_timeout_ms
            ):
                break
    finally:
        await stop_consumer(consumer)
    return shown


async def ask(settings: Settings, query: RangeQuery, timeout: float) -> dict[str, Any]:
    """Send ``query`` to the query topic (keyed by its key); its answer from the answers topic.

    The answers topic is read from its end as it was before the query was sent, so the answer
    cannot be missed; answers to other queries are skipped. Raises ``NoAnswer`` after
    ``timeout`` seconds.
    """
    consumer = await start_consumer(settings, settings.answers_topic)
    try:
        await seek_to_end(consumer, settings)
        producer = await start_producer(settings)
        try:
            await require_access(settings, producer.client, settings.queries_topic)
            await producer.send_and_wait(
                settings.queries_topic, dumps(query.to_json()), key=query.key.encode()
            )
        finally:
            await producer.stop()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                for record in records:
                    answer = record_as_dict(record)["value"]
                    if isinstance(answer, dict) and answer.get(QUERY_ID) == query.query_id:
                        return answer
    finally:
        await stop_consumer(consumer)
    raise NoAnswer(
        f"no answer on {settings.answers_topic} within {timeout:g}s (is a worker running?)"
    )
