"""The kinds of broker the project starts itself, by name (``fiba broker --kind``, demo, tests).

``embedded`` (Tansu, ``app.brokers.tansu.EmbeddedBroker``) and ``kafka`` (Apache Kafka,
``app.brokers.apache_kafka.KafkaBroker``). ``make_broker`` builds one, not yet started; its
``profile`` is the ``broker_profile`` clients use with it.
"""

from __future__ import annotations

from typing import Any

from app.brokers.apache_kafka import KEEP_RECORDS_OF_ANY_AGE, KafkaBroker
from app.brokers.process import BrokerProcess
from app.brokers.tansu import EmbeddedBroker

BROKER_KINDS: dict[str, type[BrokerProcess]] = {"embedded": EmbeddedBroker, "kafka": KafkaBroker}


def make_broker(kind: str, **options: Any) -> BrokerProcess:
    """A broker of ``kind`` (a key of ``BROKER_KINDS``) built with ``options`` (``port``,
    ``log_path``, ``start_timeout``; ``data_dir`` for ``kafka``); ``ValueError`` for an
    unknown kind."""
    try:
        cls = BROKER_KINDS[kind]
    except KeyError:
        raise ValueError(
            f"unknown broker kind {kind!r} (one of {', '.join(BROKER_KINDS)})"
        ) from None
    return cls(**options)


def options_keeping_old_records(kind: str) -> dict[str, Any]:
    """``make_broker`` options under which a broker of ``kind`` keeps records of any age for
    as long as it runs (Apache Kafka: ``KEEP_RECORDS_OF_ANY_AGE``), for data with old event
    times such as the demo's and the tests'."""
    return {"extra_config": KEEP_RECORDS_OF_ANY_AGE} if kind == "kafka" else {}


def development_broker_options(kind: str, port: int, data_dir: str | None) -> dict[str, Any]:
    """The ``make_broker`` options of ``fiba broker``: on ``port``, its log in ``data_dir``
    (``kafka`` only; None: a temporary directory), keeping every record a developer writes
    whatever its timestamp (``options_keeping_old_records``; Apache Kafka's first retention
    check deleted the README session's 2024 events 30 s after the start)."""
    options: dict[str, Any] = {"port": port, **options_keeping_old_records(kind)}
    if data_dir is not None:
        options["data_dir"] = data_dir
    return options
