"""Every built-in aggregation through the real worker (issue 16.2): aggregate records, topic and
HTTP range answers, and the same after a restart without the data dir (restored from the
changelog), all against the brute-force oracle (``tests.oracle.OracleWindow``) and the
published JSON Schemas (``schemas/``).

The registry is iterated, not listed: ``tests.aggregation_samples.aggregation_groups`` splits
it into the groups one worker can run together (numbers; ``{"value", "arg"}`` objects), and one
worker per group runs all of the group's aggregations at once (composed, as always). The
workers of both groups run side by side. Each aggregate record must name the input record it
answers (``input_partition``, ``input_offset``: issue 16.6).
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
import urllib.parse
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agents.clients import read_to_end
from agents.records import INPUT_OFFSET, INPUT_PARTITION
from app.demo import start_worker, stop_worker
from app.settings import Settings
from app.topics import create_topics
from stores.key_windows import WindowConfig
from stores.monoids import BloomFilter
from tests.aggregation_samples import GROUPS, aggregation_groups, group_values
from tests.oracle import OracleWindow
from tests.test_output_schemas import validate
from tests.test_worker_e2e import (
    BASE,
    http_get,
    make_settings,
    partition_of,
    produce,
    wait_for_stats,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

KEYS = ("k-a", "k-b", "k-c", "k-d")


def same_json(got: Any, want: Any) -> bool:
    """Equal JSON values, floats within 1e-9 (the worker combines in tree order)."""
    if isinstance(want, float) and isinstance(got, int | float):
        return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(want, dict) and isinstance(got, dict):
        return got.keys() == want.keys() and all(same_json(got[k], want[k]) for k in want)
    if isinstance(want, list) and isinstance(got, list):
        return len(got) == len(want) and all(map(same_json, got, want))
    return got == want


class Oracle:
    """Replays one group's accepted events per partition, in offset order, by brute force."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.composed = WindowConfig.from_settings(settings).composed
        self.events: dict[int, list[tuple[str, int, Any]]] = {}
        self.stream_time: dict[int, int] = {}

    def add(self, partition: int, key: str, ts: int, value: Any) -> dict[str, Any]:
        """Accept one event; the JSON ``windows`` of its aggregate record."""
        self.events.setdefault(partition, []).append((key, ts, value))
        s = max(self.stream_time.get(partition, ts), ts)
        self.stream_time[partition] = s
        windows = {}
        for w in self.settings.windows:
            count, aggregates = self.query(partition, key, s - w.size_ms, s)
            windows[w.name] = {
                "start": s - w.size_ms,
                "end": s,
                "count": count,
                "aggregates": aggregates,
            }
        return windows

    def query(self, partition: int, key: str, lo: int, hi: int) -> tuple[int, dict[str, Any]]:
        """``(count, aggregates)`` over ``lo <= t <= hi``, as JSON."""
        window = OracleWindow(self.composed)
        for k, ts, value in self.events.get(partition, []):
            if k == key:
                window.insert(ts, value)
        lowered = json.loads(json.dumps(window.query_range(lo, hi), default=BloomFilter.to_json))
        count = lowered["count"]  # the worker always composes a count
        if "count" not in self.settings.aggregations:
            del lowered["count"]
        return count, lowered


def events(group: str, n: int, seed: int, start: int) -> list[tuple[bytes, bytes, Any]]:
    """``n`` keyed events of ``group``, up to 2 s out of order (never late nor future)."""
    rng = random.Random(seed)
    values = group_values(group, n, seed)
    out = []
    for i, value in enumerate(values):
        ts = start + i * 150 - rng.choice([0, 0, 0, rng.randrange(2_000)])
        key = rng.choice(KEYS)
        out.append((key.encode(), json.dumps({"ts": ts, "value": value}).encode(), value))
    return out


def feed(oracle: Oracle, records, placed) -> dict[tuple[int, int], dict]:
    """Expected ``windows`` of the aggregate record answering each ``(partition, offset)``."""
    expected = {}
    for (partition, offset), (key, value, _) in sorted(zip(placed, records, strict=True)):
        obj = json.loads(value)
        expected[(partition, offset)] = oracle.add(partition, key.decode(), obj["ts"], obj["value"])
    return expected


def landed_aggregates(settings: Settings, positions: int, timeout: float = 60) -> list:
    """The aggregates topic's records once they answer ``positions`` distinct input records
    (``/stats`` counts an output when it is queued, before it lands), or at ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        records = asyncio.run(read_to_end(settings, settings.aggregates_topic))
        objs = [json.loads(r.value) for r in records]
        answered = {(obj[INPUT_PARTITION], obj[INPUT_OFFSET]) for obj in objs}
        if len(answered) >= positions or time.monotonic() > deadline:
            return records
        time.sleep(0.3)


def check_aggregates(settings: Settings, expected: dict[tuple[int, int], dict]) -> None:
    by_input: dict[tuple[int, int], dict] = {}
    for r in landed_aggregates(settings, len(expected)):
        obj = json.loads(r.value)
        validate("aggregate", obj)
        position = (obj[INPUT_PARTITION], obj[INPUT_OFFSET])
        assert position[0] == r.partition == partition_of(r.key, settings.partitions)
        assert position not in by_input or same_json(obj, by_input[position]), position
        by_input[position] = obj
    assert by_input.keys() == expected.keys()
    for position, windows in expected.items():
        got = by_input[position]["windows"]
        assert same_json(got, windows), (position, got, windows)


def check_answers(settings: Settings, oracle: Oracle, round_id: str) -> None:
    """Range queries over the query topic and over HTTP equal the oracle's answers."""
    queries = []
    for key in KEYS:
        partition = partition_of(key.encode(), settings.partitions)
        s = oracle.stream_time.get(partition)
        if s is not None:
            queries.append(({"key": key, "from": s - 7_000, "to": s - 1_000}, partition))
            queries.append(({"key": key, "window": "5s"}, partition))
    to_send = []
    for i, (query, _) in enumerate(queries):
        query["query_id"] = f"{round_id}-{i}"
        to_send.append((query["key"].encode(), json.dumps(query).encode()))
    asyncio.run(produce(settings, settings.queries_topic, to_send))
    answers: dict[str, dict] = {}
    deadline = time.monotonic() + 60
    while len(answers) < len(queries):
        assert time.monotonic() < deadline, f"answers missing: {len(answers)}/{len(queries)}"
        for r in asyncio.run(read_to_end(settings, settings.answers_topic)):
            answer = json.loads(r.value)
            if answer["query_id"].startswith(f"{round_id}-"):
                answers[answer["query_id"]] = answer
        time.sleep(0.3)
    for query, partition in queries:
        s = oracle.stream_time[partition]
        lo, hi = (s - 5_000, s) if "window" in query else (query["from"], query["to"])
        count, aggregates = oracle.query(partition, query["key"], lo, hi)
        answer = answers[query["query_id"]]
        validate("answer", answer)
        assert answer["error"] is None and answer["count"] == count, (query, answer)
        assert same_json(answer["result"], aggregates), (query, answer, aggregates)
        params = {k: query[k] for k in ("from", "to", "window") if k in query}
        path = f"/windows/{query['key']}?{urllib.parse.urlencode(params)}"
        status, via_http = http_get(settings, path)
        validate("answer", via_http)
        assert status == 200 and via_http["count"] == count, (query, via_http)
        assert same_json(via_http["result"], aggregates), (query, via_http, aggregates)
    status, bad = http_get(settings, f"/windows/{KEYS[0]}?from=noon&to=5&query_id={round_id}")
    validate("answer", bad)
    assert status == 400 and bad["query_id"] == round_id and "from" in bad["error"], bad


def test_every_aggregation_through_worker_restore_and_answers(
    kafka_bootstrap, embedded_profile, tmp_path: Path
) -> None:
    runs = {}
    for i, group in enumerate(GROUPS):
        settings = replace(
            make_settings(kafka_bootstrap, embedded_profile, tmp_path / f"{group}-1", "event"),
            aggregations=aggregation_groups()[group],
        )
        asyncio.run(create_topics(settings))
        records = events(group, 150, seed=i, start=BASE)
        placed = asyncio.run(produce(settings, settings.input_topic, records))
        oracle = Oracle(settings)
        runs[group] = (settings, oracle, feed(oracle, records, placed), len(records))
    logs = {group: tmp_path / f"{group}-1.log" for group in GROUPS}
    workers = {g: start_worker(runs[g][0], logs[g]) for g in GROUPS}
    try:
        for group, (settings, oracle, expected, n) in runs.items():
            wait_for_stats(settings, workers[group], n)
            check_aggregates(settings, expected)
            check_answers(settings, oracle, "first")
        for worker in workers.values():
            stop_worker(worker)
        # a new worker without the data dir: restored from the changelog, then more events
        for i, (group, (settings, oracle, expected, _)) in enumerate(runs.items()):
            settings = replace(settings, state_dir=tmp_path / f"{group}-2")
            records = events(group, 40, seed=10 + i, start=BASE + 150 * 150)
            placed = asyncio.run(produce(settings, settings.input_topic, records))
            expected.update(feed(oracle, records, placed))
            runs[group] = (settings, oracle, expected, len(records))
            logs[group] = tmp_path / f"{group}-2.log"
            workers[group] = start_worker(settings, logs[group])
        for group, (settings, oracle, expected, n) in runs.items():
            wait_for_stats(settings, workers[group], n)
            check_aggregates(settings, expected)
            check_answers(settings, oracle, "restored")
    except BaseException:
        for log in logs.values():
            print(log.read_text(errors="replace")[-4000:])
        raise
    finally:
        for worker in workers.values():
            stop_worker(worker)
