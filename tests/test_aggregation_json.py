"""Every built-in aggregation's result has a documented JSON form in the output records
(issue 16.2: ``bloom`` made the worker exit on its first event), and aggregate records say
which input record they answer (issue 16.6)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agents.records import INPUT_OFFSET, INPUT_PARTITION, AggregateRecord, encode_json
from stores.monoids import BloomFilter, monoid, monoid_names
from tests.aggregation_samples import aggregate_samples, aggregation_groups


def test_every_registered_aggregation_is_in_a_group_and_sampled() -> None:
    assert set(aggregate_samples()) == set(monoid_names())
    assert {"argmax", "argmin"} <= set(aggregation_groups()["objects"])


@pytest.mark.parametrize("name", monoid_names())
def test_every_aggregation_writes_json_records_naming_their_input(name: str) -> None:
    records = [json.loads(raw) for raw in aggregate_samples()[name]]
    assert [(r[INPUT_PARTITION], r[INPUT_OFFSET]) for r in records] == [
        (0, i) for i in range(len(records))
    ]
    for obj in records:
        record = AggregateRecord.from_json(obj)
        assert record.input_offset == obj[INPUT_OFFSET]
        assert all(name in w.aggregates for w in record.windows.values())
        assert json.loads(encode_json(record.to_json())) == obj


def test_bloom_results_are_filters_in_json_that_decode_to_the_same_filter() -> None:
    records = [json.loads(raw) for raw in aggregate_samples()["bloom"]]
    widest = [r["windows"]["10s"] for r in records]
    assert widest[-1]["count"] > 1
    for window in widest:
        got = BloomFilter.from_json(window["aggregates"]["bloom"])
        assert got.bits.bit_count() >= monoid("bloom").lower(0).k  # some item in it
        assert got.estimated_count() == pytest.approx(window["aggregates"]["distinct_count"], 1)


@given(st.lists(st.integers() | st.text(), max_size=30), st.integers() | st.text())
def test_bloom_json_form_round_trips_with_its_membership(items, probe) -> None:
    m = monoid("bloom", capacity=50, error_rate=0.05)
    partial = m.identity
    for item in items:
        partial = m.combine(partial, m.lift(item))
    original = m.lower(partial)
    decoded = BloomFilter.from_json(json.loads(encode_json({"b": original}))["b"])
    assert decoded == original
    assert all(item in decoded for item in items)
    assert (probe in decoded) == (probe in original)


@pytest.mark.parametrize(
    "obj",
    [
        {},
        {"m": 8, "k": 1},
        {"m": 8, "k": 1, "bits": "not base64!"},
        {"m": 8, "k": 1, "bits": "//8="},  # 16 bits set in an 8-bit filter
        {"m": 0, "k": 1, "bits": ""},
        {"m": "x", "k": 1, "bits": ""},
        {"m": 8, "k": 1, "bits": 5},
    ],
)
def test_a_bloom_json_form_that_is_no_filter_is_a_value_error(obj) -> None:
    with pytest.raises(ValueError, match="not a bloom filter"):
        BloomFilter.from_json(obj)


class _Opaque:
    def __repr__(self) -> str:
        return "<opaque>"


class _WithJsonForm:
    def to_json(self) -> list[int]:
        return [1, 2]


def test_an_object_without_json_form_is_written_as_its_repr() -> None:
    """A custom aggregation's value that passed the start-up check with JSON values and later
    is an object: written as ``repr``, never an exception losing the record."""
    assert encode_json({"x": _Opaque()}) == b'{"x":"<opaque>"}'
    big = encode_json({"x": _Opaque(), "big": 2**70})  # the standard library's path
    assert json.loads(big) == {"x": "<opaque>", "big": 2**70}


def test_an_object_with_to_json_is_written_in_that_form() -> None:
    assert encode_json({"x": _WithJsonForm()}) == b'{"x":[1,2]}'
