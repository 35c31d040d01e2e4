"""What the stream logic reads of the worker's configuration and of its Faust app.

``agents`` sits below ``app`` (which loads the settings and builds the Faust app), so it types
them as Protocols: ``app.settings.Settings`` is a ``WorkerSettings`` and ``app.faust_app.FibaApp``
a ``FaustWorker``, structurally. A setting the stream logic starts to read is added here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # Faust is heavy to import; the Kafka clients need none of it
    import faust
    from aiokafka import AIOKafkaProducer
    from faust.types import TP


class WorkerSettings(Protocol):
    """The settings fields read by ``agents`` (semantics: ``app.settings``)."""

    app_id: str
    partitions: int
    input_topic: str
    aggregates_topic: str
    queries_topic: str
    answers_topic: str
    emit: str
    batch_max_records: int
    batch_max_wait: int
    key_field: str | None
    ts_field: str
    value_field: str
    timestamp_source: str
    max_key_bytes: int
    max_value_bytes: int
    sweep_interval: int
    security_protocol: str | None
    sasl_mechanism: str | None
    sasl_username: str | None
    sasl_password: str | None
    ssl_cafile: str | None
    ssl_certfile: str | None
    ssl_keyfile: str | None

    @property
    def bootstrap_servers(self) -> tuple[str, ...]: ...

    @property
    def embedded(self) -> bool: ...

    @property
    def input_progress_group(self) -> str: ...

    @property
    def web_url(self) -> str: ...

    @property
    def assignment_topic(self) -> str: ...

    @property
    def exactly_once(self) -> bool: ...

    @property
    def isolation_level(self) -> str: ...

    @property
    def outputs_isolation_level(self) -> str: ...


class FaustWorker(Protocol):
    """A worker's Faust app as the stream logic uses it (``app.faust_app.FibaApp``)."""

    settings: WorkerSettings
    app: faust.App
    assignment_topic: faust.TopicT

    def key_partition(self, key: bytes) -> int:
        """The partition of the co-partitioned topics that ``key`` belongs to."""
        ...

    def kafka_producer(self) -> AIOKafkaProducer:
        """The aiokafka producer under the Faust app's producer."""
        ...

    def owned_partitions(self, tps: Iterable[TP]) -> set[int]:
        """The input partitions among ``tps`` (assignment-topic partitions)."""
        ...
