"""docker-compose.yml and the Dockerfile, checked structurally (no Docker engine here).

Every ``FIBA_*`` variable must be a setting of ``app.settings`` whose value loads, every
command run in the fiba image must be a ``fiba`` command, and the services must start in the
right order on a KRaft single-node Apache Kafka that never auto-creates topics.
"""

import importlib
import json
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import click
import pytest
import yaml

from app.brokers.apache_kafka import BROKER_CONFIG
from app.brokers.kafka_jars import KAFKA_VERSION
from app.cli import DELEGATED_COMMANDS, cli, command_names
from app.settings import SETTINGS_HELP, load_settings

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
FIBA_IMAGES = {"fiba-stream:latest": "worker", "fiba-stream-spark:latest": "spark"}
"""The images built from the Dockerfile -> their build target."""
FIBA_SERVICES = sorted(name for name, s in SERVICES.items() if s.get("image") in FIBA_IMAGES)


def environment(service: dict) -> dict[str, str]:
    """A service's environment as a dict (compose allows a mapping or a list of NAME=VALUE)."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {name: str(value) for name, value in env.items()}


def dockerfile_instruction(name: str) -> str:
    """The argument of the last ``name`` instruction of the Dockerfile."""
    found = re.findall(rf"^{name}\s+(.+)$", DOCKERFILE, flags=re.MULTILINE)
    assert found, f"no {name} in the Dockerfile"
    return found[-1].strip()


def test_the_expected_services_exist():
    assert {"kafka", "topics", "worker", "spark-join"} <= set(SERVICES)
    assert {"topics", "worker", "spark-join"} <= set(FIBA_SERVICES)
    for name in FIBA_SERVICES:
        assert SERVICES[name]["build"]["dockerfile"] == "Dockerfile"
        assert SERVICES[name]["build"]["target"] == FIBA_IMAGES[SERVICES[name]["image"]]
    assert SERVICES["worker"]["image"] == SERVICES["topics"]["image"] == "fiba-stream:latest"
    assert SERVICES["spark-join"]["image"] == "fiba-stream-spark:latest"


def test_kafka_is_a_single_node_kraft_apache_kafka_without_auto_creation():
    kafka = SERVICES["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    env = environment(kafka)
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"].startswith(f"{env['KAFKA_NODE_ID']}@kafka:")
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "1"
    assert "healthcheck" in kafka


def test_kafka_is_the_version_and_config_the_tests_run():
    """The image names ``KAFKA_VERSION`` (the broker of the tests' ``kafka`` kind), and every
    broker setting that compose and ``BROKER_CONFIG`` both set has the same value there
    (listener names aside: compose has an inside and an outside listener)."""
    kafka = SERVICES["kafka"]
    assert kafka["image"] == f"apache/kafka:{KAFKA_VERSION}"
    compose = {
        name[len("KAFKA_") :].lower().replace("_", "."): value
        for name, value in environment(kafka).items()
    }
    overlap = {key for key in set(compose) & set(BROKER_CONFIG) if "listener" not in key}
    assert {"process.roles", "auto.create.topics.enable", "group.initial.rebalance.delay.ms"} <= (
        overlap
    )
    for key in overlap:
        assert set(compose[key].split(",")) == set(BROKER_CONFIG[key].split(",")), key


@pytest.mark.parametrize("service", FIBA_SERVICES)
def test_every_fiba_variable_is_a_setting_and_loads(service):
    env = environment(SERVICES[service])
    fiba_vars = [name for name in env if name.startswith("FIBA_")]
    assert fiba_vars
    for name in fiba_vars:
        assert name[len("FIBA_") :].lower() in SETTINGS_HELP, name
    settings = load_settings(environ=env)
    advertised = environment(SERVICES["kafka"])["KAFKA_ADVERTISED_LISTENERS"]
    for server in settings.bootstrap_servers:
        assert f"//{server}" in advertised, f"{service} cannot reach {server}"
    assert settings.broker_profile == "kafka"


@pytest.mark.parametrize("service", FIBA_SERVICES)
def test_every_command_is_a_fiba_command_whose_arguments_parse(service):
    args = list(SERVICES[service]["command"])
    command: click.Command = cli
    path = []
    while isinstance(command, click.Group):
        path.append(args.pop(0))
        assert " ".join(path) in command_names()
        command = command.commands[path[-1]]
    if path[-1] in DELEGATED_COMMANDS:
        module, _, attr = DELEGATED_COMMANDS[path[-1]][0].partition(":")
        command = getattr(importlib.import_module(module), attr)
    command.make_context(" ".join(path), args)  # a click.UsageError if an option is wrong


def test_startup_order_kafka_then_topics_then_the_rest():
    assert SERVICES["topics"]["depends_on"] == {"kafka": {"condition": "service_healthy"}}
    assert SERVICES["topics"]["restart"] == "no"
    for name in set(FIBA_SERVICES) - {"topics"}:
        assert SERVICES[name]["depends_on"]["topics"] == {
            "condition": "service_completed_successfully"
        }


def test_kafka_keeps_its_data_in_a_volume():
    kafka = SERVICES["kafka"]
    log_dir = environment(kafka)["KAFKA_LOG_DIRS"]
    mounts = dict(reversed(v.split(":", 1)) for v in kafka["volumes"])
    assert mounts[log_dir] in COMPOSE["volumes"]


def test_the_worker_scales_no_fixed_host_port_and_one_state_volume_per_replica():
    worker = SERVICES["worker"]
    env = environment(worker)
    assert env["FIBA_WEB_HOST"] == "0.0.0.0"
    assert worker["ports"] == [env["FIBA_WEB_PORT"]]  # a container port: Docker picks the host's
    assert "container_name" not in worker
    state_dir = env["FIBA_STATE_DIR"]
    named = [v for v in worker.get("volumes", []) if v.split(":")[-1] == state_dir and ":" in v]
    assert not named, "a named state volume would be shared by the replicas"
    assert f'VOLUME ["{state_dir}"]' in DOCKERFILE  # an anonymous volume per container


class ReadyStub(BaseHTTPRequestHandler):
    """Answers GET /ready with the status in ``ReadyStub.status``."""

    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status if self.path == "/ready" else 404)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args) -> None:
        pass


def test_the_worker_healthcheck_passes_only_when_ready():
    worker = SERVICES["worker"]
    check = worker["healthcheck"]["test"]
    port = environment(worker)["FIBA_WEB_PORT"]
    assert check[:3] == ["CMD", "python", "-c"]
    assert f"127.0.0.1:{port}/ready" in check[3]
    server = ThreadingHTTPServer(("127.0.0.1", 0), ReadyStub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        code = check[3].replace(f":{port}/", f":{server.server_address[1]}/")
        outcomes = {}
        for status in (200, 503):
            ReadyStub.status = status
            run = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=30)
            outcomes[status] = run.returncode
    finally:
        server.shutdown()
        server.server_close()
    assert outcomes[200] == 0 and outcomes[503] != 0


def dockerfile_stages() -> dict[str, str]:
    """Stage name -> its text (from its FROM line to the next)."""
    parts = re.split(r"^FROM\s+", DOCKERFILE, flags=re.MULTILINE)[1:]
    return {part.split()[2]: "FROM " + part for part in parts}


def test_the_default_image_is_the_small_worker_and_spark_has_java_17():
    stages = dockerfile_stages()
    assert list(stages)[-1] == "worker"  # `docker build .` builds the last stage
    assert stages["core"].startswith("FROM python:3.11")
    assert stages["worker"].startswith("FROM core AS worker")
    assert stages["spark"].startswith("FROM core AS spark")
    for small in ("core", "worker"):
        assert "openjdk" not in stages[small] and "[spark" not in stages[small]
    assert "openjdk-17-jre-headless" in stages["spark"]
    assert "pip install '.[spark,bench]'" in stages["spark"]
    assert "RUN pip install .\n" in stages["core"]


def test_the_image_runs_fiba():
    assert json.loads(dockerfile_instruction("ENTRYPOINT")) == ["fiba"]
    for package in ("app", "agents", "stores", "spark_bridge", "bench"):
        assert f"COPY {package} ./{package}" in DOCKERFILE
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", ".git", "fiba-data"} <= set(ignored)
