"""The ``fiba`` CLI: one-line config errors, topic creation, produce/tail round trips, queries
sent to the query topic, and the properties of the built-in event generator."""

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from agents.records import DLQ_DETAIL, DLQ_REASON
from app.brokers.kinds import BROKER_KINDS
from app.brokers.process import free_port, wait_for_port
from app.cli import cli, command_names
from app.demo import run_demo
from app.generator import MAX_VALUE, generate_events, key_name, ooo_count
from app.kafka_io import MAX_RECORD_BYTES
from app.settings import SETTINGS_HELP, load_settings
from app.topics import topic_specs
from stores.state_lock import StateDirLock
from tests.conftest import broker_kinds_under_test
from tests.test_crash_recovery import wait_until

TOPIC_FLAGS = ("input-topic", "queries-topic", "aggregates-topic", "answers-topic")


@pytest.fixture(autouse=True)
def no_fiba_environment(monkeypatch):
    """Tests see only the FIBA_* variables they set themselves."""
    for name in list(os.environ):
        if name.startswith("FIBA_"):
            monkeypatch.delenv(name)


def fiba(*args: str, env: dict[str, str] | None = None):
    """Run ``fiba ARGS`` in-process; the click Result (stdout, stderr, exit_code)."""
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


@pytest.fixture
def broker_env(kafka_bootstrap, embedded_profile) -> dict[str, str]:
    """FIBA_* variables of the test broker with an app id and topic names unique to one test."""
    tag = f"c{uuid.uuid4().hex[:10]}"
    return {
        "FIBA_BROKER": kafka_bootstrap,
        "FIBA_BROKER_PROFILE": "embedded" if embedded_profile else "kafka",
        "FIBA_APP_ID": tag,
        "FIBA_PARTITIONS": "3",
        **{f"FIBA_{f.upper().replace('-', '_')}": f"{tag}-{f}" for f in TOPIC_FLAGS},
        "FIBA_DEAD_LETTER_TOPIC": f"{tag}-dead-letters",
    }


# --- configuration errors ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "env", "fragment"),
    [
        (["worker", "--windows", "5x"], {}, "bad window '5x'"),
        (["worker", "--windows", "2h", "--retention", "1h"], {}, "longer than the retention"),
        (["worker"], {"FIBA_WINDOWS": "10m", "FIBA_RETENTION": "5m"}, "FIBA_WINDOWS"),
        (["worker", "--aggregations", "count,nosuch"], {}, "nosuch"),
        (["produce", "--generate", "1", "--broker-profile", "fast"], {}, "'fast' is not one"),
        (["tail", "--config", "/nonexistent/fiba.toml"], {}, "cannot read config file"),
        (["worker"], {"FIBA_WINDOW": "5m"}, "unknown setting(s) FIBA_WINDOW"),
        (["broker"], {"FIBA_BROKER": "127.0.0.1:70000"}, "not a TCP port (1-65535): 70000"),
        (["worker"], {"FIBA_WEB_HOST": ""}, "FIBA_WEB_HOST: must not be empty"),
        (["tail", "--broker", "h1:9092,h2:0"], {}, "--broker: not a TCP port (1-65535): 0"),
        (
            ["tail", "--security-protocol", "SSL"],
            {"FIBA_SSL_CAFILE": "/nonexistent/ca.pem"},
            "environment FIBA_SSL_CAFILE: '/nonexistent/ca.pem' is not a file",
        ),
        (
            ["worker", "--security-protocol", "SASL_SSL", "--sasl-mechanism", "PLAIN"],
            {"FIBA_SSL_CAFILE": __file__},  # not PEM
            "environment FIBA_SSL_CAFILE: cannot load CA certificates (PEM)",
        ),
        (
            [
                "produce",
                "--generate",
                "1",
                "--security-protocol",
                "SSL",
                "--ssl-certfile",
                __file__,
            ],
            {},
            "--ssl-certfile: cannot load the client certificate",
        ),
    ],
)
def test_a_config_error_is_one_line_on_stderr_with_exit_code_2(args, env, fragment):
    result = fiba(*args, env=env)
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("fiba: ")
    assert fragment in lines[0]


@pytest.mark.parametrize("port", ["70000", "-1"])
def test_fiba_broker_refuses_a_port_out_of_range(port):
    result = fiba("broker", "--port", port)
    assert result.exit_code == 2
    assert f"Invalid value for '--port': {port} is not in the range 0<=x<=65535" in result.stderr


def test_a_config_file_error_names_the_file(tmp_path):
    config = tmp_path / "fiba.toml"
    config.write_text('[fiba]\nwindows = "1m,2h"\nretention = "1h"\n')
    result = fiba("worker", "--config", str(config))
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [result.stderr.strip()]
    assert str(config) in result.stderr
    assert "'2h'" in result.stderr


def test_an_unreachable_broker_stops_the_command_with_exit_code_2():
    address = f"127.0.0.1:{free_port()}"
    for args in (["topics", "create"], ["produce", "--generate", "5"], ["tail"], ["worker"]):
        result = fiba(*args, "--broker", address)
        assert result.exit_code == 2, args
        assert result.stderr.count("\n") == 1, result.stderr
        assert "cannot reach the Kafka broker" in result.stderr
        assert address in result.stderr


def test_the_console_script_reports_without_a_traceback():
    fiba_script = os.path.join(os.path.dirname(sys.executable), "fiba")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIBA_")}
    done = subprocess.run(
        [fiba_script, "worker", "--windows", "1m,oops"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("fiba: --windows: bad window 'oops'")
    assert done.stderr.count("\n") == 1


@pytest.mark.parametrize("command", ["worker", "broker"])
def test_a_port_in_use_is_one_line_and_exit_2_before_anything_starts(command):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        unreachable = f"127.0.0.1:{free_port()}"  # the port is checked before the broker
        flags = ["--web-port", str(port)] if command == "worker" else ["--port", str(port)]
        result = fiba(command, *flags, "--broker", unreachable)
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "in use" in result.stderr


def test_version_and_short_help_everywhere_with_setting_defaults():
    version = fiba("--version")
    assert version.exit_code == 0 and version.stdout.startswith("fiba, version ")
    for name in sorted(command_names()):
        result = fiba(*name.split(), "-h")
        assert result.exit_code == 0, (name, result.stderr)
        assert "Usage: " in result.stdout and "-h, --help" in result.stdout, name
    worker_help = " ".join(fiba("worker", "-h").stdout.split())
    assert "[env FIBA_WINDOWS; default: 1m,5m,1h]" in worker_help
    assert "[env FIBA_RETENTION; default: 1h]" in worker_help
    assert "[env FIBA_RESOLUTION; default: unset]" in worker_help


def test_config_show_prints_each_setting_with_its_layer(tmp_path):
    config = tmp_path / "fiba.toml"
    config.write_text('retention = "2h"\nsasl_password = "hunter2"\n')
    env = {"FIBA_WINDOWS": "1m,30m", "FIBA_CONFIG": str(config)}
    result = fiba("config", "show", "--emit", "batch", env=env)
    assert result.exit_code == 0, result.stderr
    rows = {line.split()[0]: line.split(None, 1)[1] for line in result.stdout.splitlines()}
    assert set(rows) == set(SETTINGS_HELP)
    assert rows["retention"] == f"2h  ({config}: retention)"
    assert rows["windows"] == "1m,30m  (environment FIBA_WINDOWS)"
    assert rows["emit"] == "batch  (--emit)"
    assert rows["web_host"] == "127.0.0.1  (default)"
    assert rows["sasl_password"] == f"****  ({config}: sasl_password)"
    assert "hunter2" not in result.stdout
    assert rows["max_wall_clock_skew"] == "1d  (default)"
    assert rows["max_future_skew"] == "off  (default)"
    assert fiba("config", "show", "--max-future-skew", "off").exit_code == 0
    help_text = " ".join(fiba("worker", "-h").stdout.split())
    assert "FIBA_MAX_WALL_CLOCK_SKEW; default: 1d]" in help_text
    assert "FIBA_MAX_FUTURE_SKEW; default: off]" in help_text


def test_help_lists_every_command():
    result = fiba("--help")
    assert result.exit_code == 0
    for name in ("broker", "topics", "worker", "produce", "tail", "query", "demo", "bench"):
        assert f"  {name} " in result.stdout
    assert "spark-join" in result.stdout
    assert "spark-read" in result.stdout


# --- topics --------------------------------------------------------------------------------


@pytest.mark.kafka
def test_topics_create_is_idempotent_and_rejects_another_partition_count(broker_env):
    first = fiba("topics", "create", env=broker_env)
    assert first.exit_code == 0, first.stderr
    assert [line.split()[0] for line in first.stdout.splitlines()] == ["created"] * 8
    assert all(line.endswith("(3 partitions)") for line in first.stdout.splitlines())
    second = fiba("topics", "create", env=broker_env)
    assert second.exit_code == 0
    assert [line.split()[0] for line in second.stdout.splitlines()] == ["exists"] * 8
    mismatch = fiba("topics", "create", "--partitions", "5", env=broker_env)
    assert mismatch.exit_code == 1
    assert mismatch.stderr.count("\n") == 1
    assert "already exists with 3 partitions" in mismatch.stderr


# --- produce and tail ----------------------------------------------------------------------


def tail_json(*args: str, env: dict[str, str]) -> list[dict]:
    result = fiba("tail", *args, env=env)
    assert result.exit_code == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.mark.kafka
def test_produce_generate_then_tail_round_trip(broker_env):
    assert fiba("topics", "create", env=broker_env).exit_code == 0
    flags = ["--keys", "4", "--seed", "3", "--start", "1700000000000", "--ooo-fraction", "0.3"]
    produced = fiba("produce", "--generate", "300", *flags, env=broker_env)
    assert produced.exit_code == 0, produced.stderr
    assert "sent 300 records" in produced.stderr

    records = tail_json(
        "--topic",
        "input",
        "--from-beginning",
        "--limit",
        "400",
        "--idle-timeout",
        "2s",
        env=broker_env,
    )
    events = list(
        generate_events(300, keys=4, seed=3, start_ms=1_700_000_000_000, ooo_fraction=0.3)
    )
    assert len(records) == 300
    for key in {e.key for e in events}:
        got = [r for r in records if r["key"] == key]
        want = [e for e in events if e.key == key]
        assert [r["value"] for r in got] == [{"ts": e.ts, "value": e.value} for e in want]
        assert [r["timestamp"] for r in got] == [e.ts for e in want]
        assert len({r["partition"] for r in got}) == 1

    # From the end (profile-aware end offsets): nothing old is shown, even from the tail of
    # multi-record batches.
    assert tail_json("--topic", "input", "--idle-timeout", "1s", env=broker_env) == []


@pytest.mark.kafka
def test_produce_file_with_configured_field_names(broker_env, tmp_path):
    env = {**broker_env, "FIBA_TS_FIELD": "time", "FIBA_VALUE_FIELD": "reading"}
    assert fiba("topics", "create", env=env).exit_code == 0
    lines = [
        {"key": "a", "time": 5, "reading": 1.5},
        {"key": "b", "time": "2024-01-01T00:00:00Z", "reading": 2},
        {"key": "a", "time": 3, "reading": {"x": 1}},
    ]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    produced = fiba("produce", str(path), env=env)
    assert produced.exit_code == 0, produced.stderr

    records = tail_json("--topic", "input", "--from-beginning", "--limit", "3", env=env)
    got = sorted((r["key"], json.dumps(r["value"], sort_keys=True)) for r in records)
    want = sorted(
        (line["key"], json.dumps({k: v for k, v in line.items() if k != "key"}, sort_keys=True))
        for line in lines
    )
    assert got == want
    assert {r["timestamp"] for r in records if r["key"] == "a"} == {5, 3}


@pytest.mark.kafka
def test_produce_file_stops_at_a_bad_line(broker_env, tmp_path):
    assert fiba("topics", "create", env=broker_env).exit_code == 0
    path = tmp_path / "events.jsonl"
    path.write_text('{"key": "a", "ts": 1, "value": 1}\n{"ts": 2, "value": 2}\n')
    result = fiba("produce", str(path), env=broker_env)
    assert result.exit_code == 1
    assert "line 2: not a JSON object with a string 'key'" in result.stderr


@pytest.mark.kafka
def test_produce_file_stops_at_a_non_finite_number_and_says_what_was_sent(broker_env, tmp_path):
    assert fiba("topics", "create", env=broker_env).exit_code == 0
    path = tmp_path / "events.jsonl"
    lines = ['{"key": "a", "ts": 1, "value": 1}', '{"key": "b", "ts": 2, "value": 3}']
    path.write_text("\n".join([*lines, '{"key": "a", "ts": 3, "value": 1e400}', *lines]) + "\n")
    result = fiba("produce", str(path), env=broker_env)
    assert result.exit_code == 1
    last = result.stderr.splitlines()[-1]  # after the progress bar
    assert last.startswith(f"fiba: {path}: line 3: a number that is not finite")
    assert "2 records before it were sent" in last
    tailed = fiba(
        "tail", "--topic", "input", "--from-beginning", "--idle-timeout", "3s", env=broker_env
    )
    assert len(tailed.stdout.splitlines()) == 2


@pytest.mark.kafka
@pytest.mark.parametrize(
    ("line", "says"),
    [
        (b'{"key": "a", "ts": 2, "value": "\xff"}', "line 2: not UTF-8 text"),
        (b'{"key": "\\ud800", "ts": 2, "value": 1}', "line 2: the 'key' is not valid Unicode"),
    ],
)
def test_produce_file_stops_at_a_line_that_is_no_utf8_or_whose_key_is_no_unicode(
    broker_env, tmp_path, line, says
):
    assert fiba("topics", "create", env=broker_env).exit_code == 0
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"key": "a", "ts": 1, "value": 1}\n' + line + b"\n")
    result = fiba("produce", str(path), env=broker_env)
    assert result.exit_code == 1
    last = result.stderr.splitlines()[-1]  # after the progress bar
    assert last.startswith(f"fiba: {path}: {says}"), last
    assert "1 record before it was sent" in last


@pytest.mark.kafka
def test_produce_sends_event_times_ahead_of_the_clock_or_beyond_64_bits(broker_env, tmp_path):
    """Apache Kafka refuses a record timestamp more than an hour ahead of its clock, and no
    broker takes one beyond 64 bits: such a record gets the clock's time as its Kafka timestamp,
    its value unchanged (the worker judges the event time: future or bad_timestamp)."""
    assert fiba("topics", "create", env=broker_env).exit_code == 0
    now = int(time.time() * 1000)
    times = [now - 60_000, now + 2 * 3_600_000, 10**20]
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps({"key": "a", "ts": t, "value": 1}) + "\n" for t in times))
    produced = fiba("produce", str(path), env=broker_env)
    assert produced.exit_code == 0, produced.stderr
    after = int(time.time() * 1000)
    generated = fiba("produce", "--generate", "2", "--start", str(now + 7_200_000), env=broker_env)
    assert generated.exit_code == 0, generated.stderr

    records = tail_json("--topic", "input", "--from-beginning", "--limit", "5", env=broker_env)
    from_file = [r for r in records if r["key"] == "a"]
    assert [r["value"]["ts"] for r in from_file] == times
    assert from_file[0]["timestamp"] == times[0]
    assert all(now <= r["timestamp"] <= after for r in from_file[1:])
    generated_records = [r for r in records if r["key"] != "a"]
    assert len(generated_records) == 2
    assert all(r["timestamp"] < now + 3_600_000 for r in generated_records)


@pytest.mark.kafka
def test_tail_shows_dead_letters_with_their_reason_headers(broker_env):
    assert fiba("topics", "create", env=broker_env).exit_code == 0

    async def send_dead_letter() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=broker_env["FIBA_BROKER"])
        await producer.start()
        try:
            await producer.send_and_wait(
                broker_env["FIBA_DEAD_LETTER_TOPIC"],
                b"{not json",
                key=b"k",
                headers=[(DLQ_REASON, b"malformed_json"), (DLQ_DETAIL, b"Expecting value")],
            )
        finally:
            await producer.stop()

    asyncio.run(send_dead_letter())
    [record] = tail_json(
        "--topic", "dead-letters", "--from-beginning", "--limit", "1", env=broker_env
    )
    assert record["value"] == "{not json"
    assert record["key"] == "k"
    assert record["headers"] == {DLQ_REASON: "malformed_json", DLQ_DETAIL: "Expecting value"}


@pytest.mark.kafka
def test_tail_prints_any_value_as_strict_json(broker_env):
    """Input records (so dead letters too) may hold anything: JSON nested deeper than the
    decoder goes, NaN, 1e400, an integer of 5000 digits are shown as their text, the line
    still strict JSON; a plain object as itself."""
    assert fiba("topics", "create", env=broker_env).exit_code == 0
    values = [
        b'{"ts": 1, "value": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"ts": 1, "value": NaN}',
        b'{"ts": 1, "value": 1e400}',
        b'{"ts": 1, "value": ' + b"9" * 5000 + b"}",
        b'{"ts": 1, "value": 2.5}',
    ]

    async def send() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=broker_env["FIBA_BROKER"])
        await producer.start()
        try:
            for value in values:
                await producer.send_and_wait(
                    broker_env["FIBA_INPUT_TOPIC"], value, key=b"k", partition=0
                )
        finally:
            await producer.stop()

    asyncio.run(send())
    result = fiba("tail", "--topic", "input", "--from-beginning", "--limit", "5", env=broker_env)
    assert result.exit_code == 0, result.stderr

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in fiba tail's output")

    shown = [
        json.loads(line, parse_constant=refuse)["value"] for line in result.stdout.splitlines()
    ]
    assert shown == [*(value.decode() for value in values[:4]), {"ts": 1, "value": 2.5}]


@pytest.mark.kafka
@pytest.mark.parametrize(
    ("args", "topic"),
    [
        (["tail", "--topic", "answers", "--limit", "1"], "FIBA_ANSWERS_TOPIC"),
        (["produce", "--generate", "3"], "FIBA_INPUT_TOPIC"),
        (["query", "k", "--window", "5m", "--timeout", "1s"], "FIBA_QUERIES_TOPIC"),
    ],
)
def test_a_command_naming_a_missing_topic_says_so_at_once_and_creates_nothing(
    broker_env, args, topic
):
    """One check for every command (app.kafka_io.existing_partitions): the same line, before
    anything is sent (a producer would wait 40 s for the topic's metadata on Apache Kafka, and
    auto-create it with 4 partitions on Tansu)."""
    result = fiba(*args, env=broker_env)
    assert result.exit_code == 1
    name = broker_env[topic]
    assert result.stderr == f"fiba: topic {name!r} does not exist (run `fiba topics create`)\n"
    again = fiba("tail", "--topic", "input", "--limit", "1", env=broker_env)
    input_topic = broker_env["FIBA_INPUT_TOPIC"]
    assert again.stderr == (
        f"fiba: topic {input_topic!r} does not exist (run `fiba topics create`)\n"
    ), "a command created the input topic"


@pytest.mark.parametrize("command", [["reset"], ["reset-stream-time", "--partition", "0"]])
def test_a_state_command_on_the_state_dir_of_a_running_worker_says_to_stop_it(tmp_path, command):
    """The lock of a running worker (held here by this process: a ``flock`` of another open
    file conflicts) refuses the state commands with what to do, not "give this one its own
    --state-dir" (the advice to a second worker)."""
    with StateDirLock(tmp_path):
        result = fiba("state", *command, "--yes", "--state-dir", str(tmp_path))
    assert result.exit_code == 2
    assert result.stderr == (
        f"fiba: a worker is running on state_dir {tmp_path} (pid {os.getpid()}):"
        " stop it first, the state cannot change under it\n"
    )


@pytest.mark.kafka
def test_produce_says_what_it_sent_once_with_plurals_right(broker_env, tmp_path):
    """No progress bar off a terminal (it was printed twice, empty, before the summary), and
    "1 record", not "1 records" (nor "1 partitions")."""
    broker_env = {**broker_env, "FIBA_PARTITIONS": "1"}
    created = fiba("topics", "create", env=broker_env)
    assert all(line.endswith("(1 partition)") for line in created.stdout.splitlines())
    mismatch = fiba("topics", "create", "--partitions", "2", env=broker_env).stderr
    assert "already exists with 1 partition, but" in mismatch
    topic = broker_env["FIBA_INPUT_TOPIC"]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert fiba("produce", str(empty), env=broker_env).stderr == f"sent 0 records to {topic}\n"
    one = tmp_path / "one.jsonl"
    one.write_text('{"key": "a", "ts": 1, "value": 1}\n')
    assert fiba("produce", str(one), env=broker_env).stderr == f"sent 1 record to {topic}\n"
    two = fiba("produce", "--generate", "2", env=broker_env)
    assert two.stderr == f"sent 2 records to {topic}\n"


@pytest.mark.kafka
def test_produce_of_a_line_too_large_for_kafka_names_it_what_was_sent_and_the_limit(
    broker_env, tmp_path
):
    assert fiba("topics", "create", env=broker_env).exit_code == 0
    path = tmp_path / "events.jsonl"
    small = '{"key": "a", "ts": 1, "value": 1}'
    huge = json.dumps({"key": "b", "ts": 2, "value": "x" * 2_000_000})
    path.write_text(f"{small}\n{huge}\n{small}\n")
    result = fiba("produce", str(path), env=broker_env)
    assert result.exit_code == 1
    [line] = result.stderr.splitlines()
    assert line.startswith(f"fiba: {path}: line 2: 2000")
    assert f"over the {MAX_RECORD_BYTES} bytes one record may have" in line
    assert "message.max.bytes" in line and "max_value_bytes, 65536 bytes" in line
    assert "max_request_size" not in line
    assert line.endswith("(1 record before it was sent; nothing after it)")
    tailed = fiba(
        "tail", "--topic", "input", "--from-beginning", "--idle-timeout", "2s", env=broker_env
    )
    assert len(tailed.stdout.splitlines()) == 1


# --- query ---------------------------------------------------------------------------------


@pytest.mark.kafka
@pytest.mark.parametrize(
    "args",
    [
        ["spark-read", "--topic", "no-such-topic"],
        ["spark-join", "--batch", "rows.parquet", "--window", "5m", "--out", "out.parquet"],
    ],
)
def test_spark_commands_stop_at_a_missing_topic_before_spark_starts(broker_env, args):
    """No topic was created: one line, as ``fiba tail`` says it, not a traceback out of
    Spark's planning."""
    result = fiba(*args, env=broker_env)
    assert result.exit_code == 1
    topic = "no-such-topic" if args[0] == "spark-read" else broker_env["FIBA_AGGREGATES_TOPIC"]
    assert result.stderr == f"fiba: topic {topic!r} does not exist (run `fiba topics create`)\n"


@pytest.mark.kafka
def test_query_sends_a_keyed_range_query_and_times_out_without_a_worker(broker_env):
    assert fiba("topics", "create", env=broker_env).exit_code == 0
    result = fiba(
        "query",
        "sensor-1",
        "--from",
        "1000",
        "--to",
        "1970-01-01T00:00:02",
        "--aggregations",
        "sum,max",
        "--timeout",
        "1s",
        env=broker_env,
    )
    assert result.exit_code == 1
    assert "no answer on" in result.stderr
    [record] = tail_json("--topic", "queries", "--from-beginning", "--limit", "1", env=broker_env)
    assert record["key"] == "sensor-1"
    sent = record["value"]
    assert len(sent.pop("query_id")) == 32
    assert sent == {"key": "sensor-1", "from": 1000, "to": 2000, "aggregations": ["sum", "max"]}


def test_query_needs_a_range_or_a_window():
    assert fiba("query", "k", "--from", "1").exit_code == 2
    assert fiba("query", "k", "--window", "5m", "--to", "1").exit_code == 2


def test_http_query_to_no_worker_is_a_clear_error():
    result = fiba("query", "k", "--window", "5m", "--http", "--web-port", str(free_port()))
    assert result.exit_code == 2
    assert "cannot reach the worker at http://127.0.0.1:" in result.stderr


# --- the generator -------------------------------------------------------------------------


generator_args = st.fixed_dictionaries(
    {
        "n": st.integers(0, 400),
        "keys": st.integers(1, 20),
        "ooo_fraction": st.floats(0, 1),
        "max_lateness_ms": st.integers(1, 5000),
        "interval_ms": st.integers(1, 1000),
        "start_ms": st.integers(0, 2**41),
        "seed": st.integers(0, 2**32),
    }
)


@given(generator_args)
def test_generator_is_deterministic_with_a_seed(args):
    n = args.pop("n")
    assert list(generate_events(n, **args)) == list(generate_events(n, **args))


@given(generator_args)
def test_generator_gives_the_requested_out_of_order_fraction_within_lateness(args):
    n = args.pop("n")
    events = list(generate_events(n, **args))
    assert len(events) == n
    stream_time = None
    late = 0
    for event in events:
        assert event.key in {key_name(i) for i in range(args["keys"])}
        assert 0 <= event.value < MAX_VALUE
        if stream_time is None:
            assert event.ts == args["start_ms"]
        elif event.ts < stream_time:
            late += 1
            assert stream_time - event.ts <= args["max_lateness_ms"]
        else:
            assert event.ts == stream_time + args["interval_ms"]
        stream_time = event.ts if stream_time is None else max(stream_time, event.ts)
    assert (
        late
        == ooo_count(n, args["ooo_fraction"])
        == min(round(n * args["ooo_fraction"]), max(n - 1, 0))
    )


def test_generator_seeds_differ_and_arguments_are_checked():
    assert list(generate_events(50, seed=1)) != list(generate_events(50, seed=2))
    for bad in ({"keys": 0}, {"ooo_fraction": 1.5}, {"interval_ms": 0}, {"max_lateness_ms": 0}):
        with pytest.raises(ValueError):
            generate_events(10, **bad)  # checked at the call, before the first event


def test_config_file_before_or_after_the_command_and_precedence(tmp_path):
    config = tmp_path / "fiba.toml"
    config.write_text('windows = "1m,2h"\nretention = "1h"\n')
    for args in (["--config", str(config), "worker"], ["worker", "--config", str(config)]):
        result = fiba(*args)
        assert result.exit_code == 2
        assert f"{config}: windows" in result.stderr
    # The environment beats the file, a flag beats the environment.
    env = {"FIBA_RETENTION": "2h", "FIBA_BROKER": f"127.0.0.1:{free_port()}"}
    result = fiba("--config", str(config), "worker", env=env)
    assert "cannot reach the Kafka broker" in result.stderr
    result = fiba("--config", str(config), "worker", "--retention", "90m", env=env)
    assert "--windows" not in result.stderr
    assert "window '2h' is longer than the retention" in result.stderr


def test_the_configuration_reference_table_lists_every_setting_once():
    page = Path(__file__).resolve().parent.parent / "docs" / "reference" / "configuration.md"
    section = page.read_text().split("## Settings", 1)[1].split("\n## ", 1)[0]
    lines = section.splitlines()
    at = [i for i, line in enumerate(lines) if line.startswith("| `")]
    rows = [lines[i] for i in at]
    names = [row.split("`")[1] for row in rows]
    assert names == list(SETTINGS_HELP)
    # one Markdown table: its header and rows on consecutive lines (a blank line ends a table,
    # and the rows after it would show as a paragraph of pipes)
    assert at == list(range(at[0], at[0] + len(at)))
    assert lines[at[0] - 2].startswith("| setting") and lines[at[0] - 1].startswith("| ---")
    for name, row in zip(names, rows, strict=True):
        assert f"`FIBA_{name.upper()}`" in row
        assert f"`--{name.replace('_', '-')}`" in row


def test_delegated_commands_run_under_their_fiba_name():
    result = fiba("bench", "--help")
    assert result.exit_code == 0
    assert result.stdout.startswith("Usage: fiba bench")


# --- the demo ------------------------------------------------------------------------------


# each pass of `make test` its own broker kind (TEST_BROKER_KINDS), as for kafka_bootstrap
SELF_STARTED_KINDS = [k for k in broker_kinds_under_test() if k != "external"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", SELF_STARTED_KINDS)
def test_the_demo_runs_end_to_end_and_checks_itself(kind):
    lines: list[str] = []
    summary = run_demo(events=300, keys=3, seed=11, timeout=120, broker_kind=kind, log=lines.append)
    assert summary.mismatches == []
    assert summary.exact
    assert summary.aggregates == 300  # emit=event: one aggregate per accepted event
    assert sorted(summary.final) == ["key-0", "key-1", "key-2"]
    assert sum(summary.dead_letters.values()) == summary.bad_records == 5
    assert sorted(channel for channel, _ in summary.answers) == ["http"] * 6 + ["topic"] * 6
    assert lines[0] == f"starting the {kind} broker ..."
    assert any(line.lstrip().startswith("exact: ") for line in lines)


def fiba_broker(
    *args: str, env: dict[str, str] | None = None, stderr: int = subprocess.STDOUT
) -> subprocess.Popen[str]:
    """``fiba broker ARGS`` in a subprocess (no FIBA_* variables unless in ``env``), output
    piped as text (stderr into stdout unless ``stderr`` says otherwise)."""
    fiba_script = os.path.join(os.path.dirname(sys.executable), "fiba")
    base = {k: v for k, v in os.environ.items() if not k.startswith("FIBA_")}
    return subprocess.Popen(
        [fiba_script, "broker", *args],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env={**base, **(env or {})},
    )


@pytest.mark.parametrize("kind", SELF_STARTED_KINDS)
def test_fiba_broker_serves_until_sigterm_and_stops_its_broker(kind, tmp_path):
    port = free_port()
    data_dir = tmp_path / "kafka-data"
    extra = ["--data-dir", str(data_dir)] if kind == "kafka" else []
    process = fiba_broker("--kind", kind, "--port", str(port), *extra)
    try:
        lines = [process.stdout.readline()]
        while "clients:" not in lines[-1]:
            lines.append(process.stdout.readline())
            assert lines[-1], "".join(lines)
        assert f"{kind} broker on 127.0.0.1:{port}" in lines[-2]
        profile = BROKER_KINDS[kind].profile
        assert lines[-1].strip() == f"clients: --broker 127.0.0.1:{port} --broker-profile {profile}"
        env = {"FIBA_BROKER": f"127.0.0.1:{port}", "FIBA_BROKER_PROFILE": profile}
        assert fiba("topics", "create", "--input-topic", "on-disk", env=env).exit_code == 0
        if kind == "kafka":  # the log is on disk, in the given directory
            partition_dir = data_dir / "log" / "on-disk-0"
            wait_until(partition_dir.is_dir, 30, f"{partition_dir} to be created")
    finally:
        process.terminate()
        assert process.wait(60) == 0
    assert not wait_for_port("127.0.0.1", port, timeout=0.5)
    if kind == "kafka":  # a given data directory is kept and reused: the topic is still there
        process = fiba_broker("--kind", kind, "--port", str(port), *extra)
        try:
            while "clients:" not in (line := process.stdout.readline()):
                assert line
            env = {"FIBA_BROKER": f"127.0.0.1:{port}", "FIBA_BROKER_PROFILE": "kafka"}
            assert fiba("topics", "create", "--input-topic", "on-disk", env=env).stdout.count(
                "exists"
            ) == len(topic_specs(load_settings(environ=env)))
        finally:
            process.terminate()
            assert process.wait(60) == 0


def test_fiba_broker_kafka_without_java_or_maven_is_one_line_and_exit_2(tmp_path):
    java_only = tmp_path / "bin"
    java_only.mkdir()
    (java_only / "java").symlink_to(shutil.which("java"))
    empty_cache = {"FIBA_CACHE_DIR": str(tmp_path / "cache")}
    for path, missing in ((str(tmp_path), "java"), (str(java_only), "mvn")):
        process = fiba_broker(
            "--kind", "kafka", env={"PATH": path, **empty_cache}, stderr=subprocess.PIPE
        )
        _, err = process.communicate(timeout=60)
        assert process.returncode == 2
        assert (
            err == f"fiba: `{missing}` not found on PATH; Apache Kafka needs Java 17+ and Maven\n"
        )


def test_an_explicit_config_file_beats_fiba_config(tmp_path):
    good = tmp_path / "good.toml"
    good.write_text(f'broker = "127.0.0.1:{free_port()}"\n')
    bad = tmp_path / "bad.toml"
    bad.write_text('windows = "oops"\n')
    env = {"FIBA_CONFIG": str(bad)}
    assert "bad window 'oops'" in fiba("worker", env=env).stderr
    for args in (["--config", str(good), "worker"], ["worker", "--config", str(good)]):
        result = fiba(*args, env=env)
        assert result.exit_code == 2
        assert "cannot reach the Kafka broker" in result.stderr


@pytest.mark.kafka
def test_the_worker_refuses_to_start_without_its_topics(broker_env):
    result = fiba("worker", env=broker_env)
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1
    assert f"topic '{broker_env['FIBA_INPUT_TOPIC']}' is missing" in result.stderr
    assert "run `fiba topics create`" in result.stderr


def test_generator_spreads_out_of_order_events_over_the_stream():
    events = list(generate_events(10_000, ooo_fraction=0.2, seed=5))
    stream_time, late_at = events[0].ts, []
    for position, event in enumerate(events[1:], 1):
        if event.ts < stream_time:
            late_at.append(position)
        stream_time = max(stream_time, event.ts)
    assert len(late_at) == 2000
    per_tenth = [sum(1 for p in late_at if p // 1000 == tenth) for tenth in range(10)]
    assert all(150 <= count <= 250 for count in per_tenth), per_tenth


def test_spark_commands_take_fiba_config_through_the_delegation(tmp_path):
    for name in ("spark-join", "spark-read"):
        result = fiba(name, "--help")
        assert result.exit_code == 0
        assert result.stdout.startswith(f"Usage: fiba {name}")
    config = tmp_path / "fiba.toml"
    config.write_text('windows = "oops"\n')
    result = fiba("--config", str(config), "spark-read", "--limit", "1")
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert "bad window 'oops'" in result.stderr


@pytest.mark.slow
def test_the_demo_stops_its_broker_and_worker_when_terminated():
    fiba_script = os.path.join(os.path.dirname(sys.executable), "fiba")
    process = subprocess.Popen(
        [fiba_script, "demo", "--events", "3000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines = []
        while not lines or "worker started" not in lines[-1]:
            lines.append(process.stdout.readline())
            assert lines[-1], "".join(lines)
        port = int(next(line for line in lines if "broker on" in line).split(":")[1].split(";")[0])
        worker_pid = int(lines[-1].split("pid ")[1].split(",")[0])
    finally:
        process.terminate()
        process.communicate(timeout=60)
    assert process.returncode != 0
    assert not wait_for_port("127.0.0.1", port, timeout=0.5)
    with pytest.raises(ProcessLookupError):
        os.kill(worker_pid, 0)


@pytest.mark.slow
@pytest.mark.parametrize("sigterm_at", ["lost", "stopping"])
def test_the_demo_ends_terminated_whenever_the_sigterm_comes(sigterm_at):
    """A SIGTERM whose interrupt is lost (``lost``: handled inside a finalizer, the demo runs
    on) or one during the demo's final stop (``stopping``) still ends the demo as terminated
    by SIGTERM, with its worker and broker stopped (``tests.terminated_demo``)."""
    result = subprocess.run(
        [sys.executable, "-m", "tests.terminated_demo", "demo", "--events", "200", "--keys", "2"],
        env={**os.environ, "SIGTERM_AT": sigterm_at},
        capture_output=True,
        text=True,
        timeout=180,
    )
    output = result.stdout + result.stderr
    port = int(output.split("broker on ")[1].split(";")[0].rsplit(":", 1)[1])
    worker_pid = int(output.split("worker started (pid ")[1].split(",")[0])
    try:
        assert result.returncode == -signal.SIGTERM, output
        assert not wait_for_port("127.0.0.1", port, timeout=0.5), output
        with pytest.raises(ProcessLookupError):
            os.kill(worker_pid, 0)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker_pid, signal.SIGKILL)
