"""Fuzzing the event parser (issue 16, "Also build"): whatever bytes arrive, ``EventParser.parse``
returns an ``Event`` or raises ``BadEvent`` with a dead-letter reason, and every ``Event`` it
returns goes through the windows of every aggregation group (accepted or ``Rejected``), into an
aggregate record, the store's entry id and the state codec without an exception.

Inputs: arbitrary bytes, and JSON objects whose time, value and key fields are drawn from every
JSON type (integers of any size, non-finite floats, digit strings in other scripts, ISO-8601
and near misses, nested objects, lone surrogates), with every key source setting.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agents.records as records
from agents.events import MAX_EVENT_TIME, MIN_EVENT_TIME, BadEvent, Event, EventParser
from agents.records import encode_aggregate
from app.settings import Settings
from stores.changelog import entry_id
from stores.key_windows import Accepted, KeyWindows, Rejected, WindowConfig
from stores.window_store import MarshalStateCodec
from tests.aggregation_samples import GROUPS, group_settings

pytestmark = pytest.mark.timeout(300)

REASONS = {v for k, v in vars(records).items() if k.startswith("REASON_")}
PARSERS = [
    EventParser(Settings()),
    EventParser(Settings(key_field="device", max_key_bytes=16, max_value_bytes=4096)),
    EventParser(Settings(timestamp_source="kafka")),
]

TRICKY = ["", " ", "²", "٣", "--5", "-", "1e3", "0x10", "12:00", "2024-13-01", "2024-01-01T24:00"]
tricky_text = st.sampled_from(
    [*TRICKY, "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59.999-01:00", "\ud800", "9" * 5000]
)
huge_numbers = st.sampled_from(["NaN", "-Infinity", "1e999", "9" * 5000, "-" + "9" * 101])
times = st.one_of(
    st.integers(),
    st.integers(MIN_EVENT_TIME - 2, MAX_EVENT_TIME + 2),
    st.floats(),
    st.datetimes().map(lambda d: d.isoformat()),
    st.integers(-(10**20), 10**20).map(str),
    tricky_text,
    st.text(max_size=30),
)
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20))
json_values = st.recursive(
    scalars | tricky_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)
values = st.one_of(
    st.integers(),
    st.floats(),
    st.fixed_dictionaries({"value": scalars, "arg": json_values}),
    json_values,
)
keys = st.one_of(st.text(max_size=20), st.integers(), tricky_text, json_values)


@st.composite
def record_values(draw: st.DrawFn) -> bytes:
    """A record value: JSON objects with the fields (each possibly missing), or raw bytes."""
    fields: dict[str, Any] = {}
    for name, strategy in (("ts", times), ("value", values), ("device", keys)):
        if draw(st.integers(0, 5)):
            fields[name] = draw(strategy)
    encoding = draw(st.sampled_from(["utf-8", "utf-16", "utf-32"]))
    text = json.dumps(fields, ensure_ascii=draw(st.booleans()))
    return draw(
        st.one_of(
            st.just(text.encode(encoding, "surrogatepass")),
            st.binary(max_size=64),
            st.just(text[: draw(st.integers(0, len(text)))].encode("utf-8", "surrogatepass")),
            st.just(f'{{"ts": 5, "value": {draw(huge_numbers)}}}'.encode()),
            st.just(f'{{"ts": {draw(huge_numbers)}, "value": 1}}'.encode()),
        )
    )


WINDOWS = {group: WindowConfig.from_settings(group_settings(group)) for group in GROUPS}


def check_event_flows_through_the_worker(event: Event) -> None:
    """The worker's steps after parsing, for every aggregation group."""
    assert isinstance(event.key, str) and event.key.encode()
    assert isinstance(event.ts, int) and MIN_EVENT_TIME <= event.ts <= MAX_EVENT_TIME
    for config in WINDOWS.values():
        windows = KeyWindows(config)
        try:
            outcome = windows.accept(event.key, event.ts, event.value)
        except Rejected as rejected:
            assert rejected.reason in REASONS
            continue
        assert isinstance(outcome, Accepted) and outcome.record is not None
        json.loads(encode_aggregate(outcome.record, 0, 0))
        entry_id(outcome.key, outcome.time)
        codec = MarshalStateCodec(config.partial_monoid)
        assert codec.decode(codec.encode(outcome.partial)) == outcome.partial


@given(
    st.sampled_from(PARSERS),
    st.one_of(
        st.none(),
        st.binary(max_size=24),
        keys.map(lambda k: str(k).encode("utf-8", "surrogatepass")),
    ),
    record_values(),
    st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
)
def test_any_record_is_an_event_or_a_dead_letter_reason(parser, key, value, kafka_ts) -> None:
    try:
        event = parser.parse(key, value, kafka_ts)
    except BadEvent as bad:
        assert bad.reason in REASONS, bad.reason
        return
    check_event_flows_through_the_worker(event)


@settings(max_examples=500)
@given(st.sampled_from(PARSERS[:2]), keys, times, values)
def test_any_json_event_is_an_event_or_a_dead_letter_reason(parser, key, ts, value) -> None:
    obj = {"device": key, "ts": ts, "value": value}
    try:
        event = parser.parse(b"key", json.dumps(obj).encode("utf-8", "surrogatepass"), None)
    except BadEvent as bad:
        assert bad.reason in REASONS, bad.reason
        return
    check_event_flows_through_the_worker(event)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b'{"ts": "\\u00b2", "value": 1}', "bad_timestamp"),  # a digit to isdigit(), not to int()
        (b'{"ts": "--5", "value": 1}', "bad_timestamp"),
        (b'{"ts": "' + b"9" * 5000 + b'", "value": 1}', "bad_timestamp"),
        (b'{"ts": 1180591620717411303424, "value": 1}', "bad_timestamp"),  # no 64-bit time
        (b'{"ts": "99999999999999999", "value": 1}', "bad_timestamp"),  # year 3170843
        (b'{"ts": "0001-01-01T00:00:00+01:00", "value": 1}', "bad_timestamp"),  # year 0
        (b'{"ts": 5, "value": ' + b"9" * 5000 + b"}", "bad_value"),  # past int()'s limit
        (b'{"ts": 5, "value": ' + b"9" * 400 + b"}", "bad_value"),  # mean: no float
        (b'{"ts": 5, "value": -' + b"9" * 100 + b"}", "bad_value"),
    ],
)
def test_values_that_escaped_the_parser_are_dead_letters(value: bytes, reason: str) -> None:
    with pytest.raises(BadEvent) as caught:
        PARSERS[0].parse(b"k", value, None)
    assert caught.value.reason == reason


@pytest.mark.parametrize(
    ("parser", "key", "value"),
    [
        (PARSERS[0], b"", b'{"ts": 5, "value": 1}'),
        (PARSERS[1], None, b'{"device": "", "ts": 5, "value": 1}'),
    ],
)
def test_an_empty_key_is_a_dead_letter(parser: EventParser, key, value: bytes) -> None:
    with pytest.raises(BadEvent) as caught:
        parser.parse(key, value, None)
    assert caught.value.reason == "empty_key"


def test_a_lone_surrogate_in_the_key_field_is_a_bad_key() -> None:
    with pytest.raises(BadEvent) as caught:
        PARSERS[1].parse(None, b'{"device": "\\ud800", "ts": 5, "value": 1}', None)
    assert caught.value.reason == "bad_key"


def test_kafka_timestamps_beyond_year_9999_are_bad_timestamps() -> None:
    parser = EventParser(replace(Settings(), timestamp_source="kafka"))
    assert parser.parse(b"k", b'{"value": 1}', MAX_EVENT_TIME).ts == MAX_EVENT_TIME
    with pytest.raises(BadEvent, match="outside the years 1-9999"):
        parser.parse(b"k", b'{"value": 1}', MAX_EVENT_TIME + 1)


@dataclass(frozen=True)
class _Record:
    key: bytes | None
    value: bytes | None
    timestamp: int | None


def outcome_of(parser: EventParser, record: _Record) -> tuple[Any, ...]:
    """``parse``'s outcome for ``record``: the event's fields, or the rejection's."""
    try:
        event = parser.parse(record.key, record.value, record.timestamp)
    except BadEvent as bad:
        return ("bad", bad.reason, bad.detail)
    return (event.key, event.ts, event.value)


def outcomes_of_parse_many(parser: EventParser, chunk: list[_Record]) -> list[tuple[Any, ...]]:
    return [
        ("bad", got.reason, got.detail) if isinstance(got, BadEvent) else got
        for got in parser.parse_many(chunk)
    ]


NUMBER_TEXTS = [
    "9" * 18,
    "9" * 19,
    "1" + "0" * 19,
    "-9223372036854775809",
    "18446744073709551616",
    "123456789012345678901234567890",
    "0.1234567890123456789",
    "1e400",
    "-1e400",
    "NaN",
    "1e-400",
    "4.9e-324",
    "1.7976931348623157e308",
    "-0",
    "-0.0",
    "1E2",
    "9" * 101,
]


@pytest.mark.parametrize("number", NUMBER_TEXTS)
def test_parse_many_reads_numbers_as_parse_does(number: str) -> None:
    """orjson reads an integer beyond 64 bits as a float, and refuses infinities: such numbers
    must leave the chunk parser's fast path (mutation check: without ``_LONG_DIGITS`` the
    integers of 19+ digits came back as floats)."""
    chunk = [
        _Record(b"k", f'{{"ts": 5, "value": {number}}}'.encode(), 1),
        _Record(b"k", f'{{"ts": {number}, "value": 1}}'.encode(), 1),
        _Record(b"k", f'{{"ts": 5, "value": 1, "extra": {number}}}'.encode(), 1),
    ]
    for parser in PARSERS:
        expected = [outcome_of(parser, record) for record in chunk]
        got = outcomes_of_parse_many(parser, chunk)
        assert list(map(repr, got)) == list(map(repr, expected))  # 1e+19 is not 10**19


@settings(max_examples=300)
@given(
    st.sampled_from(PARSERS),
    st.lists(
        st.builds(
            _Record,
            st.one_of(
                st.none(),
                st.binary(max_size=24),
                keys.map(lambda k: str(k).encode("utf-8", "surrogatepass")),
            ),
            st.one_of(
                record_values(),
                st.builds(
                    lambda ts, v: json.dumps({"ts": ts, "value": v}).encode(),
                    times,
                    values,
                ),
            ),
            st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
        ),
        max_size=8,
    ),
)
def test_parse_many_has_the_outcome_of_parse_for_every_record(parser, chunk) -> None:
    expected = [outcome_of(parser, record) for record in chunk]
    assert list(map(repr, outcomes_of_parse_many(parser, chunk))) == list(map(repr, expected))
