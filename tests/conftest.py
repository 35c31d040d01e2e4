"""Shared pytest configuration: hypothesis profiles.

Profiles: ``ci`` (default; derandomized so CI runs are reproducible, no deadline because the
2-core CI machine is shared with brokers and Spark) and ``dev`` (random, more examples). Pick
one with ``HYPOTHESIS_PROFILE=dev``.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=100,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "dev",
    deadline=None,
    max_examples=500,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# --- Kafka -------------------------------------------------------------------------------------
# Worker and Spark tests never mock Kafka: they get a real broker. With KAFKA_BOOTSTRAP set they
# use that cluster; otherwise one embedded broker (Tansu) is started for the session and stopped
# at its end. Tests create their own uniquely named topics, so they never collide.

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def kafka_bootstrap():
    """``host:port`` of a running Kafka-protocol broker for the whole test session."""
    external = os.environ.get("KAFKA_BOOTSTRAP")
    if external:
        yield external
        return
    from app.broker import EmbeddedBroker

    with EmbeddedBroker() as broker:
        yield broker.bootstrap


@pytest.fixture(scope="session")
def embedded_profile() -> bool:
    """True when the tests run on the embedded broker (its quirks need the embedded profile)."""
    return not os.environ.get("KAFKA_BOOTSTRAP")


# Spark fixtures (`spark`), imported lazily by the Spark tests only.
pytest_plugins = ["tests.spark_fixtures"]
