"""Range queries -> answers, over the query topic and over HTTP.

A query (``agents.records.RangeQuery``) asks for the aggregates of one key's retained events
with ``from <= t <= to`` (both inclusive; with panes, times are pane starts), or for one
configured ``window`` at the partition's stream time, optionally restricted to some
``aggregations``. It is answered from the same per-key FiBA as the windows (a range query,
O(log n)). An unknown key answers count 0 with the aggregates of the empty window; an invalid
query (from > to, unknown window or aggregation, missing bounds) answers with ``error`` set,
never crashes.

Query topic: co-partitioned with the input, keyed by the aggregation key, so the record reaches
the worker owning that key's input partition; the answer goes to the answers topic (same key).
A query record that is not a JSON object with a ``query_id`` and a ``key`` cannot be answered:
it becomes a dead letter (``bad_query``). A query whose Kafka key is not its ``key`` would be
answered by the wrong partition, so it gets an error answer.

HTTP (Faust web views on the worker's ``web_port``):

- ``GET /windows/{key}?from=&to=`` or ``?window=5m``, optional ``&aggregations=sum,max``:
  the ``Answer`` JSON (status 200, or 400 with ``error`` set). A worker that does not own the
  key's partition redirects (307) to the one that does, found in the group assignment.
- ``GET /stats``: the pipeline's counters (``WindowsPipeline.stats``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import faust
from faust.types import TP, Message
from faust.web import Request, Response, View
from yarl import URL

from agents.events import BadEvent, parse_event_time
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
)
from agents.windows import WindowsPipeline, encode_json
from app.faust_app import FibaApp
from stores.key_windows import KeyWindows

logger = logging.getLogger(__name__)


class BadQuery(Exception):
    """A query that cannot be answered; ``str(exc)`` is the error text of the answer."""


def _time_bound(raw: Any, name: str) -> int | None:
    if raw is None:
        return None
    try:
        return parse_event_time(raw)
    except BadEvent as exc:
        raise BadQuery(f"{name}: {exc.detail}") from None


def query_from_json(obj: Mapping[str, Any]) -> RangeQuery:
    """The ``RangeQuery`` of a decoded query object; ``BadQuery`` if it has no id or key or
    its fields have the wrong types (the semantic checks are ``answer``'s)."""
    query_id, key = obj.get(QUERY_ID), obj.get(KEY)
    if not isinstance(query_id, str | int) or isinstance(query_id, bool):
        raise BadQuery("query_id missing or not a string")
    if not isinstance(key, str):
        raise BadQuery("key missing or not a string")
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
        query_id=str(query_id),
        key=key,
        from_ts=_time_bound(obj.get(FROM), "from"),
        to_ts=_time_bound(obj.get(TO), "to"),
        window=window,
        aggregations=aggregations,
    )


def answer(windows: KeyWindows | None, query: RangeQuery) -> Answer:
    """The answer to ``query`` from one partition's windows (``None``: nothing loaded)."""
    stream_time = windows.stream_time if windows is not None else None

    def error(text: str) -> Answer:
        return Answer(
            query.query_id, query.key, query.from_ts, query.to_ts, {}, 0, stream_time, text
        )

    config = windows.config if windows is not None else None
    if config is None:
        return error("this worker holds no state for the key's partition")
    wanted = query.aggregations or config.aggregations
    unknown = [a for a in wanted if a not in config.aggregations]
    if unknown:
        return error(
            f"unknown aggregation(s) {', '.join(unknown)}; "
            f"configured: {', '.join(config.aggregations)}"
        )
    t_from, t_to = query.from_ts, query.to_ts
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

    def __init__(self, fiba: FibaApp, pipeline: WindowsPipeline) -> None:
        self.fiba = fiba
        self.pipeline = pipeline

    def owns(self, partition: int) -> bool:
        """True when the input partition is assigned to this worker right now."""
        tp = TP(self.fiba.settings.input_topic, partition)
        return tp in self.fiba.app.consumer.assignment()

    async def ask(self, query: RangeQuery) -> Answer:
        """Answer ``query`` from the state of the key's partition (restored if needed)."""
        partition = self.fiba.key_partition(query.key.encode())
        state = await self.pipeline.state(partition)
        return answer(state.windows, query)

    async def handle(self, message: Message) -> None:
        """One query record -> one answer record (or a dead letter if it has no id/key)."""
        self.pipeline.counts["queries"] += 1
        try:
            obj = json.loads(message.value or b"")
            if not isinstance(obj, dict):
                raise BadQuery("not a JSON object")
            query = query_from_json(obj)
        except (BadQuery, UnicodeDecodeError, json.JSONDecodeError) as exc:
            await self.pipeline.dead_letters.send(
                REASON_BAD_QUERY,
                str(exc),
                message.topic,
                message.partition,
                message.offset,
                message.key,
                message.value,
            )
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
        await self.fiba.answers_topic.send(
            key=query.key.encode(), value=encode_json(result.to_json())
        )

    def owner_url(self, partition: int) -> URL | None:
        """Web URL of the worker owning input ``partition`` per the group assignment."""
        topic = self.fiba.settings.input_topic
        distribution = self.fiba.app.assignor.external_topics_metadata()
        for url, topics in distribution.items():
            if partition in topics.get(topic, ()):
                return URL(url)
        return None


def install(fiba: FibaApp, service: QueryService) -> None:
    """Register the query agent and the HTTP views on ``fiba.app``."""
    app = fiba.app

    async def queries_agent(stream: faust.StreamT) -> None:
        async for event in stream.events():
            await service.handle(event.message)

    app.agent(fiba.queries_topic, name="fiba-queries")(queries_agent)

    @app.page("/windows/{key}")
    class WindowsView(View):
        async def get(self, request: Request, key: str) -> Response:
            partition = fiba.key_partition(key.encode())
            if not service.owns(partition):
                owner = service.owner_url(partition)
                if owner is None or owner == URL(str(app.conf.canonical_url)):
                    return self.json(
                        {"error": "the key's partition has no owner right now"}, status=503
                    )
                target = str(request.url.with_host(owner.host or "").with_port(owner.port))
                return self.json({"redirect": target}, status=307, headers={"Location": target})
            params = request.query
            try:
                query = query_from_json(
                    {
                        QUERY_ID: params.get("query_id", "http"),
                        KEY: key,
                        FROM: params.get("from"),
                        TO: params.get("to"),
                        WINDOW: params.get("window"),
                        AGGREGATIONS: params.get("aggregations"),
                    }
                )
            except BadQuery as exc:
                return self.json({"error": str(exc)}, status=400)
            service.pipeline.counts["http_queries"] += 1
            result = await service.ask(query)
            status = 400 if result.error else 200
            return self.bytes(
                encode_json(result.to_json()), content_type="application/json", status=status
            )

    @app.page("/stats")
    class StatsView(View):
        async def get(self, request: Request) -> Response:
            return self.json(service.pipeline.stats())
