"""Fuzzing range queries (issue 16, "Also build"): any HTTP query parameters of
``GET /windows/{key}`` (``query_from_params``) and any query record (``parse_query``) give a
``BadQuery`` (HTTP 400 / a dead letter) or a query whose answer is a valid answer record
(``schemas/answer.schema.json``), never another exception. A bad query record that carries a
usable ``query_id`` (a string or an integer) keeps it, so the worker answers it too, with an
error answer that is also a valid answer record (issue 28)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.queries.parsing import BadQuery, failed, parse_query, query_from_params
from agents.queries.service import answer
from agents.records import encode_json
from stores.key_windows import KeyWindows, WindowConfig
from tests.aggregation_samples import group_settings, group_values
from tests.test_fuzz_events import json_values, times, tricky_text
from tests.test_output_schemas import validate

pytestmark = pytest.mark.timeout(300)

GROUP = "numbers"


def windows() -> KeyWindows:
    """Windows of every number aggregation, keys ``k0``..``k2`` over a few seconds."""
    state = KeyWindows(WindowConfig.from_settings(group_settings(GROUP)))
    for i, value in enumerate(group_values(GROUP, 30, 1)):
        state.accept(f"k{i % 3}", 1_000 + 250 * i, value)
    return state


WINDOWS = windows()
names = group_settings(GROUP).aggregations
texts = st.one_of(
    st.text(max_size=30),
    tricky_text,
    times.map(str),
    st.sampled_from(["1s", "3s", "10s", "5m", ",".join(names), "sum,,max", " sum , nope "]),
)
keys = st.one_of(st.sampled_from(["k0", "k1", "k2", "nobody", ""]), st.text(max_size=10))


def check_answers(query) -> None:
    result = answer(WINDOWS, query)
    validate("answer", json.loads(encode_json(result.to_json())))


def usable_id(value: bytes | None) -> str | None:
    """The ``query_id`` a query record carries, as its answer writes it, if usable: a string or
    an integer of at most 100 digits, in an object that is JSON but perhaps for values JSON
    cannot hold (NaN, infinities, longer integers)."""
    try:
        obj = json.loads(
            value or b"",
            parse_constant=lambda name: None,
            parse_int=lambda text: int(text) if len(text) <= 100 else None,
        )
    except (ValueError, RecursionError):
        return None
    query_id = obj.get("query_id") if isinstance(obj, dict) else None
    if isinstance(query_id, bool) or not isinstance(query_id, str | int):
        return None
    return str(query_id)


def check_bad_query(bad: BadQuery, value: bytes | None) -> None:
    """``bad`` keeps the record's usable id, and its error answer is a valid answer record."""
    assert str(bad)
    assert bad.query_id == usable_id(value)
    if bad.query_id is not None:
        validate("answer", json.loads(encode_json(failed(bad.query_id, bad.key or "", str(bad)))))


@settings(max_examples=300)
@given(
    keys,
    st.dictionaries(
        st.sampled_from(["from", "to", "window", "aggregations", "query_id", "other"]), texts
    ),
)
def test_any_http_query_parameters_answer_or_are_bad_queries(key, params) -> None:
    try:
        query = query_from_params(key, params)
    except BadQuery as bad:
        assert str(bad)
        return
    check_answers(query)


fields = st.sampled_from(["query_id", "key", "from", "to", "window", "aggregations"])


@st.composite
def query_records(draw: st.DrawFn) -> bytes | None:
    no_json = st.sampled_from([float("nan"), float("-inf"), 10**150])  # written, not JSON
    obj = draw(st.dictionaries(fields, st.one_of(json_values, texts, keys, times, no_json)))
    if draw(st.booleans()):
        obj.setdefault("query_id", draw(st.one_of(st.text(max_size=8), st.integers())))
        obj.setdefault("key", draw(keys))
    text = json.dumps(obj, ensure_ascii=draw(st.booleans()))
    return draw(
        st.one_of(
            st.just(text.encode("utf-8", "surrogatepass")),
            st.none(),
            st.binary(max_size=40),
            st.just(b'{"query_id": ' + b"9" * 5000 + b', "key": "k0", "window": "1s"}'),
        )
    )


@settings(max_examples=300)
@given(query_records())
def test_any_query_record_answers_or_is_a_bad_query(value) -> None:
    try:
        query = parse_query(value)
    except BadQuery as bad:
        check_bad_query(bad, value)
        return
    assert query.query_id == usable_id(value)
    query.key.encode()  # the worker compares it with the record's Kafka key
    check_answers(query)


@pytest.mark.parametrize(
    "value",
    [
        b'{"query_id": ' + b"9" * 5000 + b', "key": "k0", "window": "1s"}',  # int() limit
        b'{"query_id": "q", "key": "\\ud800", "window": "1s"}',  # no UTF-8 key
        b'{"query_id": "q", "key": "k0", "from": NaN, "to": 5}',
        b"[1, 2]",
        b"\xff\xfe\x00",
        None,
    ],
)
def test_query_records_that_escaped_are_bad_queries(value) -> None:
    with pytest.raises(BadQuery) as bad:
        parse_query(value)
    check_bad_query(bad.value, value)


@pytest.mark.parametrize(
    "value, key",
    [
        (b'{"query_id": "q2", "key": "k", "from": "x", "to": 5}', "k"),  # issue 28
        (b'{"query_id": "q3", "key": "k", "window": 5}', "k"),
        (b'{"query_id": "q4", "key": "k", "window": "1s", "aggregations": [1]}', "k"),
        (b'{"query_id": 5, "key": 7, "window": "1s"}', None),
        (b'{"query_id": "q6", "key": "\\ud800", "window": "1s"}', None),
        (b'{"query_id": "q7"}', None),
        (b'{"query_id": "q8", "key": "k", "from": NaN, "to": 5}', "k"),  # no JSON, but an id
        (b'{"query_id": "q9", "key": "k", "from": ' + b"9" * 200 + b', "to": 5}', "k"),
        (b'{"query_id": ' + b"9" * 200 + b', "key": "k", "window": "1s"}', None),
    ],
)
def test_a_bad_query_record_with_an_id_keeps_it_for_its_error_answer(value, key) -> None:
    with pytest.raises(BadQuery) as bad:
        parse_query(value)
    assert (bad.value.query_id, bad.value.key) == (usable_id(value), key)
    check_bad_query(bad.value, value)


@pytest.mark.parametrize(
    "params",
    [
        {"window": "1s", "from": "1"},
        {"window": "1s", "to": "5"},
        {"window": "1s", "from": "1", "to": "5"},
    ],
)
def test_a_window_with_bounds_is_an_error_answer_not_a_silent_choice(params) -> None:
    """The CLI refuses ``--window`` with ``--from``/``--to``; HTTP and query records answer
    an error (HTTP 400) instead of dropping the bounds."""
    result = answer(WINDOWS, query_from_params("k0", params))
    assert result.error == "give from and to, or a window, not both"
    assert result.count == 0 and result.result == {}


@pytest.mark.parametrize(
    "params", [{"from": "²", "to": "5"}, {"from": "0", "to": "--5"}, {"window": "1s", "to": "x"}]
)
def test_http_parameters_that_escaped_are_bad_queries(params) -> None:
    with pytest.raises(BadQuery):
        query_from_params("k0", params)
