"""What ``bench.goals`` runs (``FULL``, ``QUICK``) and how long that takes, estimated.

A ``Plan`` names each part's sizes; ``estimate_s`` turns one into seconds per part from the
rates these benchmarks measured on the project's 2-core machine, idle, native build, Apache
Kafka (bench/RESULTS.md, 2026-12-07): a rough figure, printed before a run so that nobody
starts an hour-long one by mistake. A shared machine takes longer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bench.jvm_peers import MAINS, SCENARIOS, VARIANTS, WARMUP_OCCUPANCY
from bench.worker_harness import MEASURED, MIN_MEASURED_S


@dataclass(frozen=True, slots=True)
class Plan:
    """The sizes of one ``bench.goals`` run."""

    floors: tuple[str, ...]
    """The pipeline's bound scenarios (``floor`` first: every ratio is against it)."""
    occupancies: tuple[int, ...]
    """k, events per key in the largest window, of the pipeline's ``batch`` and ``event``."""
    pipeline_events: int
    """Input events of a worker cell of the pipeline (more where too short to measure)."""
    floor_events: int
    """Input events of a floor cell: enough for 1 s measured at 850k events/s, so that the
    floor is not measured twice (``long_enough``) on an idle machine."""
    peer_occupancies: tuple[int, ...]
    peer_events: int
    warmup: int
    """Events each JVM peer warms up on (issue 29: at least 10^6)."""
    latency_loads: tuple[float, ...]
    latency_seconds: tuple[float, float]
    """Warm-up and measured seconds of a paced latency run."""
    latency_occupancy: int
    """k of the latency runs: one of ``occupancies`` (its cells give the maximum rates)."""
    scale_events: int
    scale_keys: int
    memory_entries: int
    memory_per_key: tuple[int, ...]
    jvm_peers: tuple[str, ...] = tuple(MAINS)
    """The JVM peers run (``bench.jvm_peers.MAINS``; none: only Quix beside the worker)."""
    quick: bool = False
    """A smoke of the wiring (``bench.peers``' quick Quix cells)."""


FULL = Plan(
    floors=("floor", "batch-floor", "emit-floor"),
    occupancies=(100, 1_000, 10_000, 100_000),
    pipeline_events=90_000,
    floor_events=2_000_000,
    peer_occupancies=(10, 100),
    peer_events=100_000,
    warmup=1_000_000,
    latency_loads=(0.25, 0.5, 0.9),
    latency_seconds=(5.0, 20.0),
    latency_occupancy=1_000,
    scale_events=400_000,
    scale_keys=1_000,
    memory_entries=1_000_000,
    memory_per_key=(100, 1_000),
)
QUICK = Plan(
    floors=("floor",),
    occupancies=(100, 1_000),
    pipeline_events=24_000,
    floor_events=2_000_000,
    peer_occupancies=(10,),
    peer_events=24_000,
    warmup=50_000,
    latency_loads=(0.5,),
    latency_seconds=(1.0, 3.0),
    latency_occupancy=1_000,
    scale_events=100_000,
    scale_keys=100,
    memory_entries=100_000,
    memory_per_key=(100,),
    quick=True,
)
MODES = ("batch", "event")

RATES = {
    "floor": 850_000,
    "batch-floor": 180_000,
    "emit-floor": 110_000,
    "batch": 150_000,
    "event": 55_000,
}
"""Events per second of the pipeline's scenarios (k = 10^3)."""
CELL_S = 12.0
"""A worker cell's fixed cost: topics, producing a small input, the child's start and join."""
PREFILL_PER_S = 2_000_000
"""Window entries a worker cell pre-fills per second (100 keys, k each)."""
PRODUCE_PER_S = 120_000
"""Input records pre-produced per second (``bench.worker_harness.produce``)."""
JVM_RATES = {"kafka-streams-cache": (8_850, 0.58), "kafka-streams-nocache": (4_000, 0.83)}
JVM_RATES["flink"] = (14_000, 0.12)
"""A JVM peer's events/s at k = 10 and the exponent of its fall with k: ``r * (k/10)^-e``."""
KAFKA_STREAMS_IDLE_S = 60.0
"""Kafka Streams' idle wait after each measured job's prefill (``max.task.idle.ms``)."""
QUIX_WORK_PER_S = 250_000
"""Quix's events/s times k."""
JVM_START_S = 60.0
"""The JVM peers' Maven build (cached) and each JVM's start."""


def stream_s(events: int, rate: float) -> float:
    """Producing ``events`` and reading them at ``rate``, the stream lengthened as
    ``bench.worker_harness.long_enough`` lengthens a too short one."""
    share = MEASURED[1] - MEASURED[0]
    if events * share / rate < MIN_MEASURED_S:
        events = math.ceil(2 * MIN_MEASURED_S * rate / share)
    return events / PRODUCE_PER_S + events / rate


def jvm_rate(system: str, k: int) -> float:
    rate, fall = JVM_RATES[system]
    return rate * (k / 10) ** -fall


def estimate_s(plan: Plan) -> dict[str, float]:
    """Seconds per part of ``plan`` on an idle machine, roughly."""
    pipeline = sum(CELL_S + stream_s(plan.floor_events, RATES[f]) for f in plan.floors)
    pipeline += sum(
        CELL_S + 100 * k / PREFILL_PER_S + stream_s(plan.pipeline_events, RATES[m])
        for m in MODES
        for k in plan.occupancies
    )
    jobs = [job for (system, _), job in SCENARIOS.items() if system in plan.jvm_peers]
    peers = plan.peer_events / PRODUCE_PER_S + (JVM_START_S if jobs else 0.0)
    for k in plan.peer_occupancies:
        peers += sum(CELL_S + stream_s(plan.peer_events, RATES[m]) for m in MODES)
        peers += CELL_S + min(plan.peer_events, 2_000_000 // k) * k / QUIX_WORK_PER_S
        for job in jobs:
            peers += (plan.peer_events + 100 * k) / jvm_rate(job, k)  # the prefill, the input
            peers += KAFKA_STREAMS_IDLE_S if job.startswith("kafka") else 0.0
    warming = [SCENARIOS[(system, VARIANTS[system][0])] for system in plan.jvm_peers]
    peers += sum(plan.warmup / jvm_rate(job, WARMUP_OCCUPANCY) for job in warming)
    paced = CELL_S + sum(plan.latency_seconds) + 5.0
    latency = len(MODES) * len(plan.latency_loads) * paced
    scale = plan.scale_events / PRODUCE_PER_S + sum(
        2 * CELL_S + plan.scale_events / RATES[m] + plan.scale_events / (1.6 * RATES[m])
        for m in MODES
    )
    memory = sum(5.0 + plan.memory_entries / 300_000 for _ in plan.memory_per_key)
    return {
        "pipeline": pipeline,
        "peers": peers,
        "latency": latency,
        "scale_out": scale,
        "memory": memory,
    }


def describe(plan: Plan) -> list[str]:
    """The plan and its estimated duration, as printed before a run."""
    seconds = estimate_s(plan)
    total = sum(seconds.values())
    return [
        f"pipeline: {', '.join(plan.floors)}, then {' and '.join(MODES)} at k = "
        f"{', '.join(f'{k:,}' for k in plan.occupancies)} ({plan.floor_events:,} events a "
        f"floor cell, {plan.pipeline_events:,} a worker cell, more where too short)",
        f"peers: k = {', '.join(map(str, plan.peer_occupancies))}, {plan.peer_events:,} events"
        + (f", {' and '.join(plan.jvm_peers)} warmed on {plan.warmup:,}" if plan.jvm_peers else ""),
        f"latency: {' and '.join(MODES)} at k = {plan.latency_occupancy:,}, loads "
        f"{', '.join(f'{x:.0%}' for x in plan.latency_loads)} of the pipeline's rates, "
        f"{plan.latency_seconds[0]:g} s warm-up + {plan.latency_seconds[1]:g} s",
        f"scale-out: {plan.scale_events:,} events over {plan.scale_keys:,} keys, one worker "
        "against two, both modes",
        f"memory: {plan.memory_entries:,} entries at "
        f"{', '.join(map(str, plan.memory_per_key))} per key",
        "estimated duration on an idle machine: "
        + ", ".join(f"{part} {s / 60:.0f} min" for part, s in seconds.items())
        + f"; about {total / 60:.0f} min in all (longer on a shared machine)",
    ]
