"""The event-to-aggregate latency histogram (``agents.emit_latency``), counted in bulk: what is
noted per source, taken at the hand-over and observed at the acknowledgement, bucket by
bucket; a worker's ``/metrics`` shows it (tests/test_worker_health.py, tests/test_dashboard.py).
"""

from __future__ import annotations

import asyncio

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from agents.emit_latency import LATENCY_BUCKETS_S, EmitLatency
from app.health import aggregate_latency

NOW_S = 1_700_000_000.0


def test_latencies_fall_into_their_buckets_with_count_and_sum() -> None:
    latency = EmitLatency(bounds_s=(0.001, 0.01, 0.1), clock=lambda: NOW_S)
    now_ms = int(NOW_S * 1000)
    # 0 ms and 1 ms: at most the first bound (inclusive); 5 ms twice; 10 ms; 50 ms; 2 s
    latency.observe([now_ms, now_ms - 1, now_ms - 5, now_ms - 5, now_ms - 10, now_ms - 50])
    latency.observe([now_ms - 2000])
    assert latency.bucket_counts == [2, 3, 1, 1]
    assert latency.count == 7
    assert abs(latency.sum_s - (0 + 1 + 5 + 5 + 10 + 50 + 2000) / 1000) < 1e-9
    assert latency.cumulative() == [("0.001", 2), ("0.01", 5), ("0.1", 6), ("+Inf", 7)]


def test_clock_skew_counts_as_zero_and_missing_timestamps_are_left_out() -> None:
    latency = EmitLatency(bounds_s=(0.001,), clock=lambda: NOW_S)
    latency.observe([int(NOW_S * 1000) + 30, -1])  # from a clock ahead; no timestamp
    assert (latency.count, latency.sum_s, latency.bucket_counts) == (1, 0.0, [1, 0])


def test_taken_per_source_or_all_and_observed_once() -> None:
    latency = EmitLatency(clock=lambda: NOW_S)
    for source, ts in ((0, 10), (1, 11), (0, 12), (2, 13)):
        latency.add(source, ts)
    latency.add_many(0, [14, 15])  # a slice's notes at once
    latency.add_many(3, [])
    assert latency.take(0) == [10, 12, 14, 15]
    assert latency.take(3) == []
    assert latency.take(0) == []
    assert sorted(latency.take()) == [11, 13]
    assert latency.take() == []
    assert latency.count == 0  # noted, not observed: nothing acknowledged yet


def test_a_round_is_observed_when_its_last_batch_is_acknowledged_and_never_if_one_fails() -> None:
    """``observe_when_delivered``: the round's latencies are counted from the event loop's
    callbacks once every batch is acknowledged (the reader no longer waits for them), at the
    clock of that moment; at once for a round without batches; never for a failed one."""
    clock = [NOW_S]
    latency = EmitLatency(bounds_s=(0.001, 0.01), clock=lambda: clock[0])
    now_ms = int(NOW_S * 1000)

    async def rounds() -> None:
        loop = asyncio.get_running_loop()
        first, second = loop.create_future(), loop.create_future()
        latency.observe_when_delivered([now_ms, now_ms], [first, second])
        first.set_result(None)
        await asyncio.sleep(0)
        assert latency.count == 0  # one batch still in flight
        clock[0] = NOW_S + 0.005  # acknowledged 5 ms later
        second.set_result(None)
        await asyncio.sleep(0)
        assert (latency.count, latency.bucket_counts) == (2, [0, 2, 0])
        latency.observe_when_delivered([now_ms], [])
        assert latency.count == 3
        failed = loop.create_future()
        latency.observe_when_delivered([now_ms], [failed])
        failed.set_exception(OSError("broker gone"))
        await asyncio.sleep(0)
        assert latency.count == 3

    asyncio.run(rounds())


def test_the_buckets_span_a_tenth_of_a_millisecond_to_ten_seconds() -> None:
    assert LATENCY_BUCKETS_S[0] == 0.0001 and LATENCY_BUCKETS_S[-1] == 10.0
    assert list(LATENCY_BUCKETS_S) == sorted(set(LATENCY_BUCKETS_S))


def test_exposed_as_a_prometheus_histogram_labelled_by_emit_mode() -> None:
    latency = EmitLatency(clock=lambda: NOW_S)
    latency.observe([int(NOW_S * 1000) - 3] * 4)

    class One:
        def collect(self):  # type: ignore[no-untyped-def]
            yield aggregate_latency(latency, "batch")

    registry = CollectorRegistry(auto_describe=False)
    registry.register(One())  # type: ignore[arg-type]
    (family,) = text_string_to_metric_families(generate_latest(registry).decode())
    assert (family.name, family.type) == ("fiba_aggregate_latency_seconds", "histogram")
    samples = {(s.name, s.labels.get("le")): s.value for s in family.samples}
    assert all(s.labels["emit"] == "batch" for s in family.samples)
    assert samples[("fiba_aggregate_latency_seconds_count", None)] == 4
    assert abs(samples[("fiba_aggregate_latency_seconds_sum", None)] - 0.012) < 1e-9
    assert samples[("fiba_aggregate_latency_seconds_bucket", "0.002")] == 0
    assert samples[("fiba_aggregate_latency_seconds_bucket", "0.005")] == 4
    assert samples[("fiba_aggregate_latency_seconds_bucket", "+Inf")] == 4
