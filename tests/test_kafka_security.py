"""Security on Apache Kafka: a SASL_PLAINTEXT listener with PLAIN and SCRAM-SHA-256 users and
ACLs (``app.brokers.kafka_sasl``). The worker, the CLI commands and the Spark bridge connect with
the documented settings (``security_protocol``, ``sasl_mechanism``, ``sasl_username``,
``sasl_password``); a wrong password or a topic the ACLs deny stops a command at once with one
line on stderr and exit code 2.

The broker here is one of its own for this module (the session broker has no SASL listener),
always Apache Kafka: Tansu has neither SASL users nor ACLs. The user ``alice`` may use the
topics named ``sec-...`` only; ``secret-...`` topics exist but are denied to her.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.brokers.apache_kafka import KafkaBroker
from app.brokers.kafka_sasl import SaslListener, grant_prefix
from app.brokers.kinds import BROKER_KINDS
from app.brokers.process import free_port
from tests.conftest import broker_kinds_under_test
from tests.spark_fixtures import create_topic

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        "kafka" not in broker_kinds_under_test() or "kafka" not in BROKER_KINDS,
        reason="SASL users and ACLs need Apache Kafka (broker kind kafka): Tansu has neither",
    ),
]

USER, PASSWORD = "alice", "alice-secret"
SECRET_TOPIC = f"secret-{uuid.uuid4().hex[:8]}"
MECHANISMS = ("PLAIN", "SCRAM-SHA-256")
COMMAND_TIMEOUT_S = 60.0
"""A refused command must end long before this (it fails at its first connection)."""


@pytest.fixture(scope="module")
def secure_broker() -> Iterator[KafkaBroker]:
    """Apache Kafka with a SASL_PLAINTEXT listener for ``USER``, ACLs on, ``USER`` allowed the
    ``sec-`` topics and every group, and the topic ``SECRET_TOPIC`` she may not use."""
    broker = KafkaBroker(sasl=SaslListener(users={USER: PASSWORD}, authorize=True))
    with broker:
        asyncio.run(grant_prefix(broker.bootstrap, USER, "sec-"))
        create_topic(broker.bootstrap, SECRET_TOPIC, 1)
        yield broker


def sasl_env(broker: KafkaBroker, mechanism: str, password: str = PASSWORD) -> dict[str, str]:
    """FIBA_* variables for ``USER`` over SASL ``mechanism``, with topics unique to a call."""
    tag = f"sec-{uuid.uuid4().hex[:8]}"
    return {
        "FIBA_BROKER": broker.sasl_bootstrap,
        "FIBA_BROKER_PROFILE": "kafka",
        "FIBA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "FIBA_SASL_MECHANISM": mechanism,
        "FIBA_SASL_USERNAME": USER,
        "FIBA_SASL_PASSWORD": password,
        "FIBA_APP_ID": tag,
        "FIBA_PARTITIONS": "2",
        "FIBA_INPUT_TOPIC": f"{tag}-input",
        "FIBA_QUERIES_TOPIC": f"{tag}-queries",
        "FIBA_AGGREGATES_TOPIC": f"{tag}-aggregates",
        "FIBA_ANSWERS_TOPIC": f"{tag}-answers",
        "FIBA_DEAD_LETTER_TOPIC": f"{tag}-dead-letters",
    }


def environment(env: dict[str, str]) -> dict[str, str]:
    """This process's environment without FIBA_* variables, plus ``env``."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("FIBA_")}, **env}


def fiba(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``fiba ARGS`` in a subprocess, bounded by ``COMMAND_TIMEOUT_S``."""
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        env=environment(env),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module", params=MECHANISMS)
def pipeline(request, secure_broker, tmp_path_factory) -> Iterator[tuple[dict[str, str], list]]:
    """A worker over SASL ``mechanism`` that turned 30 generated events into aggregates:
    (its FIBA_* variables, the aggregate records tailed from the beginning). The worker keeps
    running for the tests of this mechanism; its output is ``worker.log`` in its state dir."""
    env = sasl_env(secure_broker, request.param)
    state = tmp_path_factory.mktemp("secure-worker")
    created = fiba("topics", "create", env=env)
    assert created.returncode == 0, created.stderr
    worker_env = {**env, "FIBA_STATE_DIR": str(state), "FIBA_WEB_PORT": str(free_port())}
    with open(state / "worker.log", "wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "worker"],
            env=environment(worker_env),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        sent = fiba("produce", "--generate", "30", "--keys", "3", "--seed", "5", env=env)
        assert sent.returncode == 0, sent.stderr
        tailed = subprocess.run(
            [sys.executable, "-m", "app.cli", "tail", "--from-beginning", "--limit", "30"],
            env=environment(env),
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert tailed.returncode == 0, tailed.stderr + (state / "worker.log").read_text()
        yield worker_env, [json.loads(line) for line in tailed.stdout.splitlines()]
    finally:
        worker.terminate()
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def test_the_worker_turns_events_into_aggregates_over_sasl(pipeline):
    _, aggregates = pipeline
    assert len(aggregates) == 30
    assert {a["key"] for a in aggregates} == {"key-0", "key-1", "key-2"}
    totals = {}
    for record in aggregates:
        totals[record["key"]] = record["value"]["windows"]["1h"]["count"]
    assert sum(totals.values()) == 30  # the last aggregate of each key counts all its events


def test_a_range_query_is_answered_over_sasl(pipeline):
    env, aggregates = pipeline
    last = aggregates[-1]["value"]
    answered = fiba(
        "query",
        aggregates[-1]["key"],
        "--from",
        str(last["stream_time"] - 3_600_000 + 1),
        "--to",
        str(last["stream_time"]),
        "--timeout",
        "30s",
        env=env,
    )
    log = Path(env["FIBA_STATE_DIR"], "worker.log").read_text()
    assert answered.returncode == 0, answered.stderr + log
    assert json.loads(answered.stdout)["count"] == last["windows"]["1h"]["count"]


@pytest.mark.spark
def test_the_spark_bridge_reads_aggregates_over_sasl(pipeline, spark, secure_broker):
    from spark_bridge.read import read_aggregates

    env, aggregates = pipeline
    options = {
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": env["FIBA_SASL_MECHANISM"],
        "kafka.sasl.username": USER,
        "kafka.sasl.password": PASSWORD,
    }
    df = read_aggregates(
        spark,
        secure_broker.sasl_bootstrap,
        env["FIBA_AGGREGATES_TOPIC"],
        engine="python",
        options=options,
    )
    assert df.count() == len(aggregates)


COMMANDS = {
    "topics create": ("topics", "create"),
    "produce": ("produce", "--generate", "3"),
    "tail": ("tail", "--idle-timeout", "1s"),
    "query": ("query", "key-0", "--window", "1h", "--timeout", "5s"),
    "worker": ("worker",),
    "spark-read": ("spark-read", "--limit", "1"),
}
"""Every ``fiba`` command that talks to Kafka, with arguments that make it do so at once."""


def assert_one_line_exit_2(done: subprocess.CompletedProcess[str], fragment: str) -> None:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("fiba: ") and fragment in lines[0], lines[0]


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("command", COMMANDS)
def test_a_wrong_password_is_one_line_and_exit_2(secure_broker, mechanism, command):
    env = sasl_env(secure_broker, mechanism, password="not-" + PASSWORD)
    began = time.monotonic()
    done = fiba(*COMMANDS[command], env=env)
    assert_one_line_exit_2(done, "the broker rejected the credentials: Authentication failed")
    assert f"(user '{USER}', {mechanism})" in done.stderr
    assert time.monotonic() - began < COMMAND_TIMEOUT_S


TOPIC_OF_COMMAND = {
    "topics create": "FIBA_INPUT_TOPIC",
    "produce": "FIBA_INPUT_TOPIC",
    "tail": "FIBA_AGGREGATES_TOPIC",
    "query": "FIBA_QUERIES_TOPIC",
    "worker": "FIBA_INPUT_TOPIC",
}
"""The setting naming the topic each command uses; set to a denied topic in the test."""


@pytest.mark.parametrize("command", TOPIC_OF_COMMAND)
def test_a_denied_topic_is_one_line_and_exit_2(secure_broker, command):
    env = sasl_env(secure_broker, "SCRAM-SHA-256")
    if command in ("query", "worker"):  # they need the topics they are allowed first
        assert fiba("topics", "create", env=env).returncode == 0
    env[TOPIC_OF_COMMAND[command]] = SECRET_TOPIC
    done = fiba(*COMMANDS[command], env=env)
    assert_one_line_exit_2(done, f"not authorised for topic {SECRET_TOPIC}")


# --- SASL_SSL ----------------------------------------------------------------------------------


def make_test_ca(directory: Path) -> tuple[Path, Path, Path]:
    """With ``openssl``: a CA, a broker certificate for 127.0.0.1 signed by it, and another CA
    that signed nothing. Returns (the broker's PEM keystore: PKCS#8 key then certificate, the
    CA file, the other CA's file)."""

    def openssl(command: str) -> None:
        subprocess.run(
            ["openssl", *command.split()], cwd=directory, check=True, capture_output=True
        )

    for ca in ("ca", "other-ca"):
        openssl(
            f"req -x509 -newkey rsa:2048 -nodes -keyout {ca}.key -out {ca}.pem -days 2"
            f" -subj /CN=fiba-test-{ca}"
        )
    openssl("req -newkey rsa:2048 -nodes -keyout broker.key -out broker.csr -subj /CN=127.0.0.1")
    (directory / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl(
        "x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out broker.pem"
        " -days 2 -extfile san.cnf"
    )
    openssl("pkcs8 -topk8 -nocrypt -in broker.key -out broker.p8")
    keystore = directory / "keystore.pem"
    keystore.write_bytes(
        (directory / "broker.p8").read_bytes() + (directory / "broker.pem").read_bytes()
    )
    return keystore, directory / "ca.pem", directory / "other-ca.pem"


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory) -> Iterator[tuple[KafkaBroker, Path, Path]]:
    """Apache Kafka with a SASL_SSL listener for ``USER`` (no ACLs), its certificate signed by
    a CA made here: (the broker, the CA file, another CA's file)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl makes the test CA")
    keystore, ca, other_ca = make_test_ca(tmp_path_factory.mktemp("tls"))
    with KafkaBroker(sasl=SaslListener(users={USER: PASSWORD}, keystore=keystore)) as broker:
        yield broker, ca, other_ca


def test_produce_and_tail_over_sasl_ssl(tls_broker):
    broker, ca, _ = tls_broker
    env = {
        **sasl_env(broker, "SCRAM-SHA-256"),
        "FIBA_SECURITY_PROTOCOL": "SASL_SSL",
        "FIBA_SSL_CAFILE": str(ca),
    }
    assert fiba("topics", "create", env=env).returncode == 0
    sent = fiba("produce", "--generate", "5", env=env)
    assert sent.returncode == 0, sent.stderr
    tailed = fiba("tail", "--topic", "input", "--from-beginning", "--limit", "5", env=env)
    assert tailed.returncode == 0, tailed.stderr
    assert len(tailed.stdout.splitlines()) == 5


def test_a_broker_certificate_of_another_ca_is_one_line_and_exit_2(tls_broker):
    broker, _, other_ca = tls_broker
    env = {
        **sasl_env(broker, "SCRAM-SHA-256"),
        "FIBA_SECURITY_PROTOCOL": "SASL_SSL",
        "FIBA_SSL_CAFILE": str(other_ca),
    }
    done = fiba("tail", "--idle-timeout", "1s", env=env)
    assert_one_line_exit_2(done, f"TLS handshake with {broker.sasl_bootstrap} failed")
    assert "(check ssl_cafile)" in done.stderr
