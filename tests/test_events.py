"""Event parsing: every valid form of key, time and value, and the reason of every rejection."""

import calendar
import json
import re
from dataclasses import replace
from datetime import UTC

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agents.events import BadEvent, Event, EventParser, parse_event_time
from agents.records import dead_letter_headers
from app.settings import Settings

PARSER = EventParser(Settings())


def _json(obj) -> bytes:
    return json.dumps(obj).encode()


@pytest.mark.parametrize(
    ("raw", "ms"),
    [
        (1_700_000_000_000, 1_700_000_000_000),
        (1.7e12, 1_700_000_000_000),
        ("1700000000000", 1_700_000_000_000),
        ("1970-01-01T00:00:01.5Z", 1500),
        ("1970-01-01T01:00:00+01:00", 0),
        ("1970-01-01 00:00:02", 2000),
        (-5, -5),
    ],
)
def test_event_times(raw, ms):
    assert parse_event_time(raw) == ms


@given(st.datetimes(timezones=st.just(UTC)))
def test_iso_times_are_epoch_ms_rounded_down(moment):
    expected = calendar.timegm(moment.utctimetuple()) * 1000 + moment.microsecond // 1000
    assert parse_event_time(moment.isoformat()) == expected


def test_valid_record():
    event = PARSER.parse(b"sensor-1", _json({"ts": 10, "value": 2.5}), None)
    assert event == Event("sensor-1", 10, 2.5)


def test_object_values_are_kept_for_multi_field_aggregations():
    event = PARSER.parse(b"k", _json({"ts": 1, "value": {"value": 3, "arg": "x"}}), None)
    assert event.value == {"value": 3, "arg": "x"}


def test_key_field_and_custom_field_names():
    parser = EventParser(Settings(key_field="device", ts_field="time", value_field="v"))
    event = parser.parse(None, _json({"device": "d7", "time": "5", "v": 1}), None)
    assert event == Event("d7", 5, 1)


def test_kafka_timestamp_source():
    parser = EventParser(Settings(timestamp_source="kafka"))
    assert parser.parse(b"k", _json({"value": 1}), 1234) == Event("k", 1234, 1)
    with pytest.raises(BadEvent) as info:
        parser.parse(b"k", _json({"value": 1}), -1)
    assert info.value.reason == "bad_timestamp"


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (b"k", b"{not json", "malformed_json"),
        (b"k", b"\xff\xfe", "malformed_json"),
        (b"k", b"[1, 2]", "malformed_json"),
        (b"k", None, "malformed_json"),
        (b"k", b'{"ts": 1, "value": NaN}', "bad_value"),
        (b"k", b'{"ts": 1, "value": Infinity}', "bad_value"),
        (b"k", b'{"ts": 1, "value": 1e999}', "bad_value"),
        (b"k", b'{"ts": 1, "value": "7"}', "bad_value"),
        (b"k", b'{"ts": 1, "value": true}', "bad_value"),
        (b"k", b'{"ts": 1, "value": null}', "bad_value"),
        (b"k", b'{"ts": 1, "value": [1]}', "bad_value"),
        (b"k", b'{"value": 1}', "missing_field"),
        (b"k", b'{"ts": 1}', "missing_field"),
        (None, b'{"ts": 1, "value": 1}', "missing_field"),
        (b"k", b'{"ts": "yesterday", "value": 1}', "bad_timestamp"),
        (b"k", b'{"ts": 1.5, "value": 1}', "bad_timestamp"),
        (b"k", b'{"ts": false, "value": 1}', "bad_timestamp"),
        (b"k", b'{"ts": {}, "value": 1}', "bad_timestamp"),
        (b"\xff", b'{"ts": 1, "value": 1}', "bad_key"),
        (b"x" * 2000, b'{"ts": 1, "value": 1}', "oversize"),
    ],
)
def test_rejections_carry_their_reason(key, value, reason):
    with pytest.raises(BadEvent) as info:
        PARSER.parse(key, value, None)
    assert info.value.reason == reason
    assert info.value.detail
    assert not PYTHON_INTERNALS.search(info.value.detail), info.value.detail


PYTHON_INTERNALS = re.compile(r"\b(True|False|None|inf|nan|list|dict|str|int|float|codec)\b|'")
"""What a Python repr, type name or codec error would put into a rejection's detail."""


@pytest.mark.parametrize(
    ("value", "detail"),
    [
        (b"[1, 2]", "not a JSON object but an array"),
        (b'{"ts": 1, "value": 1e400}', "not a finite number: a number too large (beyond 1.8e308)"),
        (b'{"ts": "noon", "value": 1}', 'not epoch ms nor ISO-8601: "noon"'),
        (b'{"ts": 1, "value": null}', "not a number: null"),
        (b'{"ts": 1, "value": [true]}', "not a number or an object: [true]"),
        (b"{not json", "not JSON: Expecting property name enclosed in double quotes at line 1"),
        (b"\x80abc", "not JSON: byte 0 is not valid UTF-8 text"),
    ],
)
def test_rejection_details_show_json_not_python(value, detail):
    with pytest.raises(BadEvent) as info:
        PARSER.parse(b"k", value, None)
    assert info.value.detail.startswith(detail)


def test_dead_letters_carry_kafka_connect_headers_beside_ours():
    headers = dict(dead_letter_headers("malformed_json", "not JSON: x", "events", 2, 41))
    assert headers["fiba.error.reason"] == b"malformed_json"
    assert headers["__connect.errors.topic"] == b"events"
    assert headers["__connect.errors.partition"] == b"2"
    assert headers["__connect.errors.offset"] == b"41"
    assert headers["__connect.errors.exception.class.name"] == b"fiba.errors.MalformedJson"
    assert headers["__connect.errors.exception.message"] == b"not JSON: x"
    assert headers["__connect.errors.stage"] == b"VALUE_CONVERTER"
    stages = {
        r: dict(dead_letter_headers(r, "d", "t", 0, 0))["__connect.errors.stage"]
        for r in ("late", "bad_key")
    }
    assert stages == {"late": b"TASK_PUT", "bad_key": b"KEY_CONVERTER"}


def test_oversize_value_and_key_field_problems():
    small = EventParser(replace(Settings(), max_value_bytes=20))
    with pytest.raises(BadEvent, match="oversize"):
        small.parse(b"k", _json({"ts": 1, "value": 123456789}), None)
    parser = EventParser(replace(Settings(), key_field="id"))
    for obj, reason in [
        ({"ts": 1, "value": 1}, "missing_field"),
        ({"id": [1], "ts": 1, "value": 1}, "bad_key"),
    ]:
        with pytest.raises(BadEvent) as info:
            parser.parse(None, _json(obj), None)
        assert info.value.reason == reason


@given(st.binary(max_size=64))
def test_arbitrary_bytes_never_raise_anything_but_bad_event(data):
    try:
        event = PARSER.parse(b"k", data, None)
    except BadEvent:
        return
    assert isinstance(event.ts, int)
