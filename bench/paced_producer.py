"""A producer at a steady rate, in a process of its own: the load of ``bench.latency``.

``python -m bench.paced_producer RATE EVENTS`` (settings in ``FIBA_*`` variables, as
``bench.worker_harness.child_process`` passes them) sends the first ``EVENTS`` records of
``bench.worker_harness.event_stream`` to the input topic at ``RATE`` records per second: every
``TICK_S`` it hands the records due by then to aiokafka as whole record batches, one per
partition (``agents.batched_send``: a few µs per record, so that the producer takes little of
the CPU the worker needs), keys partitioned as Kafka's default partitioner does, timestamps
left to the producer (``CreateTime`` = its clock; a topic with ``LogAppendTime`` replaces them
by the broker's). When it falls behind, the next tick sends all that is due: the rate holds on
average. Prints one JSON line at the end: records sent and seconds taken.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from aiokafka import AIOKafkaProducer

from agents.batched_send import NO_HEADERS, KeyPartitioner, OutputRecord, send_output_records
from agents.clients import client_options
from app.settings import Settings, load_settings
from bench.worker_harness import event_stream

TICK_S = 0.001
"""How often the producer hands over the records due."""


async def pace(settings: Settings, records: list[tuple[bytes, bytes]], rate: float) -> float:
    """Send ``records`` to ``settings.input_topic`` at ``rate`` per second; seconds taken
    (until every record is acknowledged)."""
    producer = AIOKafkaProducer(**client_options(settings), linger_ms=0)
    await producer.start()
    try:
        partition_of = KeyPartitioner(settings.partitions)
        loop = asyncio.get_running_loop()
        deliveries = []
        sent = 0
        started = loop.time()
        while sent < len(records):
            due = min(len(records), int((loop.time() - started) * rate) + 1)
            by_partition: dict[int, list[OutputRecord]] = {}
            for key, value in records[sent:due]:
                by_partition.setdefault(partition_of(key), []).append(
                    (key, value, None, NO_HEADERS)
                )
            for partition, batch in by_partition.items():
                delivery = await send_output_records(
                    producer, settings.input_topic, partition, batch
                )
                deliveries.append(delivery)
            sent = max(sent, due)
            await asyncio.sleep(TICK_S)
        for delivery in deliveries:
            await delivery
        return loop.time() - started
    finally:
        await producer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rate", type=float)
    parser.add_argument("events", type=int)
    args = parser.parse_args()
    records = event_stream(args.events)
    began = time.time()
    seconds = asyncio.run(pace(load_settings(), records, args.rate))
    print(json.dumps({"sent": len(records), "seconds": seconds, "began": began}), flush=True)


if __name__ == "__main__":
    main()
