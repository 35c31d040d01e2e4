"""Custom aggregations in the ``aggregations`` setting: import paths and entry points,
refused at start when the spot-check fails, named in the state shape, and (end to end) a custom
monoid through a worker SIGKILL and a restore from the changelog without the data dir.

The custom monoids are in ``tests.custom_monoids`` (on PYTHONPATH, as a user's module is).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import urllib.parse
from dataclasses import replace
from pathlib import Path

import pytest

from agents.clients import read_to_end
from agents.queries.service import answer
from agents.records import AggregateRecord, RangeQuery, encode_aggregate
from app.demo import start_worker, stop_worker
from app.settings import ConfigError, load_settings
from app.topics import create_topics
from stores.aggregations import ENTRY_POINT_GROUP, check_monoid, resolve_aggregation
from stores.key_windows import KeyWindows, WindowConfig
from stores.state_shape import StateMismatch, StateShape
from tests import custom_monoids
from tests.test_crash_recovery import (
    BASE,
    caught_up,
    http_get,
    make_events,
    processed,
    produce,
    wait_until,
    worker_settings,
)
from tests.test_output_schemas import validate
from tests.test_spark_contract import decode_rows

SPAN = "tests.custom_monoids:SPAN"


def aggregations(value: str):
    return load_settings(environ={"FIBA_AGGREGATIONS": value}).aggregations


def refusal(value: str) -> str:
    with pytest.raises(ConfigError) as caught:
        aggregations(value)
    return str(caught.value)


def test_an_import_path_names_a_custom_monoid_next_to_built_ins():
    assert aggregations(f"count,{SPAN},sum") == ("count", SPAN, "sum")
    assert resolve_aggregation(SPAN) is custom_monoids.SPAN


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("tests.custom_monoids:NOT_ASSOCIATIVE", "is not associative"),
        ("tests.custom_monoids:WRONG_IDENTITY", "identity 0 is not neutral"),
        ("tests.custom_monoids:NO_STATE", "no to_state/from_state to store it"),
        ("tests.custom_monoids:OPAQUE", "has no JSON form"),
        ("tests.custom_monoids:NOT_A_MONOID", "is a int, not a monoid"),
        ("tests.custom_monoids:MISSING", "no attribute 'MISSING'"),
        ("tests.no_such_module:SPAN", "cannot import 'tests.no_such_module:SPAN': Module"),
        (":SPAN", "is not an import path"),
        ("percentile95", "unknown aggregation 'percentile95'"),
    ],
)
def test_a_bad_custom_aggregation_is_refused_naming_the_setting(path, message):
    text = refusal(f"count,{path}")
    assert text.startswith("environment FIBA_AGGREGATIONS: ")
    assert message in text and "\n" not in text


def test_the_spot_check_uses_the_monoids_own_sample_inputs():
    class Words(type(custom_monoids.SPAN)):
        sample_inputs = ("a", "b", "c")

        def lift(self, x):
            if not isinstance(x, str):
                raise TypeError("words only")
            return super().lift(x)

    check_monoid(Words(), "words")
    with pytest.raises(ValueError, match="give the monoid a sample_inputs attribute"):
        check_monoid(type("Numbers", (Words,), {"sample_inputs": None})(), "words")


def test_a_non_associative_monoid_stops_the_cli_with_one_line():
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIBA_")}
    env["FIBA_AGGREGATIONS"] = "count,tests.custom_monoids:NOT_ASSOCIATIVE"
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "worker"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("fiba: environment FIBA_AGGREGATIONS: ")
    assert "is not associative" in done.stderr and done.stderr.count("\n") == 1


def test_an_entry_point_names_a_custom_monoid(tmp_path, monkeypatch):
    dist = tmp_path / "fiba_span-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fiba-span\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nspan = {SPAN}\n")
    with pytest.raises(ConfigError, match="unknown aggregation 'span'"):
        aggregations("count,span")
    monkeypatch.syspath_prepend(str(tmp_path))
    settings = load_settings(environ={"FIBA_AGGREGATIONS": "count,span"})
    assert settings.aggregations == ("count", "span")
    assert resolve_aggregation("span") is custom_monoids.SPAN
    # the state shape names the entry point's target: pointing it elsewhere changes the shape
    stored = StateShape.of(settings, "marshal-state/1").encode()
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nspan = tests.x:OTHER\n")
    with pytest.raises(StateMismatch, match=f"from count,span={SPAN} to count,span=tests.x:OTHER"):
        StateShape.of(settings, "marshal-state/1").check(stored, "the changelog")


def test_a_changed_import_path_is_a_changed_state_shape():
    settings = load_settings(environ={"FIBA_AGGREGATIONS": f"count,{SPAN}"})
    stored = StateShape.of(settings, "marshal-state/1").encode()
    other = replace(settings, aggregations=("count", "tests.custom_monoids:OTHER_SPAN"))
    with pytest.raises(StateMismatch, match=f"aggregations changed from count,{SPAN} to"):
        StateShape.of(other, "marshal-state/1").check(stored, "the changelog")


def test_a_custom_aggregation_in_the_records_and_their_json():
    settings = load_settings(environ={"FIBA_AGGREGATIONS": f"count,{SPAN}"})
    windows = KeyWindows(WindowConfig.from_settings(settings))
    for ts, value in ((BASE + 2, 5), (BASE, 4), (BASE + 1, 7)):
        record = windows.accept("k", ts, value).record
    assert record.windows["1m"].aggregates[SPAN] == {"first": 4, "last": 5, "n": 3}
    decoded = AggregateRecord.from_json(json.loads(encode_aggregate(record, 0, 7)))
    assert decoded.windows["1m"].aggregates[SPAN] == {"first": 4, "last": 5, "n": 3}
    reply = answer(windows, RangeQuery("q", "k", BASE + 1, BASE + 2, aggregations=(SPAN,)))
    assert (reply.count, reply.result) == (2, {SPAN: {"first": 7, "last": 5, "n": 2}})


def test_custom_values_are_valid_records_and_decode_in_spark_as_json_text():
    """Any JSON value (or ``repr`` string) of a custom aggregation: valid against the schema,
    and in the Spark rows' ``aggregates_json`` map (a number: ``aggregates``), never corrupt."""
    windows = KeyWindows(WindowConfig.from_settings(load_settings(environ={})))
    record = windows.accept("k", BASE, 3).record
    values = {SPAN: {"first": 3, "last": 3, "n": 1}, "p": [1, 2.5], "b": True, "r": "<o>"}
    values["n"] = 2.5
    record.windows["1m"].aggregates.update(values)
    raw = encode_aggregate(record, 0, 7)
    validate("aggregate", json.loads(raw))
    [row] = decode_rows("aggregates", [raw])
    assert row["_corrupt_record"] is None
    [(_, window)] = [w for w in row["windows"] if w[0] == "1m"]
    texts = dict(window["aggregates_json"])
    assert texts == {SPAN: '{"first":3,"last":3,"n":1}', "p": "[1,2.5]", "b": "true", "r": "<o>"}
    assert dict(window["aggregates"])["n"] == 2.5


NAMED = f"spread={SPAN}"


def test_a_name_given_to_an_aggregation_is_used_in_records_queries_and_the_state_shape():
    settings = load_settings(environ={"FIBA_AGGREGATIONS": f"count,sum,{NAMED}"})
    assert settings.aggregations == ("count", "sum", NAMED)
    config = WindowConfig.from_settings(settings)
    assert config.aggregations == ("count", "sum", "spread")
    windows = KeyWindows(config)
    for ts, value in ((BASE + 2, 5), (BASE, 4), (BASE + 1, 7)):
        record = windows.accept("k", ts, value).record
    assert record.windows["1m"].aggregates == {
        "count": 3,
        "sum": 16,
        "spread": {"first": 4, "last": 5, "n": 3},
    }
    raw = encode_aggregate(record, 0, 7)
    validate("aggregate", json.loads(raw))
    # Spark's rows key it by its name too: flatten_window makes it the column spread_json
    [row] = decode_rows("aggregates", [raw])
    [(_, window)] = [w for w in row["windows"] if w[0] == "1m"]
    assert dict(window["aggregates_json"]) == {"spread": '{"first":4,"last":5,"n":3}'}
    reply = answer(windows, RangeQuery("q", "k", BASE + 1, BASE + 2, aggregations=("spread",)))
    assert (reply.count, reply.result) == (2, {"spread": {"first": 7, "last": 5, "n": 2}})
    stored = StateShape.of(settings, "marshal-state/1").encode()
    renamed = load_settings(environ={"FIBA_AGGREGATIONS": f"count,sum,other={SPAN}"})
    with pytest.raises(StateMismatch, match=f"from count,sum,{NAMED} to count,sum,other="):
        StateShape.of(renamed, "marshal-state/1").check(stored, "the changelog")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (f"1x={SPAN}", "the name '1x' must be letters, digits"),
        (f"a b={SPAN}", "the name 'a b' must be letters, digits"),
        (f"={SPAN}", "the name '' must be letters"),
        ("spread=", "names no aggregation"),
        (f"count={SPAN}", "'count' is a built-in aggregation's name"),
        (f"x=sum,x={SPAN}", "duplicate aggregation name"),
        (f"spread={SPAN},spread=sum", "duplicate aggregation name"),
        ("spread=tests.custom_monoids:MISSING", "no attribute 'MISSING'"),
    ],
)
def test_a_bad_aggregation_name_is_refused(value, message):
    assert message in refusal(value)


def test_the_faust_api_takes_the_same_named_entries():
    from agents.sliding import composed_monoid

    composed = composed_monoid(["count", NAMED])
    partial = composed.combine(composed.lift(4), composed.lift(5))
    assert composed.lower(partial) == {"count": 2, "spread": {"first": 4, "last": 5, "n": 2}}


MY_MONOID = """
class Spread:
    identity = None
    def lift(self, x): return (x, x)
    def combine(self, a, b):
        return b if a is None else a if b is None else (min(a[0], b[0]), max(a[1], b[1]))
    def lower(self, a): return None if a is None else a[1] - a[0]
SPREAD = Spread()
"""


def test_a_module_in_the_current_directory_must_be_importable(tmp_path):
    """The ``fiba`` command's module search path starts with its own folder, not the current
    directory: a monoid module next to the user fails to import, and the error says how to make
    it importable; with PYTHONPATH it works, under its given name."""
    (tmp_path / "mymon.py").write_text(MY_MONOID)
    fiba = Path(sys.executable).with_name("fiba")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIBA_") and k != "PYTHONPATH"}
    args = [str(fiba), "config", "show", "--aggregations", "count,spread=mymon:SPREAD"]
    refused = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert refused.returncode == 2, refused.stderr
    [line] = refused.stderr.splitlines()
    assert "cannot import 'mymon:SPREAD': ModuleNotFoundError" in line
    assert "mymon is in the current directory" in line
    assert f"PYTHONPATH={tmp_path}" in line
    shown = subprocess.run(
        args, cwd=tmp_path, env=env | {"PYTHONPATH": "."}, capture_output=True, text=True
    )
    assert shown.returncode == 0, shown.stderr
    assert "count,spread=mymon:SPREAD" in shown.stdout


def span_oracle(events: list[tuple[str, int, int]]) -> dict[str, dict]:
    """Per key: the value of its oldest and youngest event (equal times: in sending order)."""
    by_key: dict[str, list[tuple[int, int, int]]] = {}
    for index, (key, ts, value) in enumerate(events):
        by_key.setdefault(key, []).append((ts, index, value))
    return {
        key: {"first": min(items)[2], "last": max(items)[2], "n": len(items)}
        for key, items in by_key.items()
    }


@pytest.mark.kafka
@pytest.mark.timeout(240)
def test_a_custom_monoid_survives_sigkill_and_a_restore_from_the_changelog(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path
) -> None:
    state_dir = tmp_path / "state"
    settings = worker_settings(kafka_bootstrap, embedded_profile, state_dir, partitions=2)
    settings = replace(settings, aggregations=("count", SPAN, NAMED))
    asyncio.run(create_topics(settings))
    events = make_events(2_000, seed=11)
    last = asyncio.run(produce(settings, events))
    logs = [tmp_path / f"worker-{i}.log" for i in range(2)]
    worker = start_worker(settings, logs[0])
    try:
        wait_until(lambda: processed(settings, worker, logs[0]) >= 700, 120, "a third processed")
        worker.kill()  # SIGKILL mid-stream, and the data dir is lost: restore from the changelog
        worker.wait(10)
        shutil.rmtree(state_dir)
        worker = start_worker(settings, logs[1])
        wait_until(lambda: caught_up(settings, [worker], [logs[1]], last), 120, "all processed")
        query = urllib.parse.urlencode({"from": 0, "to": BASE * 2})
        for key, expected in sorted(span_oracle(events).items()):
            answer = http_get(settings, f"/windows/{key}?{query}")
            assert (answer["count"], answer["result"][SPAN]) == (expected["n"], expected), key
            assert answer["result"]["spread"] == expected, key
        last_record = asyncio.run(read_to_end(settings, settings.aggregates_topic))[-1]
        aggregates = json.loads(last_record.value)["windows"]["1h"]["aggregates"]
        assert list(aggregates) == ["count", SPAN, "spread"]
        assert aggregates["spread"] == aggregates[SPAN]
    except BaseException:
        print("\n".join(log.read_text(errors="replace")[-3000:] for log in logs if log.exists()))
        raise
    finally:
        stop_worker(worker)
