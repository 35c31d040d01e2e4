"""``GET /stats`` answers before the worker's Kafka consumer has started (nothing assigned)."""

from app.settings import load_settings
from app.worker import build_worker


def test_stats_before_the_consumer_starts(tmp_path) -> None:
    settings = load_settings(overrides={"state_dir": str(tmp_path / "state")}, environ={})
    stats = build_worker(settings).pipeline.stats()
    assert stats["assigned"] == []
    assert stats["partitions"] == {}
