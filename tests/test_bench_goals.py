"""``bench.goals``: its quick run on the session broker records every part, and its goal table
judges each of issue 29's goals or says why not.

The test's run is the quick plan made smaller (``SMOKE``): no JVM peers (as in
``tests/test_peers.py``: their Maven build, two JVMs and Kafka Streams' idle minute per job;
their checks are tested in ``tests/test_jvm_semantics.py``), one k, fewer events for the floor,
scale-out and memory; every part still runs its real code on a real broker once. Nothing about
speed: the verdicts on made-up parts check the judging, the run the wiring."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import stores
from bench import goals, worker_harness
from bench.bench_broker import BenchBroker
from bench.goal_table import goal_rows
from bench.goals_plan import FULL, QUICK, describe, estimate_s


def test_the_plans_are_estimated_and_the_full_one_covers_the_issue() -> None:
    assert (FULL.occupancies[0], FULL.occupancies[-1]) == (100, 100_000)
    assert FULL.warmup >= 1_000_000 and FULL.floors[0] == "floor"
    assert FULL.latency_occupancy in FULL.occupancies and 0.5 in FULL.latency_loads
    assert 100 in FULL.peer_occupancies
    assert sum(estimate_s(QUICK).values()) < sum(estimate_s(FULL).values())
    assert describe(FULL)[-1].startswith("estimated duration on an idle machine:")


def pipeline_part(batch: list[float], event: list[float]) -> dict:
    ks = [100, 1_000, 10_000, 100_000]

    def row(scenario: str, k: int, rate: float) -> dict:
        return {
            "scenario": scenario,
            "occupancy": k,
            "events_per_s": rate,
            "cpu_us_per_event": 1e6 / rate,
        }

    rows = [row("floor", 100, 1000.0)]
    rows += [row("batch", k, r) for k, r in zip(ks, batch, strict=True)]
    rows += [row("event", k, r) for k, r in zip(ks, event, strict=True)]
    return {"part": "pipeline", "rows": rows}


def peers_part(warmup: int, flink: float, streams: float) -> dict:
    def row(scenario: str, rate: float, **more: object) -> dict:
        return {
            "scenario": scenario,
            "occupancy": 100,
            "events_per_s": rate,
            "cpu_us_per_event": 10.0,
            **more,
        }

    jvm = {"warmup": {"events": warmup}, "check": {"checked": True, "mismatches": 0}}
    return {
        "part": "peers",
        "rows": [
            row("event", 1000.0),
            row("flink", flink, **jvm),
            row("kafka-streams-cache", streams, **jvm),
        ],
    }


def verdicts(parts: list[dict]) -> list[str]:
    return [row[-1] for row in goal_rows(parts)]


def test_each_goal_is_judged_on_its_own_figures() -> None:
    # against a floor of 1,000 events/s; emit=event 1,000 events/s at k = 100 in the peers part
    met = verdicts(
        [pipeline_part([600, 560, 520, 500], [300, 280, 260, 250]), peers_part(10**6, 200, 10)]
    )
    assert met[:5] == ["met"] * 5  # 0.5x, 0.25x, flat at 83 %, 5x, 100x
    missed = verdicts(
        [pipeline_part([600, 560, 520, 470], [300, 280, 260, 240]), peers_part(10**6, 201, 11)]
    )
    assert missed[:5] == ["not met"] * 5  # 0.47x, 0.24x, flat at 78 %, 4.98x, 90.9x
    cold = verdicts([peers_part(50_000, 100.0, 5.0)])
    assert cold[3].startswith("not judged: warmed on 50,000 < 10^6 events (met")
    assert verdicts([])[0] == "not judged: no pipeline part"
    elsewhere = peers_part(10**6, 100.0, 5.0)
    for row in elsewhere["rows"]:
        row["occupancy"] = 10
    shown = goal_rows([elsewhere])[4]
    assert shown[1:] == [
        "k = 10: 1,000 against 5 events/s",
        "200.0x (per CPU s 1.0x)",
        "not judged: k = 10 only",
    ]


SMOKE = replace(
    QUICK,
    jvm_peers=(),
    occupancies=(100,),
    latency_occupancy=100,
    pipeline_events=100_000,
    floor_events=300_000,
    peer_events=48_000,
    latency_seconds=(0.5, 1.0),
    scale_events=10_000,
    memory_entries=20_000,
)
"""The quick plan made smaller: k = 100 (windows pre-filled with 10^4 events, not 10^5), and
worker cells long enough to be measured at once (with ``MEASURED_S`` below, no cell is run
again on a longer stream)."""
MEASURED_S = 0.05
"""The smoke's ``worker_harness.MIN_MEASURED_S``: its figures are not used."""


@pytest.mark.kafka
@pytest.mark.timeout(600)
def test_a_quick_run_records_every_part_and_the_table_judges_it(
    kafka_bootstrap: str,
    broker_kind: str,
    broker_profile: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if broker_profile == "embedded":
        pytest.skip("the embedded broker (Tansu) stamps no append time: the latency part needs it")
    monkeypatch.setattr(worker_harness, "MIN_MEASURED_S", MEASURED_S)
    broker = BenchBroker(kafka_bootstrap, broker_profile, broker_kind)
    parts = goals.run(broker, SMOKE, tmp_path)
    assert [p["part"] for p in parts] == [
        "plan",
        "pipeline",
        "peers",
        "latency",
        "scale_out",
        "memory",
    ]
    for part in parts[1:]:
        assert part["seconds"] > 0 and part["load_before"] >= 0 and part["load_after"] >= 0
    pipeline = parts[1]["rows"]
    assert [(r["scenario"], r["occupancy"]) for r in pipeline] == [
        ("floor", 100),
        ("batch", 100),
        ("event", 100),
    ]
    assert all(r["events"] >= QUICK.pipeline_events for r in pipeline)
    latency = parts[3]["rows"]
    given = {r["emit"]: r["events_per_s"] for r in latency if r["kind"] == "max_rate"}
    assert given == {
        r["scenario"]: r["events_per_s"]
        for r in pipeline
        if r["occupancy"] == 100 and r["scenario"] != "floor"
    }
    assert parts[5]["rows"][0]["build"] == stores.build()
    rows = goal_rows(parts)
    judged = [row[-1] for row in rows]
    assert judged[0] in ("met", "not met") and judged[1] in ("met", "not met")
    assert judged[2] == "not judged: k = 100 only"
    assert (
        judged[3] == "not judged: no flink run"
        and judged[4] == "not judged: no kafka-streams-cache run"
    )
    assert judged[5] in ("met", "not met") and judged[6] in ("met", "not met")
