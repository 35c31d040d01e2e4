"""``agents.records.encode_json``: output records as compact JSON, equal to the standard
library's for ordinary records; non-finite floats become null; huge integers stay exact."""

import json
import math

from hypothesis import given
from hypothesis import strategies as st

from agents.records import encode_json

finite = st.floats(allow_nan=False, allow_infinity=False)
scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | finite | st.text()
records = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(st.dictionaries(st.text(), records, max_size=6))
def test_ordinary_records_decode_to_what_the_standard_library_writes(record) -> None:
    assert json.loads(encode_json(record)) == json.loads(json.dumps(record))


def test_non_finite_floats_are_null_and_huge_integers_exact() -> None:
    record = {"sum": math.inf, "mean": -math.inf, "x": [math.nan, 1.5], "big": 2**70}
    assert json.loads(encode_json(record)) == {
        "sum": None,
        "mean": None,
        "x": [None, 1.5],
        "big": 2**70,
    }
    assert encode_json({"w": {"count": 3, "max": 2.5}}) == b'{"w":{"count":3,"max":2.5}}'
