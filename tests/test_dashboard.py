"""The Grafana dashboard (``docs/grafana-dashboard.json``) names only metrics a real worker's
``GET /metrics`` exports, and has the panels operators asked for. The worker runs
``emit=batch`` (tests/test_worker_health.py: ``event``), on Apache Kafka exactly-once, and its
event-to-aggregate latency histogram counts every aggregate record it wrote (acknowledged, or
under exactly-once committed)."""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from prometheus_client.parser import text_string_to_metric_families

from agents.clients import client_options
from app.demo import log_tail, start_worker, stop_worker
from app.topics import create_topics
from tests.test_crash_recovery import (
    caught_up,
    http_get,
    make_events,
    produce,
    wait_until,
    worker_settings,
)

DASHBOARD = Path(__file__).resolve().parent.parent / "docs" / "grafana-dashboard.json"
METRIC = re.compile(r"\bfiba_[a-z0-9_]+")
PANELS = {
    "Throughput",
    "Input lag per partition",
    "Dead letters by reason",
    "Restore time",
    "Query latency",
    "Event-loop lag",
    "Event-to-aggregate latency",
}
SERIES_SUFFIXES = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum"),
}
"""The series names a family of each type exposes in the text format."""


def dashboard_metrics() -> set[str]:
    """Every metric name in the dashboard's queries (panels and template variables)."""
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    return {name for expr in exprs for name in METRIC.findall(expr)}


def test_the_dashboard_has_the_panels_operators_need() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert {panel["title"] for panel in dashboard["panels"]} >= PANELS
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        assert all(METRIC.search(t["expr"]) for t in panel["targets"]), panel["title"]
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


def exported_series(body: str) -> set[str]:
    """The series names of a /metrics body, also for families without a sample yet."""
    names = set()
    for family in text_string_to_metric_families(body):
        names.update(sample.name for sample in family.samples)
        names.update(family.name + s for s in SERIES_SUFFIXES.get(family.type, ("",)))
    return names


@pytest.mark.kafka
@pytest.mark.timeout(180)
def test_every_metric_of_the_dashboard_is_exported_by_a_real_worker(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path
) -> None:
    settings = worker_settings(kafka_bootstrap, embedded_profile, tmp_path / "w", partitions=2)
    guarantee = "at_least_once" if embedded_profile else "exactly_once"  # Tansu has none
    settings = replace(settings, emit="batch", processing_guarantee=guarantee)
    asyncio.run(create_topics(settings))
    produced_from = time.time()
    last = asyncio.run(produce(settings, make_events(50, seed=1)))
    log = tmp_path / "worker.log"
    worker = start_worker(settings, log)
    try:
        wait_until(lambda: caught_up(settings, [worker], [log], last), 90, "caught up")
        asyncio.run(send_malformed(settings))
        wait_until(
            lambda: http_get(settings, "/stats")["dead_letters"].get("malformed_json") == 1,
            30,
            "the malformed record is dead-lettered",
        )
        http_get(settings, "/windows/key-1?from=0&to=1")  # one query: latency observed
        wait_until(
            lambda: every_aggregate_timed(scrape(settings)),
            30,
            "every aggregate record's latency observed",
        )
        body = scrape(settings)
    except BaseException:
        print(log_tail(log))
        raise
    finally:
        stop_worker(worker)
    missing = dashboard_metrics() - exported_series(body)
    assert not missing, f"the dashboard names metrics no worker exports: {sorted(missing)}"
    # the labels the panels group by are on real samples
    samples = {
        (sample.name, tuple(sorted(sample.labels.items())))
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }
    assert ("fiba_events_rejected_total", (("reason", "malformed_json"),)) in samples
    assert ("fiba_query_seconds_count", (("via", "http"),)) in samples
    for partition in ("0", "1"):
        assert ("fiba_input_lag_records", (("partition", partition),)) in samples
        assert ("fiba_restore_seconds", (("partition", partition),)) in samples
    # emit=batch: one aggregate record per key and batch, each timed from its input record's
    # CreateTime (this process's clock) to its acknowledgement
    values = {name: value for name, labels, value in sample_list(body)}
    assert 0 < values["fiba_aggregate_latency_seconds_count"] <= 50
    since_produced = time.time() - produced_from + 0.001
    assert (
        0
        < values["fiba_aggregate_latency_seconds_sum"]
        <= (values["fiba_aggregate_latency_seconds_count"] * since_produced)
    )
    assert ("fiba_aggregate_latency_seconds_count", (("emit", "batch"),)) in samples


def scrape(settings) -> str:
    url = f"http://127.0.0.1:{settings.web_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


def sample_list(body: str) -> list[tuple[str, dict[str, str], float]]:
    return [
        (sample.name, sample.labels, sample.value)
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    ]


def every_aggregate_timed(body: str) -> bool:
    """The latency histogram counts as many records as the worker wrote to the aggregates
    topic (they are acknowledged), and some."""
    values = {(name, labels.get("topic")): value for name, labels, value in sample_list(body)}
    written = values[("fiba_output_records_total", "aggregates")]
    return written > 0 and values[("fiba_aggregate_latency_seconds_count", None)] == written


async def send_malformed(settings) -> None:
    producer = AIOKafkaProducer(**client_options(settings))
    await producer.start()
    try:
        await producer.send_and_wait(settings.input_topic, b"{not json", key=b"key-1")
    finally:
        await producer.stop()
