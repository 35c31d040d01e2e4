"""The one Kafka connection config (``agents.connection``): every field is read from the worker's
settings and from Spark source options, and reaches every client's options; connector-only
security options the driver's Python client cannot use are refused in one line.

Pure functions of the config (and the PEM files it names), tested directly: TLS contexts are
recorded by their arguments (``create_ssl_context`` replaced) so they compare by value.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from agents.connection import KafkaConnection
from app.settings import Settings

CERT = "-----BEGIN CERTIFICATE-----\nMIIBcert{n}\n-----END CERTIFICATE-----"
KEY = "-----BEGIN PRIVATE KEY-----\nMIIEkey{n}\n-----END PRIVATE KEY-----"


def describe(value: Any) -> Any:
    """A value comparable by content: Faust credentials by their attributes."""
    return None if value is None else {k: v for k, v in vars(value).items()}


RENDERINGS: dict[str, Callable[[KafkaConnection], Any]] = {
    "aiokafka": lambda c: c.aiokafka_options(),
    "faust": lambda c: (c.faust_broker(), describe(c.faust_credentials())),
    "spark source": lambda c: c.source_options(),
    "spark connector": lambda c: c.connector_options(),
}
"""Every client's options of a connection."""


@pytest.fixture
def files(tmp_path, monkeypatch) -> Callable[[str], str]:
    """PEM files by name (two of each kind, with different contents); TLS contexts recorded."""
    monkeypatch.setattr(
        "aiokafka.helpers.create_ssl_context", lambda **kwargs: SimpleNamespace(**kwargs)
    )
    contents = {
        "ca1.pem": CERT.format(n=1),
        "ca2.pem": CERT.format(n=2),
        "client1.pem": CERT.format(n=3),
        "client2.pem": CERT.format(n=4),
        "client1.key": KEY.format(n=1),
        "client2.key": KEY.format(n=2),
    }
    for name, text in contents.items():
        (tmp_path / name).write_text(text + "\n")
    return lambda name: str(tmp_path / name)


def base_and_changes(path: Callable[[str], str]) -> tuple[KafkaConnection, dict[str, Any]]:
    """A connection using every field, and for each field another value of it."""
    base = KafkaConnection(
        bootstrap_servers=("h1:9092",),
        security_protocol="SASL_SSL",
        sasl_mechanism="PLAIN",
        sasl_username="u",
        sasl_password="p",
        ssl_cafile=path("ca1.pem"),
        ssl_certfile=path("client1.pem"),
        ssl_keyfile=path("client1.key"),
    )
    changes = {
        "bootstrap_servers": ("h1:9092", "h2:9092"),
        "security_protocol": "SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": "v",
        "sasl_password": "q",
        "ssl_cafile": path("ca2.pem"),
        "ssl_certfile": path("client2.pem"),
        "ssl_keyfile": path("client2.key"),
    }
    return base, changes


def test_the_table_covers_every_field(files):
    _, changes = base_and_changes(files)
    assert set(changes) == {f.name for f in dataclasses.fields(KafkaConnection)}


@pytest.mark.parametrize("client", sorted(RENDERINGS))
@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(KafkaConnection)])
def test_every_field_reaches_every_client(files, name, client):
    base, changes = base_and_changes(files)
    render = RENDERINGS[client]
    changed = dataclasses.replace(base, **{name: changes[name]})
    assert render(changed) != render(base), f"{name} does not reach the {client} options"


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(KafkaConnection)])
def test_every_field_is_read_from_the_settings_and_the_source_options(files, name):
    base, changes = base_and_changes(files)
    settings_fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
    settings_fields[name] = changes[name]
    servers = settings_fields.pop("bootstrap_servers")
    settings = Settings(broker=",".join(servers), **settings_fields)
    expected = dataclasses.replace(base, **{name: changes[name]})
    assert KafkaConnection.from_settings(settings) == expected
    assert KafkaConnection.from_options(expected.source_options()) == expected


def test_the_password_stays_out_of_the_repr():
    assert "s3cret" not in repr(KafkaConnection(sasl_username="u", sasl_password="s3cret"))


def test_the_rendered_options_of_a_plaintext_connection():
    plain = KafkaConnection(bootstrap_servers=("h:1",))
    assert plain.aiokafka_options() == {"bootstrap_servers": ["h:1"]}
    assert (plain.faust_broker(), plain.faust_credentials()) == ("kafka://h:1", None)
    assert plain.source_options() == plain.connector_options() == {"kafka.bootstrap.servers": "h:1"}
    parsed = KafkaConnection.from_options({"KAFKA.bootstrap.servers": "kafka://h:1, h:2"})
    assert parsed.bootstrap_servers == ("h:1", "h:2")


KERBEROS = 'com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true keyTab="/k";'


@pytest.mark.parametrize(
    "option, value, instead",
    [
        ("kafka.sasl.jaas.config", KERBEROS, "kafka.sasl.username and kafka.sasl.password"),
        ("kafka.ssl.truststore.location", "/trust.jks", "kafka.ssl.cafile"),
        ("kafka.ssl.keystore.location", "/key.jks", "kafka.ssl.certfile and kafka.ssl.keyfile"),
    ],
)
def test_the_driver_refuses_connector_only_security_in_one_line(option, value, instead):
    """Engine jvm asks the broker for the high watermarks on the driver with the bridge's
    Python client, before Spark's connector runs: it says which option it cannot use."""
    from spark_bridge.jvm import explicit_offsets, jvm_kafka_options

    options = {"kafka.bootstrap.servers": "127.0.0.1:9", option: value}
    assert jvm_kafka_options(options)[option] == value  # the connector takes it
    with pytest.raises(ValueError) as refused:
        explicit_offsets(options, "topic")
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"option {option} is Spark's connector's own")
    assert instead in message.partition("; give ")[2]


def test_connector_stores_derived_from_bridge_options_are_not_refused(files):
    from spark_bridge.kafka import client_options

    options = {"kafka.bootstrap.servers": "h:1", "kafka.security.protocol": "SSL"}
    options["kafka.ssl.cafile"] = files("ca1.pem")
    derived = {**options, **KafkaConnection.from_options(options).connector_options()}
    assert "kafka.ssl.truststore.certificates" in derived
    assert client_options(derived)["ssl_context"] == SimpleNamespace(
        cafile=files("ca1.pem"), certfile=None, keyfile=None
    )


@pytest.mark.kafka
@pytest.mark.parametrize("engine", ["jvm", "auto"])
def test_spark_read_stops_on_connector_only_security_with_exit_code_2(kafka_bootstrap, engine):
    from click.testing import CliRunner

    from spark_bridge.cli import spark_read

    args = ["--broker", kafka_bootstrap, "--engine", engine, "--no-progress"]
    args += ["--option", "kafka.ssl.truststore.location=/trust.jks"]
    result = CliRunner().invoke(spark_read, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    expected = {
        "jvm": "option kafka.ssl.truststore.location is Spark's connector's own",
        "auto": "'kafka.ssl.truststore.location' is not an option of the fiba-kafka source",
    }
    assert expected[engine] in result.output
