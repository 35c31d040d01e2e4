"""A worker's health and metrics over HTTP: ``GET /live``, ``GET /ready``, ``GET /metrics``.

- ``/live``: 200 while the worker runs (its event loop answers and no task failed); 503 with
  the failure otherwise (the worker is exiting).
- ``/ready``: 200 only when the broker answers, a partition assignment arrived, no rebalance
  is in progress and every owned partition is restored and being read; 503 with ``{"ready":
  false, "reason": ...}`` otherwise. A worker owning no partition (more workers than
  partitions) is ready. "The broker answers" is asked of the broker itself
  (``BrokerProbe``: a metadata request for every topic, at most one per
  ``BROKER_PROBE_TTL_S``), not inferred from the group: a worker whose broker went away kept
  its assignment, and so its 200, until the group's session expired.
- ``/metrics``: the Prometheus text format (``prometheus_client``, one registry per worker).
  Counters and gauges are read from the worker's state when scraped (``StateCollector``, no
  cost on the record path), and so is the event-to-aggregate latency histogram (counted in
  bulk by ``agents.emit_latency``); query latency and event-loop lag are histograms observed
  as they happen.

Event-loop lag: a task sleeps ``LOOP_PROBE_S`` and observes how much later than asked it
woke up (the time the loop was held by other work).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError
from faust.web import Request, Response, View
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from agents.clients import client_options
from agents.emit_latency import EmitLatency
from agents.input_reader import InputReader
from agents.records import REASON_BAD_QUERY
from agents.retention_watch import RetentionCheck
from agents.windows import WindowsPipeline
from app.faust_app import FibaApp
from app.settings import SETTINGS_HELP, Settings, setting_text


class Worker(Protocol):
    """The parts of a wired worker (``app.worker.Worker``) its health and metrics read."""

    fiba: FibaApp
    pipeline: WindowsPipeline
    reader: InputReader

    @property
    def retention_checks(self) -> Sequence[RetentionCheck]: ...


logger = logging.getLogger(__name__)

LOOP_PROBE_S = 0.25
"""Period of the event-loop lag probe."""

BROKER_PROBE_TTL_S = 1.0
"""How long a broker probe's verdict is reused by ``/ready`` (probes of frequent scrapes)."""
BROKER_PROBE_TIMEOUT_S = 3.0
"""How long the broker has to answer a probe (a broker that hangs is as down as one that is
gone)."""

QUERY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
LOOP_LAG_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)


class StateCollector(Collector):
    """Metrics read from a worker's live state at each scrape: O(partitions + keys) (the
    window entries are summed per key)."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    def collect(self) -> Iterator[Metric]:
        pipeline, reader = self.worker.pipeline, self.worker.reader
        counts, dead = pipeline.counts, pipeline.dead_letters.counts
        accepted = CounterMetricFamily("fiba_events_accepted", "Input events applied to windows")
        accepted.add_metric([], counts.get("accepted", 0))
        yield accepted
        rejected = CounterMetricFamily(
            "fiba_events_rejected", "Input events sent to the dead letters", labels=["reason"]
        )
        for reason, n in sorted(dead.items()):
            if reason != REASON_BAD_QUERY:
                rejected.add_metric([reason], n)
        yield rejected
        bad_queries = CounterMetricFamily("fiba_queries_rejected", "Query records dead-lettered")
        bad_queries.add_metric([], dead.get(REASON_BAD_QUERY, 0))
        yield bad_queries
        outputs = CounterMetricFamily(
            "fiba_output_records", "Records written to an output topic", labels=["topic"]
        )
        outputs.add_metric(["aggregates"], counts.get("aggregates", 0))
        outputs.add_metric(["answers"], counts.get("answers", 0))
        yield outputs
        yield aggregate_latency(pipeline.latency, self.worker.fiba.settings.emit)
        lag = GaugeMetricFamily(
            "fiba_input_lag_records",
            "Input records after the applied offset (log end offset - applied - 1)",
            labels=["partition"],
        )
        for partition, records in reader.input_lag().items():
            lag.add_metric([str(partition)], records)
        yield lag
        owned = GaugeMetricFamily("fiba_partitions_owned", "Input partitions owned")
        owned.add_metric([], len(reader.owned))
        yield owned
        restored = GaugeMetricFamily(
            "fiba_partitions_restored", "Owned input partitions restored and being read"
        )
        restored.add_metric([], len(reader.reading & reader.owned))
        yield restored
        restoring = GaugeMetricFamily(
            "fiba_restore_running_seconds",
            "Time spent so far by each restore in flight",
            labels=["partition"],
        )
        now = time.monotonic()
        for partition, began in sorted(reader.restore_began.items()):
            restoring.add_metric([str(partition)], now - began)
        yield restoring
        restore_time = GaugeMetricFamily(
            "fiba_restore_seconds", "Duration of the latest restore", labels=["partition"]
        )
        for partition, seconds in sorted(reader.restore_seconds.items()):
            restore_time.add_metric([str(partition)], seconds)
        yield restore_time
        keys = GaugeMetricFamily("fiba_window_keys", "Keys retained", labels=["partition"])
        entries = GaugeMetricFamily(
            "fiba_window_entries", "Window entries retained", labels=["partition"]
        )
        for partition, windows in pipeline.loaded_windows().items():
            keys.add_metric([str(partition)], len(windows))
            entries.add_metric([str(partition)], windows.entry_count())
        yield keys
        yield entries
        older = GaugeMetricFamily(
            "fiba_output_older_than_retention",
            "1 once a record written to the output topic was older than the topic's "
            "retention.ms (Kafka deletes it at its next retention check; see the log)",
            labels=["topic"],
        )
        for check in self.worker.retention_checks:
            older.add_metric([check.name], int(check.exceeded_at is not None))
        yield older


def aggregate_latency(latency: EmitLatency, emit: str) -> HistogramMetricFamily:
    """``fiba_aggregate_latency_seconds{emit}``: the event-to-aggregate latency of every
    aggregate record acknowledged (``agents.emit_latency``); its count is the number of
    aggregate records acknowledged (committed, under exactly-once)."""
    family = HistogramMetricFamily(
        "fiba_aggregate_latency_seconds",
        "From the Kafka timestamp of the input record an aggregate record answers until the "
        "aggregate record is acknowledged (exactly-once: committed)",
        labels=["emit"],
    )
    family.add_metric([emit], latency.cumulative(), latency.sum_s)
    return family


class BrokerProbe:
    """Whether the broker answers now: a metadata request for every topic (never one naming a
    topic, which some brokers would answer by creating it) on a client of its own, within
    ``BROKER_PROBE_TIMEOUT_S``. A verdict is reused for ``BROKER_PROBE_TTL_S``, so the broker
    sees at most one probe per second however often ``/ready`` is asked. O(topics) per probe.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._client: AIOKafkaClient | None = None
        self._verdict: str | None = None
        self._probed_at = -math.inf
        self._lock = asyncio.Lock()

    async def problem(self) -> str | None:
        """Why the broker does not serve this worker now, or None when it answered."""
        async with self._lock:
            if time.monotonic() - self._probed_at >= BROKER_PROBE_TTL_S:
                self._verdict = await self._probe()
                self._probed_at = time.monotonic()
            return self._verdict

    async def _probe(self) -> str | None:
        servers = ",".join(self.settings.bootstrap_servers)
        try:
            async with asyncio.timeout(BROKER_PROBE_TIMEOUT_S):
                if self._client is None:
                    client = AIOKafkaClient(**client_options(self.settings))
                    await client.bootstrap()
                    self._client = client
                await self._client.fetch_all_metadata()
        except TimeoutError:
            return f"the broker ({servers}) did not answer within {BROKER_PROBE_TIMEOUT_S:g} s"
        except (KafkaError, OSError) as exc:
            return f"the broker ({servers}) does not answer: {exc}"
        return None

    async def close(self) -> None:
        """Close the probe's client (if one was started)."""
        client, self._client = self._client, None
        if client is not None:
            await client.close()


class WorkerHealth:
    """The metrics registry of one worker and its readiness/liveness judgements."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.broker = BrokerProbe(worker.fiba.settings)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(StateCollector(worker))
        self.query_seconds = Histogram(
            "fiba_query_seconds",
            "Time to answer a range query (its count is the number of queries answered)",
            ["via"],
            buckets=QUERY_BUCKETS_S,
            registry=self.registry,
        )
        self.loop_lag = Histogram(
            "fiba_event_loop_lag_seconds",
            "How late the event loop ran a task that asked to run now",
            buckets=LOOP_LAG_BUCKETS_S,
            registry=self.registry,
        )

    def observe_query(self, via: str, seconds: float) -> None:
        """Record one answered query (``agents.queries.service.QueryService.on_answered``)."""
        self.query_seconds.labels(via).observe(seconds)

    def not_live(self) -> str | None:
        """Why the worker is not live (a task failed), or None."""
        failure = self.worker.pipeline.failure
        return None if failure is None else f"a worker task failed: {type(failure).__name__}"

    async def not_ready(self) -> str | None:
        """Why the worker does not serve every owned partition now, or None."""
        if (reason := self.not_live()) is not None:
            return reason
        if (reason := await self.broker.problem()) is not None:
            return reason
        if self.worker.fiba.app.rebalancing:
            return "a rebalance is in progress"
        return self.worker.reader.not_ready()

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format."""
        return generate_latest(self.registry)

    async def probe_loop_lag(self) -> None:
        """Forever: sleep ``LOOP_PROBE_S``, observe how late the wake-up came."""
        while True:
            asked = time.perf_counter()
            await asyncio.sleep(LOOP_PROBE_S)
            self.loop_lag.observe(max(0.0, time.perf_counter() - asked - LOOP_PROBE_S))


def effective_settings_line(worker: Worker) -> str:
    """The settings of ``worker`` as one log line, ``name=value`` each, secrets masked."""
    settings = worker.fiba.settings
    return " ".join(
        f"{name}={setting_text(name, getattr(settings, name))}" for name in SETTINGS_HELP
    )


def install(worker: Worker, health: WorkerHealth) -> None:
    """Register the three views and the loop-lag probe on the worker's Faust app, and log the
    effective settings and the HTTP address when the app starts."""
    app = worker.fiba.app
    settings = worker.fiba.settings

    @app.task
    async def announce_and_probe() -> None:
        logger.info("effective settings: %s", effective_settings_line(worker))
        logger.info("HTTP on %s", settings.web_url)
        await health.probe_loop_lag()

    @app.page("/live")
    class LiveView(View):
        async def get(self, request: Request) -> Response:
            return verdict(self, "live", health.not_live())

    @app.page("/ready")
    class ReadyView(View):
        async def get(self, request: Request) -> Response:
            return verdict(self, "ready", await health.not_ready())

    @app.on_before_shutdown.connect
    async def close_broker_probe(sender: Any, **kwargs: Any) -> None:
        await health.broker.close()

    @app.page("/metrics")
    class MetricsView(View):
        async def get(self, request: Request) -> Response:
            return self.bytes(health.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST})


def verdict(view: View, what: str, reason: str | None) -> Response:
    """``{what: true}`` with 200, or ``{what: false, "reason": reason}`` with 503."""
    body: dict[str, Any] = {what: reason is None}
    if reason is not None:
        body["reason"] = reason
    return view.json(body, status=200 if reason is None else 503)
