"""The README's Faust example (``examples/clicks.py``) as a real worker on a real broker, SIGKILLed
mid-stream and restarted, against a brute-force oracle.

Events: distinct times per user, out of order by up to 3 s, spanning more than the 10 min
retention (so entries are evicted and tombstoned), none late; amounts are distinct. Each output
names its event by ``(user, ts)``. What is asserted, per input partition:

1. Before the kill (the first worker, which started empty): the outputs are the oracle's after
   each event applied in offset order, once (exact).
2. The changelog as it stands after the kill, which is what the restarted worker recovers,
   holds a prefix of the partition's events, each once: every event before some offset ``q``
   that is still inside the retention, possibly older ones not yet tombstoned, nothing at or
   after ``q``.
3. The restarted worker starts at the committed offset ``c`` (its first output's event), and
   every output it makes equals the oracle seeded with that changelog's events and then fed the
   events from ``c`` on in offset order. Events between ``c`` and ``q`` were applied before the
   kill too, so at-least-once counts them twice: the oracle does the same, which is the table's
   guarantee without transactions. Every event before ``c`` had its output before the kill.
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
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from app.clients import client_options, read_to_end
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
LAUNCHER = """
import os, sys
import examples.clicks as example
conf = example.app.conf
conf.datadir = os.environ["TEST_DATADIR"]
conf.broker_session_timeout = 6.0
conf.broker_heartbeat_interval = 0.6
conf.broker_commit_interval = 0.5
if os.environ["TEST_EMBEDDED"] == "1":
    conf.producer_max_batch_size = 1  # the embedded broker's ListOffsets (a changelog's end)
sys.argv = ["clicks", "worker", "-l", "info"]
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

    def apply(self, click: Click) -> dict:
        """The output the example makes for ``click`` (it is never late here)."""
        assert self.stream_time is None or click.ts >= self.stream_time - RETENTION
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


def broker_settings(bootstrap: str, embedded: bool) -> Settings:
    return replace(
        Settings(),
        broker=bootstrap,
        broker_profile="embedded" if embedded else "kafka",
        partitions=PARTITIONS,
    )


def start_example(env: dict[str, str], log: Path, cwd: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-c", LAUNCHER],
            env=env,
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


async def produce(settings: Settings, topic: str, clicks: list[Click]) -> None:
    producer = AIOKafkaProducer(**client_options(settings))
    await producer.start()
    try:
        for c in clicks:
            value = json.dumps({"ts": c.ts, "amount": c.amount}).encode()
            await producer.send(topic, value, key=c.user.encode())
        await producer.flush()
    finally:
        await producer.stop()


def outputs(settings: Settings, topic: str) -> list:
    return asyncio.run(read_to_end(settings, topic))


def wait_for(predicate, what: str, worker, log: Path, timeout: float = 150.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert worker.poll() is None, f"the example worker exited:\n{log_tail(log, 40)}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{log_tail(log)}"
        time.sleep(0.5)


def test_example_survives_sigkill_exactly_as_at_least_once(
    kafka_bootstrap, embedded_profile, tmp_path
):
    settings = broker_settings(kafka_bootstrap, embedded_profile)
    app_id = f"clicks-{uuid.uuid4().hex[:8]}"
    topic, out_topic = f"{app_id}-in", f"{app_id}-out"
    changelog = f"{app_id}-clicks-changelog"
    asyncio.run(
        create_topics(
            settings,
            [
                TopicSpec(topic, PARTITIONS, 1, DATA_TOPIC_CONFIGS),
                TopicSpec(out_topic, PARTITIONS, 1, DATA_TOPIC_CONFIGS),
                TopicSpec(changelog, PARTITIONS, 1, CHANGELOG_TOPIC_CONFIGS),
                TopicSpec(f"{app_id}-__assignor-__leader", 1, 1, DATA_TOPIC_CONFIGS),
            ],
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FIBA_", "CLICKS_"))}
    env |= {
        "CLICKS_APP_ID": app_id,
        "KAFKA_BROKER": f"kafka://{kafka_bootstrap}",
        "CLICKS_PARTITIONS": str(PARTITIONS),
        "CLICKS_TOPIC": topic,
        "CLICKS_OUT": out_topic,
        "TEST_DATADIR": str(tmp_path / "data"),
        "TEST_EMBEDDED": "1" if embedded_profile else "0",
        "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
    }
    log = tmp_path / "worker.log"
    clicks = make_clicks(FIRST + SECOND, seed=21)
    worker = start_example(env, log, tmp_path)
    try:
        asyncio.run(produce(settings, topic, clicks[:FIRST]))
        wait_for(lambda: len(outputs(settings, out_topic)) >= 150, "outputs", worker, log)
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(10)
        first_outputs = outputs(settings, out_topic)
        seen_before = {(r.partition, r.offset) for r in first_outputs}
        held = asyncio.run(read_to_end(settings, changelog))
        worker = start_example(env, log, tmp_path)
        asyncio.run(produce(settings, topic, clicks[FIRST:]))
        placed = {
            (r.key.decode(), json.loads(r.value)["ts"]): (r.partition, r.offset)
            for r in asyncio.run(read_to_end(settings, topic))
        }
        clicks = [replace(c, partition=placed[c.user, c.ts][0], offset=placed[c.user, c.ts][1])
                  for c in clicks]  # fmt: skip
        last = {p: max((c for c in clicks if c.partition == p), key=lambda c: c.offset)
                for p in range(PARTITIONS)}  # fmt: skip

        def all_done() -> bool:
            done = {(r.key.decode(), json.loads(r.value)["ts"])
                    for r in outputs(settings, out_topic)
                    if (r.partition, r.offset) not in seen_before}  # fmt: skip
            return all((c.user, c.ts) in done for c in last.values())

        wait_for(all_done, "the last event of every partition", worker, log)
        every_output = outputs(settings, out_topic)
    finally:
        stop_worker(worker)
    by_event = {(c.user, c.ts): c for c in clicks}
    first_gen: dict[int, list] = defaultdict(list)  # input partition -> outputs, in order
    second_gen: dict[int, list] = defaultdict(list)
    for r in every_output:  # one user's outputs are in order in its output partition
        value = json.loads(r.value)
        click = by_event[r.key.decode(), value["ts"]]
        gen = first_gen if (r.partition, r.offset) in seen_before else second_gen
        gen[click.partition].append((click, value))
    after_kill = sum(map(len, second_gen.values()))
    print(f"{len(first_outputs)} outputs before the kill, {after_kill} after the restart")
    for p in range(PARTITIONS):
        events = sorted((c for c in clicks if c.partition == p), key=lambda c: c.offset)
        # 1. before the kill: exact, from empty, each event once in offset order
        got = {(c.user, c.ts): v for c, v in first_gen[p]}
        assert len(got) == len(first_gen[p]), "an event had two outputs before the kill"
        oracle = PartitionOracle()
        for click in events:
            expected = oracle.apply(click)
            if (click.user, click.ts) in got:
                assert got.pop((click.user, click.ts)) == expected, click
        assert not got
        # 2. the changelog at the kill: a prefix of the partition's events, each once
        entries: dict[tuple, list | None] = {}
        for r in held:
            if r.partition == p:
                user, ts = json.loads(r.key)
                entries[user, ts] = None if r.value is None else json.loads(r.value)
        holds = {k: v for k, v in entries.items() if v is not None}
        for (user, ts), state in holds.items():
            click = by_event[user, ts]
            assert state[0] == 1 and state[1] == click.amount, (click, state)
        q = max((by_event[k].offset for k in holds), default=-1) + 1
        horizon = max((c.ts for c in events if c.offset < q), default=0) - RETENTION
        wanted = {(c.user, c.ts) for c in events if c.offset < q and c.ts >= horizon}
        assert wanted <= set(holds) <= {(c.user, c.ts) for c in events if c.offset < q}
        # 3. after the restart: the oracle seeded with what the changelog holds
        after = second_gen[p]
        assert after, f"no output of partition {p} after the restart"
        start = min(c.offset for c, _ in after)
        print(f"partition {p}: restarted at offset {start}, changelog held offsets < {q}")
        before_start = {(c.user, c.ts) for c in events if c.offset < start}
        assert before_start <= {(c.user, c.ts) for c, _ in first_gen[p]}
        oracle = PartitionOracle()
        for key in sorted(holds, key=lambda k: by_event[k].offset):
            oracle.hold(by_event[key])
        got = {(c.user, c.ts): v for c, v in after}
        assert len(got) == len(after), "an event had two outputs after the restart"
        for click in (c for c in events if c.offset >= start):
            assert (click.user, click.ts) in got, f"no output for {click} after the restart"
            assert got[click.user, click.ts] == oracle.apply(click), click
