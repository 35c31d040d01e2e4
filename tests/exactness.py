"""Exactness of a worker's state and range-query answers against the brute-force oracle, as
lost and doubled event counts (the broker fault tests, tests/test_broker_faults.py).

Events are ``(key, ts, value)`` with distinct values (tests.test_crash_recovery.make_events).
The oracle of a key is a ``tests.oracle.OracleWindow`` of ``(count, sum)`` partials holding
every event of that key that the state must retain. The worker's state is asked per key over
HTTP for its whole range, and over the query topic for sub-ranges; per range, a count below
the oracle's adds to ``lost``, one above to ``doubled``, and a sum that differs while the count
agrees (an event lost and another doubled) to ``wrong_sums``. Exact means all three are 0.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from agents.records import QUERY_ID, WINDOW_COUNT, RangeQuery, dumps
from app.kafka_io import record_as_dict, seek_to_end, start_consumer, start_producer
from app.settings import Settings
from stores.monoids import make_monoid
from tests.oracle import OracleWindow
from tests.test_crash_recovery import http_get

COUNT_AND_SUM = make_monoid(
    (0, 0), lambda value: (1, value), lambda a, b: (a[0] + b[0], a[1] + b[1]), name="count+sum"
)
"""The oracle's monoid: ``(number of events, sum of their values)``."""


def oracles(events: Iterable[tuple[str, int, int]]) -> dict[str, OracleWindow]:
    """One oracle window per key, holding that key's ``events``."""
    windows: dict[str, OracleWindow] = {}
    for key, ts, value in events:
        windows.setdefault(key, OracleWindow(COUNT_AND_SUM)).insert(ts, value)
    return windows


@dataclass
class Exactness:
    """Lost and doubled event counts over the checked ranges, and what differed."""

    lost: int = 0
    doubled: int = 0
    wrong_sums: int = 0
    ranges: int = 0
    mismatches: list[str] = field(default_factory=list)

    def add(self, what: str, want: tuple[int, int], got: tuple[int, int]) -> None:
        """Compare one range's ``(count, sum)``: ``got`` from the worker, ``want`` the oracle."""
        self.ranges += 1
        if got == want:
            return
        self.lost += max(0, want[0] - got[0])
        self.doubled += max(0, got[0] - want[0])
        self.wrong_sums += got[0] == want[0]
        self.mismatches.append(f"{what}: (count, sum) {got}, oracle {want}")

    @property
    def exact(self) -> bool:
        return not (self.lost or self.doubled or self.wrong_sums)

    def __str__(self) -> str:
        head = (
            f"lost {self.lost}, doubled {self.doubled}, wrong sums {self.wrong_sums} "
            f"over {self.ranges} ranges"
        )
        return "\n".join([head, *self.mismatches[:10]])


def state_exactness(
    settings: Settings, expected: dict[str, OracleWindow], span: tuple[int, int]
) -> Exactness:
    """Every key's aggregate over ``span`` asked over the worker's HTTP endpoint (the worker of
    ``settings.web_port`` must own every key), against ``expected``."""
    result = Exactness()
    for key, oracle in sorted(expected.items()):
        answer = http_get(settings, f"/windows/{key}?from={span[0]}&to={span[1]}")
        got = (answer["count"], answer["result"].get("sum") or 0)
        result.add(f"state of {key}", oracle.query_range(*span), got)
    return result


def sample_ranges(
    expected: dict[str, OracleWindow], per_key: int, seed: int
) -> list[tuple[str, int, int]]:
    """``per_key`` random sub-ranges ``(key, from, to)`` of each key's event times."""
    rng = random.Random(seed)
    ranges = []
    for key, oracle in sorted(expected.items()):
        lo, hi = oracle.oldest(), oracle.youngest()
        for _ in range(per_key):
            a, b = sorted((rng.randint(lo, hi), rng.randint(lo, hi)))
            ranges.append((key, a, b))
    return ranges


async def ask_all(
    settings: Settings, queries: Sequence[RangeQuery], timeout: float
) -> dict[str, dict]:
    """Send ``queries`` to the query topic at once; their answers by query id, as many as
    arrived within ``timeout`` seconds (the answers topic is read from its end before)."""
    consumer = await start_consumer(settings, settings.answers_topic)
    answers: dict[str, dict] = {}
    try:
        await seek_to_end(consumer, settings)
        producer = await start_producer(settings)
        try:
            sent = [
                await producer.send(settings.queries_topic, dumps(q.to_json()), key=q.key.encode())
                for q in queries
            ]
            await asyncio.gather(*sent)
        finally:
            await producer.stop()
        wanted = {q.query_id for q in queries}
        deadline = time.monotonic() + timeout
        while wanted - answers.keys() and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                for record in records:
                    answer = record_as_dict(record)["value"]
                    if isinstance(answer, dict) and answer.get(QUERY_ID) in wanted:
                        answers[answer[QUERY_ID]] = answer
    finally:
        await consumer.stop()
    return answers


def answers_exactness(
    settings: Settings,
    expected: dict[str, OracleWindow],
    ranges: Sequence[tuple[str, int, int]],
    timeout: float = 60.0,
) -> Exactness:
    """Range queries ``ranges`` over the query topic against ``expected``; a missing answer
    or an answer with an error is a mismatch of its own (and counts its events as lost)."""
    queries = {uuid.uuid4().hex: r for r in ranges}
    asked = [RangeQuery(qid, key, from_ts=a, to_ts=b) for qid, (key, a, b) in queries.items()]
    answers = asyncio.run(ask_all(settings, asked, timeout))
    result = Exactness()
    for qid, (key, a, b) in queries.items():
        answer = answers.get(qid, {"error": "no answer"})
        want = expected[key].query_range(a, b)
        if answer.get("error"):
            result.add(f"answer for {key} [{a}, {b}] ({answer['error']})", want, (0, 0))
            continue
        got = (answer[WINDOW_COUNT], (answer.get("result") or {}).get("sum") or 0)
        result.add(f"answer for {key} [{a}, {b}]", want, got)
    return result
