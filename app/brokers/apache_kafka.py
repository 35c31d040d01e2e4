"""Apache Kafka as a broker the project starts itself (kind ``kafka``, profile ``kafka``).

``KafkaBroker`` runs one combined KRaft broker+controller of the pinned ``KAFKA_VERSION`` (jars
from ``app.brokers.kafka_jars``) on two free loopback ports: clients use ``bootstrap``, the
controller listens on a port of its own. Its log lives on disk in ``data_dir``: a temporary
directory removed on ``stop()`` unless one is given, in which case it is formatted once and
reused (topics survive a restart, also after ``kill()``: ``start()`` again serves the same log
on ``bootstrap``). ``start()`` writes ``server.properties`` (``BROKER_CONFIG``, then
``extra_config``, plus listeners and paths) and a quiet log4j2 configuration, formats the
storage unless already formatted (``kafka.tools.StorageTool``), starts ``kafka.Kafka`` with
``jvm_options`` (a small heap by default) and returns once the broker answers a metadata
request with itself as a live broker.
The JVM starts in seconds on a small machine, hence the generous default ``start_timeout``. An
optional ``sasl`` listener (``app.brokers.kafka_sasl.SaslListener``) adds a SASL_PLAINTEXT (or
SASL_SSL) listener on ``sasl_bootstrap`` with its users, SCRAM credentials and, if asked, ACL
authorization.
"""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from aiokafka.client import AIOKafkaClient

from app.brokers.kafka_jars import KAFKA_VERSION, kafka_jars, require_tool
from app.brokers.kafka_sasl import SaslListener
from app.brokers.process import (
    BrokerError,
    BrokerProcess,
    free_port,
    port_is_free,
    wait_for_port,
)

BROKER_CONFIG: dict[str, str] = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    # one node: every internal topic has one replica
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    # a group forms as soon as its first member joins
    "group.initial.rebalance.delay.ms": "0",
    "num.partitions": "1",
    # the product creates every topic explicitly (``fiba topics create``)
    "auto.create.topics.enable": "false",
}
"""Broker settings beyond listeners and paths (docker-compose.yml sets the same where both set
one, checked by tests/test_docker_compose.py)."""

YEAR_MS = 365 * 24 * 3_600_000

KEEP_RECORDS_OF_ANY_AGE: dict[str, str] = {
    "log.initial.task.delay.ms": str(YEAR_MS),
    "log.retention.check.interval.ms": str(YEAR_MS),
}
"""``extra_config`` under which no time-based retention check runs during a year of uptime.
Apache Kafka deletes the records whose timestamp is older than their topic's ``retention.ms``
(the app's data topics: 7 days) at its first check, ``log.initial.task.delay.ms`` (30 s) after
it starts, then every ``log.retention.check.interval.ms`` (5 min): records timestamped with
old event times (the demo's and the tests' events, from 2023) would vanish while being read.
The first delay also postpones the log flusher, the recovery checkpoints (written at a clean
stop anyway; after a kill the next start recovers the whole log) and the removal of deleted
topics' files (kept on disk until then), which a development broker does not need."""

JVM_OPTIONS = ("-Xmx512m", "-Xms64m", "-XX:+UseSerialGC", "-Djava.awt.headless=true")
"""The JVM of a broker the project starts (tests, demo, ``fiba broker``): a small heap, grown
as needed, since the tests start many brokers."""

SERVER_JVM_OPTIONS = ("-Xmx512m", "-Xms512m", "-XX:+UseSerialGC", "-Djava.awt.headless=true")
"""The JVM as a server runs it, the whole heap from the start, for the benchmarks
(``bench.bench_broker``): the young generation is sized from it (~170 MB instead of ~21 MB),
so young collections come several times more rarely: the broker's GC fell from 0.21-0.43 to
0.0-0.11 µs per event in ``emit-floor`` and ``event`` (bench/RESULTS.md)."""

LOG4J2_CONFIG = """\
<Configuration status="warn">
  <Appenders><Console name="out" target="SYSTEM_OUT">
    <PatternLayout pattern="[%d] %p %m (%c{1})%n"/>
  </Console></Appenders>
  <Loggers>
    <Logger name="kafka.server.KafkaServer" level="info"/>
    <Logger name="kafka.server.KafkaRaftServer" level="info"/>
    <Root level="warn"><AppenderRef ref="out"/></Root>
  </Loggers>
</Configuration>
"""
"""Warnings and errors only, plus the server's start and stop lines."""

FORMAT_TIMEOUT_S = 120.0


def random_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes in URL-safe base64 without padding (Kafka's Uuid)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def properties_text(config: dict[str, str]) -> str:
    """``config`` as a Java properties file (values here contain no characters to escape)."""
    return "".join(f"{key}={value}\n" for key, value in config.items())


async def answers_metadata(bootstrap: str, timeout: float) -> bool:
    """True when ``bootstrap`` answers a metadata request listing at least one live broker."""
    client = AIOKafkaClient(
        bootstrap_servers=bootstrap, request_timeout_ms=max(1000, int(timeout * 1000))
    )
    try:
        await asyncio.wait_for(client.bootstrap(), timeout)
        return bool(client.cluster.brokers())
    except Exception:
        return False
    finally:
        await client.close()


def run_in_thread(bootstrap: str, timeout: float) -> bool:
    """``answers_metadata`` in a thread of its own, so callers inside an event loop can use it."""
    result: list[bool] = []
    thread = threading.Thread(
        target=lambda: result.append(asyncio.run(answers_metadata(bootstrap, timeout))),
        daemon=True,
    )
    thread.start()
    thread.join(timeout + 5)
    return bool(result and result[0])


class KafkaBroker(BrokerProcess):
    """One Apache Kafka ``version`` KRaft node on loopback (module docstring)."""

    kind = "kafka"
    profile = "kafka"

    def __init__(
        self,
        port: int = 0,
        host: str = "127.0.0.1",
        log_path: str | os.PathLike[str] | None = None,
        start_timeout: float = 120.0,
        data_dir: str | os.PathLike[str] | None = None,
        version: str = KAFKA_VERSION,
        extra_config: Mapping[str, str] | None = None,
        sasl: SaslListener | None = None,
        jvm_options: Sequence[str] = JVM_OPTIONS,
    ) -> None:
        super().__init__(port, host, log_path, start_timeout)
        self.jvm_options = tuple(jvm_options)
        """The JVM's options (heap, collector): ``JVM_OPTIONS`` or ``SERVER_JVM_OPTIONS``."""
        self.sasl = sasl
        self.sasl_port = (sasl.port or free_port(host)) if sasl is not None else 0
        self.version = version
        self.extra_config = dict(extra_config or {})
        """Broker properties added to (or overriding) ``BROKER_CONFIG``, e.g. log cleaner
        settings for a test."""
        self.keep_data = data_dir is not None
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.controller_port = 0
        self._jars: Path | None = None
        self._java = ""

    def choose_ports(self) -> None:
        """Fresh client and SASL ports where they were chosen here (the controller's is chosen
        by every ``prepare``)."""
        super().choose_ports()
        if self.sasl is not None and not self.sasl.port:
            self.sasl_port = free_port(self.host)

    def may_start_again(self) -> bool:
        """Also with a given client port while it is free: then another port failed, such as
        the controller's, which every ``prepare`` chooses (CI once saw a broker on a given port
        exit on "Address already in use" for its controller port)."""
        return super().may_start_again() or port_is_free(self.host, self.port)

    @property
    def sasl_bootstrap(self) -> str:
        """``host:port`` of the SASL listener (only with ``sasl``)."""
        assert self.sasl is not None, "this broker has no SASL listener"
        return f"{self.host}:{self.sasl_port}"

    def server_config(self) -> dict[str, str]:
        """``BROKER_CONFIG`` and ``extra_config`` with this node's listeners, quorum and log
        directory (and the SASL listener's settings with ``sasl``)."""
        assert self.data_dir is not None
        host, port, cport = self.host, self.port, self.controller_port
        config = {
            **BROKER_CONFIG,
            **self.extra_config,
            "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{cport}",
            "advertised.listeners": f"PLAINTEXT://{host}:{port}",
            "controller.quorum.voters": f"{BROKER_CONFIG['node.id']}@{host}:{cport}",
            "log.dirs": str(self.data_dir / "log"),
        }
        if self.sasl is not None:
            protocol = self.sasl.protocol
            sasl = f"{protocol}://{host}:{self.sasl_port}"
            config["listeners"] += f",{sasl}"
            config["advertised.listeners"] += f",{sasl}"
            config["listener.security.protocol.map"] += f",{protocol}:{protocol}"
            config.update(self.sasl.server_config())
        return config

    def prepare(self) -> None:
        """Resolve the jars, write the configuration files and format the storage."""
        self._java = require_tool("java")
        self._jars = kafka_jars(self.version)
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="fiba-kafka-"))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.controller_port = free_port(self.host)
        (self.data_dir / "server.properties").write_text(properties_text(self.server_config()))
        (self.data_dir / "log4j2.xml").write_text(LOG4J2_CONFIG)
        if not (self.data_dir / "log" / "meta.properties").is_file():
            self.format_storage()

    def format_storage(self) -> None:
        """Format the log directory for a new single-node cluster (``kafka.tools.StorageTool``)."""
        assert self.data_dir is not None
        storage_format = [
            *self.java_command("kafka.tools.StorageTool"),
            "format",
            # one argument: an id may start with "-", which argparse would take for an option
            f"--cluster-id={random_cluster_id()}",
            "--config",
            str(self.data_dir / "server.properties"),
            *(self.sasl.format_arguments() if self.sasl is not None else ()),
        ]
        with open(self.log_path, "ab") as log:
            try:
                done = subprocess.run(
                    storage_format,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    timeout=FORMAT_TIMEOUT_S,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise BrokerError(f"formatting {self.data_dir} timed out") from None
        if done.returncode != 0:
            raise BrokerError(f"formatting {self.data_dir} failed; see {self.log_path}")

    def java_command(self, main_class: str) -> list[str]:
        """``java`` with the broker's JVM options and classpath, running ``main_class``."""
        assert self._jars is not None and self.data_dir is not None
        return [
            self._java,
            *self.jvm_options,
            f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.xml'}",
            "-cp",
            str(self._jars / "*"),
            main_class,
        ]

    def command(self) -> list[str]:
        assert self.data_dir is not None
        return [*self.java_command("kafka.Kafka"), str(self.data_dir / "server.properties")]

    def wait_ready(self, deadline: float) -> bool:
        """Wait until the port accepts connections and a metadata request lists this broker;
        ``False`` at ``deadline`` or as soon as the JVM exits."""
        while self.running and time.monotonic() < deadline:
            if wait_for_port(self.host, self.port, 0.5) and run_in_thread(
                self.bootstrap, max(1.0, min(5.0, deadline - time.monotonic()))
            ):
                return True
            time.sleep(0.2)
        return False

    def stop(self, timeout: float = 30.0, keep_log: bool = False) -> None:
        """SIGTERM (a clean KRaft shutdown takes a few seconds), SIGKILL after ``timeout``;
        the log as ``BrokerProcess.stop`` keeps it."""
        super().stop(timeout, keep_log)

    def cleanup(self) -> None:
        """Remove the data directory unless it was given."""
        if not self.keep_data and self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None
