"""The shared schema logic: the Python data source's rows and the JVM path's agree.

The JVM engine cannot run end to end here (no Kafka connector jar), so its decoding of a
``value`` binary column (``parse_values``) is checked on a local DataFrame against the Python
data source's decoder on the same values: same rows, columns and types, corrupt records
included. Also covered: connector detection, engine choice and ``flatten_window``.
"""

from __future__ import annotations

import pytest

from agents.records import AggregateRecord, Answer, WindowResult, dumps
from spark_bridge.jvm import jvm_kafka_available
from spark_bridge.read import choose_engine, engine_for, flatten_window
from spark_bridge.schema import AGGREGATES, ANSWERS, SCHEMAS
from tests.spark_fixtures import jvm_engine_df, kafka_records, python_engine_rows

pytestmark = pytest.mark.spark


def aggregate_values() -> list[bytes | None]:
    good = [
        AggregateRecord(
            f"k{i}",
            1000 * i,
            1000 * i + 7,
            {
                "1m": WindowResult(i, i + 60_000, i + 1, {"sum": i * 0.1, "max": 2**70 + i}),
                "5m": WindowResult(
                    i,
                    i + 300_000,
                    3,
                    {
                        "mean": None,
                        "argmax": {"ts": i, "value": 2.5, "tag": "é"},
                        "collect": [1, 2.0, "x"],
                        "label": "abc",
                        "spelled": "12.5",
                        "flag": True,
                    },
                ),
            },
        )
        for i in range(5)
    ]
    return [dumps(r.to_json()) for r in good] + [
        b"{not json",
        b"",
        None,
        b"[]",
        b'"a string"',
        dumps({"key": "k", "event_ts": 1, "stream_time": 2, "windows": {"5m": {"start": 1}}}),
        dumps({"key": "k", "event_ts": "x", "stream_time": 2, "windows": {}}),
        dumps({"key": "k", "event_ts": 1, "stream_time": 2, "windows": {"5m": None}}),
        dumps({"key": "k", "event_ts": 1, "stream_time": 2, "windows": {}}),
    ]


def answer_values() -> list[bytes | None]:
    return [
        dumps(Answer("q1", "k", 1, 2, {"sum": 3, "argmax": {"ts": 1}}, 4, 5).to_json()),
        dumps(Answer("q2", "k", None, None, {}, 0, None, error="unknown window").to_json()),
        dumps({"query_id": "q3", "key": "k"}),
        dumps({"key": "k"}),
        b"nope",
    ]


@pytest.mark.parametrize(
    ("kind", "values"), [(AGGREGATES, aggregate_values()), (ANSWERS, answer_values())]
)
def test_jvm_path_equals_python_decoder(spark, kind, values):
    records = kafka_records(values)
    jvm = jvm_engine_df(spark, kind, records)
    assert jvm.schema == SCHEMAS[kind]
    expected = python_engine_rows(spark, kind, records)
    assert jvm.orderBy("offset").collect() == expected
    corrupt = [r.offset for r in expected if r._corrupt_record is not None]
    assert len(corrupt) == (8 if kind == AGGREGATES else 2)


def test_numeric_and_json_aggregates_are_split(spark):
    rows = python_engine_rows(spark, AGGREGATES, kafka_records(aggregate_values()[:1]))
    window = rows[0].windows["5m"]
    assert window.aggregates == {"mean": None, "spelled": 12.5}
    assert window.aggregates_json == {
        "argmax": '{"ts":0,"value":2.5,"tag":"é"}',
        "collect": '[1,2.0,"x"]',
        "label": "abc",
        "flag": "true",
    }
    assert rows[0].windows["1m"].aggregates == {"sum": 0.0, "max": float(2**70)}


def test_flatten_window(spark):
    df = jvm_engine_df(spark, AGGREGATES, kafka_records(aggregate_values()))
    flat = flatten_window(df.where("_corrupt_record IS NULL"), "5m").orderBy("offset")
    assert flat.columns == [
        "key",
        "event_ts",
        "stream_time",
        "input_partition",
        "input_offset",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "_corrupt_record",
        "window_start",
        "window_end",
        "window_count",
        "mean",
        "spelled",
        "argmax_json",
        "collect_json",
        "flag_json",
        "label_json",
    ]
    first = flat.first()
    assert (first.window_count, first.spelled, first.label_json) == (3, 12.5, "abc")
    one_minute = flatten_window(df, "1m", numeric=["sum"], prefix="w_").orderBy("offset")
    assert [r.w_window_count for r in one_minute.collect()] == [1, 2, 3, 4, 5] + [None] * 9


def test_engine_detection_with_the_connector_the_session_resolved(spark):
    assert jvm_kafka_available(spark) is True
    assert choose_engine(spark, "auto") == "jvm"
    assert choose_engine(spark, "auto", broker_profile="embedded") == "python"
    assert choose_engine(spark, "auto", streaming=True) == "python"
    assert choose_engine(spark, "jvm", streaming=True) == "jvm"
    assert choose_engine(spark, "jvm") == "jvm"
    assert choose_engine(spark, "python") == "python"
    with pytest.raises(ValueError, match="engine"):
        choose_engine(spark, "scala")


def test_auto_engine_never_takes_the_connector_on_the_embedded_broker():
    assert engine_for("auto", "kafka", connector_available=True) == "jvm"
    assert engine_for("auto", "embedded", connector_available=True) == "python"
    assert engine_for("auto", "kafka", connector_available=False) == "python"
    assert engine_for("auto", "kafka", connector_available=True, streaming=True) == "python"
    assert engine_for("jvm", "embedded", connector_available=False) == "jvm"
