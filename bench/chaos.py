"""Chaos run: random SIGKILLs of ``fiba worker`` subprocesses, every output checked by brute force.

``python -m bench.chaos [--events 100000 --kills 20 --workers 2 ...]`` (``make chaos``): on
``KAFKA_BOOTSTRAP`` or a fresh embedded broker, it produces a keyed stream with late, future
and malformed records and range queries while SIGKILLing a random worker ``--kills`` times
(restarting it with or without its data dir), then checks every output topic against an
oracle that shares no code with the worker. Exits 1 on any mismatch. What is checked in each
emit mode: docs/bench-methods.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from subprocess import Popen
from typing import Any

from agents.batched_send import default_partition
from agents.clients import read_to_end
from app.brokers.process import free_port
from app.brokers.tansu import EmbeddedBroker
from app.demo import log_tail, start_worker, stop_worker
from app.kafka_io import send_records
from app.settings import Settings, WindowSpec
from app.topics import create_topics

BASE = (time.time_ns() // 1_000_000_000 - 86_400) * 1000
"""Event time of the stream's start: a day ago, so that the outputs (whose Kafka timestamps are
their event times) are inside the topics' time retention on a real broker, and the whole stream
(100 ms apart) stays behind the worker's clock (``max_wall_clock_skew``)."""
INTERVAL_MS = 100
RETENTION_MS = 300_000
WINDOWS = (WindowSpec("10s", 10_000), WindowSpec("1m", 60_000))
FUTURE_AHEAD_MS = 3 * 86_400_000
"""How far ahead of its place in the stream a future event is: beyond the worker's clock plus
``max_wall_clock_skew`` (1 day, the default) whatever the stream time, so that it is ``future``
in any case (``max_future_skew`` is off, the default: nothing else is future)."""
BAD_KINDS = ("malformed", "no_key", "missing", "bad_value")
CLEAN_START = 1_000
EXPECTED_REASON = {
    "malformed": "malformed_json",
    "no_key": "missing_field",
    "missing": "missing_field",
    "bad_value": "bad_value",
    "future": "future",
}


@dataclass
class Outcome:
    """What the checks found."""

    events: int = 0
    kills: int = 0
    lost: int = 0
    doubled: int = 0
    lost_outputs: int = 0
    repeated: int = 0
    wrong_outputs: int = 0
    dead_letters_missing: int = 0
    dead_letters_repeated: int = 0
    wrong_reason: int = 0
    queries: int = 0
    answers_missing: int = 0
    answers_repeated: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def duplicates(self) -> int:
        """Outputs seen more than once: aggregate records, dead letters, answers (allowed
        under at-least-once, none under exactly-once)."""
        return self.repeated + self.dead_letters_repeated + self.answers_repeated

    @property
    def exact(self) -> bool:
        return not (
            self.lost
            or self.doubled
            or self.lost_outputs
            or self.wrong_outputs
            or self.dead_letters_missing
            or self.wrong_reason
            or self.answers_missing
        )

    def summary(self) -> str:
        return (
            f"events {self.events:,}, kills {self.kills}, lost {self.lost + self.lost_outputs} "
            f"(state {self.lost}, aggregate records {self.lost_outputs}), doubled (state) "
            f"{self.doubled}, repeated (outputs) {self.repeated}, dead letters missing "
            f"{self.dead_letters_missing}; wrong aggregate records {self.wrong_outputs}, "
            f"wrong dead-letter reasons {self.wrong_reason}, repeated dead letters "
            f"{self.dead_letters_repeated}, answers missing {self.answers_missing} of "
            f"{self.queries} queries, repeated answers {self.answers_repeated}"
        )


def generate(n: int, keys: int, seed: int) -> list[tuple[bytes | None, bytes, str]]:
    """``n`` input records ``(key, value, kind)``: about 20% of the events out of order (at most
    20 s behind), 1% late (10 retentions behind), 0.5% future, 2% bad (``BAD_KINDS``), none of
    those three among the first ``CLEAN_START`` (so that no partition's stream time starts in
    the future). Event ``i`` is generated at ``input_time(i)`` and its value is ``i``: values
    are distinct, so a lost or doubled event changes a sum."""
    rng = random.Random(seed)
    records: list[tuple[bytes | None, bytes, str]] = []
    now = BASE
    for i in range(n):
        now += INTERVAL_MS
        key = f"key-{rng.randrange(keys)}"
        roll = rng.random() if i >= CLEAN_START else 1.0
        if roll < 0.2:
            ts, kind = now - rng.randint(1, 20_000), "event"
        elif roll < 0.21:
            ts, kind = now - 10 * RETENTION_MS, "event"
        elif roll < 0.215:
            ts, kind = now + FUTURE_AHEAD_MS, "future"
        elif roll < 0.235:
            kind = BAD_KINDS[rng.randrange(len(BAD_KINDS))]
            ts = now
        else:
            ts, kind = now, "event"
        value: Any = {"ts": ts, "value": i}
        if kind == "malformed":
            records.append((key.encode(), b'{"ts": %d, "val' % ts, kind))
            continue
        if kind == "missing":
            del value["value"]
        elif kind == "bad_value":
            value["value"] = "many"
        records.append(
            (None if kind == "no_key" else key.encode(), json.dumps(value).encode(), kind)
        )
    return records


@dataclass
class Oracle:
    """The expected outputs of the input as it lies on the input topic, by brute force."""

    accepted: dict[str, list[tuple[int, int]]] = field(default_factory=lambda: defaultdict(list))
    """Per key, its accepted events ``(ts, value)`` in input order."""
    offsets: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    """Per key, the input offsets of its accepted events (``accepted``'s order)."""
    stream_time: dict[int, int] = field(default_factory=dict)
    times: dict[int, list[tuple[int, int]]] = field(default_factory=lambda: defaultdict(list))
    """Per partition, ``(offset, stream time after it)`` of every accepted event."""
    per_event: bool = True
    """Whether to keep ``records`` (``emit=event``; ``emit=batch`` records are checked one by
    one, ``batch_record_error``)."""
    records: Counter[tuple] = field(default_factory=Counter)
    """``emit=event``: the record expected after each accepted event."""
    rejected: dict[tuple[int, int], str] = field(default_factory=dict)

    def feed(self, partition: int, offset: int, key: str, kind: str, value: dict | None) -> None:
        """Apply one input record (in offset order per partition)."""
        if kind != "event":
            self.rejected[(partition, offset)] = EXPECTED_REASON[kind]
            return
        assert value is not None
        ts, s = value["ts"], self.stream_time.get(partition)
        if s is not None and ts < s - RETENTION_MS:
            self.rejected[(partition, offset)] = "late"
            return
        s = self.stream_time[partition] = ts if s is None else max(s, ts)
        self.times[partition].append((offset, s))
        self.accepted[key].append((ts, value["value"]))
        self.offsets[key].append(offset)
        if self.per_event:
            self.records[(key, ts, s, self.windows(key, len(self.accepted[key]), s))] += 1

    def windows(self, key: str, n: int, s: int) -> tuple:
        """``(name, start, end, count, sum)`` of every window ``[s - w, s]`` over the first
        ``n`` accepted events of ``key``."""
        events = self.accepted[key]
        windows = []
        for window in WINDOWS:
            start = s - window.size_ms
            inside = []
            # an accepted event is never ahead of its input time (futures are rejected), so
            # the events input before the window's start are all outside it
            for i in range(n - 1, -1, -1):
                t, v = events[i]
                if input_time(v) < start:
                    break
                if start <= t <= s:
                    inside.append(v)
            windows.append((window.name, start, s, len(inside), sum(inside)))
        return tuple(windows)

    def batch_record_error(self, record: tuple, partition: int, offset: int) -> str | None:
        """Why an ``emit=batch`` record answering input ``offset`` of ``partition`` is wrong
        (None: it is right). Its key's last event in the batch must be the accepted event at
        ``offset``; its stream time one the partition had after that event and before the
        key's next accepted one (the batch's end lies between); its windows those of the
        key's events up to ``offset`` at that stream time."""
        key, event_ts, s, windows = record
        offsets = self.offsets.get(key, [])
        n = bisect_right(offsets, offset)
        if not n or offsets[n - 1] != offset:
            return f"{key}: no accepted event at input offset {offset}"
        if self.accepted[key][n - 1][0] != event_ts:
            return f"{key}@{offset}: event_ts {event_ts}, expected {self.accepted[key][n - 1][0]}"
        times = self.times[partition]
        low = times[bisect_left(times, (offset,))][1]
        if n < len(offsets):
            high = times[bisect_left(times, (offsets[n],)) - 1][1]
        else:
            high = self.stream_time[partition]
        if not low <= s <= high:
            return f"{key}@{offset}: stream time {s} outside [{low}, {high}]"
        expected = self.windows(key, n, s)
        if windows != expected:
            return f"{key}@{offset}: windows {windows}, expected {expected}"
        return None

    def retained(self, key: str, partition: int) -> tuple[int, int]:
        """Count and sum of ``key``'s retained events (not older than stream time - R)."""
        s = self.stream_time[partition]
        kept = [v for t, v in self.accepted[key] if t >= s - RETENTION_MS]
        return len(kept), sum(kept)


def input_time(index: int) -> int:
    """The generator's clock when it made event ``index``."""
    return BASE + (index + 1) * INTERVAL_MS


def record_tuple(obj: dict) -> tuple:
    windows = tuple(
        (
            name,
            w["start"],
            w["end"],
            w["count"],
            w["aggregates"]["sum"],
        )
        for name, w in sorted(obj["windows"].items(), key=lambda item: WINDOW_ORDER[item[0]])
    )
    return (obj["key"], obj["event_ts"], obj["stream_time"], windows)


WINDOW_ORDER = {w.name: i for i, w in enumerate(WINDOWS)}


def http_json(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
        return json.loads(response.read())


def crash_report(log: Path, lines: int = 60) -> str:
    """What a worker's ``log`` says about its exit: its first traceback (up to ``lines`` lines)
    and its last lines (Faust logs its own shutdown after the error)."""
    text = log.read_text(errors="replace").splitlines() if log.exists() else []
    start = next((i for i, line in enumerate(text) if line.startswith("Traceback")), None)
    first = [] if start is None else [*text[start : start + lines], "..."]
    return "\n".join([*first, log_tail(log)])


class Cluster:
    """The worker subprocesses of one run."""

    def __init__(
        self,
        settings: Settings,
        root: Path,
        workers: int,
        module: tuple[str, ...] = ("app.cli", "worker"),
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.root = root
        self.module = module
        self.extra_env = extra_env
        self.settings = [
            replace(settings, state_dir=root / f"state-{i}", web_port=free_port())
            for i in range(workers)
        ]
        self.procs: list[Popen[bytes]] = []
        self.starts = [0] * workers

    def start(self, i: int) -> None:
        self.starts[i] += 1
        proc = start_worker(self.settings[i], self.log(i), self.module, self.extra_env)
        if i < len(self.procs):
            self.procs[i] = proc
        else:
            self.procs.append(proc)

    def kill(self, i: int, wipe: bool) -> None:
        self.procs[i].kill()
        self.procs[i].wait(30)
        if wipe:
            shutil.rmtree(self.settings[i].state_dir, ignore_errors=True)
        self.start(i)

    def log(self, i: int) -> Path:
        return self.root / f"worker-{i}-{self.starts[i]}.log"

    def applied(self) -> dict[int, int]:
        """Applied offset per partition, as reported by the workers that answer."""
        offsets: dict[int, int] = {}
        for i, (s, proc) in enumerate(zip(self.settings, self.procs, strict=True)):
            if proc.poll() is not None:
                raise RuntimeError(f"worker {i} exited:\n{crash_report(self.log(i))}")
            try:
                stats = http_json(s.web_port, "/stats")
            except (OSError, urllib.error.URLError, ValueError):
                continue
            for p, state in stats["partitions"].items():
                if int(p) in stats["assigned"]:
                    offsets[int(p)] = max(offsets.get(int(p), -1), state["applied_offset"])
        return offsets

    def stop(self) -> None:
        for proc in self.procs:
            stop_worker(proc)


CHAOS_SESSION_TIMEOUT_MS = 6_000


def chaos_settings(
    bootstrap: str, embedded: bool, partitions: int, emit: str, guarantee: str = "at_least_once"
) -> Settings:
    tag = f"chaos-{uuid.uuid4().hex[:8]}"
    return replace(
        Settings(),
        broker=bootstrap,
        broker_profile="embedded" if embedded else "kafka",
        app_id=tag,
        input_topic=f"{tag}-events",
        aggregates_topic=f"{tag}-aggregates",
        queries_topic=f"{tag}-queries",
        answers_topic=f"{tag}-answers",
        dead_letter_topic=f"{tag}-dlq",
        partitions=partitions,
        retention=RETENTION_MS,
        windows=WINDOWS,
        aggregations=("count", "sum"),
        emit=emit,
        processing_guarantee=guarantee,
        sweep_interval=10_000,
        # a killed member leaves the group after the session timeout: Faust's default (60 s) on a
        # real broker would make each takeover a minute long (the embedded profile sets its own)
        session_timeout=None if embedded else CHAOS_SESSION_TIMEOUT_MS,
    )


def run(
    args: argparse.Namespace,
    bootstrap: str,
    embedded: bool,
    root: Path,
    module: tuple[str, ...] = ("app.cli", "worker"),
    extra_env: dict[str, str] | None = None,
) -> Outcome:
    """One chaos run on the broker at ``bootstrap`` (worker files under ``root``; workers run
    as ``python -m <module>`` with ``extra_env``)."""
    settings = chaos_settings(bootstrap, embedded, args.partitions, args.emit, args.guarantee)
    asyncio.run(create_topics(settings))
    records = generate(args.events, args.keys, args.seed)
    kinds = {(key, value): kind for key, value, kind in records}
    cluster = Cluster(settings, root, args.workers, module, extra_env)
    outcome = Outcome(events=len(records))
    rng = random.Random(args.seed + 1)
    producing_error: list[BaseException] = []

    def produce() -> None:
        try:
            asyncio.run(
                send_records(
                    settings, [(k, v, None) for k, v, _ in records], rate=args.rate, progress=False
                )
            )
        except BaseException as exc:  # reported by the main thread
            producing_error.append(exc)

    queries = [
        {"query_id": f"q{i}", "key": f"key-{i % args.keys}", "window": "1m"}
        for i in range(args.queries)
    ]
    per_kill = -(-len(queries) // max(1, args.kills))
    try:
        for i in range(args.workers):
            cluster.start(i)
        producer = threading.Thread(target=produce, name="chaos-producer")
        producer.start()
        started = time.monotonic()
        progress = 0
        for n in range(args.kills):
            step = args.events // (2 * args.kills)
            progress = wait_for_progress(
                cluster, min(progress + step, len(records)), args.settle_timeout
            )
            time.sleep(rng.uniform(0, args.max_delay))
            victim = rng.randrange(args.workers)
            wipe = args.wipe_every > 0 and (n + 1) % args.wipe_every == 0
            cluster.kill(victim, wipe)
            outcome.kills += 1
            print(
                f"kill {n + 1}/{args.kills} at {time.monotonic() - started:.1f} s: worker "
                f"{victim}{' (data dir wiped)' if wipe else ''}",
                flush=True,
            )
            batch, queries = queries[:per_kill], queries[per_kill:]
            if batch:
                send_queries(settings, batch)
                outcome.queries += len(batch)
        if args.rebalance_kill and args.workers > 1:
            kill_during_rebalance(cluster, rng, outcome, started)
        if queries:
            send_queries(settings, queries)
            outcome.queries += len(queries)
        producer.join()
        if producing_error:
            raise producing_error[0]
        last = last_offsets(settings)
        deadline = time.monotonic() + args.settle_timeout
        while True:
            applied = cluster.applied()
            if all(applied.get(p, -1) >= o for p, o in last.items()):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"not caught up: applied {applied}, input ends {last}")
            time.sleep(1)
        oracle = build_oracle(settings, kinds)
        check_state(cluster, oracle, outcome)
        query_ids = {f"q{i}" for i in range(outcome.queries)}
        answers, outcome.answers_repeated = wait_for_answers(
            settings, query_ids, args.settle_timeout
        )
        outcome.answers_missing = outcome.queries - answers
    finally:
        cluster.stop()
    check_outputs(settings, oracle, outcome)
    return outcome


def kill_during_rebalance(
    cluster: Cluster, rng: random.Random, outcome: Outcome, started: float
) -> None:
    """SIGKILL worker 0 and restart it; once it serves HTTP (it is joining the group: the
    others are being rebalanced), SIGKILL worker 1 within a random second, and restart it."""
    cluster.kill(0, wipe=False)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            http_json(cluster.settings[0].web_port, "/stats")
            break
        except (OSError, urllib.error.URLError, ValueError):
            time.sleep(0.05)
    time.sleep(rng.uniform(0, 1))
    cluster.kill(1, wipe=False)
    outcome.kills += 2
    print(
        f"kills {outcome.kills - 1}-{outcome.kills} at {time.monotonic() - started:.1f} s: "
        "worker 0, then worker 1 while worker 0 joins (a rebalance)",
        flush=True,
    )


def wait_for_progress(cluster: Cluster, records: int, timeout: float) -> int:
    """Wait until the workers' applied offsets cover ``records`` input records in all (so that
    the next kill hits a worker at work); how many they cover then."""
    deadline = time.monotonic() + timeout
    while (covered := sum(o + 1 for o in cluster.applied().values())) < records:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no progress to {records} records within {timeout:g} s")
        time.sleep(0.05)
    return covered


def send_queries(settings: Settings, queries: list[dict]) -> None:
    asyncio.run(
        send_records(
            settings,
            [(q["key"].encode(), json.dumps(q).encode(), None) for q in queries],
            topic=settings.queries_topic,
            progress=False,
        )
    )


def last_offsets(settings: Settings) -> dict[int, int]:
    records = asyncio.run(read_to_end(settings, settings.input_topic))
    last: dict[int, int] = {}
    for r in records:
        last[r.partition] = max(last.get(r.partition, -1), r.offset)
    return last


def build_oracle(settings: Settings, kinds: dict[tuple[bytes | None, bytes], str]) -> Oracle:
    oracle = Oracle(per_event=settings.emit != "batch")
    for r in asyncio.run(read_to_end(settings, settings.input_topic)):
        kind = kinds[(r.key, r.value)]
        value = json.loads(r.value) if kind == "event" else None
        key = r.key.decode() if r.key is not None else ""
        oracle.feed(r.partition, r.offset, key, kind, value)
    return oracle


def check_state(cluster: Cluster, oracle: Oracle, outcome: Outcome) -> None:
    """Each key's retained count and sum, asked over HTTP (forwarded to its owner)."""
    query = urllib.parse.urlencode({"from": 0, "to": BASE * 2})
    for key in sorted(oracle.accepted):
        partition = default_partition(key.encode(), cluster.settings[0].partitions)
        want_count, want_sum = oracle.retained(key, partition)
        got = ask_any(cluster, f"/windows/{key}?{query}")
        count, total = got["count"], got["result"]["sum"]
        outcome.lost += max(0, want_count - count)
        outcome.doubled += max(0, count - want_count)
        if count == want_count and total != want_sum:
            outcome.notes.append(f"{key}: sum {total}, expected {want_sum}")
            outcome.wrong_outputs += 1


def ask_any(cluster: Cluster, path: str) -> Any:
    """``path`` from the first worker that answers it (each forwards to the key's owner)."""
    error: Exception | None = None
    for s in cluster.settings:
        try:
            return http_json(s.web_port, path)
        except (OSError, urllib.error.URLError, ValueError) as exc:
            error = exc
    raise RuntimeError(f"no worker answered {path}: {error!r}")


def wait_for_answers(settings: Settings, query_ids: set[str], timeout: float) -> tuple[int, int]:
    """How many of ``query_ids`` got an answer, and how many answers came more than once,
    once all did or ``timeout`` seconds passed."""
    deadline = time.monotonic() + timeout
    while True:
        answers = Counter(
            json.loads(r.value)["query_id"]
            for r in asyncio.run(read_to_end(settings, settings.answers_topic))
        )
        answered = query_ids & set(answers)
        if answered == query_ids or time.monotonic() > deadline:
            return len(answered), sum(n - 1 for q, n in answers.items() if q in query_ids)
        time.sleep(1)


def check_outputs(settings: Settings, oracle: Oracle, outcome: Outcome) -> None:
    """The aggregate records (``check_event_records``, ``check_batch_records``) and the dead
    letters against ``oracle``."""
    objs = [
        json.loads(r.value) for r in asyncio.run(read_to_end(settings, settings.aggregates_topic))
    ]
    if settings.emit == "batch":
        check_batch_records(objs, oracle, outcome)
    else:
        check_event_records(objs, oracle, outcome)
    dead: Counter[tuple[int, int]] = Counter()
    for r in asyncio.run(read_to_end(settings, settings.dead_letter_topic)):
        headers = {name: data.decode() for name, data in r.headers}
        source = (int(headers["fiba.error.partition"]), int(headers["fiba.error.offset"]))
        if headers["fiba.error.topic"] != settings.input_topic:
            continue  # a bad query
        dead[source] += 1
        if oracle.rejected.get(source) != headers["fiba.error.reason"]:
            outcome.wrong_reason += 1
    outcome.dead_letters_missing = sum(1 for source in oracle.rejected if not dead[source])
    outcome.dead_letters_repeated = sum(n - 1 for n in dead.values() if n > 1)


def check_event_records(objs: list[dict], oracle: Oracle, outcome: Outcome) -> None:
    """``emit=event``: one record per accepted event, each exactly the oracle's."""
    got = Counter(record_tuple(obj) for obj in objs)
    for record, n in oracle.records.items():
        outcome.lost_outputs += max(0, n - got[record])
        outcome.repeated += max(0, got[record] - n)
    outcome.wrong_outputs += sum(n for record, n in got.items() if record not in oracle.records)


def check_batch_records(objs: list[dict], oracle: Oracle, outcome: Outcome) -> None:
    """``emit=batch``: every record right for the batch end it reports
    (``Oracle.batch_record_error``; batches are not on the topic, so a replay after a kill may
    cut them differently, each record still right), and for every key a record after its last
    accepted event (missing: a lost output). A record seen twice counts as repeated."""
    got = Counter((record_tuple(obj), obj["input_partition"], obj["input_offset"]) for obj in objs)
    answered = set()
    for (record, partition, offset), n in got.items():
        outcome.repeated += n - 1
        error = oracle.batch_record_error(record, partition, offset)
        if error is None:
            answered.add((record[0], offset))
        else:
            outcome.wrong_outputs += n
            outcome.notes.append(error)
    outcome.lost_outputs += sum(
        1 for key, offsets in oracle.offsets.items() if (key, offsets[-1]) not in answered
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The run's parameters from the command line ``argv``."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.chaos", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2, choices=(1, 2, 3))
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--keys", type=int, default=50)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument(
        "--rate",
        type=float,
        default=1000.0,
        help="input events/s (the input lasts through the kills)",
    )
    parser.add_argument(
        "--max-delay",
        type=float,
        default=1.0,
        help="a kill comes once events/(2 kills) more records are applied, plus up to this "
        "many seconds (random)",
    )
    parser.add_argument(
        "--wipe-every", type=int, default=5, help="wipe the data dir every Nth kill (0: never)"
    )
    parser.add_argument(
        "--rebalance-kill",
        action="store_true",
        help="after the kills, kill a worker while another one joins the group",
    )
    parser.add_argument(
        "--guarantee", choices=("at_least_once", "exactly_once"), default="at_least_once"
    )
    parser.add_argument(
        "--emit",
        choices=("event", "batch"),
        default="event",
        help="the workers' emit mode (batch: each record checked against the batch end it reports)",
    )
    parser.add_argument("--settle-timeout", type=float, default=300.0)
    parser.add_argument("--seed", type=int, default=1)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the chaos test; 0 when every check passed."""
    args = parse_args(argv)
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP")
    with ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fiba-chaos-")))
        if not bootstrap:
            bootstrap = stack.enter_context(EmbeddedBroker()).bootstrap
        print(
            f"chaos: {args.events:,} events, emit={args.emit}, {args.kills} kills of "
            f"{args.workers} workers, "
            f"{args.partitions} partitions, broker {bootstrap}"
            f" ({'KAFKA_BOOTSTRAP' if os.environ.get('KAFKA_BOOTSTRAP') else 'embedded'})",
            flush=True,
        )
        outcome = run(args, bootstrap, not os.environ.get("KAFKA_BOOTSTRAP"), root)
    print(outcome.summary(), flush=True)
    for note in outcome.notes[:10]:
        print("  ", note)
    duplicated = args.guarantee == "exactly_once" and outcome.duplicates
    return 0 if outcome.exact and not duplicated else 1


if __name__ == "__main__":
    sys.exit(main())
