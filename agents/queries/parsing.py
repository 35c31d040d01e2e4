"""Query records and HTTP query parameters -> ``RangeQuery``, or ``BadQuery``.

A record that is no JSON object with a usable ``query_id`` and ``key`` is refused with
``BadQuery``, which carries the id (and key) whenever they could be read, also from a record
JSON cannot hold (NaN, a 101-digit integer), so that every id gets an answer. The semantic
checks (known windows and aggregations, ``from <= to``) are ``service.answer``'s. Costs:
O(len(value)). Reference: docs/reference/http.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agents.events import BadEvent, decode_json_object, parse_event_time
from agents.records import AGGREGATIONS, FROM, KEY, QUERY_ID, TO, WINDOW, Answer, RangeQuery


class BadQuery(Exception):
    """A query that cannot be asked; ``str(exc)`` is the error text of the answer.

    ``query_id``: the query's id when it has a usable one (a string or an integer), so that it
    gets an error answer as well as its dead letter; ``key``: its ``key`` when that was valid.
    """

    def __init__(self, text: str, query_id: str | None = None, key: str | None = None) -> None:
        super().__init__(text)
        self.query_id = query_id
        self.key = key


def _time_bound(raw: Any, name: str) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, _NoJson):
        raise BadQuery(f"{name}: not a time: {raw!r}")
    try:
        return parse_event_time(raw)
    except BadEvent as exc:
        raise BadQuery(f"{name}: {exc.detail}") from None


def query_from_json(obj: Mapping[str, Any]) -> RangeQuery:
    """The ``RangeQuery`` of a decoded query object; ``BadQuery`` if it has no id or key or
    its fields have the wrong types (the semantic checks are ``answer``'s), carrying the id
    (and the key) when they were usable."""
    query_id, key = obj.get(QUERY_ID), obj.get(KEY)
    if not isinstance(query_id, str | int) or isinstance(query_id, bool):
        raise BadQuery("query_id missing or not a string")
    query_id = str(query_id)
    if not isinstance(key, str):
        raise BadQuery("key missing or not a string", query_id)
    try:
        key.encode()
    except UnicodeEncodeError:  # a lone surrogate (JSON "\ud800") is no UTF-8
        raise BadQuery("key is not valid Unicode", query_id) from None
    try:
        return _query_fields(obj, query_id, key)
    except BadQuery as bad:
        raise BadQuery(str(bad), query_id, key) from None


def _query_fields(obj: Mapping[str, Any], query_id: str, key: str) -> RangeQuery:
    """``query_from_json`` past the id and key: the bounds, window and aggregations."""
    window = obj.get(WINDOW)
    if window is not None and not isinstance(window, str):
        raise BadQuery("window must be a window name")
    aggregations = obj.get(AGGREGATIONS)
    if aggregations is not None:
        if isinstance(aggregations, str):
            aggregations = [a.strip() for a in aggregations.split(",") if a.strip()]
        if not isinstance(aggregations, list) or not all(isinstance(a, str) for a in aggregations):
            raise BadQuery("aggregations must be a list of names")
        aggregations = tuple(aggregations)
    return RangeQuery(
        query_id=query_id,
        key=key,
        from_ts=_time_bound(obj.get(FROM), "from"),
        to_ts=_time_bound(obj.get(TO), "to"),
        window=window,
        aggregations=aggregations,
    )


def query_id_param(params: Mapping[str, str]) -> str:
    """The ``query_id`` of an HTTP query (``"http"`` unless given)."""
    return params.get("query_id", "http")


def failed(query_id: str, key: str, error: str) -> dict[str, Any]:
    """The JSON of the answer to a query that could not be asked: ``error`` set, nothing else
    known (the same fields as every answer, ``query_id`` first)."""
    return Answer(query_id, key, None, None, {}, 0, None, error).to_json()


def query_from_params(key: str, params: Mapping[str, str]) -> RangeQuery:
    """The ``RangeQuery`` of ``GET /windows/{key}``'s query parameters ``from``, ``to``,
    ``window``, ``aggregations`` (comma-separated) and ``query_id`` (default ``"http"``);
    ``BadQuery`` as ``query_from_json``."""
    return query_from_json(
        {
            QUERY_ID: query_id_param(params),
            KEY: key,
            FROM: params.get("from"),
            TO: params.get("to"),
            WINDOW: params.get("window"),
            AGGREGATIONS: params.get("aggregations"),
        }
    )


def parse_query(value: bytes | None) -> RangeQuery:
    """The ``RangeQuery`` of a query record's value; ``BadQuery`` if it is no JSON object with
    a ``query_id`` and a ``key`` of the right types (``query_from_json``). O(len(value))."""
    try:
        obj = decode_json_object(value or b"")
    except BadEvent as exc:
        raise _refused(exc.detail, value or b"") from None
    return query_from_json(obj)


class _NoJson:
    """A value JSON cannot hold that a query record may still carry: NaN, an infinity, or an
    integer of more than 100 digits (``decode_json_object`` refuses the whole record)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text if len(self.text) <= 100 else f"a number of {len(self.text)} digits"


_LENIENT = json.JSONDecoder(
    parse_constant=_NoJson, parse_int=lambda text: int(text) if len(text) <= 100 else _NoJson(text)
)
"""Reads a record that would be a JSON object but for ``_NoJson`` values."""


def _refused(detail: str, value: bytes) -> BadQuery:
    """``BadQuery(detail)`` for a record that is no JSON object, carrying its id (and key) if
    it would be one with usable ones but for values JSON cannot hold, so that it is answered.
    O(len(value))."""
    try:
        obj = _LENIENT.decode(value.decode(json.detect_encoding(value), "surrogatepass"))
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError included
        return BadQuery(detail)
    if not isinstance(obj, dict):
        return BadQuery(detail)
    try:
        query = query_from_json(obj)
    except BadQuery as bad:
        return BadQuery(detail, bad.query_id, bad.key)
    return BadQuery(detail, query.query_id, query.key)
