"""A reduced ``make chaos`` (``bench.chaos``): two workers SIGKILLed twice while they work
through a stream with late, future and malformed records; every output checked by brute force."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.chaos import parse_args, run

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(400)]


def test_random_kills_lose_nothing(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path
) -> None:
    args = parse_args(["--events", "4000", "--kills", "2", "--queries", "4", "--rate", "800"])
    outcome = run(args, kafka_bootstrap, embedded_profile, tmp_path)
    assert outcome.kills == 2
    assert outcome.exact, outcome.summary()
    assert outcome.events == 4000 and outcome.queries == 4
