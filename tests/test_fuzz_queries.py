"""Fuzzing range queries (issue 16, "Also build"): any HTTP query parameters of
``GET /windows/{key}`` (``query_from_params``) and any query record (``parse_query``) give a
``BadQuery`` (HTTP 400 / a dead letter) or a query whose answer is a valid answer record
(``schemas/answer.schema.json``), never another exception."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.queries import BadQuery, answer, parse_query, query_from_params
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
    obj = draw(st.dictionaries(fields, st.one_of(json_values, texts, keys, times)))
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
        assert str(bad)
        return
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
    with pytest.raises(BadQuery):
        parse_query(value)


@pytest.mark.parametrize(
    "params", [{"from": "²", "to": "5"}, {"from": "0", "to": "--5"}, {"window": "1s", "to": "x"}]
)
def test_http_parameters_that_escaped_are_bad_queries(params) -> None:
    with pytest.raises(BadQuery):
        query_from_params("k0", params)
