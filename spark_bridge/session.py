"""A SparkSession set up for the bridge: UTC session time zone, the ``fiba-kafka`` source.

``spark_session(master, ...)`` gets or creates the session (``master=None`` keeps what
``spark-submit`` configured), makes the Python workers use this interpreter, and registers
``spark_bridge.source.FibaKafkaDataSource`` so ``format("fiba-kafka")`` works.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

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


def spark_session(
    master: str | None = None,
    *,
    app_name: str = "fiba-spark",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """The active session, or a new one on ``master`` with ``DEFAULT_CONF`` and ``conf``."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    for name, value in {**DEFAULT_CONF, **(conf or {})}.items():
        builder = builder.config(name, value)
    return register(builder.getOrCreate())
