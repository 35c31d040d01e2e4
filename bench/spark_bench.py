"""Spark bridge benchmark: aggregates topic -> Spark through both engines, and the as-of join.

``python -m bench.spark_bench [--records N] [--quick] [--broker embedded|kafka]`` produces N
aggregate records to a 4-partition topic, reads them into the typed schema with each engine
(the Python data source and Spark's connector, alternating), and times the as-of join of N
batch rows with them, from Parquet and from the topic. Writes ``bench/results/spark_bench*.json``
(docs/benchmarks.md, "Spark"); the steps in detail: docs/bench-methods.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

from agents.records import (
    EVENT_TS,
    KEY,
    STREAM_TIME,
    WINDOW_AGGREGATES,
    WINDOW_COUNT,
    WINDOW_END,
    WINDOW_START,
    dumps,
)
from agents.records import WINDOWS as WINDOWS_FIELD
from app.brokers.kinds import BROKER_KINDS, make_broker
from bench.machine import describe_machine

RESULTS = Path(__file__).resolve().parent / "results"
PARTITIONS = 4
KEYS = 1000
WINDOWS = {"1m": 60_000, "5m": 300_000, "1h": 3_600_000}
START_MS = 1_700_000_000_000
SPACING_MS = 10
JOIN_TARGET_S = 60.0


def aggregate_value(i: int, rng: random.Random) -> tuple[int, bytes, bytes]:
    """(partition, key, value) of the i-th benchmark aggregate record.

    The JSON object is built directly with the field names of ``agents.records`` (what
    ``AggregateRecord.to_json`` yields, without its slow ``asdict`` deep copy).
    """
    key = f"sensor-{i % KEYS}"
    st = START_MS + i * SPACING_MS
    r = rng.random
    windows = {
        name: {
            WINDOW_START: st - size,
            WINDOW_END: st,
            WINDOW_COUNT: 1 + int(r() * 1000),
            WINDOW_AGGREGATES: {
                "count": 1 + int(r() * 1000),
                "sum": r() * 1e4,
                "max": r() * 100,
                "mean": r() * 100,
                "pop_stddev": r() * 10,
            },
        }
        for name, size in WINDOWS.items()
    }
    value = {KEY: key, EVENT_TS: st - int(r() * 5000), STREAM_TIME: st, WINDOWS_FIELD: windows}
    return zlib.crc32(key.encode()) % PARTITIONS, key.encode(), dumps(value)


async def produce(bootstrap: str, topic: str, n: int) -> float:
    """Create ``topic`` and produce ``n`` records in batches; returns the seconds taken."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        configs = {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete"}
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1, topic_configs=configs)])
    finally:
        await admin.close()
    rng = random.Random(7)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=1 << 20, acks=1
    )
    await producer.start()
    began = time.perf_counter()
    try:
        pending = []
        for i in range(n):
            partition, key, value = aggregate_value(i, rng)
            pending.append(await producer.send(topic, value, key=key, partition=partition))
            if len(pending) >= 20_000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return time.perf_counter() - began


def timed(label: str, run) -> float:
    print(f"[spark_bench] {label} ...", file=sys.stderr, flush=True)
    began = time.perf_counter()
    run()
    seconds = time.perf_counter() - began
    print(f"[spark_bench] {label}: {seconds:.1f}s", file=sys.stderr, flush=True)
    return seconds


ENGINES = ("python", "jvm")


def run(bootstrap: str, n: int, workdir: Path, profile: str) -> dict[str, Any]:
    from pyspark.sql import functions as F

    from spark_bridge.join import asof_join
    from spark_bridge.read import read_aggregates
    from spark_bridge.session import spark_session

    topic = f"bench-aggregates-{os.getpid()}"
    produce_s = asyncio.run(produce(bootstrap, topic, n))
    spark = spark_session(
        "local[2]",
        app_name="fiba-spark-bench",
        conf={"spark.sql.shuffle.partitions": "8", "spark.driver.memory": "3g"},
    )
    result: dict[str, Any] = {"produce_s": produce_s}
    try:
        sources = {
            engine: read_aggregates(spark, bootstrap, topic, engine=engine, broker_profile=profile)
            for engine in ENGINES
        }
        for attempt in (1, 2):
            for engine, source in sources.items():
                result[f"read_{engine}_{attempt}_s"] = timed(
                    f"read, engine {engine} ({attempt})",
                    lambda source=source: source.write.format("noop").mode("overwrite").save(),
                )
        aggregates_path, batch_path = str(workdir / "aggregates"), str(workdir / "batch")
        sources["python"].write.parquet(aggregates_path)
        span_ms = n * SPACING_MS
        (
            spark.range(n)
            .select(
                F.col("id"),
                F.concat(F.lit("sensor-"), (F.rand(11) * KEYS).cast("int")).alias("key"),
                (F.lit(START_MS) + (F.rand(13) * span_ms).cast("long")).alias("ts"),
            )
            .write.parquet(batch_path)
        )
        batch = spark.read.parquet(batch_path)

        def join_from(aggregates, out: str) -> None:
            joined = asof_join(
                batch, aggregates, "5m", aggregations=["count", "sum", "max", "mean"]
            )
            joined.write.mode("overwrite").parquet(out)

        result["join_s"] = timed(
            "join", lambda: join_from(spark.read.parquet(aggregates_path), str(workdir / "j"))
        )
        for engine, source in sources.items():
            out = str(workdir / f"j-{engine}")
            result[f"join_from_kafka_{engine}_s"] = timed(
                f"join from Kafka, engine {engine}",
                lambda source=source, out=out: join_from(source, out),
            )
        matched = {
            engine: spark.read.parquet(str(workdir / f"j-{engine}")).exceptAll(
                spark.read.parquet(str(workdir / "j"))
            )
            for engine in ENGINES
        }
        result["join_results_differ"] = {e: df.count() for e, df in matched.items()}
        joined = spark.read.parquet(str(workdir / "j"))
        result["matched_rows"] = joined.where("agg_window_end IS NOT NULL").count()
    finally:
        spark.stop()
    return {
        "records": n,
        "batch_rows": n,
        "partitions": PARTITIONS,
        "master": "local[2]",
        "broker_profile": profile,
        **result,
    }


def markdown(result: dict[str, Any]) -> str:
    n = result["records"]
    rows = [("produce N aggregates (aiokafka, batched)", result["produce_s"])]
    for attempt in (1, 2):
        rows += [
            (
                f"read N aggregates, engine python (fiba-kafka source) — run {attempt}",
                result[f"read_python_{attempt}_s"],
            ),
            (
                f"read N aggregates, engine jvm (Spark's Kafka connector + parse_values) — "
                f"run {attempt}",
                result[f"read_jvm_{attempt}_s"],
            ),
        ]
    rows += [
        ("as-of join N batch rows x N aggregates (Parquet in, Parquet out)", result["join_s"]),
        *(
            (f"as-of join, aggregates from Kafka, engine {e}", result[f"join_from_kafka_{e}_s"])
            for e in ENGINES
        ),
    ]
    lines = [
        f"N = {n:,}; local[2]; broker profile {result['broker_profile']}; load average before "
        f"{result['load_before']}, after {result['load_after']}",
        "",
        "| step | seconds | rows/s |",
        "| --- | ---: | ---: |",
    ]
    lines += [f"| {label} | {s:.1f} | {n / s:,.0f} |" for label, s in rows]
    best = {e: min(result[f"read_{e}_1_s"], result[f"read_{e}_2_s"]) for e in ENGINES}
    verdict = "met" if result["join_s"] <= JOIN_TARGET_S else "NOT met"
    lines += [
        "",
        f"Read, faster run of each: jvm / python = {best['jvm'] / best['python']:.2f} "
        f"(seconds). Join target (<= {JOIN_TARGET_S:.0f} s): {verdict}. "
        f"{result['matched_rows']:,} of {n:,} batch rows found an aggregate; rows of the join "
        f"from Kafka not in the Parquet join's: {result['join_results_differ']}.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=None, help="N (default 10^6)")
    parser.add_argument("--quick", action="store_true", help="N = 10^5")
    parser.add_argument(
        "--broker", choices=sorted(BROKER_KINDS), default="embedded", help="broker kind to start"
    )
    args = parser.parse_args()
    n = args.records or (100_000 if args.quick else 1_000_000)
    # SIGTERM unwinds like Ctrl-C, so the embedded broker and Spark are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    load_before = " ".join(f"{v:.2f}" for v in os.getloadavg())
    with tempfile.TemporaryDirectory(prefix="spark-bench-") as tmp:
        external = os.environ.get("KAFKA_BOOTSTRAP")
        if external:
            result = run(external, n, Path(tmp), "kafka")
        else:
            with make_broker(args.broker) as broker:
                result = run(broker.bootstrap, n, Path(tmp), BROKER_KINDS[args.broker].profile)
    result["load_before"] = load_before
    result["load_after"] = " ".join(f"{v:.2f}" for v in os.getloadavg())
    result["machine"] = describe_machine()
    RESULTS.mkdir(exist_ok=True)
    name = "spark_bench_quick.json" if n < 1_000_000 else "spark_bench.json"
    (RESULTS / name).write_text(json.dumps(result, indent=2) + "\n")
    print(markdown(result))


if __name__ == "__main__":
    main()
