"""``emit=event``'s kernel call alone, offline: ``python -m bench.event_kernel``.

The worker's window work under ``emit=event`` without Kafka, JSON parsing or the store:
``bench.worker_harness``'s input (100 keys, 20 % of the events up to 5 s late), parsed, applied
by ``windows.apply_events`` in slices with the worker's aggregate encoder, over windows
pre-filled to each occupancy as in the end-to-end run (``bench.worker_scenarios``). Prints the
CPU nanoseconds per event of the calls (``time.process_time``; the median of
``--repetitions``, each on a freshly restored state), the load average, and a digest of every
output (records, store effects, rejections), so that two builds can be compared byte for
byte. ``--profile SECONDS`` repeats the first cell that long (for ``perf record``). Results go
to stdout only; docs/native-core.md quotes them.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from app.settings import Settings
from bench.bench_broker import BenchBroker
from bench.worker_harness import KEYS, event_stream, scenario_settings
from bench.worker_scenarios import prefilled_pairs
from stores.gc_pause import paused_gc
from stores.key_windows import WindowConfig
from stores.native_windows import new_key_windows


def _settings(occupancy: int, aggregations: tuple[str, ...]) -> Settings:
    offline = BenchBroker("127.0.0.1:1", "kafka", "none")  # no broker: settings only
    settings = scenario_settings(offline, occupancy, "event", Path("unused"))
    return replace(settings, aggregations=aggregations)


def _stream(events: int) -> list[tuple[str, int, Any]]:
    stream = []
    for key, value in event_stream(events):
        obj = json.loads(value)
        stream.append((key.decode(), obj["ts"], obj["value"]))
    return stream


def run_once(
    settings: Settings, occupancy: int, stream: list[tuple[str, int, Any]], size: int
) -> tuple[float, str]:
    """CPU ns per event of ``apply_events`` over ``stream`` in slices of ``size``, and the
    digest of the outputs."""
    from agents.records import aggregate_encoder

    config = WindowConfig.from_settings(settings)
    windows = new_key_windows(config, emit="event")
    encoder = aggregate_encoder(config.aggregations, config.lowered_is_aggregates)
    with paused_gc(freeze=True):  # as the worker builds a restored partition
        windows.restore({f"key-{k}": prefilled_pairs(config.lift, occupancy) for k in range(KEYS)})
    offsets = list(range(len(stream)))
    outputs = []
    started = time.process_time()
    for lo in range(0, len(stream), size):
        outputs.append(
            windows.apply_events(stream[lo : lo + size], offsets[lo : lo + size], 0, encoder)
        )
    elapsed = time.process_time() - started
    digest = hashlib.sha256()
    for applied in outputs:
        for record in applied.records:
            digest.update(record)
        digest.update(repr((applied.effects, applied.keys, applied.event_ts)).encode())
        digest.update(repr([(o, r.reason, r.detail) for o, r in applied.rejected]).encode())
    windows.clear()  # unlinks the trees: frozen, they would never be freed otherwise
    gc.unfreeze()
    return 1e9 * elapsed / len(stream), digest.hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--occupancies", default="100,10000")
    parser.add_argument("--aggregations", default=",".join(Settings().aggregations))
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--slice", type=int, default=500)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--profile", type=float, default=0.0)
    args = parser.parse_args()
    aggregations = tuple(args.aggregations.split(","))
    stream = _stream(args.events)
    print(f"load average {os.getloadavg()[0]:.2f}; aggregations {args.aggregations}")
    for occupancy in (int(x) for x in args.occupancies.split(",")):
        settings = _settings(occupancy, aggregations)
        if args.profile:
            deadline = time.monotonic() + args.profile
            while time.monotonic() < deadline:
                run_once(settings, occupancy, stream, args.slice)
            return
        runs = [run_once(settings, occupancy, stream, args.slice) for _ in range(args.repetitions)]
        ns = statistics.median(r[0] for r in runs)
        digests = sorted({r[1] for r in runs})
        print(f"k={occupancy:<6d} apply_events {ns:8.0f} ns/event  digest {' '.join(digests)}")
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
