"""The Faust app of a worker, built from ``Settings``, and the topics its agents use.

``create_app(settings)`` returns a ``FibaApp``: the ``faust.App`` plus its topics, with raw
bytes keys and values (the agents parse and validate input themselves, so no record can crash
a codec). Topics are never declared by Faust: ``app.topics`` creates them beforehand. The
``embedded`` broker profile shortens the session timeout (5 s) so that joins and takeovers take
seconds on the embedded broker; ``session_timeout`` sets it on either profile. Nothing else
depends on the profile. Configuration: docs/reference/configuration.md; how the worker uses
Faust: docs/design/delivery.md.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import faust
from aiokafka import AIOKafkaProducer
from faust.types import TP

from agents.batched_send import default_partition
from agents.connection import KafkaConnection
from app.settings import Settings

EMBEDDED_SESSION_TIMEOUT_MS = 5_000
PRODUCER_LINGER_S = 0.005
PRODUCER_MAX_BATCH_BYTES = 1 << 18


@dataclass(frozen=True, slots=True)
class FibaApp:
    """A worker's Faust app with its settings and Faust topics (raw bytes): the assignment
    topic (its agent makes Faust's assignor hand out the partitions, ``agents.input_reader``)
    and the input (which the worker reads with its own consumer, ``agents.input_reader``; the
    benchmarks' bare Faust agent consumes it). Aggregates and dead letters are produced as
    whole batches with ``app.producer``'s aiokafka producer (``kafka_producer``), answers by
    an own producer, and the query topic has its own consumer
    (``agents.queries.consumer.QueryConsumer``)."""

    settings: Settings
    app: faust.App
    input_topic: faust.TopicT
    assignment_topic: faust.TopicT

    def key_partition(self, key: bytes) -> int:
        """The input partition of a record with Kafka key ``key`` (Kafka's murmur2 default
        partitioner over ``partitions`` partitions, the same on every client)."""
        return default_partition(key, self.settings.partitions)

    def kafka_producer(self) -> AIOKafkaProducer:
        """The aiokafka producer under Faust's ``app.producer`` (the one the app starts and
        flushes), for sending whole record batches (``agents.batched_send``)."""
        return self.app.producer._ensure_producer()

    def owned_partitions(self, tps: Iterable[TP]) -> set[int]:
        """The input partitions that the Faust topic partitions ``tps`` (an assignment, or a
        part of one) make this worker own: the numbers of those of the assignment topic."""
        topic = self.settings.assignment_topic
        return {tp.partition for tp in tps if tp.topic == topic}


def faust_options(settings: Settings) -> dict[str, Any]:
    """The ``faust.App`` keyword arguments of ``settings`` (profile applied)."""
    connection = KafkaConnection.from_settings(settings)
    options: dict[str, Any] = {
        "broker": connection.faust_broker(),
        "web_host": settings.web_host,
        # Faust listens on web_bind (default 0.0.0.0, every interface), not on web_host
        "web_bind": settings.web_host,
        "web_port": settings.web_port,
        # Faust's default, f"http://{web_host}:{web_port}", is no URL for an IPv6 web_host
        "canonical_url": settings.web_url,
        "web_enabled": True,
        # in DescribeGroups answers: who a member is and where its /stats is (fiba status)
        "broker_client_id": settings.worker_client_id,
        "datadir": str(settings.state_dir / "faust"),
        "topic_partitions": settings.partitions,
        "topic_replication_factor": settings.replication_factor,
        "topic_allow_declare": False,
        "table_standby_replicas": settings.standby_replicas,
        "consumer_auto_offset_reset": "earliest",
        "processing_guarantee": "at_least_once",
        "store": "memory://",
        # Outputs and changelog records go as closed whole batches (agents.batched_send), which
        # never linger; the linger applies to anything sent record by record.
        "producer_linger": PRODUCER_LINGER_S,
        # acks=all (Faust's default, stated): an output or changelog record counts as
        # delivered once every in-sync replica has it (agents.windows.deliver_outputs).
        "producer_acks": -1,
        "producer_max_batch_size": PRODUCER_MAX_BATCH_BYTES,
        # Faust's consumer settings stay at Faust's defaults: in a worker it reads only the
        # (empty) assignment topic, and the benchmarks' bare Faust agent on the input
        # (bench/worker_pipeline.py) is the framework's floor as Faust ships it.
    }
    credentials = connection.faust_credentials()
    if credentials is not None:
        options["broker_credentials"] = credentials
    session_ms = settings.session_timeout
    if session_ms is None and settings.embedded:
        session_ms = EMBEDDED_SESSION_TIMEOUT_MS
    if session_ms is not None:
        options["broker_session_timeout"] = session_ms / 1000
        options["broker_heartbeat_interval"] = session_ms / 10_000
    return options


def measure_fetch_checks_from_assignment(app: faust.App) -> None:
    """Make Faust's livelock checks count from the latest assignment, not from the start.

    Faust logs ``Aiokafka has not sent fetch request for TP(...) since start`` for a partition
    whose aiokafka fetch state has no fetch yet, once ``stream_processing_timeout`` has passed
    since its consumer started. But aiokafka renews the fetch state of every partition at
    each rebalance, so the first check after any rebalance of a worker that has run that long
    finds every partition "never fetched": a false alarm for each (the assignment and leader
    topics included), however healthy the worker. Restarting the consumer thread's clock at
    each assignment keeps the check meaning what it says: no fetch for that long since the
    partition was (re)assigned. O(1) per rebalance.
    """

    @app.on_partitions_assigned.connect
    async def restart_fetch_clock(sender: Any, assigned: set[TP], **kwargs: Any) -> None:
        thread = getattr(app.consumer, "_thread", None)  # faust's AIOKafkaConsumerThread
        if thread is not None:
            thread.time_started = time.monotonic()


def create_app(settings: Settings) -> FibaApp:
    """A new Faust app for ``settings`` (agents are added by ``agents.*.install``); the state
    directory is created if missing (Faust's data dir lives inside it)."""
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    app = faust.App(settings.app_id, **faust_options(settings))
    measure_fetch_checks_from_assignment(app)

    def raw_topic(name: str) -> faust.TopicT:
        return app.topic(
            name,
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
            partitions=settings.partitions,
        )

    return FibaApp(
        settings=settings,
        app=app,
        input_topic=raw_topic(settings.input_topic),
        assignment_topic=raw_topic(settings.assignment_topic),
    )
