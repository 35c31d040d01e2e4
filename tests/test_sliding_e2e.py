"""The documented Faust example (``examples/clicks.py``) as a real worker on a real broker,
SIGKILLed mid-stream and restarted, against a brute-force oracle.

Events out of order by up to 3 s over more than the 10 min retention. Asserted per input
partition: before the kill the outputs are the oracle's, once; the changelog the killed worker
wrote holds a prefix of the events, each once; from the committed offset on, the restarted
worker gives each event one output equal to the oracle's seeded with that changelog (events
applied before the kill but after the commit count twice, as at-least-once does and the
oracle too). Every assertion: docs/testing.md.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, replace
from itertools import takewhile
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from agents.clients import client_options, read_to_end
from app.demo import log_tail, stop_worker
from app.settings import Settings
from app.topics import CHANGELOG_TOPIC_CONFIGS, DATA_TOPIC_CONFIGS, TopicSpec, create_topics
from stores.monoids import monoid
from tests.oracle import OracleWindow

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

PARTITIONS = 2
USERS = [f"user-{i}" for i in range(6)]
BASE = 1_700_000_000_000
RETENTION = 600_000
WINDOWS = {"1m": 60_000, "5m": 300_000}
FIRST, SECOND = 700, 300
BACKLOG_FIRST, BACKLOG_SECOND = 60, 240
LAUNCHER = """
import os, sys
import examples.clicks as example
conf = example.app.conf
conf.datadir = os.environ["TEST_DATADIR"]
conf.broker_session_timeout = 6.0
conf.broker_heartbeat_interval = 0.6
conf.broker_commit_interval = float(os.environ.get("TEST_COMMIT_INTERVAL", "0.5"))
if os.environ["TEST_EMBEDDED"] == "1":
    conf.producer_max_batch_size = 1  # the embedded broker's ListOffsets (a changelog's end)
if os.environ.get("TEST_SEEK_GATE"):  # each seek to the commits waits for this file
    import asyncio
    from faust.transport.consumer import ThreadDelegateConsumer as Consumer
    seek = Consumer.seek_to_committed
    async def gated_seek(self):
        for _ in range(600):
            if os.path.exists(os.environ["TEST_SEEK_GATE"]):
                break
            await asyncio.sleep(0.1)
        return await seek(self)
    Consumer.seek_to_committed = gated_seek
sys.argv = ["clicks", "worker", "-l", "info", "--without-web"]
example.app.main()
"""


@dataclass(frozen=True)
class Click:
    user: str
    ts: int
    amount: int
    partition: int = -1
    offset: int = -1


def make_clicks(n: int, seed: int) -> list[Click]:
    rng = random.Random(seed)
    seen: set[tuple[str, int]] = set()
    clicks = []
    for i in range(n):
        user = rng.choice(USERS)
        ts = BASE + 1_500 * i + rng.randint(-3_000, 0)
        while (user, ts) in seen:
            ts += 1
        seen.add((user, ts))
        clicks.append(Click(user, ts, i + 1))
    return clicks


def last_three():
    from stores.monoids import make_monoid

    return make_monoid((), lambda x: (x,), lambda a, b: (a + b)[-3:], list, name="last_three")


class PartitionOracle:
    """Every event the table holds per user (a multiset, in time order) and the stream time."""

    def __init__(self) -> None:
        self.composed = {"count": monoid("count"), "sum": monoid("sum"), "last": last_three()}
        self.users: dict[str, dict[str, OracleWindow]] = {}
        self.stream_time: int | None = None

    def hold(self, click: Click) -> None:
        for name, m in self.composed.items():
            self.users.setdefault(click.user, {}).setdefault(name, OracleWindow(m))
            self.users[click.user][name].insert(click.ts, click.amount)
        if self.stream_time is None or click.ts > self.stream_time:
            self.stream_time = click.ts

    def apply(self, click: Click) -> dict | None:
        """The output the example makes for ``click`` (None: it is late, dropped)."""
        if self.stream_time is not None and click.ts < self.stream_time - RETENTION:
            return None
        self.hold(click)
        s = self.stream_time
        windows = {}
        for window, size in WINDOWS.items():
            parts = self.users[click.user]
            lowered = {n: parts[n].query_range(s - size, s) for n in ("count", "sum", "last")}
            windows[window] = {
                "count": lowered["count"],
                "sum": lowered["sum"],
                "last_three": list(lowered["last"]),
            }
        return {"ts": click.ts, "stream_time": s, "windows": windows}


class ExampleRun:
    """The example's topics on the test's broker, and its workers (subprocesses, logs in
    ``tmp_path``)."""

    def __init__(self, bootstrap: str, embedded: bool, tmp_path: Path) -> None:
        self.settings = replace(
            Settings(),
            broker=bootstrap,
            broker_profile="embedded" if embedded else "kafka",
            partitions=PARTITIONS,
        )
        self.app_id = app_id = f"clicks-{uuid.uuid4().hex[:8]}"
        self.topic, self.out_topic = f"{app_id}-in", f"{app_id}-out"
        self.changelog = f"{app_id}-clicks-changelog"
        specs = [
            TopicSpec(self.topic, PARTITIONS, 1, DATA_TOPIC_CONFIGS),
            TopicSpec(self.out_topic, PARTITIONS, 1, DATA_TOPIC_CONFIGS),
            TopicSpec(self.changelog, PARTITIONS, 1, CHANGELOG_TOPIC_CONFIGS),
            TopicSpec(f"{app_id}-__assignor-__leader", 1, 1, DATA_TOPIC_CONFIGS),
        ]
        asyncio.run(create_topics(self.settings, specs))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FIBA_", "CLICKS_"))}
        self.env = env | {
            "CLICKS_APP_ID": app_id,
            "KAFKA_BROKER": f"kafka://{bootstrap}",
            "CLICKS_PARTITIONS": str(PARTITIONS),
            "CLICKS_TOPIC": self.topic,
            "CLICKS_OUT": self.out_topic,
            "TEST_EMBEDDED": "1" if embedded else "0",
            "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
        }
        self.tmp_path = tmp_path
        self.workers: dict[str, subprocess.Popen[bytes]] = {}

    def log(self, name: str) -> Path:
        return self.tmp_path / f"{name}.log"

    def start(self, name: str, seek_gate: Path | None = None, commit_interval: float = 0.5) -> None:
        """Start (or restart) worker ``name``: ``examples/clicks.py`` run as written, with the
        test's session timeout, commit interval and data dir (and, on the embedded broker,
        single-record producer batches) set in the launcher; with ``seek_gate``, each seek to
        the committed offsets waits until that file exists (at most a minute)."""
        env = self.env | {
            "TEST_DATADIR": str(self.tmp_path / name),
            "TEST_COMMIT_INTERVAL": str(commit_interval),
        }
        if seek_gate is not None:
            env["TEST_SEEK_GATE"] = str(seek_gate)
        with open(self.log(name), "ab") as out:
            self.workers[name] = subprocess.Popen(
                [sys.executable, "-c", LAUNCHER],
                env=env,
                cwd=self.tmp_path,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def kill(self, name: str) -> None:
        """SIGKILL worker ``name``, then wait until the records and offset commits it had
        already sent (still in its sockets) have landed: the output and changelog topics and
        the committed offsets stay the same for a second. ``killed_at_ms``: a time (ms) once
        it is dead, so that every record it sent has a Kafka timestamp at most that (records
        sent in the millisecond of the kill share it)."""
        worker = self.workers.pop(name)
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(10)
        self.killed_at_ms = int(time.time() * 1000)
        self.wait_stable(self._progress)

    @staticmethod
    def wait_stable(progress) -> None:
        """Return once ``progress()`` gives the same value twice, a second apart."""
        seen = None
        while seen != (seen := progress()):
            time.sleep(1)

    def finish_after_kill(self, clicks: list[Click]) -> tuple[list[Click], list, set, list]:
        """Produce ``clicks[FIRST:]`` after a kill and wait for the output of each partition's
        last event: ``clicks`` placed (partitions and offsets), the output records, the
        ``(partition, offset)`` of those the killed worker wrote, and its changelog records."""
        self.produce(clicks[FIRST:])
        clicks = self.placed(clicks)
        last = last_of_partitions(clicks)
        self.wait_for(
            lambda: {(c.user, c.ts) for c in last} <= self.output_events(self.killed_at_ms + 1),
            "the last event of every partition after the kill",
        )
        records = self.read(self.out_topic)
        before = {(r.partition, r.offset) for r in self.written_before_kill(self.out_topic)}
        return clicks, records, before, self.written_before_kill(self.changelog)

    def written_before_kill(self, topic: str) -> list:
        """The records of ``topic`` that the killed worker wrote (Kafka timestamps, set when
        sent, at most ``killed_at_ms``; they may land later, so the reading comes at the end)."""
        return [r for r in self.read(topic) if r.timestamp <= self.killed_at_ms]

    def _progress(self) -> tuple:
        outputs, changelog = len(self.read(self.out_topic)), len(self.read(self.changelog))
        return outputs, changelog, self.committed()

    def stop_all(self) -> None:
        for worker in self.workers.values():
            stop_worker(worker)

    def produce(self, clicks: list[Click]) -> None:
        async def send() -> None:
            producer = AIOKafkaProducer(**client_options(self.settings))
            await producer.start()
            try:
                for c in clicks:
                    value = json.dumps({"ts": c.ts, "amount": c.amount}).encode()
                    await producer.send(self.topic, value, key=c.user.encode())
                await producer.flush()
            finally:
                await producer.stop()

        asyncio.run(send())

    def read(self, topic: str) -> list:
        return asyncio.run(read_to_end(self.settings, topic))

    def committed(self) -> dict[int, int]:
        """The example group's committed input offset per partition (0: none)."""

        async def read() -> dict[int, int]:
            consumer = AIOKafkaConsumer(
                **client_options(self.settings), group_id=self.app_id, enable_auto_commit=False
            )
            await consumer.start()
            try:
                return {
                    p: await consumer.committed(TopicPartition(self.topic, p)) or 0
                    for p in range(PARTITIONS)
                }
            finally:
                await consumer.stop()

        return asyncio.run(read())

    def placed(self, clicks: list[Click]) -> list[Click]:
        """``clicks`` with their input partitions and offsets."""
        where = {
            (r.key.decode(), json.loads(r.value)["ts"]): (r.partition, r.offset)
            for r in self.read(self.topic)
        }
        return [replace(c, partition=where[c.user, c.ts][0], offset=where[c.user, c.ts][1])
                for c in clicks]  # fmt: skip

    def output_events(self, since_ms: int = 0) -> set[tuple[str, int]]:
        """The ``(user, ts)`` of the outputs sent at or after ``since_ms`` (Kafka timestamps)."""
        return {(r.key.decode(), json.loads(r.value)["ts"])
                for r in self.read(self.out_topic) if r.timestamp >= since_ms}  # fmt: skip

    def wait_for(self, predicate, what: str, timeout: float = 150.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            for name, worker in self.workers.items():
                log = log_tail(self.log(name), 40)
                assert worker.poll() is None, f"worker {name} exited:\n{log}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.5)


def last_of_partitions(clicks: list[Click]) -> list[Click]:
    """The last placed click of each input partition."""
    return [max((c for c in clicks if c.partition == p), key=lambda c: c.offset)
            for p in range(PARTITIONS)]  # fmt: skip


def split_outputs(records: list, before: set, by_event: dict) -> tuple[dict, dict]:
    """Input partition -> ``(click, output)`` in output order, for the outputs at
    ``(partition, offset)`` in ``before`` and for the others (one user's outputs are in order
    in its output partition)."""
    first: dict[int, list] = defaultdict(list)
    second: dict[int, list] = defaultdict(list)
    for r in records:
        value = json.loads(r.value)
        click = by_event[r.key.decode(), value["ts"]]
        (first if (r.partition, r.offset) in before else second)[click.partition].append(
            (click, value)
        )
    return first, second


def held_entries(records: list, p: int) -> dict[tuple[str, int], list]:
    """The changelog's entries of partition ``p``: ``(user, ts) -> state`` (last record wins,
    tombstones delete)."""
    entries: dict[tuple[str, int], list | None] = {}
    for r in records:
        if r.partition == p:
            user, ts = json.loads(r.key)
            entries[user, ts] = None if r.value is None else json.loads(r.value)
    return {k: v for k, v in entries.items() if v is not None}


def check_exact_from_empty(events: list[Click], outputs: list) -> None:
    """The outputs of a worker that started empty: the oracle's after each event, once."""
    got: dict[tuple[str, int], list] = defaultdict(list)
    for c, v in outputs:
        got[c.user, c.ts].append(v)
    assert all(len(v) == 1 for v in got.values()), "an event had two outputs"
    oracle = PartitionOracle()
    for click in events:
        expected = oracle.apply(click)
        for value in got.pop((click.user, click.ts), []):
            assert value == expected, click
    assert not got


def check_prefix_once(events: list[Click], holds: dict, by_event: dict) -> int:
    """The changelog holds each event of a prefix (offsets < q) once: all of those inside
    the retention, maybe older ones not yet tombstoned, nothing else. Returns q."""
    for key, state in holds.items():
        assert state[0] == 1 and state[1] == by_event[key].amount, (by_event[key], state)
    q = max((by_event[k].offset for k in holds), default=-1) + 1
    horizon = max((c.ts for c in events if c.offset < q), default=0) - RETENTION
    wanted = {(c.user, c.ts) for c in events if c.offset < q and c.ts >= horizon}
    assert wanted <= set(holds) <= {(c.user, c.ts) for c in events if c.offset < q}
    return q


def check_taken_over(
    events: list[Click], holds: dict, start: int, before: list, after: list, by_event: dict
) -> None:
    """The outputs of a worker that took the partition over at input offset ``start`` with the
    changelog's entries ``holds``: check 3 of the module doc (``before``: the outputs made
    before; the oracle holds each event of ``holds`` as many times as its entry counts)."""
    done_before = {(c.user, c.ts) for c, _ in before}
    assert {(c.user, c.ts) for c in events if c.offset < start} <= done_before
    oracle = PartitionOracle()
    for key in sorted(holds, key=lambda k: by_event[k].offset):
        count, total, _ = holds[key]
        assert total == count * by_event[key].amount, (by_event[key], holds[key])
        for _ in range(count):
            oracle.hold(by_event[key])
    got = {(c.user, c.ts): v for c, v in after}
    assert len(got) == len(after), "an event had two outputs after the takeover"
    assert all(c.offset >= start for c, _ in after), "an output of an event before the start"
    for click in (c for c in events if c.offset >= start):
        expected = oracle.apply(click)
        assert got.pop((click.user, click.ts), None) == expected, click


def test_example_survives_sigkill_exactly_as_at_least_once(
    kafka_bootstrap, embedded_profile, tmp_path
):
    """Checks 1-3 of the module doc, in one run on fresh topics."""
    run = ExampleRun(kafka_bootstrap, embedded_profile, tmp_path)
    clicks = make_clicks(FIRST + SECOND, seed=21)
    run.start("worker")
    try:
        run.produce(clicks[:FIRST])
        run.wait_for(lambda: len(run.read(run.out_topic)) >= 150, "150 outputs")
        run.kill("worker")
        committed = run.committed()
        run.start("worker")
        clicks, records, before, held = run.finish_after_kill(clicks)
    finally:
        run.stop_all()
    by_event = {(c.user, c.ts): c for c in clicks}
    first, second = split_outputs(records, before, by_event)
    print(f"{len(before)} outputs before the kill, {len(records) - len(before)} after")
    for p in range(PARTITIONS):
        events = sorted((c for c in clicks if c.partition == p), key=lambda c: c.offset)
        check_exact_from_empty(events, first[p])  # 1.
        holds = held_entries(held, p)
        q = check_prefix_once(events, holds, by_event)  # 2.
        c = committed[p]
        check_taken_over(events, holds, c, first[p], second[p], by_event)  # 3.
        late = sum(1 for e in events if e.offset >= c) - len(second[p])
        print(f"partition {p}: restarted at offset {c}, the changelog held offsets < {q}, "
              f"{late} replayed events late")  # fmt: skip


def test_standby_replica_takes_over_a_killed_worker(kafka_bootstrap, embedded_profile, tmp_path):
    """Two workers (Faust's default ``table_standby_replicas=1``: each keeps the other's
    partition as a standby). Once every event so far has its output, one is SIGKILLed; the other
    takes its partition over without reading the changelog (its standby copy is up to date) and
    continues exactly as check 3 says (on its own partition too). The rest of the stream is
    produced once the survivor has recovered both partitions: events it processed while the
    group still waited for the dead member are committed only after the rebalance and so
    processed again (at-least-once; on a loaded CI machine nearly all of the second part of
    its own partition twice), which is not the takeover this test is about."""
    run = ExampleRun(kafka_bootstrap, embedded_profile, tmp_path)
    clicks = make_clicks(FIRST + SECOND, seed=22)
    run.start("a")
    run.start("b")
    try:
        run.produce(clicks[:FIRST])
        wanted = {(c.user, c.ts) for c in clicks[:FIRST]}
        run.wait_for(lambda: wanted <= run.output_events(), "an output of every event")
        time.sleep(3)  # the standby reads the last changelog records
        run.kill("a")
        committed = run.committed()
        run.wait_for(lambda: recovered_all(run.log("b").read_text()), "the survivor's recovery")
        clicks, records, before, held = run.finish_after_kill(clicks)
    finally:
        run.stop_all()
    by_event = {(c.user, c.ts): c for c in clicks}
    first, second = split_outputs(records, before, by_event)
    for p in range(PARTITIONS):
        events = sorted((c for c in clicks if c.partition == p), key=lambda c: c.offset)
        holds = held_entries(held, p)
        check_taken_over(events, holds, committed[p], first[p], second[p], by_event)
        print(f"partition {p}: continued at offset {committed[p]}")
    # the takeover read no changelog record: the survivor's last recovery (Faust's tables in
    # its log) started every changelog partition at its highwater, from the standby's copy
    log = run.log("b").read_text()
    highwater = last_log_table(log, "Highwater - Active")
    starts = last_log_table(log, "Reading Starts At - Active")
    assert set(starts) == set(range(PARTITIONS)) and starts == highwater, (starts, highwater)


def test_restart_with_a_backlog_processes_each_event_once(
    kafka_bootstrap, embedded_profile, tmp_path
):
    """A worker restarted with a changelog to recover, the backlog produced while its seek to
    the committed offsets is held back (until a backlog output appears, or 3 s) and nothing
    committed before that seek: each event is processed once, exactly. Faust 0.15.3 resumes
    the input partitions before that seek and empties the streams' queues after it, so without
    ``agents.faust_recovery`` the records processed meanwhile are fetched and processed again
    (or lost; see its module doc). The first worker is killed once everything it did is
    committed, so nothing is replayed: the outputs of both workers are the oracle's, once per
    event."""
    run = ExampleRun(kafka_bootstrap, embedded_profile, tmp_path)
    clicks = make_clicks(BACKLOG_FIRST + BACKLOG_SECOND, seed=23)
    gate = tmp_path / "seek-gate"
    run.start("first")
    try:
        run.produce(clicks[:BACKLOG_FIRST])
        placed = run.placed(clicks[:BACKLOG_FIRST])
        ends = {p: 1 + max(c.offset for c in placed if c.partition == p) for p in range(PARTITIONS)}
        run.wait_for(lambda: run.committed() == ends, "the first events all committed")
        run.kill("first")
        run.start("second", seek_gate=gate, commit_interval=60.0)
        seeking = "Seek stream partitions to committed offsets"
        run.wait_for(lambda: seeking in run.log("second").read_text(), "the second one's seek")
        run.produce(clicks[BACKLOG_FIRST:])
        backlog = {(c.user, c.ts) for c in clicks[BACKLOG_FIRST:]}
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and not backlog & run.output_events():
            time.sleep(0.2)
        gate.touch()
        run.wait_for(lambda: "Worker ready" in run.log("second").read_text(), "the seek's end")
        clicks = run.placed(clicks)
        last = {(c.user, c.ts) for c in last_of_partitions(clicks)}
        run.wait_for(lambda: last <= run.output_events(), "the last events' outputs")
        run.wait_stable(lambda: len(run.read(run.out_topic)))
    finally:
        run.stop_all()
    by_event = {(c.user, c.ts): c for c in clicks}
    _, outputs = split_outputs(run.read(run.out_topic), set(), by_event)
    for p in range(PARTITIONS):
        events = sorted((c for c in clicks if c.partition == p), key=lambda c: c.offset)
        done = [c.offset for c, _ in outputs[p]]
        missing = sorted({c.offset for c in events} - set(done))
        repeated = sorted({o for o in done if done.count(o) > 1})
        assert not missing and not repeated, (
            f"partition {p}: no output of {missing}, two of {repeated}"
        )
        check_exact_from_empty(events, outputs[p])


def recovered_all(log: str) -> bool:
    """Whether Faust's last recovery in ``log`` made every partition active."""
    title = "Reading Starts At - Active"
    return f"+{title}" in log and set(last_log_table(log, title)) == set(range(PARTITIONS))


def last_log_table(log: str, title: str) -> dict[int, int]:
    """Partition -> offset of the last table called ``title`` that Faust's recovery logged."""
    lines = log.rsplit(f"+{title}", 1)[1].splitlines()[3:]
    rows = [line.split("|") for line in takewhile(lambda line: line.startswith("|"), lines)]
    return {int(row[2]): int(row[3]) for row in rows}
