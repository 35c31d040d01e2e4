"""Fuzzing ``GET /windows/{key}`` on a real worker (issue 16, "Also build"): any key in the
path (percent-encoded, invalid UTF-8 included) and any query parameters answer 200 or 400 with
an answer record (``schemas/answer.schema.json``), never a server error, within the timeout."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from app.demo import start_worker, stop_worker
from app.topics import create_topics
from tests.aggregation_samples import aggregation_groups, group_values
from tests.test_fuzz_queries import texts
from tests.test_output_schemas import validate
from tests.test_worker_e2e import BASE, http_get, make_settings, produce, wait_for_stats

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def worker_settings(kafka_bootstrap, embedded_profile, tmp_path_factory):
    """A worker of every number aggregation owning every partition, with a few events."""
    tmp: Path = tmp_path_factory.mktemp("fuzz-http")
    settings = replace(
        make_settings(kafka_bootstrap, embedded_profile, tmp / "state", "event"),
        aggregations=aggregation_groups()["numbers"],
    )
    asyncio.run(create_topics(settings))
    values = group_values("numbers", 30, 5)
    events = [
        (f"k{i % 3}".encode(), json.dumps({"ts": BASE + 100 * i, "value": v}).encode())
        for i, v in enumerate(values)
    ]
    events += [(key.encode(), json.dumps({"ts": BASE, "value": 1}).encode()) for key in ODD_KEYS]
    asyncio.run(produce(settings, settings.input_topic, events))
    worker = start_worker(settings, tmp / "worker.log")
    try:
        wait_for_stats(settings, worker, len(events))
        deadline = time.monotonic() + 60
        while len(http_get(settings, "/stats")[1]["assigned"]) < settings.partitions:
            assert time.monotonic() < deadline, "the worker does not own every partition"
            time.sleep(0.5)
        yield settings
    except BaseException:
        print((tmp / "worker.log").read_text(errors="replace")[-4000:])
        raise
    finally:
        stop_worker(worker)


ODD_KEYS = ("sensor/7", "{x}", "a b?c", "%41")
"""Keys that routing once refused (404): "/" and braces."""


@pytest.mark.parametrize("key", ODD_KEYS)
def test_keys_with_slashes_and_braces_are_answered(worker_settings, key: str) -> None:
    path = f"/windows/{urllib.parse.quote(key, safe='')}?from={BASE}&to={BASE}"
    status, answer = http_get(worker_settings, path)
    assert status == 200 and answer["key"] == key and answer["count"] == 1, answer


keys = st.one_of(
    st.sampled_from(["k0", "k1", "nobody", "%ED%A0%80", "%FF", "%00", "..", "a%2Fb"]),
    st.text(min_size=1, max_size=12).map(lambda k: urllib.parse.quote(k, safe="")),
)
param_names = st.sampled_from(["from", "to", "window", "aggregations", "query_id", "x"])


@settings(max_examples=80)
@given(keys, st.dictionaries(param_names, texts, max_size=4))
def test_any_http_query_answers_200_or_400_with_an_answer(worker_settings, key, params) -> None:
    query = urllib.parse.urlencode(
        {k: v.encode("utf-8", "surrogatepass") for k, v in params.items()}
    )
    url = f"http://127.0.0.1:{worker_settings.web_port}/windows/{key}?{query}"
    assume(len(url) < 8000)  # longer request lines are the HTTP server's 400, not the view's
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    assert status in (200, 400), (status, body[:300])
    answer = json.loads(body)
    validate("answer", answer)
    assert (status == 400) == (answer["error"] is not None), answer
