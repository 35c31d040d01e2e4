"""CPU cost of ``window_end = event_time`` against ``stream_time`` in ``KeyWindows.accept``.

``python -m bench.window_end [--events N] [--occupancies 100,1000,10000] [--rounds 3]``
streams the events of ``bench.worker_pipeline`` (100 keys, 20% out of order by up to 5 s)
through ``KeyWindows.accept`` (``emit=event``, the default aggregations, three windows of
R/100, R/10 and R) over windows pre-filled to each occupancy, once per mode and round (modes
alternate their order by round), and prints the median CPU microseconds per event with the
machine and commit, as a Markdown table for ``bench/RESULTS.md``. ``stream_time`` answers the
small windows from the kept suffixes (O(1) amortized in order); ``event_time`` asks one FiBA
range query per window, O(log n).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from dataclasses import replace

from app.settings import Settings, WindowSpec
from bench.run_frame import announce
from bench.worker_harness import KEYS, SPACING_MS, event_stream
from bench.worker_scenarios import prefilled_pairs
from stores.durations import format_duration
from stores.gc_pause import paused_gc
from stores.key_windows import KeyWindows, WindowConfig

MODES = ("stream_time", "event_time")


def mode_settings(occupancy: int, window_end: str) -> Settings:
    """The worker pipeline benchmark's windows at ``occupancy`` events per key and window R."""
    retention = occupancy * SPACING_MS
    sizes = (retention // 100, retention // 10, retention)
    return replace(
        Settings(),
        retention=retention,
        windows=tuple(WindowSpec(format_duration(s), s) for s in sizes),
        max_future_skew=retention,
        max_wall_clock_skew=None,
        window_end=window_end,
    )


def us_per_event(settings: Settings, stream: list[tuple[str, int, float]], occupancy: int) -> float:
    """CPU microseconds per ``accept`` of ``stream`` over freshly pre-filled windows."""
    windows = KeyWindows(WindowConfig.from_settings(settings), emit="event")
    lift = windows.config.lift
    with paused_gc(freeze=True):  # as the worker builds a restored partition
        windows.restore({f"key-{k}": prefilled_pairs(lift, occupancy) for k in range(KEYS)})
    started = time.process_time()
    for key, ts, value in stream:
        windows.accept(key, ts, value)
    elapsed = time.process_time() - started
    windows.clear()
    gc.unfreeze()
    return 1e6 * elapsed / len(stream)


def measure(events: int, occupancies: list[int], rounds: int) -> dict[int, dict[str, float]]:
    """Median CPU µs per event, per occupancy and mode."""
    stream = []
    for key, value in event_stream(events):
        obj = json.loads(value)
        stream.append((key.decode(), obj["ts"], obj["value"]))
    results: dict[int, dict[str, float]] = {}
    for occupancy in occupancies:
        samples: dict[str, list[float]] = {mode: [] for mode in MODES}
        for r in range(rounds):
            for mode in MODES if r % 2 == 0 else reversed(MODES):
                settings = mode_settings(occupancy, mode)
                samples[mode].append(us_per_event(settings, stream, occupancy))
        results[occupancy] = {mode: statistics.median(s) for mode, s in samples.items()}
    return results


def markdown(results: dict[int, dict[str, float]]) -> str:
    lines = [
        "| occupancy (events per key in R) | stream_time µs/event | event_time µs/event | ratio |",
        "| --- | --- | --- | --- |",
    ]
    for occupancy, cells in results.items():
        a, b = cells["stream_time"], cells["event_time"]
        lines.append(f"| {occupancy:,} | {a:.1f} | {b:.1f} | {b / a:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--occupancies", default="100,1000,10000")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    occupancies = [int(o) for o in args.occupancies.split(",")]
    announce("python -m bench.window_end " + " ".join(sys.argv[1:] if argv is None else argv))
    print(markdown(measure(args.events, occupancies, args.rounds)))


if __name__ == "__main__":
    main()
