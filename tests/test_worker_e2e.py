"""End to end: a real ``fiba worker`` subprocess on a real broker, checked against the model.

Each test creates its own topics and app id, produces an out-of-order keyed stream with late,
future and malformed records mixed in, and checks that

* every aggregate record equals the brute-force model's windows after that event (per key, in
  order; ``emit=batch``: after each batch the worker took, identified by stream time);
* every rejected record is in the dead-letter topic with its original bytes and reason;
* range queries over the query topic and over HTTP answer what the model answers.

The model (``tests.test_key_windows.Model``) replays the records of each input partition in
offset order, as the worker does.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
import zlib
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.partitioner import murmur2

import stores
from agents.clients import client_options, read_to_end
from agents.records import (
    DLQ_OFFSET,
    DLQ_PARTITION,
    DLQ_REASON,
    DLQ_TOPIC,
    INPUT_OFFSET,
    INPUT_PARTITION,
    AggregateRecord,
)
from app.brokers.process import free_port
from app.demo import start_worker, stop_worker
from app.settings import Settings, WindowSpec
from app.topics import create_topics
from tests.test_key_windows import Model, same_aggregates
from tests.test_output_delivery import wait_for_records

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

KEYS = [f"sensor-{i}" for i in range(6)]
BASE = 1_700_000_000_000


def make_settings(bootstrap: str, embedded: bool, state_dir: Path, emit: str) -> Settings:
    suffix = uuid.uuid4().hex[:8]
    return replace(
        Settings(),
        broker=bootstrap,
        broker_profile="embedded" if embedded else "kafka",
        app_id=f"e2e-{suffix}",
        input_topic=f"e2e-{suffix}-events",
        aggregates_topic=f"e2e-{suffix}-aggregates",
        queries_topic=f"e2e-{suffix}-queries",
        answers_topic=f"e2e-{suffix}-answers",
        dead_letter_topic=f"e2e-{suffix}-dlq",
        partitions=3,
        retention=20_000,
        windows=(WindowSpec("2s", 2_000), WindowSpec("5s", 5_000), WindowSpec("20s", 20_000)),
        aggregations=("count", "sum", "max", "mean", "pop_stddev"),
        max_future_skew=30_000,
        emit=emit,
        batch_max_records=50,
        batch_max_wait=100,
        state_dir=state_dir,
        web_port=free_port(),
        sweep_interval=2_000,
    )


def input_stream(n: int, seed: int) -> list[tuple[bytes | None, bytes, str | None]]:
    """``(key, value, expected reason or None)``: out of order by up to 3 s, with late, future
    and malformed records (the reason for those the worker can only judge by stream time is
    left to the model: ``None``)."""
    rng = random.Random(seed)
    records: list[tuple[bytes | None, bytes, str | None]] = []
    for i in range(n):
        key = rng.choice(KEYS).encode()
        ts = BASE + i * 100 - rng.choice([0, 0, 0, 0, rng.randrange(3_000)])
        if i % 97 == 50:
            ts -= 60_000  # late
        if i % 89 == 60:
            ts += 120_000  # future
        records.append(
            (key, json.dumps({"ts": ts, "value": rng.randrange(-100, 100)}).encode(), None)
        )
        if i % 53 == 7:
            bad = [
                (key, b"{not json", "malformed_json"),
                (key, b'{"ts": 1, "value": NaN}', "bad_value"),
                (key, json.dumps({"value": 3}).encode(), "missing_field"),
                (key, json.dumps({"ts": "noon", "value": 3}).encode(), "bad_timestamp"),
                (b"k" * 2000, json.dumps({"ts": ts, "value": 3}).encode(), "oversize"),
            ][i % 5]
            records.append(bad)
    return records


def partition_of(key: bytes, partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


async def produce(
    settings: Settings, topic: str, records, codecs: tuple[str | None, ...] = (None,)
) -> list[tuple[int, int]]:
    """Send records in order, each producer's acknowledged before the next starts (so offsets
    follow the list order): ``codecs`` split the records into as many consecutive runs, each
    sent by a producer compressing with its codec (None: none)."""
    run = -(-len(records) // len(codecs))
    metas = []
    for i, codec in enumerate(codecs):
        producer = AIOKafkaProducer(**client_options(settings), linger_ms=5, compression_type=codec)
        await producer.start()
        try:
            futures = [
                await producer.send(topic, value=v, key=k)
                for k, v, *_ in records[i * run : (i + 1) * run]
            ]
            metas += [await f for f in futures]
        finally:
            await producer.stop()
    return [(m.partition, m.offset) for m in metas]


def http_get(settings: Settings, path: str) -> tuple[int, dict]:
    """``(status, JSON body)`` of a GET; waits 30 s, longer than a worker's forwarding of a
    query (``FORWARD_TIMEOUT_S``), which answers 504 when the owner is late (the caller's
    poll retries that; a client timeout as short as the worker's raced it)."""
    url = f"http://127.0.0.1:{settings.web_port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def wait_for_stats(settings: Settings, worker, handled: int, timeout: float = 120) -> dict:
    """Poll ``GET /stats`` until ``handled`` input records were accepted or dead-lettered."""
    deadline = time.monotonic() + timeout
    stats: dict = {}
    while time.monotonic() < deadline:
        assert worker.poll() is None, "the worker exited"
        try:
            _, stats = http_get(settings, "/stats")
        except OSError:
            time.sleep(0.5)
            continue
        done = stats["counts"].get("accepted", 0) + sum(
            n for reason, n in stats["dead_letters"].items() if reason != "bad_query"
        )
        if done >= handled:
            return stats
        time.sleep(0.5)
    raise AssertionError(f"worker did not handle {handled} records in time: {stats}")


def replay_model(settings: Settings, records, placed):
    """Replay each partition in offset order through the model.

    Returns the models (final state), per partition the snapshots after each accepted event
    ``(key, stream time, {key: windows of every key})``, and the reasons of rejected records
    by ``(partition, offset)``.
    """
    models = {p: Model(settings) for p in range(settings.partitions)}
    snapshots: dict[int, list[tuple[str, int, dict]]] = {}
    rejected: dict[tuple[int, int], str] = {}
    for (partition, offset), (key, value, reason) in sorted(zip(placed, records, strict=True)):
        model = models[partition]
        if reason is not None:
            rejected[(partition, offset)] = reason
            continue
        obj = json.loads(value)
        outcome = model.accept(key.decode(), obj["ts"], obj["value"])
        if isinstance(outcome, str):
            rejected[(partition, offset)] = outcome
            continue
        every = {k: model.windows(k) for k in model.events}
        snapshots.setdefault(partition, []).append((key.decode(), model.stream_time, every))
    return models, snapshots, rejected


def matches(record: AggregateRecord, stream_time: int, windows: dict, settings: Settings) -> bool:
    """``record`` carries exactly ``windows`` (the model's) at ``stream_time``."""
    if record.stream_time != stream_time or list(record.windows) != list(windows):
        return False
    for name, (start, end, count, aggs) in windows.items():
        got = record.windows[name]
        if (got.start, got.end, got.count) != (start, end, count):
            return False
        if tuple(got.aggregates) != settings.aggregations:
            return False
        if not same_aggregates(got.aggregates, aggs):
            return False
    return True


def run_scenario(
    settings: Settings,
    tmp_path: Path,
    n: int,
    records=None,
    codecs: tuple[str | None, ...] = (None,),
) -> dict:
    """Run a worker over ``records`` (default: ``input_stream(n)``, produced with ``codecs``
    as ``produce`` does) and check every output against the model; returns the worker's last
    ``/stats``."""
    asyncio.run(create_topics(settings))
    generated = records is None
    if generated:
        records = input_stream(n, seed=zlib.crc32(settings.emit.encode()))
    placed = asyncio.run(produce(settings, settings.input_topic, records, codecs))
    models, snapshots, rejected = replay_model(settings, records, placed)
    if generated:
        reasons = {"late", "future", "malformed_json", "bad_value", "oversize"}
        assert reasons <= set(rejected.values())
    worker = start_worker(settings, tmp_path / "worker.log")
    try:
        stats = wait_for_stats(settings, worker, len(records))
        # /stats counts an output when it is queued: wait until as many have landed
        aggregates = wait_for_records(
            settings, settings.aggregates_topic, stats["counts"].get("aggregates", 0)
        )
        dead = wait_for_records(
            settings, settings.dead_letter_topic, sum(stats["dead_letters"].values())
        )
        check_aggregates(settings, aggregates, snapshots)
        check_input_positions(settings, aggregates, records, placed, rejected)
        check_dead_letters(settings, dead, records, placed, rejected)
        check_queries(settings, models)
        check_progress_committed(settings, placed)
        return stats
    except BaseException:
        print((tmp_path / "worker.log").read_text(errors="replace")[-5000:])
        raise
    finally:
        stop_worker(worker)


def check_progress_committed(settings: Settings, placed: list[tuple[int, int]]) -> None:
    """The worker commits its input progress (monitoring only) under ``<app_id>-input``:
    within a few commit intervals it reaches the end of every input partition."""
    wanted = {}
    for partition, offset in placed:
        wanted[partition] = max(wanted.get(partition, 0), offset + 1)

    async def committed() -> dict[int, int | None]:
        consumer = AIOKafkaConsumer(
            **client_options(settings),
            group_id=settings.input_progress_group,
            enable_auto_commit=False,
        )
        await consumer.start()
        try:
            tps = {p: TopicPartition(settings.input_topic, p) for p in wanted}
            return {p: await consumer.committed(tp) for p, tp in tps.items()}
        finally:
            await consumer.stop()

    deadline = time.monotonic() + 30
    while (got := asyncio.run(committed())) != wanted:
        assert time.monotonic() < deadline, (got, wanted)
        time.sleep(1)


def changed_only(snapshots, settings: Settings) -> list:
    """The snapshots after which ``emit=changes`` emits: the key's windows (counts and
    aggregates, exact here: integer inputs, no floating-point aggregation) differ from those
    of its previous emitted record."""
    last: dict[str, tuple] = {}
    kept = []
    for key, stream_time, every in snapshots:
        fingerprint = tuple(
            (count, tuple(aggs[name] for name in settings.aggregations))
            for _, _, count, aggs in every[key].values()
        )
        if last.get(key) != fingerprint:
            last[key] = fingerprint
            kept.append((key, stream_time, every))
    return kept


def check_aggregates(settings: Settings, aggregates, snapshots) -> None:
    """``event``: one record per accepted event, in order, each equal to the model after it;
    ``changes``: the same, without the records whose windows did not change.
    ``batch``: each record equals the model's windows of its key after some event at its
    stream time (a batch end), and each key's last record comes after its last event."""
    by_partition: dict[int, list[AggregateRecord]] = {}
    for r in aggregates:
        record = AggregateRecord.from_json(json.loads(r.value))
        assert r.key == record.key.encode()
        by_partition.setdefault(partition_of(r.key, settings.partitions), []).append(record)
    assert set(by_partition) == set(snapshots)
    for partition, wanted in snapshots.items():
        got = by_partition[partition]
        if settings.emit == "changes":
            wanted = changed_only(wanted, settings)
        if settings.emit in ("event", "changes"):
            assert len(got) == len(wanted)
            for record, (key, stream_time, every) in zip(got, wanted, strict=True):
                assert record.key == key
                assert matches(record, stream_time, every[key], settings), (record, every[key])
            continue
        assert len(got) <= len(wanted)
        last_event = {key: i for i, (key, _, _) in enumerate(wanted)}
        last_record: dict[str, int] = {}
        for record in got:
            positions = [
                i
                for i, (_, stream_time, every) in enumerate(wanted)
                if stream_time == record.stream_time
                and record.key in every
                and matches(record, stream_time, every[record.key], settings)
            ]
            assert positions, record
            last_record[record.key] = max(positions)
        # every key's last record includes its last event
        assert set(last_record) == set(last_event)
        for key, i in last_event.items():
            assert last_record[key] >= i, key


def check_input_positions(settings: Settings, aggregates, records, placed, rejected) -> None:
    """Each aggregate names the accepted input record it answers (``input_partition``,
    ``input_offset``): one of its key, at its ``event_ts``; per key the positions increase and
    the last one is the key's last accepted record (``emit=batch``: the key's last record of
    each batch; ``emit=changes`` may suppress that one's aggregate)."""
    original = dict(zip(placed, records, strict=True))
    last_accepted: dict[bytes, tuple[int, int]] = {}
    for position in sorted(original):
        if position not in rejected:
            last_accepted[original[position][0]] = position
    last_named: dict[bytes, tuple[int, int]] = {}
    for r in aggregates:
        obj = json.loads(r.value)
        position = (obj[INPUT_PARTITION], obj[INPUT_OFFSET])
        assert position in original and position not in rejected, position
        key, value, _ = original[position]
        assert key == r.key and json.loads(value)["ts"] == obj["event_ts"], (position, obj)
        assert position > last_named.get(key, (-1, -1)), position
        last_named[key] = position
    if settings.emit != "changes":
        assert last_named == last_accepted


def check_dead_letters(settings: Settings, dead, records, placed, rejected) -> None:
    original = dict(zip(placed, records, strict=True))
    found = {}
    for r in dead:
        headers = {k: v.decode() for k, v in r.headers}
        assert headers[DLQ_TOPIC] == settings.input_topic
        position = (int(headers[DLQ_PARTITION]), int(headers[DLQ_OFFSET]))
        key, value, _ = original[position]
        assert (r.key, r.value) == (key, value)
        found[position] = headers[DLQ_REASON]
    assert found == rejected


def check_queries(settings: Settings, models) -> None:
    queries = []
    for i, key in enumerate(KEYS):
        model = models[partition_of(key.encode(), settings.partitions)]
        s = model.stream_time
        if s is None:
            continue
        queries.append(
            (
                {"query_id": f"r{i}", "key": key, "from": s - 7_000, "to": s - 1_000},
                model.aggregates(model.values(key, s - 7_000, s - 1_000)),
            )
        )
        queries.append(
            (
                {"query_id": f"w{i}", "key": key, "window": "5s"},
                model.aggregates(model.values(key, s - 5_000, s)),
            )
        )
    queries.append(
        (
            {"query_id": "unknown", "key": "nobody", "from": 0, "to": BASE * 2},
            Model(settings).aggregates([]),
        )
    )
    k0 = KEYS[0]
    # every query with a usable id gets one answer, an error one when it is bad; the
    # malformed ones (bad_query) a dead letter as well, and one without an id only that
    errors = {
        "inverted": ({"query_id": "inverted", "key": k0, "from": 10, "to": 5}, False),
        "both": ({"query_id": "both", "key": k0, "window": "5s", "from": 1}, False),
        "bad-from": ({"query_id": "bad-from", "key": k0, "from": "x", "to": 5}, True),
        "no-key": ({"query_id": "no-key", "from": 1, "to": 5}, True),
        "7": ({"query_id": 7, "key": k0, "window": ["5s"]}, True),
    }
    to_send = [(q["key"].encode(), json.dumps(q).encode()) for q, _ in queries]
    to_send += [(k0.encode(), json.dumps(q).encode()) for q, _ in errors.values()]
    to_send.append((k0.encode(), json.dumps({"key": k0, "window": "5s"}).encode()))  # no id
    asyncio.run(produce(settings, settings.queries_topic, to_send))
    deadline = time.monotonic() + 60
    answers: dict[str, dict] = {}
    received: Counter[str] = Counter()
    while len(answers) < len(to_send) - 1 and time.monotonic() < deadline:
        received.clear()
        for r in asyncio.run(read_to_end(settings, settings.answers_topic)):
            answer = json.loads(r.value)
            answers[answer["query_id"]] = answer
            received[answer["query_id"]] += 1
        time.sleep(0.5)
    assert set(received.values()) == {1} and len(received) == len(to_send) - 1
    for query_id in errors:
        assert answers[query_id]["error"] and answers[query_id]["count"] == 0, query_id
    assert answers["no-key"]["key"] == k0  # the record's Kafka key
    assert "not both" in answers["both"]["error"]
    wanted = 1 + sum(d for _, d in errors.values())
    bad_queries: list = []
    while len(bad_queries) < wanted and time.monotonic() < deadline + 30:
        dead = asyncio.run(read_to_end(settings, settings.dead_letter_topic))
        bad_queries = [r for r in dead if dict(r.headers)[DLQ_REASON] == b"bad_query"]
        time.sleep(0.2)
    assert len(bad_queries) == wanted
    for query, (count, aggregates) in queries:
        answer = answers[query["query_id"]]
        assert answer["error"] is None
        assert answer["count"] == count, (query, answer)
        assert same_aggregates(answer["result"], {k: aggregates[k] for k in answer["result"]})
        params = {k: query[k] for k in ("from", "to", "window") if k in query}
        status, via_http = http_get(
            settings, f"/windows/{query['key']}?{urllib.parse.urlencode(params)}"
        )
        assert status == 200 and via_http["count"] == count
        assert via_http["result"] == answer["result"]
    status, inverted = http_get(settings, f"/windows/{KEYS[0]}?from=10&to=5")
    assert status == 400 and inverted["error"]
    status, both = http_get(settings, f"/windows/{KEYS[0]}?window=5s&from=1")
    assert status == 400 and "not both" in both["error"]
    counts = Counter(a["error"] is None for a in answers.values())
    assert counts[True] == len(queries)


@pytest.mark.parametrize("emit", ["event", "batch", "changes"])
def test_worker_end_to_end(kafka_bootstrap, embedded_profile, tmp_path, emit):
    settings = make_settings(kafka_bootstrap, embedded_profile, tmp_path / "state", emit)
    if emit == "changes":
        # windows that are not all as long as the retention (so events can miss every window),
        # and exact aggregations (so "unchanged" is exact on both sides)
        settings = replace(
            settings,
            windows=settings.windows[:2],
            aggregations=("count", "sum", "max", "mean"),
        )
    stats = run_scenario(settings, tmp_path, n=600)
    if emit != "changes" and stores.native() is not None:
        # the natively fetched records were parsed and applied in the kernel (apply_fetched,
        # apply_fetched_events), with no Python object per event
        assert stats["counts"].get("taken_natively", 0) > 0, stats["counts"]


def test_input_from_compressing_producers_is_read_whatever_the_codec(
    kafka_bootstrap, embedded_profile, tmp_path
):
    """Input written by producers that compress, with each of Kafka's codecs in turn (as a
    Java producer's ``compression.type`` does): every output exact, as uncompressed. Before
    aiokafka's codec extras were a dependency, every fetch of a snappy, lz4 or zstd batch
    raised ``UnsupportedCodecError`` and the worker retried it every 100 ms, reading nothing
    more of the partition."""
    settings = make_settings(kafka_bootstrap, embedded_profile, tmp_path / "state", "event")
    stats = run_scenario(settings, tmp_path, n=300, codecs=("gzip", "snappy", "lz4", "zstd"))
    assert stats["counts"]["accepted"] > 250


BIG_VALUES = (2**62, -(2**62), 2**63 - 2**10, -3 * 2**61)
"""Ints within int64, exact as floats and far apart (the model's exact stddev is the worker's)."""


@pytest.mark.parametrize("emit", ["event", "batch"])
def test_pauses_in_event_time_reject_nothing(kafka_bootstrap, embedded_profile, tmp_path, emit):
    """A stream that pauses for 6 minutes, a day and a month, ending now (a replay of the
    last month, then live), with the default ``max_future_skew`` (off) and
    ``max_wall_clock_skew``: every event is accepted, no dead letter, and every aggregate and
    query answer equals the model's. (Before: everything after the first pause was ``future``.)
    After the month, the values are ints near +-2**62 whose sums leave int64: exact all the
    same (the native kernel hands such a partition to the Python path before it sums them)."""
    settings = replace(
        make_settings(kafka_bootstrap, embedded_profile, tmp_path / "state", emit),
        max_future_skew=Settings().max_future_skew,
    )
    minute, day = 60_000, 86_400_000
    pauses = [0, 6 * minute, day, 30 * day]
    start = int(time.time() * 1000) - sum(pauses) - 60_000
    rng = random.Random(28)
    records, t = [], start
    for pause in pauses:
        t += pause
        for _ in range(40):
            t += 250
            ts = t - rng.choice([0, 0, 0, 1_500])
            x = rng.choice(BIG_VALUES) if pause == 30 * day else rng.randrange(-100, 100)
            value = json.dumps({"ts": ts, "value": x}).encode()
            records.append((rng.choice(KEYS).encode(), value, None))
    stats = run_scenario(settings, tmp_path, len(records), records)
    assert stats["counts"]["accepted"] == len(records)
    assert stats["dead_letters"] == {}


def test_http_query_is_answered_by_the_owning_worker(kafka_bootstrap, embedded_profile, tmp_path):
    base = make_settings(kafka_bootstrap, embedded_profile, tmp_path / "a", "event")
    base = replace(base, partitions=4)
    other = replace(base, state_dir=tmp_path / "b", web_port=free_port())
    asyncio.run(create_topics(base))
    workers = [start_worker(base, tmp_path / "a.log"), start_worker(other, tmp_path / "b.log")]
    try:
        deadline = time.monotonic() + 90
        while True:
            assert time.monotonic() < deadline, "the two workers never shared the partitions"
            try:
                owned = [set(http_get(s, "/stats")[1]["assigned"]) for s in (base, other)]
            except OSError:
                owned = [set(), set()]
            if all(owned) and owned[0] | owned[1] == set(range(4)) and not owned[0] & owned[1]:
                break
            time.sleep(0.5)
        records = [
            (k.encode(), json.dumps({"ts": BASE + i, "value": i}).encode(), None)
            for i, k in enumerate(KEYS * 5)
        ]
        asyncio.run(produce(base, base.input_topic, records))
        key = next(k for k in KEYS if partition_of(k.encode(), 4) in owned[1])
        expected = sum(i for i, k in enumerate(KEYS * 5) if k == key)
        deadline = time.monotonic() + 60
        status, answer = 0, {}
        while not (status == 200 and answer["count"] == 5):
            assert time.monotonic() < deadline, ("the events were not processed", status, answer)
            time.sleep(0.5)
            status, answer = http_get(base, f"/windows/{key}?from={BASE}&to={BASE + 1000}")
        assert answer["result"]["sum"] == expected
        assert answer["query_id"] == "http"
        assert http_get(base, "/stats")[1]["counts"]["http_forwarded"] >= 1
        status, answer = http_get(base, f"/windows/{key}?window=2s&aggregations=sum")
        assert status == 200 and answer["result"] == {"sum": expected}
    except BaseException:
        for log in ("a.log", "b.log"):
            print((tmp_path / log).read_text(errors="replace")[-3000:])
        raise
    finally:
        for worker in workers:
            stop_worker(worker)
