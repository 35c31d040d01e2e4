"""``bench.latency``: each input record is matched to the first aggregate record including it,
append time to append time, and a quick paced run on a real worker measures every event.

Nothing here judges a latency's size: figures are only ever judged in the results.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import pytest

from bench import latency
from bench.bench_broker import BenchBroker


class Rec(NamedTuple):
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    timestamp_type: int = latency.LOG_APPEND_TIME


def aggregate(key: bytes, partition: int, offset: int, appended: int) -> Rec:
    value = json.dumps({"input_partition": partition, "input_offset": offset}).encode()
    return Rec(partition=0, offset=0, key=key, value=value, timestamp=appended)


INPUTS = [
    Rec(0, 0, b"a", b"", 1000),
    Rec(0, 1, b"a", b"", 1001),
    Rec(0, 2, b"a", b"", 1010),
    Rec(0, 3, b"a", b"", 1020),
    Rec(0, 4, b"b", b"", 1030),
    Rec(1, 0, b"a", b"", 1031),  # another partition: its own answers
]
BATCH_ANSWERS = [  # emit=batch: one record per key and batch, answering its last input
    aggregate(b"a", 0, 1, 1015),
    aggregate(b"a", 0, 3, 1040),
    aggregate(b"b", 0, 4, 1040),
    aggregate(b"a", 1, 0, 1041),
]


def test_each_input_waits_for_the_first_aggregate_record_that_includes_it() -> None:
    figures = latency.analyse(INPUTS, BATCH_ANSWERS, warmup_ms=0)
    # per input: 1015-1000, 1015-1001, 1040-1010, 1040-1020, 1040-1030, 1041-1031
    assert figures["per_event"] == latency.summary([15, 14, 30, 20, 10, 10])
    assert figures["per_event"]["n"] == 6 and figures["per_event"]["max"] == 30
    # per aggregate record, from the input it answers
    assert figures["per_aggregate"] == latency.summary([14, 20, 10, 10])
    assert (figures["unmatched"], figures["aggregates_read"]) == (0, 4)


def test_the_warm_up_is_left_out_and_an_unanswered_input_is_counted() -> None:
    figures = latency.analyse([*INPUTS, Rec(0, 5, b"a", b"", 1050)], BATCH_ANSWERS, warmup_ms=5)
    assert figures["per_event"] == latency.summary([30, 20, 10, 10])
    assert figures["per_aggregate"] == latency.summary([20, 10, 10])
    assert figures["unmatched"] == 1
    assert figures["input_rate"] == pytest.approx(5 / 0.045)  # 5 inputs from 1005 to 1050


def test_create_time_is_refused() -> None:
    with pytest.raises(ValueError, match="LogAppendTime"):
        latency.analyse([INPUTS[0]._replace(timestamp_type=0)], [], warmup_ms=0)


def test_percentiles_by_nearest_rank() -> None:
    figures = latency.summary(list(range(1, 1001)))
    assert (figures["p50"], figures["p99"], figures["p999"], figures["max"]) == (
        500,
        990,
        999,
        1000,
    )


def test_the_goal_is_judged_on_emit_event_at_half_the_maximum_rate() -> None:
    rows = [{"kind": "paced", "emit": "event", "load": 0.5, "per_event": {"p99": 21.0}}]
    assert latency.goal_verdict(rows).endswith("21 ms, not met")
    rows[0]["per_event"]["p99"] = 20.0
    assert latency.goal_verdict(rows).endswith("20 ms, met")
    assert latency.goal_verdict([]).endswith("not measured")


@pytest.mark.kafka
@pytest.mark.timeout(180)
def test_a_quick_paced_run_times_every_event_of_a_real_worker(
    kafka_bootstrap: str, broker_kind: str, broker_profile: str, tmp_path: Path
) -> None:
    if broker_profile == "embedded":
        pytest.skip("the embedded broker (Tansu) keeps CreateTime: it stamps no append time")
    broker = BenchBroker(kafka_bootstrap, broker_profile, broker_kind)
    run = latency.run(
        broker, ["event"], [0.5], 100, 0, (0.5, 1.5), tmp_path, rates={"event": 400.0}
    )
    top, paced = run
    assert top == {"kind": "max_rate", "emit": "event", "events_per_s": 400.0, "given": True}
    assert paced["events"] == 400 and paced["producer"]["sent"] == 400
    assert paced["aggregates_read"] == 400 and paced["unmatched"] == 0
    event, answer = paced["per_event"], paced["per_aggregate"]
    assert event == answer  # emit=event: each input answered by its own record
    assert 0 < event["n"] < 400  # the warm-up left out
    assert 0 <= event["p50"] <= event["p99"] <= event["p999"] <= event["max"]
    assert paced["metric"]["count"] == 400  # the worker's histogram: every record acknowledged
    assert "emit=event" in latency.markdown(run)
