"""The Apache Kafka broker kind: its jar cache (resolved from Maven Central through the project's
own pom, atomically, reused), a failed resolution as one line, and the broker answering on
loopback with its log on disk (what the CLI and the session fixture use)."""

import threading
from pathlib import Path

import pytest

from app.broker import BrokerSetupError
from app.kafka_broker import KafkaBroker, random_cluster_id
from app.kafka_jars import KAFKA_VERSION, SCALA_VERSION, kafka_jars

pytestmark = pytest.mark.timeout(600)


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
    assert not temporary.exists()
    # a given one: formatted, and kept by the same stop (no second broker start needed)
    kept = KafkaBroker(data_dir=tmp_path / "kept")
    kept.prepare()
    kept.stop()
    assert (tmp_path / "kept" / "log" / "meta.properties").is_file()


def test_a_cluster_id_starting_with_a_dash_formats_the_storage(tmp_path, monkeypatch):
    """One id in 64 starts with "-" (URL-safe base64); the storage tool must not take it for
    an option (it did: the broker failed to start once in a while)."""
    cluster_id = "-" + random_cluster_id()[1:]
    monkeypatch.setattr("app.kafka_broker.random_cluster_id", lambda: cluster_id)
    broker = KafkaBroker(data_dir=tmp_path / "data")
    broker.prepare()  # formats the storage, starts nothing
    meta = (tmp_path / "data" / "log" / "meta.properties").read_text()
    assert f"cluster.id={cluster_id}\n" in meta
