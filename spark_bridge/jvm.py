"""The JVM engine: Spark's own Kafka connector (``spark-sql-kafka-0-10``), and its options.

``format("kafka")`` reads the topic in the JVM and ``parse_values`` decodes its ``value``
column with the bridge's one decoder (``spark_bridge.decode`` through ``mapInArrow``): the same
rows as the Python source. ``jvm_kafka_options`` translates the bridge's options (security settings
as a JAAS config and PEM certificates), passes other ``kafka.*`` and the connector's own
options through and refuses the rest. On the embedded broker batch reads get explicit ends from
the Fetch high watermark and streaming is refused. Reference: docs/reference/spark.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import partial
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_bridge.connector import CONNECTOR_ERROR_CONF
from spark_bridge.decode import decode_kafka_batches
from spark_bridge.kafka import KafkaReader
from spark_bridge.offsets import EARLIEST, LATEST, resolve_offsets, to_checkpoint
from spark_bridge.schema import AGGREGATES, ANSWERS, OFFSET, PARTITION, SCHEMAS, TIMESTAMP, TOPIC

KAFKA_PROVIDER_CLASS = "org.apache.spark.sql.kafka010.KafkaSourceProvider"

CONNECTOR_OPTIONS = (
    "startingOffsets",
    "endingOffsets",
    "startingOffsetsByTimestamp",
    "endingOffsetsByTimestamp",
    "startingTimestamp",
    "endingTimestamp",
    "startingOffsetsByTimestampStrategy",
    "failOnDataLoss",
    "kafkaConsumer.pollTimeoutMs",
    "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "minPartitions",
    "maxRecordsPerPartition",
    "groupIdPrefix",
    "includeHeaders",
)
"""Source options of Spark's Kafka connector (besides ``kafka.*``) passed through unchanged;
``subscribe``/``assign``/``subscribePattern`` are the bridge's (the topic)."""

LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "OAUTHBEARER": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
}
"""SASL mechanism -> the JAAS login module a user name and password go to."""
OAUTH_CALLBACK_HANDLER = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
)

_BRIDGE_SECURITY = ("kafka.sasl.username", "kafka.sasl.password")
_PEM_FILES = ("kafka.ssl.cafile", "kafka.ssl.certfile", "kafka.ssl.keyfile")
_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----.*?-----END \1-----", re.DOTALL)
_PKCS8_KEYS = ("PRIVATE KEY", "ENCRYPTED PRIVATE KEY")
_DERIVED_FAMILIES = ("kafka.sasl.jaas.config", "kafka.ssl.truststore.", "kafka.ssl.keystore.")
"""Connector options the bridge's options become; also giving them directly is refused."""


def jvm_kafka_available(spark: SparkSession) -> bool:
    """True when Spark's Kafka connector can be loaded by the session's JVM.

    False as well when the session has no JVM gateway (Spark Connect).
    """
    jvm = getattr(spark, "_jvm", None) or getattr(spark.sparkContext, "_jvm", None)
    if jvm is None:
        return False
    try:
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName(KAFKA_PROVIDER_CLASS, False, loader)
    except Exception:
        return False
    return True


def connector_missing_reason(spark: SparkSession) -> str:
    """Why the connector is not on ``spark``'s classpath, as far as the session knows."""
    return spark.conf.get(CONNECTOR_ERROR_CONF, None) or (
        "the session was started without its jars (spark_bridge.session.spark_session adds them)"
    )


def explicit_offsets(options: Mapping[str, str], topic: str) -> dict[str, str]:
    """``startingOffsets`` and ``endingOffsets`` of a batch read of ``topic`` as per-partition
    JSON, "latest" being the Fetch high watermark (for the embedded broker: module docstring).

    ``options`` are the bridge's (bootstrap, security, the two offset specifications, whose
    explicit offsets are clamped into the retained range). One metadata, one ListOffsets
    (earliest) and one Fetch round trip.
    """
    lowered = {k.lower(): v for k, v in options.items()}
    with KafkaReader(lowered, topic) as reader:
        partitions, earliest, latest = reader.bounds()
    out = {}
    for name, default in (("startingOffsets", EARLIEST), ("endingOffsets", LATEST)):
        spec = lowered.get(name.lower(), default)
        offsets = resolve_offsets(spec, topic, partitions, earliest, latest, default)
        out[name] = json.dumps(to_checkpoint(topic, offsets))
    return out


def jaas_quote(value: str) -> str:
    """``value`` as a double-quoted JAAS option value (Kafka parses it with Java's
    ``StreamTokenizer``: backslash, quote and line breaks escaped)."""
    escaped = (
        value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    )
    return f'"{escaped}"'


def _jaas_config(mechanism: str, user: str, password: str) -> tuple[str, dict[str, str]]:
    """(``sasl.jaas.config``, other connector options it needs) for a user and password."""
    if mechanism == "GSSAPI":
        raise ValueError(
            "kafka.sasl.mechanism GSSAPI (Kerberos) takes a keytab, not a user name and "
            "password: pass --option kafka.sasl.jaas.config='com.sun.security.auth.module."
            'Krb5LoginModule required useKeyTab=true keyTab="..." principal="...";\' and '
            "kafka.sasl.kerberos.service.name instead"
        )
    module = LOGIN_MODULES.get(mechanism)
    if module is None:
        known = ", ".join(sorted(LOGIN_MODULES))
        raise ValueError(f"kafka.sasl.mechanism {mechanism!r} is not one of {known}, GSSAPI")
    if mechanism == "OAUTHBEARER":  # OAuth client credentials (KIP-768)
        secret = jaas_quote(password)
        config = f"{module} required clientId={jaas_quote(user)} clientSecret={secret};"
        return config, {"kafka.sasl.login.callback.handler.class": OAUTH_CALLBACK_HANDLER}
    return f"{module} required username={jaas_quote(user)} password={jaas_quote(password)};", {}


def _pem_blocks(path: str, option: str) -> list[tuple[str, str]]:
    """(label, block text) of every PEM block in file ``path`` (named by ``option`` in errors)."""
    try:
        text = Path(path).read_text(encoding="ascii")
    except (OSError, UnicodeError) as exc:
        raise ValueError(f"{option}: cannot read PEM file {path!r}: {exc}") from None
    return [(m.group(1), m.group(0)) for m in _PEM_BLOCK.finditer(text)]


def _pem_stores(cafile: str | None, certfile: str | None, keyfile: str | None) -> dict[str, str]:
    """Connector options of PEM files: PEM *text* in the trust and key store options (read here,
    on the driver, so executors need no copy of the files)."""
    out: dict[str, str] = {}
    if cafile:
        blocks = _pem_blocks(cafile, "kafka.ssl.cafile")
        certs = [b for label, b in blocks if label == "CERTIFICATE"]
        if not certs:
            raise ValueError(f"kafka.ssl.cafile {cafile!r} holds no PEM CERTIFICATE")
        out["kafka.ssl.truststore.type"] = "PEM"
        out["kafka.ssl.truststore.certificates"] = "\n".join(certs)
    if keyfile and not certfile:
        raise ValueError("kafka.ssl.keyfile needs kafka.ssl.certfile (the client certificate)")
    if certfile:
        cert_blocks = _pem_blocks(certfile, "kafka.ssl.certfile")
        key_blocks = _pem_blocks(keyfile, "kafka.ssl.keyfile") if keyfile else cert_blocks
        chain = [b for label, b in cert_blocks if label == "CERTIFICATE"]
        keys = [(label, b) for label, b in key_blocks if label.endswith("PRIVATE KEY")]
        if not chain:
            raise ValueError(f"kafka.ssl.certfile {certfile!r} holds no PEM CERTIFICATE")
        if len(keys) != 1:
            raise ValueError(
                f"{'kafka.ssl.keyfile' if keyfile else 'kafka.ssl.certfile'} must hold exactly "
                f"one PEM private key, found {len(keys)}"
            )
        label, key = keys[0]
        if label not in _PKCS8_KEYS:
            raise ValueError(
                f"the client key is a PEM {label!r}; Kafka's JVM client needs PKCS#8 "
                "('PRIVATE KEY'): convert it with openssl pkcs8 -topk8 -nocrypt"
            )
        out["kafka.ssl.keystore.type"] = "PEM"
        out["kafka.ssl.keystore.certificate.chain"] = "\n".join(chain)
        out["kafka.ssl.keystore.key"] = key
    return out


def jvm_kafka_options(options: Mapping[str, str]) -> dict[str, str]:
    """The connector's options for the bridge's source options (names case-insensitive).

    - ``kafka.sasl.username``/``password`` become ``kafka.sasl.jaas.config`` with the login
      module of ``kafka.sasl.mechanism`` (PLAIN default; SCRAM-*; OAUTHBEARER as OAuth client
      credentials, with its callback handler), values escaped; GSSAPI is refused (Kerberos
      takes a keytab: pass ``kafka.sasl.jaas.config`` itself);
    - PEM files ``kafka.ssl.cafile``/``certfile``/``keyfile`` are read: their PEM text goes to
      ``kafka.ssl.truststore.certificates`` and ``kafka.ssl.keystore.certificate.chain``/
      ``key`` (type PEM); the key must be PKCS#8;
    - every other ``kafka.*`` option and the connector's own (``CONNECTOR_OPTIONS``) pass
      through unchanged.

    Raises ``ValueError`` (one line) for an option the connector does not take, for a setting
    given twice (a bridge option and the connector option it becomes), or for unusable files.
    """
    lowered = {k.lower(): v for k, v in options.items()}
    connector = {name.lower(): name for name in CONNECTOR_OPTIONS}
    out: dict[str, str] = {}
    for name, value in lowered.items():
        if name in _BRIDGE_SECURITY or name in _PEM_FILES:
            continue
        if name.startswith("kafka."):
            out[name] = value
        elif name in connector:
            out[connector[name]] = value
        else:
            raise ValueError(
                f"option {name!r} is not an option of Spark's Kafka connector (engine jvm); "
                f"it takes kafka.* and {', '.join(CONNECTOR_OPTIONS)}"
            )
    derived: dict[str, str] = {}
    user, password = lowered.get("kafka.sasl.username"), lowered.get("kafka.sasl.password")
    if user is not None or password is not None:
        mechanism = lowered.get("kafka.sasl.mechanism", "PLAIN").upper()
        config, extra = _jaas_config(mechanism, user or "", password or "")
        derived["kafka.sasl.jaas.config"] = config
        derived.update({k: v for k, v in extra.items() if k not in out})
    derived.update(
        _pem_stores(*(lowered.get(name) for name in _PEM_FILES))  # type: ignore[arg-type]
    )
    for family in _DERIVED_FAMILIES:
        if any(n.startswith(family) for n in derived) and any(n.startswith(family) for n in out):
            raise ValueError(
                f"options {family}* are given twice: directly and by kafka.sasl.username/"
                "password or kafka.ssl.cafile/certfile/keyfile; give one or the other"
            )
    return {**out, **derived}


def parse_values(df: DataFrame, kind: str) -> DataFrame:
    """``df`` with Kafka columns (``value`` binary, ``topic``, ``partition``, ``offset``,
    ``timestamp``, as ``format("kafka")`` yields) decoded into ``SCHEMAS[kind]``.

    One ``mapInArrow`` running ``spark_bridge.decode`` in the Python workers: row by row, no
    shuffle, the very rows the ``fiba-kafka`` data source yields for the same records.
    """
    if kind not in (AGGREGATES, ANSWERS):
        raise ValueError(f"unknown record kind {kind!r}")
    raw = df.select(
        F.col("value").cast("binary").alias("value"),
        F.col(TOPIC).cast("string").alias(TOPIC),
        F.col(PARTITION).cast("int").alias(PARTITION),
        F.col(OFFSET).cast("long").alias(OFFSET),
        F.col(TIMESTAMP).cast("timestamp").alias(TIMESTAMP),
    )
    return raw.mapInArrow(partial(decode_kafka_batches, kind), SCHEMAS[kind])
