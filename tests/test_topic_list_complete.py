"""``fiba topics create`` (``app.topics.topic_specs``) creates every topic a worker touches.

A worker runs its whole life cycle on topics created from the list alone (join, assignment,
restore, input, aggregates, dead letters, a query over the topic and one over HTTP), then the
broker's topic list is compared with the specs: any other topic with the test's unique prefix
was created by the broker on first use, so the list missed it. On a broker with auto-creation
off (the docker-compose Kafka; ``KAFKA_BOOTSTRAP`` pointing at one) a missed topic makes the
worker fail instead; on the embedded broker, which auto-creates any topic a client names, the
extra topic shows in the listing. Either way the test fails when the list is incomplete.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from agents.clients import client_options, read_to_end
from app.demo import start_worker, stop_worker
from app.settings import Settings
from app.topics import create_topics, topic_specs
from tests.test_worker_e2e import BASE, make_settings, produce
from tests.test_worker_health import get

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]


async def topics_named_like(settings: Settings) -> set[str]:
    """Every topic on the broker whose name carries the test's unique app id."""
    admin = AIOKafkaAdminClient(**client_options(settings))
    await admin.start()
    try:
        return {name for name in await admin.list_topics() if settings.app_id in name}
    finally:
        await admin.close()


def test_the_topic_list_is_every_topic_a_worker_uses(kafka_bootstrap, embedded_profile, tmp_path):
    settings = make_settings(kafka_bootstrap, embedded_profile, tmp_path / "state", "event")
    asyncio.run(create_topics(settings))
    wanted = {spec.name for spec in topic_specs(settings)}
    assert asyncio.run(topics_named_like(settings)) == wanted
    log = tmp_path / "worker.log"
    worker = start_worker(settings, log)
    try:
        deadline = time.monotonic() + 90
        status = 0
        while status != 200:
            assert worker.poll() is None, "the worker exited"
            assert time.monotonic() < deadline, "the worker never became ready"
            time.sleep(0.5)
            try:
                status, _ = get(settings.web_port, "/ready")
            except OSError:
                continue
        events = [(b"k", json.dumps({"ts": BASE + i, "value": i}).encode(), None) for i in range(5)]
        asyncio.run(produce(settings, settings.input_topic, [*events, (b"k", b"{", None)]))
        query = {"query_id": "q", "key": "k", "from": BASE, "to": BASE + 10}
        asyncio.run(produce(settings, settings.queries_topic, [(b"k", json.dumps(query).encode())]))
        deadline = time.monotonic() + 60
        while not asyncio.run(read_to_end(settings, settings.answers_topic)):
            assert time.monotonic() < deadline, "no answer"
            time.sleep(0.5)
        assert get(settings.web_port, "/windows/k?window=2s")[0] == 200
        assert asyncio.run(topics_named_like(settings)) == wanted
        assert worker.poll() is None
    except BaseException:
        print(log.read_text(errors="replace")[-5000:])
        raise
    finally:
        stop_worker(worker)
