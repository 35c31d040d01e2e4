"""A SparkSession set up for the bridge: UTC session time zone, the ``fiba-kafka`` source, and
Spark's own Kafka connector when it resolves.

``spark_session(master, ...)`` gets or creates the session (``master=None`` keeps what
``spark-submit`` configured), makes the Python workers use this interpreter (on a ``local``
master through ``spark_bridge.python_workers``, which starts them faster), puts the jars of
Spark's Kafka connector on the classpath (``spark_bridge.connector``: resolved from Maven Central
once, then cached; when they cannot be, the session starts without them and the reason is kept
in its conf for ``engine="auto"``'s fallback line), and registers
``spark_bridge.source.FibaKafkaDataSource`` so ``format("fiba-kafka")`` works. Options only
take effect when the call starts Spark's JVM (not on an already running session).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

from spark_bridge.connector import connector_conf
from spark_bridge.python_workers import is_local, worker_python
from spark_bridge.source import FibaKafkaDataSource

DEFAULT_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
}


def register(spark: SparkSession) -> SparkSession:
    """Register the ``fiba-kafka`` data source on ``spark`` (idempotent); returns ``spark``."""
    spark.dataSource.register(FibaKafkaDataSource)
    return spark


def session_conf(conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """``DEFAULT_CONF``, the connector's conf and ``conf``, later ones winning except
    ``spark.jars``, whose lists are joined (a caller's jars join the connector's)."""
    connector = connector_conf()
    merged = {**DEFAULT_CONF, **connector, **(conf or {})}
    jars = [c["spark.jars"] for c in (connector, conf or {}) if c.get("spark.jars")]
    if jars:
        merged["spark.jars"] = ",".join(jars)
    return merged


def spark_session(
    master: str | None = None,
    *,
    app_name: str = "fiba-spark",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """The active session, or a new one on ``master`` with ``session_conf(conf)``; unless
    ``PYSPARK_PYTHON`` is set, the Python workers run this interpreter (``worker_python()``'s
    on a ``local`` master)."""
    os.environ.setdefault("PYSPARK_PYTHON", worker_python() if is_local(master) else sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    for name, value in session_conf(conf).items():
        builder = builder.config(name, value)
    return register(builder.getOrCreate())
