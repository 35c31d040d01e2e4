"""Offset specifications and ranges of the data source (pure functions, no Spark, no Kafka)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_bridge.offsets import (
    OffsetRange,
    OffsetSpecError,
    from_checkpoint,
    limit_offsets,
    offset_ranges,
    resolve_offsets,
    to_checkpoint,
)

EARLIEST = {0: 5, 1: 0, 2: 10}
LATEST = {0: 50, 1: 7, 2: 10}


def test_earliest_latest_and_json_specs():
    parts = [0, 1, 2]
    assert resolve_offsets("earliest", "t", parts, EARLIEST, LATEST, "latest") == EARLIEST
    assert resolve_offsets("latest", "t", parts, EARLIEST, LATEST, "earliest") == LATEST
    spec = json.dumps({"t": {"0": 20, "1": -1}})
    assert resolve_offsets(spec, "t", parts, EARLIEST, LATEST, "earliest") == {0: 20, 1: 7, 2: 10}
    spec = json.dumps({"t": {"0": -2, "1": 999, "2": 0}})
    assert resolve_offsets(spec, "t", parts, EARLIEST, LATEST, "latest") == {0: 5, 1: 7, 2: 10}


@pytest.mark.parametrize(
    "spec",
    ["newest", "{}", '{"other": {"0": 1}}', '{"t": {"0": -3}}', '{"t": {"7": 1}}', "[1]"],
)
def test_bad_specs_are_refused(spec):
    with pytest.raises(OffsetSpecError):
        resolve_offsets(spec, "t", [0, 1, 2], EARLIEST, LATEST, "earliest")


def test_checkpoint_round_trip():
    offsets = {2: 9, 0: 1}
    assert to_checkpoint("t", offsets) == {"t": {"0": 1, "2": 9}}
    assert from_checkpoint("t", json.loads(json.dumps(to_checkpoint("t", offsets)))) == offsets


spans = st.dictionaries(
    st.integers(0, 5), st.tuples(st.integers(0, 100), st.integers(0, 100)), max_size=6
)


@given(spans, st.integers(1, 30))
def test_ranges_cover_each_partition_exactly_in_bounded_slices(span, max_records):
    start = {p: min(a, b) for p, (a, b) in span.items()}
    end = {p: max(a, b) for p, (a, b) in span.items()}
    ranges = offset_ranges(start, end, max_records)
    assert all(isinstance(r, OffsetRange) and 0 < r.end - r.start <= max_records for r in ranges)
    assert ranges == sorted(ranges, key=lambda r: (r.partition, r.start))
    for p in end:
        covered = [o for r in ranges if r.partition == p for o in range(r.start, r.end)]
        assert covered == list(range(start[p], end[p]))


@given(spans, st.integers(1, 200))
def test_limit_offsets_caps_the_total_and_always_progresses(span, max_rows):
    start = {p: min(a, b) for p, (a, b) in span.items()}
    end = {p: max(a, b) for p, (a, b) in span.items()}
    limited = limit_offsets(start, end, max_rows)
    assert all(start[p] <= limited[p] <= end[p] for p in end)
    taken = sum(limited[p] - start[p] for p in end)
    backlog = sum(end[p] - start[p] for p in end)
    if backlog <= max_rows:
        assert limited == end
    else:
        assert 0 < taken <= max_rows
