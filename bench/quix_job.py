"""The peer under measurement: a Quix Streams sliding-window job over the worker benchmark's input.

``python -m bench.quix_job BOOTSTRAP PROFILE INPUT OUTPUT DURATION_MS GRACE_MS PREFILL PORT
STATE_DIR`` runs a Quix Streams ``Application`` that reads ``INPUT`` from its start, takes each
record's event time from ``ts`` and emits ``sliding_window(DURATION_MS, GRACE_MS).agg(count,
sum, max, mean).current()`` to ``OUTPUT``; ``PREFILL`` starts every key with full windows. It
serves ``GET /stats`` on ``PORT`` for the rate measurement until SIGTERM. Details:
docs/bench-methods.md.
"""

from __future__ import annotations

import sys
import uuid
from typing import Any

from agents.batched_send import default_partition
from app.topics import DATA_TOPIC_CONFIGS
from bench.worker_harness import KEYS, SPACING_MS, T0, serve_stats

AGGREGATIONS = ("count", "sum", "max", "mean")
"""The job's aggregations (Quix's ``Count``, ``Sum``, ``Max``, ``Mean`` of ``value``)."""

PARTITIONS = 4
"""The input's partition count (``bench.worker_harness.scenario_settings``)."""

OUTPUT_TOPIC_CONFIGS = {**DATA_TOPIC_CONFIGS, "retention.ms": "-1"}
"""The output topic's configs (all explicit, for the embedded broker): its records' timestamps
are their windows' starts, years old, which time retention would delete."""


def prefill_events(n: int) -> list[tuple[int, float]]:
    """The ``(time, value)`` events every key's windows start with (``PREFILL`` = ``n``)."""
    start = T0 - n * SPACING_MS
    return [(start + j * SPACING_MS, float(j % 7)) for j in range(n)]


def prefill_windows(window: Any, n: int, duration: int) -> list[tuple[int, int, list]]:
    """``(start, end, [max_timestamp, aggregation])`` of every window the Quix sliding
    ``window`` holds for one key after the ``n`` ``prefill_events``: each event's left window
    (events ``0..j``, since ``n`` events span exactly ``duration``) and, but for the last
    event's (empty), its right window (events ``j+1..n-1``)."""
    events = prefill_events(n)
    prefix, acc = [], window._initialize_value()
    for ts, value in events:
        acc = window._aggregate_value(acc, {"value": value}, ts)
        prefix.append(acc)
    suffix, acc = [None] * n, window._initialize_value()
    for j in range(n - 1, -1, -1):
        acc = window._aggregate_value(acc, {"value": events[j][1]}, events[j][0])
        suffix[j] = acc
    last = events[-1][0] if events else 0
    windows = []
    for j, (ts, _) in enumerate(events):
        windows.append((max(0, ts - duration), ts, [ts, prefix[j]]))
        if j + 1 < n:
            windows.append((ts + 1, ts + 1 + duration, [last, suffix[j + 1]]))
    return windows


def run(
    bootstrap: str,
    profile: str,
    input_topic: str,
    output_topic: str,
    duration: int,
    grace: int,
    prefill: int,
    port: int,
    state_dir: str,
) -> None:
    """Run the job (see the module doc) until SIGTERM."""
    from quixstreams import Application, message_context
    from quixstreams.dataframe.windows import Count, Max, Mean, Sum
    from quixstreams.models import TopicConfig

    consumer_config = {}
    if profile == "embedded":  # Tansu: a join takes half the session timeout
        consumer_config = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000}
    app = Application(
        broker_address=bootstrap,
        consumer_group=f"quix-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        state_dir=state_dir,
        consumer_extra_config=consumer_config,
        loglevel="WARNING",
    )
    source = app.topic(
        input_topic,
        value_deserializer="json",
        key_deserializer="bytes",
        config=TopicConfig(PARTITIONS, 1, extra_config=dict(DATA_TOPIC_CONFIGS)),
        timestamp_extractor=lambda value, headers, ts, ts_type: value["ts"],
    )
    sink = app.topic(
        output_topic,
        value_serializer="json",
        key_serializer="bytes",
        config=TopicConfig(PARTITIONS, 1, extra_config=dict(OUTPUT_TOPIC_CONFIGS)),
    )
    counts = {"accepted": 0}

    def count(value: Any) -> None:
        counts["accepted"] += 1

    sdf = app.dataframe(source).update(count)
    window = sdf.sliding_window(duration_ms=duration, grace_ms=grace).agg(
        count=Count(), sum=Sum("value"), max=Max("value"), mean=Mean("value")
    )
    if prefill:
        filled: set[int] = set()
        windows = prefill_windows(window, prefill, duration)
        process = window.process_window

        def process_with_prefill(
            value: Any, key: bytes, timestamp_ms: int, headers: Any, transaction: Any
        ) -> Any:
            partition = message_context().partition
            if partition not in filled:
                filled.add(partition)
                for k in range(KEYS):
                    name = f"key-{k}".encode()
                    if default_partition(name, PARTITIONS) != partition:
                        continue
                    state = transaction.as_state(prefix=name)
                    for start, end, stored in windows:
                        state.update_window(start, end, value=stored, timestamp_ms=stored[0])
            return process(value, key, timestamp_ms, headers, transaction)

        window.process_window = process_with_prefill  # type: ignore[method-assign]
    window.current().to_topic(sink)
    server = serve_stats(port, {"counts": counts})
    try:  # Quix stops on SIGTERM itself
        app.run()
    finally:
        server.shutdown()


def main() -> None:
    bootstrap, profile, input_topic, output_topic, *numbers, state_dir = sys.argv[1:]
    duration, grace, prefill, port = map(int, numbers)
    run(bootstrap, profile, input_topic, output_topic, duration, grace, prefill, port, state_dir)


if __name__ == "__main__":
    main()
