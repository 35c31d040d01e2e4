"""Spark's own Kafka connector (``spark-sql-kafka-0-10``) for the installed PySpark.

``connector_jars()`` resolves ``org.apache.spark:spark-sql-kafka-0-10_2.13:<pyspark version>``
from Maven Central once (``app.brokers.kafka_jars.maven_jars``: ``mvn``, an atomic cache) and
returns only the jars Spark does not ship (the connector, its token provider, ``kafka-clients``,
``commons-pool2``); ``connector_conf()`` is the session configuration that puts them on the
classpath. ``python -m spark_bridge.connector`` (``make spark-jars``) resolves them ahead.
Reference: docs/reference/spark.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyspark

from app.brokers.kafka_jars import maven_jars
from app.brokers.process import BrokerSetupError

SCALA_VERSION = "2.13"
CONNECTOR_ARTIFACT = f"spark-sql-kafka-0-10_{SCALA_VERSION}"
CONNECTOR_ERROR_CONF = "spark.fiba.kafkaConnector.error"
"""Session conf holding why the connector is not on the classpath (``connector_conf``)."""


def spark_jars_dir() -> Path:
    """The jars PySpark runs Spark with."""
    return Path(pyspark.__file__).resolve().parent / "jars"


def shipped_by_spark(artifact_id: str, shipped: set[str]) -> bool:
    """True when ``shipped`` (jar file names) holds ``<artifact_id>-<version>.jar``."""
    prefix = artifact_id + "-"
    return any(
        name.startswith(prefix) and name[len(prefix) : len(prefix) + 1].isdigit()
        for name in shipped
    )


def connector_jars(version: str | None = None, root: Path | None = None) -> list[Path]:
    """The connector's jars for Spark ``version`` (default: the installed PySpark's) that Spark
    does not ship, resolved into the cache on first use; ``BrokerSetupError`` if they cannot
    be."""
    version = version or pyspark.__version__
    folder = maven_jars(
        f"spark-sql-kafka-{version}",
        f"Spark's Kafka connector {CONNECTOR_ARTIFACT} {version}",
        [("org.apache.spark", CONNECTOR_ARTIFACT, version)],
        f"{CONNECTOR_ARTIFACT}-{version}.jar",
        root,
        repository_layout=True,
    )
    shipped = {p.name for p in spark_jars_dir().glob("*.jar")}
    jars = folder.rglob("*.jar")  # <group path>/<artifactId>/<version>/<artifactId>-<version>.jar
    return sorted(jar for jar in jars if not shipped_by_spark(jar.parent.parent.name, shipped))


def connector_conf() -> dict[str, str]:
    """Spark conf adding the connector's jars (``spark.jars``), or its error (module docstring)."""
    try:
        jars = connector_jars()
    except BrokerSetupError as exc:
        return {CONNECTOR_ERROR_CONF: str(exc)}
    return {"spark.jars": ",".join(str(jar) for jar in jars)}


def main() -> None:
    """Resolve the connector now and print its jars; a failure is one line and exit code 2."""
    try:
        jars = connector_jars()
    except BrokerSetupError as exc:
        print(f"fiba: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    print("\n".join(str(jar) for jar in jars))


if __name__ == "__main__":
    main()
