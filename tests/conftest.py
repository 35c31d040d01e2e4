"""Shared pytest configuration: hypothesis profiles.

Profiles: ``ci`` (default; derandomized so CI runs are reproducible, no deadline because the
2-core CI machine is shared with brokers and Spark) and ``dev`` (random, more examples). Pick
one with ``HYPOTHESIS_PROFILE=dev``.
"""

import os
from contextlib import ExitStack

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
# Worker and Spark tests never mock Kafka: they get a real broker. Every test that uses
# `kafka_bootstrap` runs once per broker kind the project starts itself (ids `[embedded]`: Tansu
# with the embedded profile, `[kafka]`: Apache Kafka with the kafka profile, no workaround), one
# session broker per kind: pytest runs all tests of one kind, stops that broker, then starts the
# other. TEST_BROKER_KINDS=embedded (or kafka) keeps one kind. With KAFKA_BOOTSTRAP set the
# tests use only that cluster (id `[external]`), with the profile in KAFKA_BROKER_PROFILE
# (default kafka). Tests create their own uniquely named topics, so they never collide.

import pytest  # noqa: E402

from app.brokers.kinds import BROKER_KINDS, make_broker, options_keeping_old_records  # noqa: E402
from app.brokers.process import BrokerError  # noqa: E402

# The tests' events are from 2023 and every output record's Kafka timestamp is its event time,
# far beyond the 7 days of time retention the app gives its topics: the session broker keeps
# records of any age (Apache Kafka's first retention check, 30 s after it starts, deleted the
# outputs of whichever test was running then).


def broker_kinds_under_test() -> list[str]:
    """The parameters of the session broker (see above)."""
    if os.environ.get("KAFKA_BOOTSTRAP"):
        return ["external"]
    chosen = os.environ.get("TEST_BROKER_KINDS")
    kinds = [k.strip() for k in chosen.split(",")] if chosen else list(BROKER_KINDS)
    unknown = set(kinds) - set(BROKER_KINDS)
    if unknown:
        raise pytest.UsageError(f"TEST_BROKER_KINDS: unknown kinds {sorted(unknown)}")
    return kinds


@pytest.fixture(scope="session", params=broker_kinds_under_test())
def broker_kind(request: pytest.FixtureRequest) -> str:
    """The kind of the session broker: ``embedded``, ``kafka`` or ``external``."""
    return request.param


# Under xdist (`make test`) the controller starts one session broker per kind, once, as it sets
# up its first worker, hands every worker the addresses (`workerinput`) and stops the brokers
# when the run ends: the workers share them instead of starting a broker (a JVM for `kafka`)
# each. A failed start fails the Kafka tests with its reason, as a worker's own start would.
SHARED_BROKERS = "fiba_session_brokers"
_shared_brokers = pytest.StashKey[dict[str, str]]()
_shared_brokers_stop = pytest.StashKey[ExitStack]()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """xdist controller, per worker: start the shared session brokers on the first call."""
    config = node.config
    if os.environ.get("KAFKA_BOOTSTRAP"):
        return
    if _shared_brokers not in config.stash:
        stack = config.stash[_shared_brokers_stop] = ExitStack()
        addresses = config.stash[_shared_brokers] = {}
        for kind in broker_kinds_under_test():
            try:
                broker = make_broker(kind, **options_keeping_old_records(kind))
                addresses[kind] = stack.enter_context(broker).bootstrap
            except BrokerError as exc:
                addresses[kind] = f"error: {exc}"
    node.workerinput[SHARED_BROKERS] = config.stash[_shared_brokers]


def pytest_unconfigure(config: pytest.Config) -> None:
    """xdist controller: stop the shared session brokers (if it started any)."""
    if _shared_brokers_stop in config.stash:
        config.stash[_shared_brokers_stop].close()


@pytest.fixture(scope="session")
def kafka_bootstrap(request: pytest.FixtureRequest, broker_kind: str):
    """``host:port`` of a running Kafka-protocol broker for the whole test session."""
    if broker_kind == "external":
        yield os.environ["KAFKA_BOOTSTRAP"]
        return
    shared = getattr(request.config, "workerinput", {}).get(SHARED_BROKERS, {}).get(broker_kind)
    if shared is not None:
        if shared.startswith("error: "):
            pytest.fail(f"the session broker {broker_kind!r} did not start: {shared[7:]}")
        yield shared
        return
    with make_broker(broker_kind, **options_keeping_old_records(broker_kind)) as broker:
        yield broker.bootstrap


@pytest.fixture(scope="session")
def broker_profile(broker_kind: str) -> str:
    """The ``broker_profile`` for the session broker (``embedded`` on Tansu only)."""
    if broker_kind == "external":
        return os.environ.get("KAFKA_BROKER_PROFILE", "kafka")
    return BROKER_KINDS[broker_kind].profile


@pytest.fixture(scope="session")
def embedded_profile(broker_profile: str) -> bool:
    """True when the tests run with the embedded profile (the Tansu workarounds)."""
    return broker_profile == "embedded"


# Spark fixtures (`spark`), imported lazily by the Spark tests only.
pytest_plugins = ["tests.spark_fixtures"]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadfile``: the slowest files first, the longest split (tests/xdist_schedule.py)."""
    if config.getoption("dist") != "loadfile":
        return None
    from tests.xdist_schedule import SlowestFirstScheduling

    return SlowestFirstScheduling(config, log)
