"""The JVM engine: Spark's own Kafka connector (``spark-sql-kafka-0-10``), and its options.

``format("kafka")`` reads the topic in the JVM and ``parse_values`` decodes its ``value``
column with the bridge's one decoder (``spark_bridge.decode`` through ``mapInArrow``): the same
rows as the Python source. ``jvm_kafka_options`` renders the bridge's connection options for
the connector (``agents.connection``: a JAAS config, PEM stores), passes other ``kafka.*`` and
the connector's own options through and refuses the rest. On every broker a batch read gets
explicit offsets from the Fetch high watermark (``explicit_offsets``: the connector's
ListOffsets "latest" is wrong on the embedded broker); a stream is refused where ListOffsets is
seen below the high watermark (``check_list_offsets``). Reference: docs/reference/spark.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import partial

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from agents.connection import DERIVED_FAMILIES, SOURCE_OPTIONS, KafkaConnection
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


def explicit_offsets(
    options: Mapping[str, str], topic: str, streaming: bool = False
) -> dict[str, str]:
    """The offset specifications of a read of ``topic`` as per-partition JSON, "latest" being
    the Fetch high watermark and a partition the JSON leaves out taking the default (earliest
    for a start, latest for an end), as the Python source does.

    A batch read gets ``startingOffsets`` and ``endingOffsets``; a stream only a JSON
    ``startingOffsets`` (``earliest``/``latest`` are left to the connector, resolved when the
    query starts). ``options`` are the bridge's (bootstrap, security, the two specifications,
    whose explicit offsets are clamped into the retained range). One metadata, one ListOffsets
    (earliest) and one Fetch round trip; none for a stream without JSON.
    """
    lowered = {k.lower(): v for k, v in options.items()}
    specs = {"startingOffsets": EARLIEST, "endingOffsets": LATEST}
    if streaming:
        spec = lowered.get("startingoffsets", LATEST).strip()
        if spec in (EARLIEST, LATEST):
            return {}
        specs = {"startingOffsets": EARLIEST}
    with KafkaReader(lowered, topic) as reader:
        partitions, earliest, latest = reader.bounds()
    out = {}
    for name, default in specs.items():
        spec = lowered.get(name.lower(), default)
        offsets = resolve_offsets(spec, topic, partitions, earliest, latest, default)
        out[name] = json.dumps(to_checkpoint(topic, offsets))
    return out


STREAM_REFUSED = (
    "engine jvm cannot stream this topic: Spark's Kafka connector takes each micro-batch's end "
    "from ListOffsets(latest), and "
)


def check_list_offsets(options: Mapping[str, str], topic: str) -> None:
    """Raise ``ValueError`` (one line) when the broker's ListOffsets(latest) of a partition of
    ``topic`` is below its Fetch high watermark (taken first, so records appended meanwhile can
    only raise ListOffsets): the connector would end micro-batches short. Detects the embedded
    broker on any topic whose newest batch holds several records. One metadata, two ListOffsets
    and one Fetch round trip."""
    lowered = {k.lower(): v for k, v in options.items()}
    with KafkaReader(lowered, topic) as reader:
        partitions = reader.partitions()
        watermarks = reader.high_watermarks(partitions)
        listed = reader.latest_offsets(partitions)
    for p in partitions:
        if listed[p] < watermarks[p]:
            raise ValueError(
                f"{STREAM_REFUSED}this broker answers it wrongly ({topic}[{p}]: {listed[p]}, "
                f"high watermark {watermarks[p]}); use engine python"
            )


def jvm_kafka_options(options: Mapping[str, str]) -> dict[str, str]:
    """The connector's options for the bridge's source options (names case-insensitive).

    The connection's options (servers, protocol, mechanism; a user name and password as
    ``kafka.sasl.jaas.config``, PEM files as PEM text in the trust and key stores) are
    ``KafkaConnection.from_options(options).connector_options()``; every other ``kafka.*``
    option and the connector's own (``CONNECTOR_OPTIONS``) pass through unchanged (a
    ``kafka.sasl.jaas.config`` too: the driver's client refuses it, ``driver_refusal``).

    Raises ``ValueError`` (one line) for an option the connector does not take, for a setting
    given twice (a bridge option and the connector option it becomes), or for unusable files.
    """
    lowered = {k.lower(): v for k, v in options.items()}
    connector = {name.lower(): name for name in CONNECTOR_OPTIONS}
    fields = {"kafka.bootstrap.servers", *SOURCE_OPTIONS}
    out: dict[str, str] = {}
    for name, value in lowered.items():
        if name in fields:
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
    derived = KafkaConnection.from_options(lowered).connector_options()
    for family in DERIVED_FAMILIES:
        if any(n.startswith(family) for n in derived) and any(n.startswith(family) for n in out):
            raise ValueError(
                f"options {family}* are given twice: directly and by kafka.sasl.username/"
                "password or kafka.ssl.cafile/certfile/keyfile; give one or the other"
            )
    return {**derived, **out}


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
