"""The models and output checks of the JVM peers (``bench.jvm_semantics``) on hand-made
records: a right output passes, and each kind of wrong record is reported. No JVM, no broker."""

from __future__ import annotations

import json

from bench.jvm_semantics import check_over_range, check_sliding, over_range_rows, sliding_windows

A, B = b"key-a", b"key-b"
D = 1000


def event(key: bytes, ts: int, value: float) -> tuple[bytes, bytes]:
    return key, json.dumps({"ts": ts, "value": value}).encode()


RECORDS = [
    event(A, 1000, 1.0),
    event(A, 3000, 4.0),  # ahead of the two below: the models do not depend on the order
    event(A, 1500, 2.0),
    event(A, 2001, 8.0),
    event(B, 1000, 5.0),
    event(B, 1000, -1.0),  # same key, same time
    event(B, 2000, 3.0),  # both at 1000 in its windows: the lower bound is in
]


def row(key: bytes, ts: int, cnt: int, sm: float, mx: float) -> tuple[bytes, bytes]:
    return key, json.dumps({"ts": ts, "cnt": cnt, "sm": sm, "mx": mx}).encode()


def window(key: bytes, start: int, end: int, count: int, total: float, top: float):
    value = {"start": start, "end": end, "count": count, "sum": total, "max": top}
    return key, json.dumps(value).encode()


# One row per event over [ts - D, ts], both bounds in; rows of equal time see each other.
FLINK = [
    row(A, 1000, 1, 1.0, 1.0),
    row(A, 1500, 2, 3.0, 2.0),
    row(A, 2001, 2, 10.0, 8.0),  # 1000 is out: 2001 - D = 1001
    row(A, 3000, 2, 12.0, 8.0),  # 2001 is in: 3000 - D = 2000
    row(B, 1000, 2, 4.0, 5.0),
    row(B, 1000, 2, 4.0 + 1e-12, 5.0),  # sums compared within 1e-6
    row(B, 2000, 3, 7.0, 5.0),
]


def test_the_over_range_model_takes_both_bounds_and_rows_of_equal_time() -> None:
    rows = over_range_rows(RECORDS, D)
    assert rows[A] == [
        (1000, 1, 1.0, 1.0),
        (1500, 2, 3.0, 2.0),
        (2001, 2, 10.0, 8.0),
        (3000, 2, 12.0, 8.0),
    ]
    assert rows[B] == [(1000, 2, 4.0, 5.0), (1000, 2, 4.0, 5.0), (2000, 3, 7.0, 5.0)]


def test_the_flink_check_passes_its_output_and_reports_each_wrong_row() -> None:
    check = check_over_range(reversed(FLINK), RECORDS, D)  # output order does not matter
    assert (check.records, check.compared, check.mismatches) == (7, 7, [])

    lower_bound_in = [*FLINK[:2], row(A, 2001, 3, 11.0, 8.0), *FLINK[3:]]
    assert check_over_range(lower_bound_in, RECORDS, D).mismatches == [
        "b'key-a': row (2001, 3, 11.0, 8.0), expected (2001, 2, 10.0, 8.0)"
    ]
    assert check_over_range(FLINK[:-1], RECORDS, D).mismatches == ["b'key-b': 2 rows, expected 3"]
    wrong_sum = [*FLINK[:-1], row(B, 2000, 3, 7.5, 5.0)]
    assert len(check_over_range(wrong_sum, RECORDS, D).mismatches) == 1
    wrong_max = [*FLINK[:-1], row(B, 2000, 3, 7.0, 3.0)]
    assert len(check_over_range(wrong_max, RECORDS, D).mismatches) == 1
    stray = [*FLINK, row(b"key-c", 1, 1, 1.0, 1.0)]
    assert check_over_range(stray, RECORDS, D).mismatches == ["b'key-c': 1 rows, expected 0"]


# KIP-450 for key-a (1000, 1500, 2001, 3000): the left window [t - D, t] of each time; the
# right window [t + 1, t + 1 + D] of each time with a record in (t, t + 1 + D]: of 1000 (the
# same bounds as 2001's left window), of 1500 and of 2001 (3000 in (2001, 3002]), not of 3000;
# key-b likewise (1000 twice, 2000).
KS_WINDOWS = {
    (A, 0, 1000): (1, 1.0, 1.0),
    (A, 500, 1500): (2, 3.0, 2.0),
    (A, 1001, 2001): (2, 10.0, 8.0),
    (A, 1501, 2501): (1, 8.0, 8.0),
    (A, 2000, 3000): (2, 12.0, 8.0),
    (A, 2002, 3002): (1, 4.0, 4.0),
    (B, 0, 1000): (2, 4.0, 5.0),
    (B, 1000, 2000): (3, 7.0, 5.0),
    (B, 1001, 2001): (1, 3.0, 3.0),
}
KS = [window(key, start, end, *aggregate) for (key, start, end), aggregate in KS_WINDOWS.items()]


def test_the_sliding_model_has_a_left_window_per_time_and_right_windows_with_records() -> None:
    assert sliding_windows(RECORDS, D) == KS_WINDOWS


def test_the_kafka_streams_check_takes_each_windows_last_update_and_reports_wrong_ones() -> None:
    updates = [window(A, 1501, 2501, 0, 0.0, 0.0), window(B, 0, 1000, 1, 5.0, 5.0), *KS]
    check = check_sliding(updates, RECORDS, D)
    assert (check.records, check.compared, check.mismatches) == (11, 9, [])

    # a right window started as a copy of the window its record fell in, record included
    # (an aggregator that mutates its input: the bug this check found in bench/jvm)
    own_record_in = [*KS, window(A, 1501, 2501, 2, 10.0, 8.0)]
    assert check_sliding(own_record_in, RECORDS, D).mismatches == [
        "window (b'key-a', 1501, 2501): (2, 10.0, 8.0), expected (1, 8.0, 8.0)"
    ]
    assert check_sliding(KS[1:], RECORDS, D).mismatches == [
        "window (b'key-a', 0, 1000) not emitted"
    ]
    right_of_the_last = [*KS, window(A, 3001, 4001, 0, 0.0, 0.0)]
    assert check_sliding(right_of_the_last, RECORDS, D).mismatches == [
        "window (b'key-a', 3001, 4001) not a KIP-450 window"
    ]
    stale_last = [*KS, window(B, 0, 1000, 1, 5.0, 5.0)]
    assert len(check_sliding(stale_last, RECORDS, D).mismatches) == 1
    for wrong in (window(B, 1000, 2000, 3, 7.5, 5.0), window(B, 1000, 2000, 3, 7.0, 3.0)):
        assert len(check_sliding([*KS, wrong], RECORDS, D).mismatches) == 1
