"""Spark's own Kafka connector (``spark-sql-kafka-0-10``) for the installed PySpark.

``connector_jars()`` resolves ``org.apache.spark:spark-sql-kafka-0-10_2.13:<pyspark version>``
with its runtime dependencies from Maven Central once, into ``<cache>/spark-sql-kafka-<version>/``
(``app.kafka_jars.maven_jars``: the project's pom, ``mvn``, an atomic cache), and returns the
jars Spark does not ship itself: an artifact with a jar of the same artifactId in
``pyspark/jars`` is left out, so Spark's own (newer) scala-library, lz4, snappy and slf4j stay
the only copies on the classpath. What remains is the connector, its token provider,
``kafka-clients`` and ``commons-pool2``. ``connector_conf()`` is the session configuration that
puts them on the driver's and executors' classpath (``spark.jars``), or, when they cannot be
resolved (no ``mvn``, offline, a PySpark whose connector Maven Central does not serve), no jars
and the reason under ``CONNECTOR_ERROR_CONF``. Spark's own ``spark.jars.packages`` (Ivy) is not
used: it resolves again at every session start, and its ``~/.m2`` resolver fails on a pom
cached without its jar.

``python -m spark_bridge.connector`` resolves now (``make spark-jars``) and prints the jars.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyspark

from app.broker import BrokerSetupError
from app.kafka_jars import maven_jars

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
