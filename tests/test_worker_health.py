"""A real worker's health and metrics endpoints, its HTTP bind address and its start-up log.

One ``tests.impatient_worker`` subprocess (Faust's livelock checks every few seconds) on the
session broker: ``/ready`` answers 503 with a reason until its partitions are restored and
read, then 200; ``/metrics`` (Prometheus text) counts what the worker did; the HTTP server
listens on ``web_host`` only (not on the machine's other address); the log shows the
effective settings (secrets masked) and the HTTP address, and no Faust false alarm.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
import urllib.error
import urllib.request
from dataclasses import replace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.brokers.kinds import make_broker, options_keeping_old_records
from app.brokers.process import free_port
from app.demo import start_worker, stop_worker
from app.health import BROKER_PROBE_TTL_S
from app.topics import create_topics
from tests.conftest import broker_kinds_under_test
from tests.impatient_worker import STREAM_PROCESSING_TIMEOUT_S
from tests.test_crash_recovery import worker_settings
from tests.test_worker_e2e import BASE, make_settings, produce

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

FAUST_FALSE_ALARM = "has not sent fetch request"


def get(port: int, path: str, host: str = "127.0.0.1") -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def other_address() -> str | None:
    """This machine's primary non-loopback IPv4 address (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
            address = probe.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") else address


def metrics(port: int) -> dict[tuple[str, tuple], float]:
    status, body = get(port, "/metrics")
    assert status == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
    }


REJECTIONS = ("malformed_json", "bad_value")
"""The reasons of the two bad records the health test sends."""


def test_health_metrics_bind_and_startup_log(kafka_bootstrap, embedded_profile, tmp_path):
    settings = make_settings(kafka_bootstrap, embedded_profile, tmp_path / "state", "event")
    settings = replace(settings, sasl_password="hunter2", web_port=free_port())
    asyncio.run(create_topics(settings))
    log = tmp_path / "worker.log"
    worker = start_worker(settings, log, module=("tests.impatient_worker",))
    port = settings.web_port
    try:
        not_ready, deadline = [], time.monotonic() + 90
        while True:
            assert worker.poll() is None, "the worker exited"
            assert time.monotonic() < deadline, ("never ready", not_ready[-3:])
            try:
                status, body = get(port, "/ready")
            except OSError:
                time.sleep(0.2)
                continue
            if status == 200:
                assert json.loads(body) == {"ready": True}
                ready_at = time.monotonic()
                break
            assert status == 503
            not_ready.append(json.loads(body)["reason"])
            time.sleep(0.2)
        assert not_ready, "the worker was ready before it had its partitions"
        assert get(port, "/live") == (200, b'{"live":true}')

        records = [
            (f"k{i % 4}".encode(), json.dumps({"ts": BASE + i, "value": i}).encode(), None)
            for i in range(40)
        ]
        records += [(b"k0", b"{oops", None), (b"k1", b'{"ts": 1, "value": "x"}', None)]
        produced_from = time.time()
        asyncio.run(produce(settings, settings.input_topic, records))
        status, _ = get(port, f"/windows/k1?from={BASE}&to={BASE + 100}")
        assert status == 200
        deadline = time.monotonic() + 60
        rejected = [("fiba_events_rejected_total", (("reason", r),)) for r in REJECTIONS]
        latency = "fiba_aggregate_latency_seconds"
        emit = (("emit", "event"),)
        # every input record counted: the 40 accepted and both dead letters (the bad records
        # are the last of their partition, so they may be applied in a later chunk), and the
        # latency of every aggregate record once it is acknowledged
        while (
            (m := metrics(port)).get(("fiba_events_accepted_total", ())) != 40
            or any(name not in m for name in rejected)
            or m.get((f"{latency}_count", emit)) != 40
        ):
            assert time.monotonic() < deadline, m
            time.sleep(0.5)
        # each latency ran from its input's CreateTime (this process's clock, whole ms) to
        # the acknowledgement, within the time since the records were produced
        since_produced = time.time() - produced_from + 0.001
        assert 0 < m[(f"{latency}_sum", emit)] <= 40 * since_produced
        partitions = [str(p) for p in range(settings.partitions)]
        assert m[("fiba_events_rejected_total", (("reason", "malformed_json"),))] == 1
        assert m[("fiba_events_rejected_total", (("reason", "bad_value"),))] == 1
        assert m[("fiba_output_records_total", (("topic", "aggregates"),))] == 40
        # the aggregates carry their 2023 event times, older than the topic's 7 days; the dead
        # letters the bad records' Kafka timestamps (the producer's clock), and no answer went
        # to the topic: said for the aggregates only, once
        older = "fiba_output_older_than_retention"
        assert m[(older, (("topic", "aggregates"),))] == 1
        assert m[(older, (("topic", "dead_letters"),))] == 0
        assert m[(older, (("topic", "answers"),))] == 0
        said = "are older than its retention.ms"
        assert log.read_text(errors="replace").count(said) == 1
        assert f"records written to topic {settings.aggregates_topic} {said}" in log.read_text()
        assert m[("fiba_partitions_owned", ())] == m[("fiba_partitions_restored", ())] == 3
        keys = sum(m[("fiba_window_keys", (("partition", p),))] for p in partitions)
        entries = sum(m[("fiba_window_entries", (("partition", p),))] for p in partitions)
        assert (keys, entries) == (4, 40)
        for p in partitions:
            assert m[("fiba_restore_seconds", (("partition", p),))] >= 0
        deadline = time.monotonic() + 30  # the lag needs a fetch after the last record
        while any(m.get(("fiba_input_lag_records", (("partition", p),))) != 0 for p in partitions):
            assert time.monotonic() < deadline, m
            time.sleep(0.5)
            m = metrics(port)
        assert m[("fiba_query_seconds_count", (("via", "http"),))] == 1
        deadline = time.monotonic() + 30  # the probe observes every 0.25 s once the app runs
        while not m.get(("fiba_event_loop_lag_seconds_count", ())):
            assert time.monotonic() < deadline, m
            time.sleep(0.5)
            m = metrics(port)

        address = other_address()
        if address is None:
            pytest.skip("this machine has no non-loopback IPv4 address to test the bind on")
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((address, port), timeout=5).close()

        # Faust's livelock checks ran meanwhile, for three of their periods since the worker
        # was ready (its partitions assigned and read)
        time.sleep(max(0.0, ready_at + 3 * STREAM_PROCESSING_TIMEOUT_S - time.monotonic()))
        text = log.read_text(errors="replace")
        assert FAUST_FALSE_ALARM not in text
        assert f"HTTP on http://127.0.0.1:{port}" in text
        assert "effective settings: broker=" in text
        assert "sasl_password=****" in text and "hunter2" not in text
    except BaseException:
        print(log.read_text(errors="replace")[-5000:])
        raise
    finally:
        stop_worker(worker)


def wait_ready(port: int, worker, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while True:
        assert worker.poll() is None, "the worker exited"
        assert time.monotonic() < deadline, "the worker never became ready"
        try:
            if get(port, "/ready")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)


def test_no_faust_false_alarm_after_a_rebalance(kafka_bootstrap, embedded_profile, tmp_path):
    """A second worker joins once the first has run longer than Faust's check period: the
    rebalance renews aiokafka's fetch states, which Faust's check used to take for partitions
    never fetched since the start."""
    first = make_settings(kafka_bootstrap, embedded_profile, tmp_path / "a", "event")
    second = replace(first, state_dir=tmp_path / "b", web_port=free_port())
    asyncio.run(create_topics(first))
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    workers = [start_worker(first, logs[0], module=("tests.impatient_worker",))]
    try:
        wait_ready(first.web_port, workers[0])
        time.sleep(1.25 * STREAM_PROCESSING_TIMEOUT_S)  # the first has run longer than a period
        workers.append(start_worker(second, logs[1], module=("tests.impatient_worker",)))
        deadline = time.monotonic() + 90
        while True:  # both ready with the partitions split
            assert time.monotonic() < deadline, "the workers never shared the partitions"
            owned = []
            for settings, worker in zip((first, second), workers, strict=True):
                wait_ready(settings.web_port, worker)
                owned.append(set(json.loads(get(settings.web_port, "/stats")[1])["assigned"]))
            if all(owned) and not owned[0] & owned[1]:
                break
            time.sleep(0.5)
        # Faust's checks (every 0.25 s) ran meanwhile; with the old clock the first check
        # after the rebalance already alarms
        time.sleep(STREAM_PROCESSING_TIMEOUT_S)
        for log in logs:
            assert FAUST_FALSE_ALARM not in log.read_text(errors="replace"), log.name
    except BaseException:
        for log in logs:
            if log.exists():
                print(log.read_text(errors="replace")[-4000:])
        raise
    finally:
        for worker in workers:
            stop_worker(worker)


def ipv6_loopback() -> bool:
    """True when this machine can listen on ``::1``."""
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


def test_a_worker_on_an_ipv6_web_host(kafka_bootstrap, embedded_profile, tmp_path):
    """``web_host = "::1"``: the worker starts (Faust's URL of it has the address in brackets),
    listens there, logs ``HTTP on http://[::1]:PORT`` and ``fiba query --http`` asks it."""
    if not ipv6_loopback():
        pytest.skip("no IPv6 loopback here")
    from agents.records import RangeQuery
    from app.worker_http import http_ask

    settings = make_settings(kafka_bootstrap, embedded_profile, tmp_path / "state", "event")
    settings = replace(settings, web_host="::1", web_port=free_port())
    asyncio.run(create_topics(settings))
    log = tmp_path / "worker.log"
    worker = start_worker(settings, log)
    port = settings.web_port
    try:
        deadline = time.monotonic() + 90
        while True:
            assert worker.poll() is None, "the worker exited"
            assert time.monotonic() < deadline, "the worker never became ready"
            try:
                if get(port, "/ready", host="[::1]")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        query = RangeQuery("q", "k", BASE, BASE + 1, None, None)
        answer = http_ask(settings, query, 10)
        assert (answer["key"], answer["count"], answer["error"]) == ("k", 0, None)
        assert f"HTTP on http://[::1]:{port}" in log.read_text(errors="replace")
    except BaseException:
        print(log.read_text(errors="replace")[-5000:])
        raise
    finally:
        stop_worker(worker)


@pytest.mark.parametrize("kind", [k for k in broker_kinds_under_test() if k != "external"])
def test_ready_says_503_with_the_reason_while_the_broker_is_down(kind, tmp_path):
    """A broker of the test's own (an external cluster cannot be stopped) is stopped under a
    ready worker: the next answers of ``/ready`` are 503 naming the broker (they stayed 200
    until the group's session expired), and 200 again once the broker is back (Tansu comes
    back empty: its topics are created again, as after any restart of it)."""
    options = options_keeping_old_records(kind)
    if kind == "kafka":
        options["data_dir"] = tmp_path / "kafka"  # the restart finds its log again
    broker = make_broker(kind, port=free_port(), **options)
    broker.start()
    worker = None
    try:
        settings = worker_settings(broker.bootstrap, kind == "embedded", tmp_path / "state", 2)
        asyncio.run(create_topics(settings))
        worker = start_worker(settings, tmp_path / "worker.log")
        wait_ready(settings.web_port, worker)
        broker.stop()
        answers = []
        while not answers or answers[-1][0] == 200:  # one last 200 probed before the stop
            assert worker.poll() is None, "the worker exited"
            assert len(answers) < 3, f"/ready after the broker stopped: {answers}"
            status, body = get(settings.web_port, "/ready")
            answers.append((status, json.loads(body)))
            time.sleep(BROKER_PROBE_TTL_S)
        status, body = answers[-1]
        assert status == 503 and body["ready"] is False, answers
        assert f"the broker ({broker.bootstrap})" in body["reason"], answers
        broker.start()
        if kind == "embedded":
            asyncio.run(create_topics(settings))
        wait_ready(settings.web_port, worker, timeout=120)
    finally:
        if worker is not None:
            stop_worker(worker, timeout=10)
        broker.stop()
