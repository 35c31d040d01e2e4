"""The Apache Kafka broker kind: its jar cache (resolved from Maven Central through the project's
own pom, atomically, reused), a failed resolution as one line, and the broker answering on
loopback with its log on disk (what the CLI and the session fixture use), keeping records of any
age when asked to (the demo and the session fixture do)."""

import asyncio
import socket
import threading
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from app.brokers import apache_kafka
from app.brokers.apache_kafka import KafkaBroker, random_cluster_id
from app.brokers.kafka_jars import KAFKA_VERSION, SCALA_VERSION, kafka_jars
from app.brokers.kinds import development_broker_options, make_broker, options_keeping_old_records
from app.brokers.process import BrokerError, BrokerSetupError, free_port
from app.topics import DATA_TOPIC_CONFIGS
from bench.broker_cpu import kind_of, thread_names

# Apache Kafka's own broker kind, whichever kind and build the pass runs: `make test` runs
# these in its embedded pass only
pytestmark = [pytest.mark.timeout(600), pytest.mark.once]


def test_concurrent_first_resolutions_leave_one_complete_cache(tmp_path):
    """Two first runs at once (Maven's own ~/.m2 is warm after the session broker, so this
    copies jars): both get the same complete directory, no temporary directory is left."""
    results: list[Path | BaseException] = []

    def resolve() -> None:
        try:
            results.append(kafka_jars(root=tmp_path))
        except BaseException as exc:
            results.append(exc)

    threads = [threading.Thread(target=resolve) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    target = tmp_path / f"kafka-{KAFKA_VERSION}"
    assert results == [target, target]
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]
    jars = {p.name for p in target.iterdir()}
    assert f"kafka_{SCALA_VERSION}-{KAFKA_VERSION}.jar" in jars
    assert any(name.startswith("log4j-slf4j2-impl-") for name in jars)  # a logging backend
    assert kafka_jars(root=tmp_path) == target  # reused


def test_a_failed_resolution_is_one_line_and_leaves_no_cache(tmp_path):
    with pytest.raises(BrokerSetupError) as error:
        kafka_jars("0.0.0-no-such-version", root=tmp_path)
    message = str(error.value)
    assert message.startswith("resolving Apache Kafka 0.0.0-no-such-version from Maven Central")
    assert "\n" not in message
    assert list(tmp_path.iterdir()) == []


def test_the_broker_removes_a_temporary_log_dir_and_keeps_a_given_one(tmp_path):
    with KafkaBroker() as broker:
        temporary = broker.data_dir
        assert temporary is not None and (temporary / "log" / "meta.properties").is_file()
        # its process, whose CPU time bench.scale_out reads
        assert broker.pid is not None and Path(f"/proc/{broker.pid}/stat").is_file()
        # and bench.broker_cpu per kind of thread, by the names jcmd gives
        kinds = {kind_of(name) for name in thread_names(broker.pid).values()}
        assert {"network", "request_handlers", "gc", "jit"} <= kinds
        # the small JVM of the tests, demo and CLI
        assert jvm_arguments(broker.pid)[: len(apache_kafka.JVM_OPTIONS)] == list(
            apache_kafka.JVM_OPTIONS
        )
    assert not temporary.exists()
    assert broker.pid is None
    # a given one: formatted, and kept by the same stop (no second broker start needed)
    kept = KafkaBroker(data_dir=tmp_path / "kept")
    kept.prepare()
    kept.stop()
    assert (tmp_path / "kept" / "log" / "meta.properties").is_file()


def jvm_arguments(pid: int) -> list[str]:
    """The arguments of process ``pid`` after the ``java`` executable."""
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[1:]


def test_the_benchmarks_broker_runs_the_jvm_as_a_server_does_and_keeps_old_records(
    monkeypatch,
):
    """``bench.bench_broker`` starts Apache Kafka with the whole heap committed up front
    (``SERVER_JVM_OPTIONS``: young collections several times rarer), the tests' brokers with a
    small one; and it keeps records older than their topic's ``retention.ms`` past Kafka's
    retention checks (the workloads' times are from 1970; before, the first check deleted
    the aggregates stamped with them)."""
    from bench.bench_broker import BENCH_BROKER_OPTIONS

    assert "-Xms512m" in apache_kafka.SERVER_JVM_OPTIONS
    assert "-Xms512m" not in apache_kafka.JVM_OPTIONS
    fast_retention_checks(monkeypatch)
    with make_broker("kafka", **BENCH_BROKER_OPTIONS["kafka"]) as broker:
        assert broker.pid is not None
        arguments = jvm_arguments(broker.pid)
        tp = TopicPartition("old-events", 0)
        asyncio.run(create_old_record(broker.bootstrap, tp))
        time.sleep(4)  # four retention checks without the keeping options
        kept = asyncio.run(read_all(broker.bootstrap, tp))
    assert arguments[: len(apache_kafka.SERVER_JVM_OPTIONS)] == list(
        apache_kafka.SERVER_JVM_OPTIONS
    )
    assert [(r.timestamp, r.value) for r in kept] == [(OLD_TS, b"2023")]


def test_a_broker_whose_chosen_port_is_taken_starts_on_fresh_ports_and_a_given_one_fails():
    """A port chosen free can be taken before the JVM binds it (CI saw "Address already in
    use" with tests in parallel): a broker on ports it chose itself starts again on fresh ones;
    a given port is never changed, its failure is one ``BrokerError``."""
    broker = KafkaBroker()
    taken = broker.port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as occupier:
        occupier.bind((broker.host, taken))
        occupier.listen()
        with broker:
            assert broker.port != taken
            assert apache_kafka.run_in_thread(broker.bootstrap, 10.0)
        given = KafkaBroker(port=taken)
        with pytest.raises(BrokerError, match=f"did not start on 127.0.0.1:{taken}"):
            given.start()
        given.log_path.unlink()


def test_a_broker_on_a_given_port_whose_controller_port_is_taken_starts_on_a_fresh_one(
    monkeypatch,
):
    """The controller's port is chosen free by every ``prepare`` even when the client port is
    given, and can be taken before the JVM binds it (CI: "Address already in use" for it, and
    the test's broker on a given port failed): the broker starts again on a fresh controller
    port, its given client port kept."""
    given = free_port()
    choose = apache_kafka.free_port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as occupier:
        occupier.bind(("127.0.0.1", 0))
        occupier.listen()
        taken = occupier.getsockname()[1]
        first = iter([taken])
        monkeypatch.setattr(apache_kafka, "free_port", lambda host: next(first, 0) or choose(host))
        with KafkaBroker(port=given) as broker:
            assert broker.port == given and broker.controller_port != taken
            assert "Address already in use" in broker.log_path.read_text()
            assert apache_kafka.run_in_thread(broker.bootstrap, 10.0)


def test_a_broker_not_ready_in_time_is_one_broker_error_with_its_log_kept(tmp_path):
    """A JVM that is not ready within ``start_timeout`` (a loaded machine) is stopped and
    reported as one ``BrokerError`` naming its log, which is kept for reading (the stop that
    keeps it used to raise a TypeError on Apache Kafka, hiding why)."""
    broker = KafkaBroker(port=free_port(), data_dir=tmp_path / "data", start_timeout=0.0)
    with pytest.raises(BrokerError, match="did not start"):
        broker.start()
    assert not broker.running
    assert broker.log_path.is_file()
    broker.log_path.unlink()


def test_a_cluster_id_starting_with_a_dash_formats_the_storage(tmp_path, monkeypatch):
    """One id in 64 starts with "-" (URL-safe base64); the storage tool must not take it for
    an option (it did: the broker failed to start once in a while)."""
    cluster_id = "-" + random_cluster_id()[1:]
    monkeypatch.setattr("app.brokers.apache_kafka.random_cluster_id", lambda: cluster_id)
    broker = KafkaBroker(data_dir=tmp_path / "data")
    broker.prepare()  # formats the storage, starts nothing
    meta = (tmp_path / "data" / "log" / "meta.properties").read_text()
    assert f"cluster.id={cluster_id}\n" in meta


OLD_TS = 1_700_000_000_000
"""A timestamp from 2023, like the demo's and the tests' events."""


def fast_retention_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kafka's time-based retention checks at once and every second (its defaults: the first
    30 s after the start, then every 5 min), so that a broker without the keeping options
    deletes an old record within a test's few seconds."""
    monkeypatch.setitem(apache_kafka.BROKER_CONFIG, "log.initial.task.delay.ms", "0")
    monkeypatch.setitem(apache_kafka.BROKER_CONFIG, "log.retention.check.interval.ms", "1000")


def test_the_demo_and_test_broker_keeps_old_records_past_its_retention_checks(monkeypatch):
    """The demo's and the tests' events are from 2023, older than the data topics'
    ``retention.ms``: a broker started with ``options_keeping_old_records`` must still serve
    them after Kafka's retention checks (before, its first check deleted them)."""
    fast_retention_checks(monkeypatch)
    with make_broker("kafka", **options_keeping_old_records("kafka")) as broker:
        tp = TopicPartition("old-events", 0)
        asyncio.run(create_old_record(broker.bootstrap, tp))
        time.sleep(4)  # four retention checks without the keeping options
        kept = asyncio.run(read_all(broker.bootstrap, tp))
    assert [(r.timestamp, r.value) for r in kept] == [(OLD_TS, b"2023")]


def test_the_development_broker_keeps_old_records_past_its_retention_checks(monkeypatch):
    """``fiba broker --kind kafka`` (``development_broker_options``) keeps records older than
    their topic's ``retention.ms`` (the README session's, from 2024, were deleted by Kafka's
    first retention check, 30 s after the start), checked every second here."""
    fast_retention_checks(monkeypatch)
    options = development_broker_options("kafka", free_port(), None)
    with make_broker("kafka", **options) as broker:
        tp = TopicPartition("old-events", 0)
        asyncio.run(create_old_record(broker.bootstrap, tp))
        time.sleep(4)  # four retention checks without the keeping options
        kept = asyncio.run(read_all(broker.bootstrap, tp))
    assert [(r.timestamp, r.value) for r in kept] == [(OLD_TS, b"2023")]


async def create_old_record(bootstrap: str, tp: TopicPartition) -> None:
    """``tp``'s topic with the app's data topic configs, holding one record at ``OLD_TS``."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(tp.topic, 1, 1, topic_configs=DATA_TOPIC_CONFIGS)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(tp.topic, b"2023", partition=tp.partition, timestamp_ms=OLD_TS)
    finally:
        await producer.stop()


async def read_all(bootstrap: str, tp: TopicPartition) -> list[ConsumerRecord]:
    """Every record of ``tp`` (from its first retained offset on)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        records: list[ConsumerRecord] = []
        while await consumer.position(tp) < end:
            records += (await consumer.getmany(tp, timeout_ms=500)).get(tp, [])
        return records
    finally:
        await consumer.stop()
