"""Input records -> ``Event``: parsing and validation, with a reason code for every rejection.

An input record is keyed by the aggregation key (non-empty UTF-8, or ``key_field`` inside the
value) with a JSON object value holding the event time (epoch ms or ISO-8601, or the Kafka
timestamp with ``timestamp_source = "kafka"``; years 1 to 9999) and a finite number or an
object as the value. ``EventParser.parse`` returns an ``Event`` or raises ``BadEvent(reason,
detail)`` with a dead-letter reason code; ``parse_many`` parses a fetched chunk at once with the
same outcome per record (in one native call when the native core is loaded, else orjson for
the common record). Cost O(size of the record). Every rule: docs/reference/records.md.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import orjson

import stores
from agents.config import WorkerSettings
from agents.records import (
    REASON_BAD_KEY,
    REASON_BAD_TIMESTAMP,
    REASON_BAD_VALUE,
    REASON_EMPTY_KEY,
    REASON_MALFORMED_JSON,
    REASON_MISSING_FIELD,
    REASON_OVERSIZE,
)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)
MIN_EVENT_TIME = (datetime(1, 1, 1, tzinfo=UTC) - _EPOCH) // _ONE_MS
"""Epoch ms of 0001-01-01T00:00:00Z, the earliest event time."""
MAX_EVENT_TIME = (datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC) - _EPOCH) // _ONE_MS
"""Epoch ms of 9999-12-31T23:59:59.999Z, the latest event time."""
_EPOCH_MS_TEXT = re.compile(r"-?[0-9]{1,20}")


class BadEvent(Exception):
    """An input record that cannot be aggregated: ``reason`` (a short code) and ``detail``."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Event:
    """One valid input event: aggregation ``key``, event time ``ts`` (epoch ms) and ``value``."""

    key: str
    ts: int
    value: Any


SHOWN_CHARS = 80
"""Longest rendering of an offending input value in a rejection's detail."""

_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}


def shown(raw: Any) -> str:
    """``raw`` (a decoded JSON value) as JSON text for a rejection's detail, cut to
    ``SHOWN_CHARS``; a number too large for a double (JSON allows it) is named so. Never a Python
    repr: the detail is read by people who sent JSON."""
    if isinstance(raw, float) and not math.isfinite(raw):
        return "a number too large (beyond 1.8e308)"
    text = json.dumps(raw, ensure_ascii=False)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def json_type(raw: Any) -> str:
    """The JSON type of a decoded value, with its article: "an array", "null", "a number"."""
    if raw is None:
        return "null"
    return _JSON_TYPES.get(type(raw), "a number")


def json_error(exc: UnicodeDecodeError | json.JSONDecodeError) -> str:
    """A rejection's detail for bytes that do not decode as JSON text: where the JSON breaks,
    or that the bytes are not Unicode text."""
    if isinstance(exc, UnicodeDecodeError):
        return f"not JSON: byte {exc.start} is not valid {exc.encoding.upper()} text"
    return f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"


def _reject_constant(name: str) -> Any:
    raise BadEvent(REASON_BAD_VALUE, f"{name} is not a finite number")


def parse_event_time(raw: Any) -> int:
    """Epoch ms of ``raw``: an int, an integral finite float, a string of ASCII digits (with an
    optional ``-``) or ISO-8601, within ``MIN_EVENT_TIME``..``MAX_EVENT_TIME``.

    Raises ``BadEvent(bad_timestamp)`` for anything else (booleans, fractions of a ms, text,
    times outside the years 1-9999). O(len(raw)).
    """
    if isinstance(raw, bool):
        raise BadEvent(REASON_BAD_TIMESTAMP, f"not a time: {shown(raw)}")
    if isinstance(raw, int):
        return _in_range(raw)
    if isinstance(raw, float):
        if math.isfinite(raw) and raw.is_integer():
            return _in_range(int(raw))
        raise BadEvent(REASON_BAD_TIMESTAMP, f"not a whole number of ms: {shown(raw)}")
    if isinstance(raw, str):
        text = raw.strip()
        if _EPOCH_MS_TEXT.fullmatch(text):
            return _in_range(int(text))
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise BadEvent(
                REASON_BAD_TIMESTAMP, f"not epoch ms nor ISO-8601: {shown(raw)}"
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return _in_range((moment - _EPOCH) // _ONE_MS)
    raise BadEvent(REASON_BAD_TIMESTAMP, f"not a time: {shown(raw)}")


def _in_range(ms: int) -> int:
    if MIN_EVENT_TIME <= ms <= MAX_EVENT_TIME:
        return ms
    raise BadEvent(REASON_BAD_TIMESTAMP, f"{ms} ms is outside the years 1-9999")


def check_value(raw: Any) -> Any:
    """``raw`` if it is a finite number (not a bool) or a JSON object; else ``BadEvent``."""
    if isinstance(raw, bool) or raw is None:
        raise BadEvent(REASON_BAD_VALUE, f"not a number: {shown(raw)}")
    if isinstance(raw, int):
        return raw
    if isinstance(raw, float):
        if math.isfinite(raw):
            return raw
        raise BadEvent(REASON_BAD_VALUE, f"not a finite number: {shown(raw)}")
    if isinstance(raw, dict):
        return raw
    raise BadEvent(REASON_BAD_VALUE, f"not a number or an object: {shown(raw)}")


def _parse_int(text: str) -> int:
    # json would call int() on a digit string of any length: past 4300 digits that raises a
    # plain ValueError; no time or value of 100 digits is valid anyway
    if len(text) > 100:
        raise BadEvent(REASON_BAD_VALUE, f"a number of {len(text)} digits")
    return int(text)


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_int=_parse_int)
"""``json.loads(data, parse_constant=...)`` builds this decoder on every call; it is stateless."""


def decode_json_object(value: bytes) -> dict[str, Any]:
    """The JSON object in ``value`` (UTF-8, -16 or -32). Raises ``BadEvent``: ``malformed_json``
    for anything else (NaN and infinities included), ``bad_value`` for a number of more than
    100 digits. O(len(value))."""
    try:
        obj = _DECODER.decode(value.decode(json.detect_encoding(value), "surrogatepass"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadEvent(REASON_MALFORMED_JSON, json_error(exc)) from None
    except RecursionError:
        raise BadEvent(REASON_MALFORMED_JSON, "JSON nested too deeply") from None
    if not isinstance(obj, dict):
        raise BadEvent(REASON_MALFORMED_JSON, f"not a JSON object but {json_type(obj)}")
    return obj


_LONG_DIGITS = re.compile(rb"[0-9]{19}")
"""Nineteen digits in a row: a number orjson would not read as the standard library does (an
integer beyond 64 bits becomes a float; the standard decoder keeps it exact, or refuses one of
more than 100 digits) or a float written with more digits than a double holds."""


def fast_json_object(value: bytes) -> dict[str, Any] | None:
    """The JSON object in ``value`` as ``decode_json_object`` returns it, decoded by orjson
    (several times faster), or ``None`` when orjson's reading could differ from the standard
    decoder's or fails (then the caller takes ``decode_json_object``). orjson reads UTF-8 only
    and refuses what the standard decoder refuses or reads otherwise (NaN, infinities, lone
    surrogates, a BOM, UTF-16/32); numbers of 19 or more digits in a row are left to the
    standard decoder (see ``_LONG_DIGITS``). O(len(value))."""
    if _LONG_DIGITS.search(value) is not None:
        return None
    try:
        obj = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    return obj if type(obj) is dict else None


class RawRecord(Protocol):
    """What ``parse_many`` reads of an input record (aiokafka's ``ConsumerRecord``)."""

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...

    @property
    def timestamp(self) -> int: ...


ParsedEvent = tuple[str, int, Any]
"""An event as ``parse_many`` returns it: ``(key, ts, value)``, the fields of ``Event``."""


_NUMBERS = (int, float)
"""The value types ``parse_many`` checks inline (orjson gives no non-finite float)."""


class EventParser:
    """Turns raw Kafka records into ``Event`` values according to one ``Settings``.

    With ``native`` (the default) and the native core loaded (``stores.native()``),
    ``parse_many`` is the native parser's (``stores/native/src/events.rs``: same outcomes,
    one call per chunk; a record it cannot decide as this class does is parsed here)."""

    __slots__ = (
        "_kafka_time",
        "_key_field",
        "_max_key",
        "_max_value",
        "_native",
        "_ts_field",
        "_value_field",
    )

    def __init__(self, settings: WorkerSettings, *, native: bool = True) -> None:
        self._key_field = settings.key_field
        self._ts_field = settings.ts_field
        self._value_field = settings.value_field
        self._kafka_time = settings.timestamp_source == "kafka"
        self._max_key = settings.max_key_bytes
        self._max_value = settings.max_value_bytes
        module = stores.native() if native else None
        self._native = None if module is None else self._native_parser(module)

    def _native_parser(self, module: Any) -> Any:
        key_field = shown(self._key_field) if self._key_field is not None else ""
        return module.EventParser(
            self._key_field,
            self._ts_field,
            self._value_field,
            self._kafka_time,
            self._max_key,
            self._max_value,
            MIN_EVENT_TIME,
            MAX_EVENT_TIME,
            (
                f"no {key_field} field",
                f"no {shown(self._ts_field)} field",
                f"no {shown(self._value_field)} field",
                f"the {key_field} field is empty",
            ),
            BadEvent,
            self._outcome,
        )

    @property
    def native(self) -> bool:
        """Whether ``parse_many`` is the native parser's."""
        return self._native is not None

    @property
    def native_parser(self) -> Any:
        """The native parser (``stores._native.EventParser``) or None: what
        ``NativeKeyWindows.apply_fetched`` parses a fetched chunk with."""
        return self._native

    def parse(self, key: bytes | None, value: bytes | None, kafka_ts: int | None) -> Event:
        """The ``Event`` of one record (``kafka_ts``: the record timestamp in ms).

        Raises ``BadEvent`` with reason ``oversize``, ``bad_key``, ``empty_key``,
        ``malformed_json``, ``missing_field``, ``bad_timestamp`` or ``bad_value``.
        """
        if value is None:
            raise BadEvent(REASON_MALFORMED_JSON, "empty value (tombstone)")
        if len(value) > self._max_value:
            raise BadEvent(
                REASON_OVERSIZE, f"value of {len(value)} bytes > max_value_bytes {self._max_value}"
            )
        obj = decode_json_object(value)
        return Event(self._key(key, obj), self._time(obj, kafka_ts), self._value(obj))

    def parse_many(self, records: Iterable[RawRecord]) -> list[ParsedEvent | BadEvent]:
        """Per record, in order, ``(key, ts, value)`` of its ``Event`` or the ``BadEvent``
        that ``parse`` raises for it: the same outcome as ``parse``, for a chunk at once. A
        record keyed by its Kafka key, timed by its ``ts_field``, whose value decodes with
        ``fast_json_object`` into an integer time within the years 1-9999 and an int or float
        value, is checked inline; any other goes through ``parse``; with the native parser,
        one native call for the chunk. O(total size)."""
        if self._native is not None:
            return self._native.parse_many(records)  # type: ignore[no-any-return]
        inline = self._key_field is None and not self._kafka_time
        max_key, max_value = self._max_key, self._max_value
        ts_field, value_field = self._ts_field, self._value_field
        outcome = self._outcome
        parsed: list[ParsedEvent | BadEvent] = []
        append = parsed.append
        for record in records:
            key, value = record.key, record.value
            if inline and key and value is not None and len(value) <= max_value:
                obj = fast_json_object(value) if len(key) <= max_key else None
                if obj is not None:
                    ts, number = obj.get(ts_field), obj.get(value_field)
                    if (
                        type(ts) is int
                        and MIN_EVENT_TIME <= ts <= MAX_EVENT_TIME
                        and type(number) in _NUMBERS
                    ):
                        try:
                            append((key.decode(), ts, number))
                            continue
                        except UnicodeDecodeError:
                            pass
            append(outcome(record))
        return parsed

    def _outcome(self, record: RawRecord) -> ParsedEvent | BadEvent:
        """``parse``'s outcome for one record, as ``parse_many`` gives it."""
        try:
            event = self.parse(record.key, record.value, record.timestamp)
        except BadEvent as bad:
            return bad
        return (event.key, event.ts, event.value)

    def _key(self, key: bytes | None, obj: dict[str, Any]) -> str:
        if self._key_field is None:
            if key is None:
                raise BadEvent(REASON_MISSING_FIELD, "record has no Kafka key")
            if len(key) > self._max_key:
                raise BadEvent(
                    REASON_OVERSIZE, f"key of {len(key)} bytes > max_key_bytes {self._max_key}"
                )
            if not key:
                raise BadEvent(REASON_EMPTY_KEY, "the Kafka key is empty")
            try:
                return key.decode()
            except UnicodeDecodeError:
                raise BadEvent(REASON_BAD_KEY, "Kafka key is not UTF-8") from None
        if self._key_field not in obj:
            raise BadEvent(REASON_MISSING_FIELD, f"no {shown(self._key_field)} field")
        raw = obj[self._key_field]
        if isinstance(raw, bool) or not isinstance(raw, str | int):
            raise BadEvent(REASON_BAD_KEY, f"key field is not a string: {shown(raw)}")
        text = str(raw)
        try:
            size = len(text.encode())
        except UnicodeEncodeError:  # a lone surrogate (JSON "\ud800") is no UTF-8
            raise BadEvent(REASON_BAD_KEY, "key field is not valid Unicode") from None
        if size > self._max_key:
            raise BadEvent(REASON_OVERSIZE, f"key longer than max_key_bytes {self._max_key}")
        if not size:
            raise BadEvent(REASON_EMPTY_KEY, f"the {shown(self._key_field)} field is empty")
        return text

    def _time(self, obj: dict[str, Any], kafka_ts: int | None) -> int:
        if self._kafka_time:
            if kafka_ts is None or kafka_ts < 0:
                raise BadEvent(REASON_BAD_TIMESTAMP, "record has no Kafka timestamp")
            return _in_range(kafka_ts)
        if self._ts_field not in obj:
            raise BadEvent(REASON_MISSING_FIELD, f"no {shown(self._ts_field)} field")
        return parse_event_time(obj[self._ts_field])

    def _value(self, obj: dict[str, Any]) -> Any:
        if self._value_field not in obj:
            raise BadEvent(REASON_MISSING_FIELD, f"no {shown(self._value_field)} field")
        return check_value(obj[self._value_field])
