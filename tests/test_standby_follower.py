"""The window store's standby follower leaves no Kafka client behind when a rebalance replaces
it while it is still starting (seen as "Unclosed AIOKafkaConsumer" in a worker's log after the
rebalances of tests/test_broker_faults.py)."""

from __future__ import annotations

import asyncio
import gc
import warnings
from pathlib import Path

import pytest

from tests.test_window_store import create_changelog, make_settings, open_store

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]


async def test_a_follower_replaced_while_starting_closes_its_consumer(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path
) -> None:
    settings = make_settings(kafka_bootstrap, embedded_profile, tmp_path / "s", partitions=3)
    await create_changelog(settings)
    store, _ = await open_store(settings, 2)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            for partitions in ([0], [1], [0, 1]):
                await store.follow(partitions)
                await asyncio.sleep(0)  # the new follower begins starting its consumer
            await store.follow([])
            gc.collect()
        unclosed = [str(w.message) for w in caught if "Unclosed AIOKafka" in str(w.message)]
        assert unclosed == []
    finally:
        await store.stop()
