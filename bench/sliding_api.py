"""The state behind ``agents.sliding`` in-process: CPU per ``add`` and per changelog record.

``python -m bench.sliding_api [--events N] [--keys K]`` feeds ``N`` events of ``K`` keys, 10 ms
apart, to a ``SlidingState`` of the README example (windows 1m and 5m, retention 10m, count,
sum and a custom last-three monoid), in order and with up to 5 s of disorder, recording what a
``SlidingWindows`` would write to its changelog (the entry per event, a tombstone per evicted
entry). Then it replays that changelog into a new state with ``put``/``remove`` (what
``SlidingStore.apply_changelog_batch`` does per record; JSON decoding excluded: it is Faust's).
Prints a Markdown table (for ``bench/RESULTS.md``): microseconds of CPU per event and per
record, and changelog records per event.
"""

from __future__ import annotations

import argparse
import random
import time

from agents.sliding import composed_monoid
from stores.durations import parse_duration
from stores.monoids import make_monoid
from stores.sliding_state import SlidingState

LAST_THREE = make_monoid((), lambda x: (x,), lambda a, b: (a + b)[-3:], list, name="last_three")


def new_state() -> SlidingState:
    windows = {"1m": parse_duration("1m"), "5m": parse_duration("5m")}
    monoid = composed_monoid(["count", "sum", LAST_THREE])
    return SlidingState(monoid, windows, parse_duration("10m"))


def run(events: int, keys: int, disorder_ms: int, seed: int = 1) -> dict[str, float]:
    rng = random.Random(seed)
    stream = [
        (f"k{rng.randrange(keys)}", 10 * i - rng.randint(0, disorder_ms), i) for i in range(events)
    ]
    state = new_state()
    changelog: list[tuple[str, int, object]] = []
    start = time.process_time()
    for key, ts, value in stream:
        outcome = state.add(0, key, ts, value)
        state.all_windows(key)
        changelog.append((key, ts, outcome.partial))
        changelog.extend((k, t, None) for k, t in outcome.evicted)
    add_s = time.process_time() - start
    replayed = new_state()
    start = time.process_time()
    for key, ts, partial in changelog:
        if partial is None:
            replayed.remove(0, key, ts)
        else:
            replayed.put(0, key, ts, partial)
    replay_s = time.process_time() - start
    assert sorted(replayed.entries()) == sorted(state.entries())
    return {
        "add_us": add_s / events * 1e6,
        "replay_us": replay_s / len(changelog) * 1e6,
        "records_per_event": len(changelog) / events,
        "retained": len(state),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=1_000)
    args = parser.parse_args()
    print("| stream | add + every window, µs/event | changelog records/event | "
          "replay, µs/record | entries retained |")  # fmt: skip
    print("| --- | --- | --- | --- | --- |")
    for name, disorder in (("in order", 0), ("disorder up to 5 s", 5_000)):
        r = run(args.events, args.keys, disorder)
        print(f"| {name} | {r['add_us']:.1f} | {r['records_per_event']:.3f} | "
              f"{r['replay_us']:.1f} | {r['retained']:,} |")  # fmt: skip


if __name__ == "__main__":
    main()
