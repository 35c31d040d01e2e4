"""The query paths in a Faust worker: ``install`` registers them on the app.

The query consumer follows the worker's assignment; ``GET /windows/{key}?from=&to=`` (or
``?window=``) is answered here when this worker owns the key, else forwarded to its owner
(504 after ``FORWARD_TIMEOUT_S``); ``GET /stats`` gives the pipeline's counters; the query
clients stop before the app shuts down. Reference: docs/reference/http.md.
"""

from __future__ import annotations

import time
from typing import Any

from faust.types import TP
from faust.web import Request, Response, View

from agents.config import FaustWorker
from agents.queries.consumer import QueryConsumer
from agents.queries.parsing import BadQuery, failed, query_from_params, query_id_param
from agents.queries.service import QueryService
from agents.records import encode_json

FORWARD_TIMEOUT_S = 5.0


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
