"""The query service: one query -> one answer, from the state of the key's partition.

``answer`` computes it from a partition's ``KeyWindows`` (an unknown key answers count 0, an
invalid query answers with ``error`` set); ``QueryService.handle`` answers a query record with
the record's Kafka timestamp, and turns a record that is no query into a ``bad_query`` dead
letter plus an error answer when it carries a usable ``query_id`` (every id is answered exactly
once). It also answers HTTP queries (``ask``) and forwards those about keys another worker owns
(``forward``). Reference: docs/reference/http.md.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from aiokafka import ConsumerRecord
from faust.types import TP

from agents.batched_send import kafka_timestamp
from agents.config import FaustWorker
from agents.queries.forwarding import AnswerForwarder
from agents.queries.latency import LatencyProducer
from agents.queries.parsing import BadQuery, failed, parse_query
from agents.records import REASON_BAD_QUERY, Answer, RangeQuery, encode_json
from agents.retention_watch import RetentionCheck
from agents.supervision import OnFailure
from agents.transactions import Transactions
from agents.windows import WindowsPipeline
from stores.key_windows import KeyWindows

OnAnswered = Callable[[str, float], None]
"""Told how a query came ("topic" or "http") and how many seconds answering it took."""

SendAnswer = Callable[[bytes, bytes, int | None], Awaitable[None]]
"""Sends one answer: key, value, Kafka timestamp (ms, or None)."""


def _text_of(key: bytes | None) -> str:
    """A record's Kafka key as the text of an answer's ``key`` (invalid UTF-8 replaced; no
    key: ``""``)."""
    return "" if key is None else key.decode("utf-8", "replace")


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
