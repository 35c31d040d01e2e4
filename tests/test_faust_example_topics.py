"""The README's command for the Faust example's topics is all it needs: after
``fiba topics create --partitions N --topic <input> --topic <output>`` (and nothing else: Faust
declares its own changelog and leader topics), ``examples/clicks.py`` runs as written and its
outputs equal the oracle's, with its input, output and changelog topics at N partitions."""

from __future__ import annotations

import asyncio
import json

import pytest
from click.testing import CliRunner

import tests.test_sliding_e2e as example_e2e
from app.cli import cli
from app.topic_info import list_topics
from tests.test_sliding_e2e import (
    PARTITIONS,
    ExampleRun,
    check_exact_from_empty,
    make_clicks,
    split_outputs,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

EVENTS = 120


def test_the_readme_command_creates_what_the_faust_example_needs(
    kafka_bootstrap, embedded_profile, tmp_path, monkeypatch
):
    commands: list[list[str]] = []

    def readme_command(settings, specs):
        """In place of the harness's own topic creation: the README's command for the input
        and output topics only."""
        source, sink = specs[0].name, specs[1].name
        args = ["topics", "create", "--broker", settings.broker, "--partitions", str(PARTITIONS),
                "--topic", source, "--topic", sink]  # fmt: skip
        result = CliRunner().invoke(cli, args, env={}, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        commands.append(args)
        return asyncio.sleep(0)

    monkeypatch.setattr(example_e2e, "create_topics", readme_command)
    run = ExampleRun(kafka_bootstrap, embedded_profile, tmp_path)
    assert len(commands) == 1
    clicks = make_clicks(EVENTS, seed=5)
    run.start("worker")
    try:
        run.wait_for(
            lambda: run.changelog in asyncio.run(list_topics(run.settings)),
            "Faust declares its table's changelog",
        )
        run.produce(clicks)
        run.wait_for(lambda: len(run.read(run.out_topic)) >= EVENTS, f"{EVENTS} outputs")
        clicks = run.placed(clicks)
        records = run.read(run.out_topic)
    finally:
        run.stop_all()
    topics = asyncio.run(list_topics(run.settings))
    for name in (run.topic, run.out_topic, run.changelog):
        assert topics[name] == PARTITIONS, (name, topics)
    assert topics[f"{run.app_id}-__assignor-__leader"] == 1  # Faust's own, one partition
    by_event = {(c.user, c.ts): c for c in clicks}
    outputs, _ = split_outputs(records, {(r.partition, r.offset) for r in records}, by_event)
    for p in range(PARTITIONS):
        events = sorted((c for c in clicks if c.partition == p), key=lambda c: c.offset)
        check_exact_from_empty(events, outputs[p])
    assert sum(len(v) for v in outputs.values()) == EVENTS
    assert all(json.loads(r.value)["windows"] for r in records)
