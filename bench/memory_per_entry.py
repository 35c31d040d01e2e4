"""Memory per retained window entry of the worker's windows state (count, sum, max), per kernel.

``python -m bench.memory_per_entry [--entries 1000000] [--keys 1000 | --entries-per-key
10,100,1000] [--paths stream,restore] [--kernels native,python] [--min-arities 4]`` fills, in
a fresh interpreter per path, kernel, MIN_ARITY and key count, one partition's windows as the
worker makes them (count/sum/max, three windows, a retention that keeps every entry;
``native``: the native kernel, ``python``: ``KeyWindows``; the default: both when the native
core is installed) with ``entries`` entries over ``keys`` keys (or ``entries / k`` keys for
each ``k`` of ``--entries-per-key``): ``stream`` through ``accept_batch`` (``emit=batch``,
1,000 events per batch, distinct times, 20% out of order), ``restore`` through ``load`` (one
bulk build per key). It reads the resident memory (``/proc``) empty, half full and full: bytes
per entry and per key are the growth over the entries and over the keys (per-key costs
included), marginal the second half's alone; then the Python heap alone (``tracemalloc``, a
second fill). Writes ``bench/results/memory_per_entry_<build>.json`` (``quick/`` below 10^6
entries). Goal (issue 29): at most 64 bytes per entry.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import subprocess
import sys
import tracemalloc
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.bench_broker import announce_run, write_results
from bench.worker_process import resident_bytes

RESULTS = Path(__file__).parent / "results"
GOAL_BYTES = 64
AGGREGATIONS = ("count", "sum", "max")
BATCH = 1000
FULL_RUN = 1_000_000


def filled_windows(
    entries: int, keys: int, path: str, at: Any, kernel: str | None = None, min_arity: int = 4
) -> Any:
    """One partition's windows on ``kernel`` (``native``: ``NativeKeyWindows`` at
    ``min_arity``; ``python``: ``KeyWindows``; None: the native kernel when it is installed)
    filled with ``entries`` entries over ``keys``
    keys along ``path``, calling ``at(filled)`` at the start and after every batch (stream) or
    key (restore)."""
    from app.settings import Settings, WindowSpec
    from stores.durations import format_duration
    from stores.gc_pause import paused_gc
    from stores.key_windows import KeyWindows, WindowConfig
    from stores.native_windows import NativeKeyWindows

    retention = 2 * entries + 10_000
    sizes = (retention // 100, retention // 10, retention)
    settings = replace(
        Settings(),
        aggregations=AGGREGATIONS,
        retention=retention,
        windows=tuple(WindowSpec(format_duration(s), s) for s in sizes),
        max_wall_clock_skew=None,
    )
    config = WindowConfig.from_settings(settings)
    windows: Any = (
        NativeKeyWindows(config, emit="batch", min_arity=min_arity)
        if resolved_kernel(kernel) == "native"
        else KeyWindows(config, emit="batch")
    )
    rng = random.Random(1)
    at(0)
    if path == "stream":
        for lo in range(0, entries, BATCH):
            batch = []
            for i in range(lo, min(entries, lo + BATCH)):
                # distinct times: every event is an entry of its own; 20% arrive late
                t = 2 * i + 1 if rng.random() < 0.8 else max(0, 2 * i - 2 * rng.randrange(1, 50))
                batch.append((f"key-{rng.randrange(keys)}", t, rng.uniform(-100, 100)))
            windows.accept_batch(batch)
            at(min(entries, lo + BATCH))
    else:
        per_key = entries // keys
        lift = config.lift
        with paused_gc(freeze=True):  # as a restore builds (agents.windows)
            for k in range(keys):
                pairs = [(1 + 2 * j, lift(rng.uniform(-100, 100))) for j in range(per_key)]
                windows.load(f"key-{k}", pairs)
                at((k + 1) * per_key)
    return windows


def resolved_kernel(kernel: str | None) -> str:
    """``kernel``, or when None the one the worker runs on: ``native`` when it is installed."""
    import stores

    return kernel or ("native" if stores.native() is not None else "python")


def measure(
    entries: int, keys: int, path: str, kernel: str | None = None, min_arity: int = 4
) -> dict[str, Any]:
    """In this interpreter: resident bytes empty, half full and full along ``path`` on
    ``kernel``, then the traced Python heap of a second fill."""
    import stores

    kernel = resolved_kernel(kernel)
    marks: dict[str, int] = {}

    def at_rss(filled: int) -> None:
        if filled == 0 and "empty" not in marks:
            gc.collect()
            marks["empty"] = resident_bytes_self()
        elif filled >= entries // 2 and "half" not in marks:
            gc.collect()
            marks["half"], marks["half_entries"] = resident_bytes_self(), filled

    windows = filled_windows(entries, keys, path, at_rss, kernel, min_arity)
    gc.collect()
    held = windows.entry_count()
    full = resident_bytes_self()
    windows.clear()
    del windows
    gc.collect()
    traced: list[int] = []
    tracemalloc.start()
    try:

        def at_traced(filled: int) -> None:
            if filled == 0:
                traced.append(tracemalloc.get_traced_memory()[0])

        windows = filled_windows(entries, keys, path, at_traced, kernel, min_arity)
        gc.collect()
        traced.append(tracemalloc.get_traced_memory()[0])
        windows.clear()
    finally:
        tracemalloc.stop()
    return {
        "path": path,
        "build": stores.build(),
        "kernel": kernel,
        "min_arity": min_arity if kernel == "native" else None,
        "entries": held,
        "keys": keys,
        "aggregations": list(AGGREGATIONS),
        "rss_empty_mb": marks["empty"] / 1e6,
        "rss_full_mb": full / 1e6,
        "entries_per_key": held / keys,
        "bytes_per_entry": (full - marks["empty"]) / held,
        "bytes_per_key": (full - marks["empty"]) / keys,
        "marginal_bytes_per_entry": (full - marks["half"]) / (held - marks["half_entries"]),
        "python_heap_bytes_per_entry": (traced[-1] - traced[0]) / held,
    }


def resident_bytes_self() -> int:
    return resident_bytes(os.getpid())


def run_child(
    entries: int, keys: int, path: str, kernel: str | None = None, min_arity: int = 4
) -> dict[str, Any]:
    """``measure`` in a fresh interpreter (this module's ``--child``), so that no earlier
    allocation is reused by the state measured."""
    command = [sys.executable, "-m", "bench.memory_per_entry", "--child", path]
    command += [
        "--entries",
        str(entries),
        "--keys",
        str(keys),
        "--kernels",
        resolved_kernel(kernel),
    ]
    command += ["--min-arities", str(min_arity)]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def results_name(build: str) -> str:
    """The results file of a build: ``memory_per_entry_<build>.json`` (``+`` as ``_``), so
    that the runs of every build stay side by side."""
    return f"memory_per_entry_{build.replace('+', '_')}.json"


def report(results: list[dict[str, Any]]) -> str:
    lines = [
        "| path | kernel | MIN_ARITY | build | entries | keys | bytes/entry (RSS) | marginal "
        "| bytes/key | Python heap | goal |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        met = "met" if r["bytes_per_entry"] <= GOAL_BYTES else "not met"
        lines.append(
            f"| {r['path']} | {r['kernel']} | {r['min_arity'] or ''} | {r['build']} "
            f"| {r['entries']:,} | {r['keys']:,} "
            f"| {r['bytes_per_entry']:.0f} | {r['marginal_bytes_per_entry']:.0f} "
            f"| {r.get('bytes_per_key', 0):,.0f} | {r['python_heap_bytes_per_entry']:.0f} "
            f"| <= {GOAL_BYTES}: {met} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=FULL_RUN)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument(
        "--entries-per-key", default=None, help="e.g. 10,100,1000: a run each, entries / it keys"
    )
    parser.add_argument("--paths", default="stream,restore")
    parser.add_argument("--kernels", default=None, help="native,python (default: installed)")
    parser.add_argument("--min-arities", default="4", help="the native kernel's, e.g. 2,4,8")
    parser.add_argument("--child", choices=("stream", "restore"), help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=None, help="results file")
    args = parser.parse_args(argv)
    arities = [int(a) for a in args.min_arities.split(",")]
    if args.child:
        figures = measure(args.entries, args.keys, args.child, args.kernels, arities[0])
        print(json.dumps(figures))
        return
    kernels = (args.kernels or f"{resolved_kernel(None)},python").split(",")
    kernels = list(dict.fromkeys(kernels))
    key_counts = (
        [max(1, args.entries // int(k)) for k in args.entries_per_key.split(",")]
        if args.entries_per_key
        else [args.keys]
    )
    facts = announce_run("bench.memory_per_entry")
    results = []
    for kernel in kernels:
        for min_arity in arities if kernel == "native" else [4]:
            for keys in key_counts:
                for path in args.paths.split(","):
                    result = run_child(args.entries, keys, path, kernel, min_arity)
                    print(json.dumps(result), flush=True)
                    results.append(result)
    out = args.out or (
        RESULTS / ("quick" if args.entries < FULL_RUN else "") / results_name(results[0]["build"])
    )
    write_results(results, out, "embedded", facts)  # no broker: the name stays
    print(report(results))


if __name__ == "__main__":
    main()
