"""A reduced ``make chaos`` (``bench.chaos``) in both emit modes: two workers SIGKILLed twice
while they work through a stream with late, future and malformed records; every output checked
by brute force."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.chaos import (
    BASE,
    RETENTION_MS,
    Oracle,
    Outcome,
    check_batch_records,
    input_time,
    parse_args,
    run,
)


@pytest.mark.kafka
@pytest.mark.timeout(400)
@pytest.mark.parametrize("emit", ["event", "batch"])
def test_random_kills_lose_nothing(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path, emit: str
) -> None:
    args = parse_args(
        ["--events", "4000", "--kills", "2", "--queries", "4", "--rate", "800", "--emit", emit]
    )
    outcome = run(args, kafka_bootstrap, embedded_profile, tmp_path)
    assert outcome.kills == 2
    assert outcome.exact, outcome.summary()
    assert outcome.events == 4000 and outcome.queries == 4


def _batch_oracle() -> Oracle:
    """Partition 0: key a at offsets 0, 2, 3 (values 0, 2, 3), key b at 1 (value 1); a
    late event at offset 4 (rejected)."""
    oracle = Oracle()
    for offset, key in enumerate("abaa"):
        value = {"ts": input_time(offset), "value": offset}
        oracle.feed(0, offset, key, "event", value)
    oracle.feed(0, 4, "a", "event", {"ts": BASE - 10 * RETENTION_MS, "value": 4})
    return oracle


def _batch_record(oracle: Oracle, key: str, n: int, s: int, offset: int) -> dict:
    """The aggregates topic's object of the record of ``key``'s first ``n`` events at stream
    time ``s``, answering input ``offset`` (as the worker writes it)."""
    ts = oracle.accepted[key][n - 1][0]
    windows = {
        name: {"start": start, "end": end, "count": count, "aggregates": {"sum": total}}
        for name, start, end, count, total in oracle.windows(key, n, s)
    }
    return {
        "key": key,
        "event_ts": ts,
        "stream_time": s,
        "windows": windows,
        "input_partition": 0,
        "input_offset": offset,
    }


def test_the_batch_check_finds_wrong_and_missing_records() -> None:
    """``check_batch_records`` accepts records cut at any batch end, and counts a record with a
    wrong sum, a stream time past the key's next event, an offset that is not the key's, and a
    key whose last event has no record."""
    oracle = _batch_oracle()
    t = [input_time(i) for i in range(4)]
    right = [
        _batch_record(oracle, "a", 1, t[1], 0),  # batch [0, 1]
        _batch_record(oracle, "b", 1, t[1], 1),
        _batch_record(oracle, "a", 3, t[3], 3),  # batch [2, 4]
        _batch_record(oracle, "a", 1, t[0], 0),  # a replay cut after offset 0
    ]
    outcome = Outcome()
    check_batch_records(right, oracle, outcome)
    assert outcome.exact and outcome.repeated == 0, (outcome.summary(), outcome.notes)

    wrong_sum = _batch_record(oracle, "a", 3, t[3], 3)
    wrong_sum["windows"]["10s"]["aggregates"]["sum"] += 1
    too_late = _batch_record(oracle, "a", 1, t[2], 0)  # a's event at offset 2 came before it
    not_its_offset = _batch_record(oracle, "b", 1, t[1], 2)
    outcome = Outcome()
    check_batch_records([right[1], wrong_sum, too_late, not_its_offset, right[1]], oracle, outcome)
    assert outcome.wrong_outputs == 3, outcome.notes
    assert outcome.lost_outputs == 1  # a's last event (offset 3): only a wrong record
    assert outcome.repeated == 1
