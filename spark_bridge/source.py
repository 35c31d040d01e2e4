"""The ``fiba-kafka`` Spark Python data source: the output topics as typed DataFrames.

``FibaKafkaDataSource`` (registered by ``spark_session``) reads a topic in batch or as a stream
with aiokafka inside the Spark tasks, no jar needed: one Spark partition per Kafka partition
(or per slice of ``maxRecordsPerPartition``), ends from the Fetch high watermark (never
ListOffsets), records decoded by ``spark_bridge.decode`` into ``spark_bridge.schema``. Streaming
micro-batches are offset ranges checkpointed by Spark. Options (``kafka.bootstrap.servers``,
``topic``, ``records``, ``startingOffsets``, ``endingOffsets``, ``maxOffsetsPerTrigger``,
``kafka.isolation.level``, the security passthrough) and what each does:
docs/reference/spark.md.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from spark_bridge.decode import decode_batch
from spark_bridge.kafka import (
    BOOTSTRAP_OPTIONS,
    ISOLATION_LEVEL_OPTION,
    SECURITY_OPTIONS,
    KafkaReader,
    KafkaSourceError,
)
from spark_bridge.offsets import (
    EARLIEST,
    LATEST,
    OffsetRange,
    from_checkpoint,
    limit_offsets,
    offset_ranges,
    resolve_offsets,
    to_checkpoint,
)
from spark_bridge.schema import AGGREGATES, SCHEMAS

SHORT_NAME = "fiba-kafka"
DEFAULT_MAX_RECORDS_PER_PARTITION = 200_000
OPTIONS = (
    *BOOTSTRAP_OPTIONS,
    "topic",
    "records",
    "startingOffsets",
    "endingOffsets",
    "maxRecordsPerPartition",
    "maxOffsetsPerTrigger",
    ISOLATION_LEVEL_OPTION,
    *SECURITY_OPTIONS,
)
"""The options the data source takes (see the module docstring)."""


def check_options(options: Mapping[str, str]) -> None:
    """Raise ``ValueError`` naming the first option (case-insensitive) not in ``OPTIONS``."""
    known = {name.lower() for name in OPTIONS}
    for name in options:
        if name.lower() not in known:
            raise ValueError(
                f"option {name!r} is not an option of the fiba-kafka source (engine python); "
                f"it takes {', '.join(OPTIONS)}"
            )


def _option(options: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    """Option ``name`` looked up case-insensitively (Spark lower-cases option names)."""
    if name in options:
        return options[name]
    lowered = name.lower()
    for key, value in options.items():
        if key.lower() == lowered:
            return value
    return default


class _Config:
    """The validated options shared by the batch and the stream reader."""

    def __init__(self, options: Mapping[str, str], streaming: bool) -> None:
        check_options(options)
        self.options = {k.lower(): v for k, v in options.items()}
        topic = _option(options, "topic")
        if not topic:
            raise KafkaSourceError("option topic is required")
        self.topic = topic
        self.kind = _option(options, "records", AGGREGATES) or AGGREGATES
        if self.kind not in SCHEMAS:
            raise KafkaSourceError(f"option records must be one of {sorted(SCHEMAS)}")
        self.starting = _option(options, "startingOffsets", LATEST if streaming else EARLIEST)
        self.ending = _option(options, "endingOffsets", LATEST)
        self.max_records = int(
            _option(options, "maxRecordsPerPartition", str(DEFAULT_MAX_RECORDS_PER_PARTITION))
            or DEFAULT_MAX_RECORDS_PER_PARTITION
        )
        max_per_trigger = _option(options, "maxOffsetsPerTrigger")
        self.max_per_trigger = int(max_per_trigger) if max_per_trigger else None

    def kafka(self) -> KafkaReader:
        return KafkaReader(self.options, self.topic)

    def bounds(self) -> tuple[list[int], dict[int, int], dict[int, int]]:
        """(partitions, earliest offsets, high watermarks) of the topic now."""
        with self.kafka() as reader:
            return reader.bounds()

    def read(self, part: OffsetRange) -> Iterator[pa.RecordBatch]:
        with self.kafka() as reader:
            for chunk in reader.read(part.partition, part.start, part.end):
                yield decode_batch(self.kind, chunk)


class FibaKafkaDataSource(DataSource):
    """Kafka topics of fiba-stream records (aggregates, answers or raw), batch and streaming."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> StructType:
        kind = _option(self.options, "records", AGGREGATES) or AGGREGATES
        if kind not in SCHEMAS:
            raise KafkaSourceError(f"option records must be one of {sorted(SCHEMAS)}")
        return SCHEMAS[kind]

    def reader(self, schema: StructType) -> DataSourceReader:
        return FibaKafkaBatchReader(_Config(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return FibaKafkaStreamReader(_Config(self.options, streaming=True))


class FibaKafkaBatchReader(DataSourceReader):
    """Reads ``[startingOffsets, endingOffsets)`` of every partition, fixed at planning time."""

    def __init__(self, config: _Config) -> None:
        self.config = config

    def partitions(self) -> list[OffsetRange]:
        c = self.config
        partitions, earliest, latest = c.bounds()
        start = resolve_offsets(c.starting, c.topic, partitions, earliest, latest, EARLIEST)
        end = resolve_offsets(c.ending, c.topic, partitions, earliest, latest, LATEST)
        end = {p: max(end[p], start[p]) for p in partitions}
        return offset_ranges(start, end, c.max_records)

    def read(self, partition: OffsetRange) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return self.config.read(partition)


class FibaKafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of offset ranges; offsets checkpointed by Spark (see module docstring)."""

    def __init__(self, config: _Config) -> None:
        self.config = config
        self._target: dict[int, int] | None = None

    def initialOffset(self) -> dict[str, Any]:
        c = self.config
        partitions, earliest, latest = c.bounds()
        start = resolve_offsets(c.starting, c.topic, partitions, earliest, latest, EARLIEST)
        return to_checkpoint(c.topic, start)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.config.bounds()[2]

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.config.max_per_trigger:
            return ReadMaxRows(self.config.max_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        c = self.config
        begin = from_checkpoint(c.topic, start)
        if self._target is not None:
            end = dict(self._target)
        else:
            partitions, earliest, latest = c.bounds()
            end = {p: latest[p] for p in partitions}
            begin = {p: begin.get(p, earliest[p]) for p in partitions}
        end = {p: max(o, begin.get(p, 0)) for p, o in end.items()}
        if isinstance(limit, ReadMaxRows):
            end = limit_offsets(begin, end, limit.max_rows)
        return to_checkpoint(c.topic, end)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[OffsetRange]:
        c = self.config
        begin, finish = from_checkpoint(c.topic, start), from_checkpoint(c.topic, end)
        if set(finish) - set(begin):
            with c.kafka() as reader:
                earliest = reader.earliest_offsets(sorted(set(finish) - set(begin)))
            begin = {**earliest, **begin}
        return offset_ranges(begin, finish, c.max_records)

    def read(self, partition: OffsetRange) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return self.config.read(partition)
