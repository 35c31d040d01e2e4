"""The published JSON Schemas of the output records (``schemas/``, issue 17.7) against records
the worker's own code writes, for every registered aggregation; the worker end-to-end test of
every aggregation (``tests/test_all_aggregations_e2e.py``) validates the records of a real
worker with ``validate``."""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from referencing import Registry, Resource

from agents.queries.service import answer
from agents.records import RangeQuery, encode_json
from stores.key_windows import KeyWindows, WindowConfig
from stores.monoids import monoid_names
from tests.aggregation_samples import GROUPS, aggregate_samples, group_settings, group_values

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas"
KINDS = ("aggregate", "answer")


@cache
def schema(kind: str) -> dict[str, Any]:
    return json.loads((SCHEMA_DIR / f"{kind}.schema.json").read_text())


@cache
def _validator(kind: str) -> jsonschema.Draft202012Validator:
    registry = Registry().with_resources(
        (schema(k)["$id"], Resource.from_contents(schema(k))) for k in KINDS
    )
    return jsonschema.Draft202012Validator(schema(kind), registry=registry)


def validate(kind: str, obj: Any) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``obj`` is a valid ``kind`` record."""
    _validator(kind).validate(obj)


@pytest.mark.parametrize("kind", KINDS)
def test_schemas_are_valid_json_schemas(kind: str) -> None:
    jsonschema.Draft202012Validator.check_schema(schema(kind))


def test_the_schema_names_every_registered_aggregation() -> None:
    aggregates = schema("aggregate")["$defs"]["aggregates"]["properties"]
    assert set(aggregates) == set(monoid_names())


@pytest.mark.parametrize("name", monoid_names())
def test_aggregate_records_of_every_aggregation_are_valid(name: str) -> None:
    for raw in aggregate_samples()[name]:
        validate("aggregate", json.loads(raw))


@pytest.mark.parametrize("group", GROUPS)
def test_answers_of_every_aggregation_are_valid(group: str) -> None:
    windows = KeyWindows(WindowConfig.from_settings(group_settings(group)))
    for i, value in enumerate(group_values(group, 20, 3)):
        windows.accept("k", 1_000 + 300 * i, value)
    queries = [
        RangeQuery("q1", "k", 2_000, 4_000),
        RangeQuery("q2", "k", window="3s"),
        RangeQuery("q3", "nobody", 0, 10),
        RangeQuery("q4", "k", 10, 5),
        RangeQuery("q5", "k", window="nope"),
    ]
    for query in queries:
        obj = json.loads(encode_json(answer(windows, query).to_json()))
        validate("answer", obj)
    assert obj["error"]


def test_records_that_break_the_contract_are_invalid() -> None:
    record = json.loads(aggregate_samples()["bloom"][0])
    broken = []
    for path, value in [
        (("input_offset",), None),
        (("windows", "1s", "aggregates", "bloom", "bits"), "not base64!"),
        (("windows", "1s", "count"), -1),
        (("windows", "1s", "aggregates", "count"), -1),  # any other name may be a custom one
    ]:
        obj = copy.deepcopy(record)
        target = obj
        for step in path[:-1]:
            target = target[step]
        if value is None:
            del target[path[-1]]
        else:
            target[path[-1]] = value
        broken.append(obj)
    for obj in broken:
        with pytest.raises(jsonschema.ValidationError):
            validate("aggregate", obj)
    with pytest.raises(jsonschema.ValidationError):
        validate("answer", {"key": "k", "result": {}, "count": 0})
