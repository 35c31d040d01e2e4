"""The JVM peers of ``bench.peers``: Kafka Streams' ``SlidingWindows`` and Flink SQL's ``OVER
... RANGE`` window (``bench/jvm``, built by its own pom with Maven), run on the benchmark's
input and checked.

Each system runs in one JVM (one stream thread / parallelism 1) that first warms up on a topic
of its own, then runs one measured job per occupancy (Kafka Streams: per occupancy and cache
mode) on the same records the worker and Quix read, after a prefill that fills every key's
windows. The JVM measures as ``bench.worker_harness.measure_rate`` does (records per wall
second between 30% and 90% of the input, CPU µs per record) and prints one JSON line per job.
Every output is read back and checked against its system's model (``bench.jvm_semantics``)
unless it holds more than ``check_limit`` records, then deleted. Details (the order of the
prefill, what each JVM counts, disk needs): docs/bench-methods.md.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from agents.clients import client_options, end_offsets
from app.settings import Settings
from app.topics import DATA_TOPIC_CONFIGS, TopicSpec, create_topics
from bench.bench_broker import BenchBroker
from bench.jvm_semantics import Check, check_over_range, check_sliding
from bench.quix_job import OUTPUT_TOPIC_CONFIGS, PARTITIONS, prefill_events
from bench.worker_harness import KEYS, MAX_LATENESS_MS, SPACING_MS, event_stream, produce

JVM_DIR = Path(__file__).parent / "jvm"
MAINS = {
    "kafka-streams": "fiba.peers.KafkaStreamsSliding",
    "flink": "fiba.peers.FlinkOverRange",
}
VARIANTS = {"kafka-streams": ("cache", "nocache"), "flink": ("",)}
"""The measured jobs per occupancy of each system (Kafka Streams: record cache on and off)."""
SCENARIOS = {
    ("kafka-streams", "cache"): "kafka-streams-cache",
    ("kafka-streams", "nocache"): "kafka-streams-nocache",
    ("flink", ""): "flink",
}
WARMUP_OCCUPANCY = 10
CHECK_LIMIT = 20_000_000
JVM_OPTIONS = ("-Xmx3g", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")


def build() -> str:
    """Build ``bench/jvm`` (``mvn package``; the first build downloads the dependencies) and
    return the class path of its jar and dependencies."""
    subprocess.run(
        ["mvn", "-q", "-B", "-f", str(JVM_DIR / "pom.xml"), "package", "-DskipTests"],
        check=True,
        timeout=1800,
    )
    deps = (JVM_DIR / "target" / "classpath.txt").read_text().strip()
    return f"{JVM_DIR / 'target' / 'fiba-peers.jar'}:{deps}"


def prefill_records(occupancy: int) -> list[tuple[bytes, bytes]]:
    """Every key's ``prefill_events(occupancy)`` as input records in time order (key by key
    within a time): the events that fill each key's windows before the input's first event
    (those the worker and Quix pre-fill). In time order because Kafka Streams' stream time is
    per task: a key's prefill written after another's whole prefill would find its early
    windows closed already (beyond the grace)."""
    return [
        (f"key-{k}".encode(), json.dumps({"ts": t, "value": v}).encode())
        for t, v in prefill_events(occupancy)
        for k in range(KEYS)
    ]


def _offline(broker: BenchBroker, topic: str = "") -> Settings:
    return replace(
        Settings(),
        broker=broker.bootstrap,
        broker_profile=broker.profile,
        input_topic=topic,
        partitions=PARTITIONS,
    )


def produce_topic(broker: BenchBroker, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    """Create ``topic`` (the input's partitions and configs) and produce ``records`` to it."""
    settings = _offline(broker, topic)
    asyncio.run(create_topics(settings, [TopicSpec(topic, PARTITIONS, 1, DATA_TOPIC_CONFIGS)]))
    asyncio.run(produce(settings, records))


def run_system(
    classpath: str,
    system: str,
    broker: BenchBroker,
    input_topic: str,
    events: int,
    occupancies: list[int],
    warmup_topic: str,
    warmup_events: int,
    workdir: Path,
    timeout: float,
) -> list[dict[str, Any]]:
    """One JVM of ``system``: its warm-up job, then a measured job per occupancy (and
    variant) on ``input_topic``; its output topics and each occupancy's prefill topic are
    created first. One result per job (the warm-up's with ``"phase": "warmup"``)."""
    runs, topics = [], []
    for occupancy in occupancies:
        prefill = f"{input_topic}-prefill-{occupancy}"
        for variant in VARIANTS[system]:
            output = f"{input_topic}-{SCENARIOS[(system, variant)]}-{occupancy}"
            topics.append(output)
            window = occupancy * SPACING_MS
            runs.append(f"{occupancy}:{window}:{prefill}:{occupancy * KEYS}:{output}:{variant}")
    topics.append(runs[0].split(":")[4] + "-warmup")
    specs = [TopicSpec(t, PARTITIONS, 1, OUTPUT_TOPIC_CONFIGS) for t in topics]
    asyncio.run(create_topics(_offline(broker), specs))
    command = [
        "java",
        *JVM_OPTIONS,
        "-cp",
        classpath,
        MAINS[system],
        broker.bootstrap,
        warmup_topic,
        str(warmup_events),
        str(WARMUP_OCCUPANCY * SPACING_MS),
        input_topic,
        str(events),
        str(MAX_LATENESS_MS),
        *runs,
    ]
    log_path = workdir / f"{system}-{uuid.uuid4().hex[:6]}.log"
    with open(log_path, "wb") as log:
        try:
            out = subprocess.run(command, stdout=subprocess.PIPE, stderr=log, timeout=timeout)
        except subprocess.TimeoutExpired:
            message = f"{system} did not finish in {timeout:.0f} s; see {log_path}"
            raise RuntimeError(message) from None
    lines = [json.loads(x) for x in out.stdout.decode().splitlines() if x.startswith("{")]
    if out.returncode != 0 or len(lines) != len(runs) + 1:
        tail = log_path.read_text()[-3000:]
        raise RuntimeError(f"{system} failed (exit {out.returncode}): {tail}")
    return [{"broker": broker.kind, "scenario": line.pop("system"), **line} for line in lines]


def output_records(
    broker: BenchBroker, topic: str, limit: int
) -> tuple[int, Iterator[tuple[bytes, bytes]] | None]:
    """The number of records in ``topic`` and, if at most ``limit``, all of them as ``(key,
    value)`` in order per partition (read whole, O(records) memory)."""

    async def read(only_count: bool) -> tuple[int, list[tuple[bytes, bytes]]]:
        settings = _offline(broker)
        consumer = AIOKafkaConsumer(**client_options(settings), enable_auto_commit=False)
        await consumer.start()
        try:
            tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            consumer.assign(tps)
            ends = await end_offsets(consumer, tps, settings)
            total = sum(ends.values())
            records: list[tuple[bytes, bytes]] = []
            if only_count or total > limit:
                return total, records
            for tp in tps:
                consumer.seek(tp, 0)
            while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
                batch = await consumer.getmany(timeout_ms=500, max_records=50_000)
                for tp, rs in batch.items():
                    records.extend((r.key, r.value) for r in rs if r.offset < ends[tp])
            return total, records
        finally:
            await consumer.stop()

    total, records = asyncio.run(read(False))
    return total, (iter(records) if total <= limit else None)


def delete_topics(broker: BenchBroker, topics: list[str]) -> None:
    """Delete ``topics`` (the JVM peers' outputs once checked: gigabytes at large windows)."""

    async def delete() -> None:
        admin = AIOKafkaAdminClient(**client_options(_offline(broker)))
        await admin.start()
        try:
            await admin.delete_topics(topics)
        finally:
            await admin.close()

    asyncio.run(delete())


def check_output(
    broker: BenchBroker, result: dict[str, Any], events: int, limit: int
) -> dict[str, Any]:
    """Check a measured job's output topic against its system's model (``bench.jvm_semantics``)
    on the prefill and the first ``events`` input records: the check's summary, or
    ``{"checked": False, "output_records": n}`` when the topic holds more than ``limit``."""
    occupancy = result["occupancy"]
    total, emitted = output_records(broker, result["output_topic"], limit)
    if emitted is None:
        return {"checked": False, "output_records": total}
    records = prefill_records(occupancy) + event_stream(events)
    check: Check
    if result["scenario"] == "flink":
        check = check_over_range(emitted, records, occupancy * SPACING_MS)
    else:
        check = check_sliding(emitted, records, occupancy * SPACING_MS)
    return {"checked": True, **check.summary()}


def run_peers(
    broker: BenchBroker,
    input_topic: str,
    events: int,
    occupancies: list[int],
    warmup_events: int,
    workdir: Path,
    check_limit: int = CHECK_LIMIT,
    systems: tuple[str, ...] = tuple(MAINS),
    timeout: float = 7200,
) -> list[dict[str, Any]]:
    """Build the JVM peers, produce the warm-up and prefill topics, run each of ``systems``
    (see the module doc) and check its measured outputs. One result per measured job, with
    its JVM's warm-up figures (``warmup``) and its output's ``check``."""
    classpath = build()
    warmup_topic = f"{input_topic}-warmup"
    produce_topic(broker, warmup_topic, event_stream(warmup_events, seed=2))
    for occupancy in occupancies:
        produce_topic(broker, f"{input_topic}-prefill-{occupancy}", prefill_records(occupancy))
    results = []
    for system in systems:
        lines = run_system(
            classpath,
            system,
            broker,
            input_topic,
            events,
            occupancies,
            warmup_topic,
            warmup_events,
            workdir,
            timeout,
        )
        warmup = {k: v for k, v in lines[0].items() if k in ("events", "events_per_s")}
        for result in lines[1:]:
            result.pop("phase")
            result["warmup"] = warmup
            result["check"] = check_output(broker, result, events, check_limit)
            print(json.dumps(result), flush=True)
            results.append(result)
        delete_topics(broker, [r["output_topic"] for r in lines])
    return results
