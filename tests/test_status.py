"""``fiba status``, ``fiba topics list|describe`` and ``fiba tail`` of any topic, against a real
worker on a real broker, then with that worker SIGKILLed (no worker alive).

Events are produced with batching (``tests.test_crash_recovery.produce``), so each partition's
tail is inside a multi-record batch: an end offset taken from ListOffsets would be short on
the embedded broker. ``fiba status`` is asked with the ``kafka`` broker profile on both broker
kinds, so its end offsets cannot depend on the embedded profile's workarounds.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli import cli
from app.demo import start_worker, stop_worker
from app.settings import Settings
from app.topics import create_topics
from tests.test_crash_recovery import caught_up, make_events, produce, wait_until, worker_settings

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

REFUSED_URL = "http://127.0.0.1:1"
"""A worker URL nothing answers at."""


def fiba(*args: str):
    return CliRunner().invoke(cli, list(args), env={}, catch_exceptions=False)


def connection(settings: Settings, profile: str) -> list[str]:
    return ["--broker", settings.broker, "--broker-profile", profile]


def status(settings: Settings, *workers: str) -> dict:
    """``fiba status --json`` with the kafka profile; ``workers``: the ``--worker`` URLs
    (default: the worker of ``settings``)."""
    args = ["status", "--json", *connection(settings, "kafka"), "--app-id", settings.app_id]
    args += ["--input-topic", settings.input_topic, "--web-port", str(settings.web_port)]
    for url in workers:
        args += ["--worker", url]
    result = fiba(*args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def by_partition(report: dict) -> dict[int, dict]:
    return {row["partition"]: row for row in report["partitions"]}


def test_status_with_a_worker_then_with_none_alive(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path
) -> None:
    settings = worker_settings(kafka_bootstrap, embedded_profile, tmp_path / "w", partitions=3)
    asyncio.run(create_topics(settings))
    before = asyncio.run(produce(settings, make_events(900, seed=3)))
    url = f"http://127.0.0.1:{settings.web_port}"
    log = tmp_path / "worker.log"
    worker = start_worker(settings, log)
    try:
        wait_until(lambda: caught_up(settings, [worker], [log], before), 90, "caught up")
        # Apache Kafka names the worker itself (group client id, commit metadata): the URL
        # given is one nothing answers at; the embedded broker names none, so the default
        wait_until(
            lambda: all(
                row["applied_by_source"]["committed"] == before[row["partition"]]
                for row in status(settings)["partitions"]
            ),
            30,
            "the progress is committed",
        )
        asked = () if embedded_profile else (REFUSED_URL,)
        rows = by_partition(status(settings, *asked))
        assert set(rows) == {0, 1, 2}
        for partition, row in rows.items():
            assert row["owner"] == url and row["owner_answers"], row
            assert row["restore"] == "restored", row
            assert row["applied_offset"] == before[partition], row
            assert row["applied_from"] == "worker", row
            assert row["applied_by_source"]["changelog"] == before[partition], row
            assert row["end_offset"] == before[partition] + 1, row
            assert row["lag"] == 0, row
    finally:
        worker.kill()  # SIGKILL: no goodbye to the group
        worker.wait(10)
        stop_worker(worker)
    after = asyncio.run(produce(settings, make_events(600, seed=4)))
    rows = by_partition(status(settings))
    for partition, row in rows.items():
        assert not row["owner_answers"], row
        if embedded_profile:  # its broker names no worker: only the URL asked (refused)
            assert (row["owner"], row["restore"]) == (None, "no owner"), row
        else:  # the dead member of the group, then the last progress commit, name it
            assert (row["owner"], row["restore"]) == (url, "owner not answering"), row
        assert row["applied_offset"] == before[partition], row
        assert row["applied_from"] == "changelog", row
        assert row["end_offset"] == after[partition] + 1, row
        assert row["lag"] == after[partition] - before[partition], row
    table = fiba("status", *connection(settings, "kafka"), "--app-id", settings.app_id,
                 "--input-topic", settings.input_topic, "--worker", REFUSED_URL)  # fmt: skip
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert lines[1].split() == ["partition", "owner", "applied", "end", "lag", "restore",
                                "applied", "from"]  # fmt: skip
    assert len(lines) == 5


def test_topics_list_describe_and_tail_of_any_topic(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path
) -> None:
    settings = worker_settings(kafka_bootstrap, embedded_profile, tmp_path, partitions=2)
    profile = settings.broker_profile
    asyncio.run(create_topics(settings))
    last = asyncio.run(produce(settings, make_events(300, seed=5)))

    listed = fiba("topics", "list", *connection(settings, profile))
    assert listed.exit_code == 0, listed.output
    assert f"{settings.changelog_topic}  (2 partitions)" in listed.stdout.splitlines()
    assert not any(line.startswith("__") for line in listed.stdout.splitlines())

    described = fiba("topics", "describe", settings.input_topic, *connection(settings, "kafka"))
    assert described.exit_code == 0, described.output
    lines = described.stdout.splitlines()
    assert lines[0] == f"topic {settings.input_topic}: 2 partitions, 300 records"
    for partition in (0, 1):
        assert lines[1 + partition].endswith(f"end offset {last[partition] + 1}")
    assert "  cleanup.policy = delete" in lines
    assert "  retention.bytes = -1" in lines

    missing = fiba("topics", "describe", "no-such-topic", *connection(settings, profile))
    assert missing.exit_code == 1
    assert missing.stderr.strip() == (
        "fiba: topic 'no-such-topic' does not exist (`fiba topics list` shows them all)"
    )

    # any topic by name, not only the five of the settings' --topic short names
    tailed = fiba("tail", "--topic", settings.input_topic, "--from-beginning", "--limit", "2",
                  *connection(settings, profile))  # fmt: skip
    assert tailed.exit_code == 0, tailed.output
    records = [json.loads(line) for line in tailed.stdout.splitlines()]
    assert len(records) == 2 and all(set(r["value"]) == {"ts", "value"} for r in records)
    gone = fiba("tail", "--topic", "no-such-topic", "--limit", "1", *connection(settings, profile))
    assert gone.exit_code == 1
    assert "topic 'no-such-topic' does not exist" in gone.stderr
    still = fiba("topics", "list", *connection(settings, profile))
    assert "no-such-topic" not in still.stdout  # neither command created it


@pytest.mark.parametrize(
    ("stats", "member", "committer", "expected"),
    [
        # the answering worker with the partition assigned and loaded
        ({"http://w1": {"assigned": [0], "partitions": {"0": {"applied_offset": 9}}}}, None,
         None, ("http://w1", "worker", True, "restored", 9)),
        # assigned, its state not loaded yet
        ({"http://w1": {"assigned": [0], "partitions": {}}}, None, None,
         ("http://w1", "worker", True, "restoring", None)),
        # no answering worker has it: the group's member, else the last committer
        ({"http://w2": {"assigned": [1], "partitions": {}}}, "http://w1", "http://w3",
         ("http://w1", "group", False, "owner not answering", None)),
        ({}, None, "http://w3", ("http://w3", "committed", False, "owner not answering", None)),
        ({}, None, None, (None, None, False, "no owner", None)),
    ],
)  # fmt: skip
def test_the_owner_and_restore_state_of_a_partition(stats, member, committer, expected):
    from app.status import Member, PartitionStatus, find_owner

    row = PartitionStatus(0, end_offset=10)
    group_member = None if member is None else Member("m-1", "127.0.0.1", member, frozenset({0}))
    find_owner(row, stats, group_member, committer)
    got = (row.owner, row.owner_from, row.owner_answers, row.restore, row.applied.get("worker"))
    assert got == expected
