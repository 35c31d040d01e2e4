"""Range queries -> answers, over the query topic and over HTTP.

A query asks for the aggregates of one key's retained events with ``from <= t <= to`` (or one
configured ``window`` at stream time), answered from the same per-key FiBA as the windows: one
range query, O(log n). An unknown key answers count 0; an invalid query answers with ``error``
set; a record that is not a query becomes a ``bad_query`` dead letter, and also an error answer
when it carries a usable ``query_id`` (every id is answered exactly once). The query topic is
co-partitioned with the input and read by ``QueryConsumer`` (not queued behind the input
backlog), answers are sent by a producer without linger (``LatencyProducer``). HTTP: ``GET
/windows/{key}?from=&to=`` or ``?window=``, forwarded to the owner through the query topic when
another worker owns the key (``AnswerForwarder``), and ``GET /stats``.
Reference: docs/reference/http.md.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from faust.types import TP
from faust.web import Request, Response, View

from agents.batched_send import kafka_timestamp
from agents.clients import client_options, fetch
from agents.config import FaustWorker, WorkerSettings
from agents.events import BadEvent, decode_json_object, parse_event_time
from agents.records import (
    AGGREGATIONS,
    FROM,
    KEY,
    QUERY_ID,
    REASON_BAD_QUERY,
    TO,
    WINDOW,
    Answer,
    RangeQuery,
    dumps,
    encode_json,
)
from agents.retention_watch import RetentionCheck
from agents.supervision import OnFailure, watched
from agents.transactions import NotOwned, Transactions
from agents.windows import WindowsPipeline
from stores.key_windows import KeyWindows

OnAnswered = Callable[[str, float], None]
"""Told how a query came ("topic" or "http") and how many seconds answering it took."""

SendAnswer = Callable[[bytes, bytes, int | None], Awaitable[None]]
"""Sends one answer: key, value, Kafka timestamp (ms, or None)."""

logger = logging.getLogger(__name__)

FORWARD_TIMEOUT_S = 5.0
QUERY_COMMIT_INTERVAL_S = 1.0
KAFKA_QUERY_FETCH_WAIT_MS = 100
EMBEDDED_QUERY_FETCH_WAIT_MS = 10


def query_fetch_wait_ms(settings: WorkerSettings) -> int:
    """Longest wait of a query/answer fetch on the broker.

    Kafka answers a fetch as soon as a record arrives (``fetch_min_bytes`` 1), so a long wait
    costs no latency there and keeps an idle consumer cheap. The embedded broker answers only
    when the wait expires, so there a query or answer waits up to this long after it arrived:
    a short wait (embedded profile), paid for by idle fetch requests (each costs the worker's
    event loop a request and a response; 5 ms instead of 10 ms gained no measurable latency
    under load and cost throughput, see bench/RESULTS.md).
    """
    return EMBEDDED_QUERY_FETCH_WAIT_MS if settings.embedded else KAFKA_QUERY_FETCH_WAIT_MS


def query_group(settings: WorkerSettings) -> str:
    """The consumer group of the query offsets: ``<app_id>-queries``."""
    return f"{settings.app_id}-queries"


class BadQuery(Exception):
    """A query that cannot be asked; ``str(exc)`` is the error text of the answer.

    ``query_id``: the query's id when it has a usable one (a string or an integer), so that it
    gets an error answer as well as its dead letter; ``key``: its ``key`` when that was valid.
    """

    def __init__(self, text: str, query_id: str | None = None, key: str | None = None) -> None:
        super().__init__(text)
        self.query_id = query_id
        self.key = key


def _time_bound(raw: Any, name: str) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, _NoJson):
        raise BadQuery(f"{name}: not a time: {raw!r}")
    try:
        return parse_event_time(raw)
    except BadEvent as exc:
        raise BadQuery(f"{name}: {exc.detail}") from None


def query_from_json(obj: Mapping[str, Any]) -> RangeQuery:
    """The ``RangeQuery`` of a decoded query object; ``BadQuery`` if it has no id or key or
    its fields have the wrong types (the semantic checks are ``answer``'s), carrying the id
    (and the key) when they were usable."""
    query_id, key = obj.get(QUERY_ID), obj.get(KEY)
    if not isinstance(query_id, str | int) or isinstance(query_id, bool):
        raise BadQuery("query_id missing or not a string")
    query_id = str(query_id)
    if not isinstance(key, str):
        raise BadQuery("key missing or not a string", query_id)
    try:
        key.encode()
    except UnicodeEncodeError:  # a lone surrogate (JSON "\ud800") is no UTF-8
        raise BadQuery("key is not valid Unicode", query_id) from None
    try:
        return _query_fields(obj, query_id, key)
    except BadQuery as bad:
        raise BadQuery(str(bad), query_id, key) from None


def _query_fields(obj: Mapping[str, Any], query_id: str, key: str) -> RangeQuery:
    """``query_from_json`` past the id and key: the bounds, window and aggregations."""
    window = obj.get(WINDOW)
    if window is not None and not isinstance(window, str):
        raise BadQuery("window must be a window name")
    aggregations = obj.get(AGGREGATIONS)
    if aggregations is not None:
        if isinstance(aggregations, str):
            aggregations = [a.strip() for a in aggregations.split(",") if a.strip()]
        if not isinstance(aggregations, list) or not all(isinstance(a, str) for a in aggregations):
            raise BadQuery("aggregations must be a list of names")
        aggregations = tuple(aggregations)
    return RangeQuery(
        query_id=query_id,
        key=key,
        from_ts=_time_bound(obj.get(FROM), "from"),
        to_ts=_time_bound(obj.get(TO), "to"),
        window=window,
        aggregations=aggregations,
    )


def query_id_param(params: Mapping[str, str]) -> str:
    """The ``query_id`` of an HTTP query (``"http"`` unless given)."""
    return params.get("query_id", "http")


def failed(query_id: str, key: str, error: str) -> dict[str, Any]:
    """The JSON of the answer to a query that could not be asked: ``error`` set, nothing else
    known (the same fields as every answer, ``query_id`` first)."""
    return Answer(query_id, key, None, None, {}, 0, None, error).to_json()


def _text_of(key: bytes | None) -> str:
    """A record's Kafka key as the text of an answer's ``key`` (invalid UTF-8 replaced; no
    key: ``""``)."""
    return "" if key is None else key.decode("utf-8", "replace")


def query_from_params(key: str, params: Mapping[str, str]) -> RangeQuery:
    """The ``RangeQuery`` of ``GET /windows/{key}``'s query parameters ``from``, ``to``,
    ``window``, ``aggregations`` (comma-separated) and ``query_id`` (default ``"http"``);
    ``BadQuery`` as ``query_from_json``."""
    return query_from_json(
        {
            QUERY_ID: query_id_param(params),
            KEY: key,
            FROM: params.get("from"),
            TO: params.get("to"),
            WINDOW: params.get("window"),
            AGGREGATIONS: params.get("aggregations"),
        }
    )


def parse_query(value: bytes | None) -> RangeQuery:
    """The ``RangeQuery`` of a query record's value; ``BadQuery`` if it is no JSON object with
    a ``query_id`` and a ``key`` of the right types (``query_from_json``). O(len(value))."""
    try:
        obj = decode_json_object(value or b"")
    except BadEvent as exc:
        raise _refused(exc.detail, value or b"") from None
    return query_from_json(obj)


class _NoJson:
    """A value JSON cannot hold that a query record may still carry: NaN, an infinity, or an
    integer of more than 100 digits (``decode_json_object`` refuses the whole record)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text if len(self.text) <= 100 else f"a number of {len(self.text)} digits"


_LENIENT = json.JSONDecoder(
    parse_constant=_NoJson, parse_int=lambda text: int(text) if len(text) <= 100 else _NoJson(text)
)
"""Reads a record that would be a JSON object but for ``_NoJson`` values."""


def _refused(detail: str, value: bytes) -> BadQuery:
    """``BadQuery(detail)`` for a record that is no JSON object, carrying its id (and key) if
    it would be one with usable ones but for values JSON cannot hold, so that it is answered.
    O(len(value))."""
    try:
        obj = _LENIENT.decode(value.decode(json.detect_encoding(value), "surrogatepass"))
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError included
        return BadQuery(detail)
    if not isinstance(obj, dict):
        return BadQuery(detail)
    try:
        query = query_from_json(obj)
    except BadQuery as bad:
        return BadQuery(detail, bad.query_id, bad.key)
    return BadQuery(detail, query.query_id, query.key)


def answer(windows: KeyWindows, query: RangeQuery) -> Answer:
    """The answer to ``query`` from the windows of the key's partition."""
    stream_time = windows.stream_time

    def error(text: str) -> Answer:
        return Answer(
            query.query_id, query.key, query.from_ts, query.to_ts, {}, 0, stream_time, text
        )

    config = windows.config
    wanted = query.aggregations or config.aggregations
    unknown = [a for a in wanted if a not in config.aggregations]
    if unknown:
        return error(
            f"unknown aggregation(s) {', '.join(unknown)}; "
            f"configured: {', '.join(config.aggregations)}"
        )
    t_from, t_to = query.from_ts, query.to_ts
    if query.window is not None and (t_from is not None or t_to is not None):
        return error("give from and to, or a window, not both")
    if query.window is not None:
        sizes = {w.name: w.size_ms for w in config.windows}
        if query.window not in sizes:
            return error(f"unknown window {query.window!r}; configured: {', '.join(sizes)}")
        if stream_time is not None:
            t_from, t_to = stream_time - sizes[query.window], stream_time
    elif t_from is None or t_to is None:
        return error("give both from and to, or a window")
    elif t_from > t_to:
        return error(f"from ({t_from}) > to ({t_to})")
    if t_from is None or t_to is None:
        count, aggregates = windows.query_range(query.key, 0, -1)
    else:
        count, aggregates = windows.query_range(query.key, t_from, t_to)
    result = {name: aggregates[name] for name in wanted}
    return Answer(query.query_id, query.key, t_from, t_to, result, count, stream_time)


class LatencyProducer:
    """An aiokafka producer that sends every record at once (``linger_ms=0``, ``acks=all``),
    started on first use: answers and forwarded queries are latency-bound, unlike the app
    producer's outputs, which linger to fill batches."""

    def __init__(self, settings: WorkerSettings) -> None:
        self.settings = settings
        self._producer: AIOKafkaProducer | None = None
        self._starting = asyncio.Lock()

    async def send(
        self, topic: str, key: bytes, value: bytes, timestamp: int | None = None
    ) -> None:
        """Hand one record to the producer (delivery is awaited by ``flush``), with Kafka
        ``timestamp`` (epoch ms, ``agents.batched_send.kafka_timestamp``; None: the clock)."""
        if self._producer is None:
            async with self._starting:
                if self._producer is None:
                    producer = AIOKafkaProducer(
                        **client_options(self.settings), linger_ms=0, acks="all"
                    )
                    await producer.start()
                    self._producer = producer
        await self._producer.send(topic, value, key=key, timestamp_ms=kafka_timestamp(timestamp))

    async def flush(self) -> None:
        """Wait until every record sent so far is acknowledged."""
        if self._producer is not None:
            await self._producer.flush()

    async def stop(self) -> None:
        """Deliver what was sent and stop."""
        if self._producer is not None:
            await self._producer.stop()


class QueryService:
    """Answers query records of the partitions this worker owns."""

    def __init__(
        self,
        fiba: FaustWorker,
        pipeline: WindowsPipeline,
        on_failure: OnFailure,
    ) -> None:
        self.fiba = fiba
        self.pipeline = pipeline
        self.on_answered: OnAnswered | None = None
        """Called with ``"topic"`` or ``"http"`` and the seconds a query took to answer
        (the worker's metrics)."""
        self.on_failure = on_failure
        """Called when the query consumer or the answers reader fails (``agents.supervision``)."""
        self.producer = LatencyProducer(fiba.settings)
        self.forwarder = AnswerForwarder(fiba, self.producer, on_failure)
        self.transactions: Transactions | None = None
        """Exactly-once: each fetched chunk of a query partition is answered in one
        transaction of the partition (``QueryConsumer``)."""
        self.answers_retention = RetentionCheck(fiba.settings.answers_topic, "answers")
        """The answers' timestamps (their query records') against the topic's retention."""

    def owns(self, partition: int) -> bool:
        """True when the input partition is assigned to this worker right now (its partition
        of the assignment topic is, see ``agents.input_reader``)."""
        tp = TP(self.fiba.settings.assignment_topic, partition)
        return tp in self.fiba.app.consumer.assignment()

    async def ask(self, query: RangeQuery) -> Answer:
        """Answer ``query`` from the state of the key's partition (restored if needed)."""
        partition = self.fiba.key_partition(query.key.encode())
        state = await self.pipeline.state(partition)
        return answer(state.windows, query)

    async def handle(self, message: ConsumerRecord, send: SendAnswer | None = None) -> None:
        """One query record -> one answer record, with the query record's Kafka timestamp (the
        record that caused it, Kafka Streams' rule), sent by ``send`` (default: the latency
        producer). A record that is no valid query is a dead letter (``bad_query``) and, if it
        has a usable ``query_id``, also gets an error answer (keyed by its ``key``, or else by
        the record's Kafka key), so that no client waits forever for it."""
        self.pipeline.counts["queries"] += 1
        began = time.perf_counter()
        send = send or self._send_answer
        try:
            query = parse_query(message.value)
        except BadQuery as exc:
            await self.pipeline.dead_letters.add(
                REASON_BAD_QUERY,
                str(exc),
                message.topic,
                message.partition,
                message.offset,
                message.key,
                message.value,
                message.timestamp,
            )
            if exc.query_id is not None:
                key = exc.key if exc.key is not None else _text_of(message.key)
                failure = failed(exc.query_id, key, str(exc))
                self.answers_retention.check(kafka_timestamp(message.timestamp))
                await send(key.encode(), encode_json(failure), message.timestamp)
                self.pipeline.counts["query_errors"] += 1
                self.pipeline.counts["answers"] += 1
                self.answered("topic", began)
            return
        if message.key != query.key.encode():
            result = Answer(
                query.query_id,
                query.key,
                query.from_ts,
                query.to_ts,
                {},
                0,
                None,
                "the query record's Kafka key must be the aggregation key",
            )
        else:
            state = await self.pipeline.state(message.partition)
            result = answer(state.windows, query)
        if result.error:
            self.pipeline.counts["query_errors"] += 1
        self.answers_retention.check(kafka_timestamp(message.timestamp))
        await send(query.key.encode(), encode_json(result.to_json()), message.timestamp)
        self.pipeline.counts["answers"] += 1
        self.answered("topic", began)

    async def _send_answer(self, key: bytes, value: bytes, timestamp: int | None) -> None:
        await self.producer.send(self.fiba.settings.answers_topic, key, value, timestamp)

    def answered(self, via: str, began: float) -> None:
        """Report a query answered ``via`` "topic" or "http", asked at ``began``
        (``time.perf_counter``), to ``on_answered``."""
        if self.on_answered is not None:
            self.on_answered(via, time.perf_counter() - began)

    async def flush(self) -> None:
        """Wait until the answers sent so far and the dead letters of bad queries (queued with
        the pipeline's outputs) are acknowledged."""
        await self.producer.flush()
        await self.pipeline.deliver_outputs()

    async def forward(self, query: RangeQuery, timeout: float) -> Answer | None:
        """Ask the owner of ``query.key`` through the query topic and wait for its answer
        (``None`` after ``timeout`` seconds)."""
        return await self.forwarder.ask(query, timeout)


class AnswerForwarder:
    """Answers for HTTP queries about keys another worker owns, obtained through Kafka.

    The query is produced to the query topic (keyed, so it reaches the owner of the key's
    partition); a group-less consumer of the answers topic, started on first use, resolves the
    waiting request by ``query_id`` (a fresh UUID, so old answers never match).
    """

    def __init__(self, fiba: FaustWorker, producer: LatencyProducer, on_failure: OnFailure) -> None:
        self.fiba = fiba
        self.producer = producer
        self.on_failure = on_failure
        self._pending: dict[str, asyncio.Future[Answer]] = {}
        self._consumer: AIOKafkaConsumer | None = None
        self._reader: asyncio.Task[None] | None = None
        self._starting = asyncio.Lock()

    async def ask(self, query: RangeQuery, timeout: float) -> Answer | None:
        await self._start()
        query_id = f"http-{uuid.uuid4().hex}"
        forwarded = replace(query, query_id=query_id)
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._pending[query_id] = future
        try:
            await self.producer.send(
                self.fiba.settings.queries_topic, query.key.encode(), dumps(forwarded.to_json())
            )
            result = await asyncio.wait_for(future, timeout)
        except TimeoutError:
            return None
        finally:
            self._pending.pop(query_id, None)
        return replace(result, query_id=query.query_id)

    async def _start(self) -> None:
        async with self._starting:
            if self._consumer is not None:
                return
            settings = self.fiba.settings
            consumer = AIOKafkaConsumer(
                **client_options(settings),
                enable_auto_commit=False,
                auto_offset_reset="latest",
                fetch_max_wait_ms=query_fetch_wait_ms(settings),
                isolation_level=settings.outputs_isolation_level,
            )
            await consumer.start()
            consumer.assign(
                [TopicPartition(settings.answers_topic, p) for p in range(settings.partitions)]
            )
            self._consumer = consumer
            self._reader = watched(self._read(consumer), "fiba-answers-reader", self.on_failure)

    async def _read(self, consumer: AIOKafkaConsumer) -> None:
        while True:
            batches = await fetch(consumer, "answers", timeout_ms=500) or {}
            for records in batches.values():
                for record in records:
                    if not self._pending:
                        break
                    try:
                        result = Answer.from_json(json.loads(record.value))
                    except (ValueError, KeyError, TypeError):
                        continue
                    future = self._pending.get(result.query_id)
                    if future is not None and not future.done():
                        future.set_result(result)

    async def stop(self) -> None:
        """Stop the answers consumer (if it was started); the producer is the service's."""
        if self._reader is not None:
            self._reader.cancel()
        if self._consumer is not None:
            await self._consumer.stop()


class QueryConsumer:
    """Reads the query partitions co-partitioned with the input partitions this worker owns.

    Faust's single consumer hands records to agents in fetch order, so a query record would wait
    behind every input record fetched before it (seconds under a backlog). This own aiokafka
    consumer is assigned, by hand, the query partitions matching the current Faust assignment
    (``follow``) and answers them at once. Its offsets are committed under the group
    ``<app_id>-queries`` (which no consumer ever joins), after the answers so far are flushed:
    a query whose answer may not have been produced is read again by the next owner
    (at-least-once answers). The periodic commit runs beside the reading loop (commits one at
    a time, in order), so queries are not held up by a flush and a commit round trip.

    Exactly-once (``service.transactions``): each query partition is claimed before it is read
    (fencing its previous owner, whose committed offsets are then final), and each fetched
    chunk of a partition is answered in one transaction of it: its answers, its bad-query dead
    letters and its offsets (``_answer_in_transaction``); nothing is committed otherwise.
    """

    def __init__(self, fiba: FaustWorker, service: QueryService) -> None:
        self.fiba = fiba
        self.service = service
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None
        self._handled: dict[TopicPartition, int] = {}
        self._owned: set[int] = set()
        self._committing = asyncio.Lock()
        self._periodic_commit: asyncio.Task[None] | None = None

    async def follow(self, partitions: set[int]) -> None:
        """Read the query partitions ``partitions`` (the owned input partitions) from their
        committed offsets; stop reading the others."""
        settings = self.fiba.settings
        if self._consumer is None:
            self._consumer = AIOKafkaConsumer(
                **client_options(settings),
                group_id=query_group(settings),
                enable_auto_commit=False,
                isolation_level=settings.isolation_level,
                auto_offset_reset="earliest",
                fetch_max_wait_ms=query_fetch_wait_ms(settings),
            )
            await self._consumer.start()
            # Assign only once the group's coordinator is known: aiokafka's coordination task
            # reads the assignment after looking the coordinator up, and an assignment replaced
            # during that lookup (revoke, then assign) killed the task for good.
            await self._consumer._coordinator.ensure_coordinator_known()
            self._task = watched(
                self._run(self._consumer), "fiba-query-consumer", self.service.on_failure
            )
        await self.commit()
        self._owned = set(partitions)
        if self.service.transactions is not None:
            for partition in sorted(partitions):
                await self.service.transactions.claim(partition)
        tps = [TopicPartition(settings.queries_topic, p) for p in sorted(partitions)]
        self._consumer.assign(tps)

    async def commit(self) -> None:
        """Commit the offsets after the queries answered so far (answers flushed first)."""
        async with self._committing:
            if self._consumer is None or not self._handled:
                return
            handled, self._handled = self._handled, {}
            await self.service.flush()
            assigned = self._consumer.assignment()
            offsets = {tp: offset for tp, offset in handled.items() if tp in assigned}
            if offsets:
                await self._consumer.commit(offsets)

    async def _commit_logged(self) -> None:
        try:
            await self.commit()
        except Exception:
            # not fatal: the uncommitted queries are answered again by the next reader
            logger.exception("committing the query offsets failed")

    async def _run(self, consumer: AIOKafkaConsumer) -> None:
        last_commit = asyncio.get_running_loop().time()
        while True:
            if not consumer.assignment():
                await asyncio.sleep(0.1)
                continue
            batches = await fetch(consumer, "queries", timeout_ms=100) or {}
            for tp, records in batches.items():
                if tp.partition not in self._owned or not records:
                    continue
                if self.service.transactions is not None:
                    await self._answer_in_transaction(tp, records)
                    continue
                for record in records:
                    await self.service.handle(record)
                    self._handled[tp] = record.offset + 1
            now = asyncio.get_running_loop().time()
            previous = self._periodic_commit
            if now - last_commit > QUERY_COMMIT_INTERVAL_S and (
                previous is None or previous.done()
            ):
                last_commit = now
                self._periodic_commit = asyncio.create_task(self._commit_logged())

    async def _answer_in_transaction(
        self, tp: TopicPartition, records: list[ConsumerRecord]
    ) -> None:
        """Answer ``records`` (of query partition ``tp``), then send the answers, the dead
        letters of bad queries among them and the offset after them in one transaction of the
        partition. The answers are made before it begins (a state restored meanwhile sends
        its own transaction). A partition no longer claimed (revoked meanwhile) is skipped:
        its next owner answers these queries."""
        service = self.service
        assert service.transactions is not None
        answers: list[tuple[bytes, bytes, int | None]] = []

        async def collect(key: bytes, value: bytes, timestamp: int | None) -> None:
            answers.append((key, value, timestamp))

        for record in records:
            await service.handle(record, collect)
        topic = self.fiba.settings.answers_topic
        try:
            async with service.transactions.transaction(tp.partition) as producer:
                for key, value, timestamp in answers:
                    await producer.send(
                        topic, value, key=key, timestamp_ms=kafka_timestamp(timestamp)
                    )
                await service.pipeline.dead_letters.outputs.send((tp.topic, tp.partition), producer)
                await producer.send_offsets_to_transaction(
                    {tp: records[-1].offset + 1}, query_group(self.fiba.settings)
                )
        except NotOwned:
            logger.info(
                "query partition %d no longer claimed: %d queries left to its owner",
                tp.partition,
                len(records),
            )

    async def stop(self) -> None:
        """Commit what was answered and stop the consumer."""
        if self._task is not None:
            self._task.cancel()
        if self._periodic_commit is not None:
            await self._periodic_commit
        if self._consumer is not None:
            await self.commit()
            await self._consumer.stop()


def install(fiba: FaustWorker, service: QueryService) -> None:
    """Register the query consumer (following the assignment) and the HTTP views. A failure of
    the consumer's task goes to ``service.on_failure``."""
    app = fiba.app

    consumer = QueryConsumer(fiba, service)

    @app.on_partitions_revoked.connect
    async def stop_reading_queries(sender: Any, revoked: set[TP], **kwargs: Any) -> None:
        await consumer.follow(set())

    @app.on_partitions_assigned.connect
    async def read_owned_queries(sender: Any, assigned: set[TP], **kwargs: Any) -> None:
        await consumer.follow(fiba.owned_partitions(assigned))

    @app.page(r"/windows/{key:[\s\S]+}")  # any key, "/" and line breaks included
    class WindowsView(View):
        async def get(self, request: Request, key: str) -> Response:
            try:
                query = query_from_params(key, request.query)
            except BadQuery as exc:
                return self.json(failed(query_id_param(request.query), key, str(exc)), status=400)
            service.pipeline.counts["http_queries"] += 1
            began = time.perf_counter()
            if service.owns(fiba.key_partition(key.encode())):
                result = await service.ask(query)
            else:
                service.pipeline.counts["http_forwarded"] += 1
                forwarded = await service.forward(query, FORWARD_TIMEOUT_S)
                if forwarded is None:
                    text = "the worker owning the key did not answer in time"
                    return self.json(failed(query.query_id, key, text), status=504)
                result = forwarded
            status = 400 if result.error else 200
            service.answered("http", began)
            return self.bytes(
                encode_json(result.to_json()), content_type="application/json", status=status
            )

    @app.on_before_shutdown.connect
    async def stop_query_clients(sender: Any, **kwargs: Any) -> None:
        await consumer.stop()
        await service.forwarder.stop()
        await service.producer.stop()

    @app.page("/stats")
    class StatsView(View):
        async def get(self, request: Request) -> Response:
            return self.json(service.pipeline.stats())
