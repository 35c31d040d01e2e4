"""What the benchmarks of real ``fiba worker`` processes share: their input, and their figures.

``keyed_records`` generates a long keyed input lazily (``keys`` keys drawn uniformly, one event
every ``step_ms`` of event time, ``OOO_FRACTION`` of them up to ``max_lateness_ms`` late);
``produce_records`` sends it. A worker's figures are read from outside, as an operator would:
``applied_events`` (its ``GET /stats`` applied offsets), ``window_entries`` (its ``GET
/metrics``), ``resident_bytes`` (``/proc``; its CPU: ``bench.worker_harness.cpu_seconds``);
``worker_environ`` keeps the build the bench runs with in the workers it starts.
Used by ``bench.soak`` and ``bench.scale_out``; methods: docs/bench-methods.md.
"""

from __future__ import annotations

import os
import random
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path

from aiokafka import AIOKafkaProducer

from agents.clients import client_options
from app.settings import Settings
from bench.worker_harness import OOO_FRACTION, T0, get_json
from stores import PURE_PYTHON_SWITCH


def keyed_records(
    n: int, keys: int, step_ms: float, max_lateness_ms: int, seed: int = 1
) -> Iterator[tuple[bytes, bytes]]:
    """``n`` input records ``(key, JSON {"ts", "value"})``, generated one at a time: event
    ``i`` at ``T0 + i * step_ms`` (moved back by 1 to ``max_lateness_ms`` - 1 ms for
    ``OOO_FRACTION`` of them), its key drawn uniformly from ``key-0`` .. ``key-<keys - 1>``."""
    rng = random.Random(seed)
    for i in range(n):
        ts = T0 + int(i * step_ms)
        if rng.random() < OOO_FRACTION:
            ts -= rng.randrange(1, max(2, max_lateness_ms))
        key = f"key-{rng.randrange(keys)}".encode()
        value = f'{{"ts":{ts},"value":{round(rng.uniform(-100, 100), 3)}}}'.encode()
        yield key, value


async def produce_records(settings: Settings, records: Iterable[tuple[bytes, bytes]]) -> int:
    """Send ``records`` to the input topic (partition by key, as any producer does), batched
    (20 ms linger, 1 MiB batches); return how many were sent once all are acknowledged."""
    producer = AIOKafkaProducer(
        **client_options(settings), linger_ms=20, max_batch_size=1 << 20, acks=1
    )
    await producer.start()
    sent = 0
    try:
        for key, value in records:
            await producer.send(settings.input_topic, value=value, key=key)
            sent += 1
        await producer.flush()
    finally:
        await producer.stop()
    return sent


def applied_events(port: int) -> dict[int, int]:
    """Per input partition the worker on ``port`` owns, the records it applied (its applied
    offset + 1, from ``GET /stats``)."""
    stats = get_json(port, "/stats")
    assigned = set(stats.get("assigned", ()))
    return {
        int(p): state["applied_offset"] + 1
        for p, state in stats.get("partitions", {}).items()
        if int(p) in assigned
    }


def window_entries(port: int, timeout: float = 10.0) -> int:
    """The window entries the worker on ``port`` holds, over its partitions (the sum of its
    ``fiba_window_entries`` gauges in ``GET /metrics``; O(keys) in the worker)."""
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=timeout) as response:
        text = response.read().decode()
    return int(
        sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("fiba_window_entries{")
        )
    )


def resident_bytes(pid: int) -> int:
    """Resident set size of process ``pid`` (``VmRSS`` in ``/proc/<pid>/status``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def peak_resident_bytes(pid: int) -> int:
    """The largest resident set size process ``pid`` had so far (``VmHWM``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmHWM for process {pid}")


def worker_environ() -> dict[str, str]:
    """What the worker's environment must keep of this one (``start_worker`` drops every
    ``FIBA_*`` variable): the pure-Python switch, so that it loads the build ``stores.build()``
    names."""
    switch = os.environ.get(PURE_PYTHON_SWITCH)
    return {} if switch is None else {PURE_PYTHON_SWITCH: switch}
