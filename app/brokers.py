"""The two kinds of broker the project starts itself, by name (``fiba broker --kind``, demo,
tests): ``embedded`` (Tansu, ``app.broker.EmbeddedBroker``) and ``kafka`` (Apache Kafka,
``app.kafka_broker.KafkaBroker``). ``make_broker`` builds one, not yet started; its ``profile``
is the ``broker_profile`` clients use with it."""

from __future__ import annotations

from typing import Any

from app.broker import BrokerProcess, EmbeddedBroker
from app.kafka_broker import KafkaBroker

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
