"""Event-to-aggregate latency of the aggregate records a worker emits, counted in bulk.

One aggregate record's latency runs from the Kafka timestamp of the input record it answers
(its ``input_partition``/``input_offset``: with ``emit=batch`` the key's last record of the
batch) until the worker learns that the record is durable: its batch acknowledged by the broker
(at-least-once, ``acks=all``), or the transaction carrying it committed (exactly-once: only
then can a ``read_committed`` reader see it). Not the hand-over to the producer, which would
leave out the producer's batching and the broker's round trip that every reader waits for.
The input timestamp is the broker's append time on a topic with ``LogAppendTime``, else the
producer's ``CreateTime`` (honest only if the producer leaves it to its clock, as aiokafka's
and the Java client's do, rather than setting an event time); both on other machines'
clocks, so skew adds to it (a latency below 0 counts as 0; inputs without a timestamp, -1,
are not counted). Kafka timestamps are whole milliseconds: a figure is up to 1 ms high.

Cost: per aggregate record one list append (``add``); per acknowledged round one ``Counter`` pass
over the records' input timestamps and one ``bisect`` per distinct timestamp (``observe``),
instead of a ``prometheus_client`` ``observe`` call per record (a loop over the buckets in
Python each). ``app.health`` exposes it as the histogram ``fiba_aggregate_latency_seconds``.
"""

from __future__ import annotations

import asyncio
import time
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

LATENCY_BUCKETS_S = (
    0.0001,
    0.0002,
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.5,
    1.0,
    2.0,
    5.0,
    10.0,
)
"""Upper bounds (seconds) of the latency buckets: 0.1 ms to 10 s in 1-2-5 steps."""


class Delivery(Protocol):
    """A record batch handed to a producer (``agents.batched_send.BatchDelivery``)."""

    def add_done_callback(self, callback: Callable[[asyncio.Future[Any]], object]) -> None: ...


class EmitLatency:
    """A histogram of the latencies of acknowledged aggregate records, and the input
    timestamps of the records queued but not yet acknowledged, per source input partition.

    ``bucket_counts[i]``: latencies at most ``bounds_s[i]`` and above the bound before it
    (the last one: above every bound); ``count`` and ``sum_s`` over all. ``clock`` gives
    epoch seconds (the clock Kafka timestamps are read against)."""

    __slots__ = ("_bounds_ms", "_clock", "_pending", "bounds_s", "bucket_counts", "count", "sum_s")

    def __init__(
        self, bounds_s: Sequence[float] = LATENCY_BUCKETS_S, clock: Callable[[], float] = time.time
    ) -> None:
        self.bounds_s = tuple(bounds_s)
        self._bounds_ms = [1000 * bound for bound in self.bounds_s]
        self._clock = clock
        self.bucket_counts = [0] * (len(self.bounds_s) + 1)
        self.count = 0
        self.sum_s = 0.0
        self._pending: dict[int, list[int]] = {}

    def add(self, source: int, input_ts: int) -> None:
        """Note one aggregate record queued for output, answering an input record of partition
        ``source`` with Kafka timestamp ``input_ts`` (epoch ms). O(1)."""
        pending = self._pending.get(source)
        if pending is None:
            pending = self._pending[source] = []
        pending.append(input_ts)

    def add_many(self, source: int, input_timestamps: Iterable[int]) -> None:
        """``add(source, ts)`` for each of ``input_timestamps``. O(records) at C speed."""
        pending = self._pending.get(source)
        if pending is None:
            pending = self._pending[source] = []
        pending.extend(input_timestamps)

    def take(self, source: int | None = None) -> list[int]:
        """The input timestamps noted for ``source`` (None: every source) since the last
        ``take`` of it, forgotten here: call it when their records are handed to the producer,
        and pass the result to ``observe`` once they are acknowledged."""
        if source is not None:
            return self._pending.pop(source, [])
        taken = [ts for pending in self._pending.values() for ts in pending]
        self._pending = {}
        return taken

    def observe(self, input_timestamps: Iterable[int]) -> None:
        """Count one latency per input timestamp (epoch ms): from it until now. O(records) at
        C speed plus O(log buckets) Python per distinct timestamp."""
        now_ms = 1000 * self._clock()
        bounds, buckets = self._bounds_ms, self.bucket_counts
        total_ms = 0.0
        for ts, n in Counter(input_timestamps).items():
            if ts < 0:
                continue
            latency_ms = max(0.0, now_ms - ts)
            buckets[bisect_left(bounds, latency_ms)] += n
            total_ms += n * latency_ms
            self.count += n
        self.sum_s += total_ms / 1000

    def observe_when_delivered(
        self, input_timestamps: list[int], deliveries: Sequence[Delivery]
    ) -> None:
        """``observe(input_timestamps)`` once every one of ``deliveries`` (one per record batch
        handed to the producer) completed without error, from the event loop's callbacks: at
        once if there is none, never if one fails. O(deliveries)."""
        if not deliveries:
            self.observe(input_timestamps)
            return
        left = [len(deliveries), True]  # deliveries not done yet, none failed so far

        def one_done(future: asyncio.Future[Any]) -> None:
            left[0] -= 1
            if future.cancelled() or future.exception() is not None:
                left[1] = False
            if left[0] == 0 and left[1]:
                self.observe(input_timestamps)

        for delivery in deliveries:
            delivery.add_done_callback(one_done)

    def cumulative(self) -> list[tuple[str, int]]:
        """The Prometheus buckets: ``(le, latencies at most le)`` per bound, then ``+Inf``."""
        out, running = [], 0
        for bound, n in zip((*map(repr, self.bounds_s), "+Inf"), self.bucket_counts, strict=True):
            running += n
            out.append((bound, running))
        return out
