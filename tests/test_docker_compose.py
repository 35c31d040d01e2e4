"""docker-compose.yml and the Dockerfile, checked structurally (no Docker engine here).

Every ``FIBA_*`` variable must be a setting of ``app.settings`` whose value loads, every
command run in the fiba image must be a ``fiba`` command, and the services must start in the
right order on a KRaft single-node Apache Kafka that never auto-creates topics.
"""

import importlib
import json
import re
from pathlib import Path

import click
import pytest
import yaml

from app.cli import DELEGATED_COMMANDS, cli, command_names
from app.kafka_broker import BROKER_CONFIG
from app.kafka_jars import KAFKA_VERSION
from app.settings import SETTINGS_HELP, load_settings

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
FIBA_IMAGE = "fiba-stream:latest"
FIBA_SERVICES = sorted(name for name, s in SERVICES.items() if s.get("image") == FIBA_IMAGE)


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


def test_the_worker_keeps_its_state_in_a_volume_and_serves_http_on_all_interfaces():
    worker = SERVICES["worker"]
    env = environment(worker)
    assert env["FIBA_WEB_HOST"] == "0.0.0.0"
    assert f"{env['FIBA_WEB_PORT']}:{env['FIBA_WEB_PORT']}" in worker["ports"]
    volume, _, path = worker["volumes"][0].partition(":")
    assert path == env["FIBA_STATE_DIR"]
    assert volume in COMPOSE["volumes"]


def test_the_image_runs_fiba_with_java_17():
    assert json.loads(dockerfile_instruction("ENTRYPOINT")) == ["fiba"]
    assert dockerfile_instruction("FROM").startswith("python:3.11")
    assert "openjdk-17-jre-headless" in DOCKERFILE
    for package in ("app", "agents", "stores", "spark_bridge", "bench"):
        assert f"COPY {package} ./{package}" in DOCKERFILE
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", ".git", "fiba-data"} <= set(ignored)
