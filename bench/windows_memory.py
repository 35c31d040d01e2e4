"""Memory per retained entry of one partition's windows: the native kernel against ``KeyWindows``.

``python -m bench.windows_memory [--keys K] [--entries N]`` builds, in a fresh subprocess per
kernel, the windows of one partition with the worker's shape (``sum,count,max``, one window
covering the retention): ``K`` keys, ``N`` entries each, applied in order in batches of 1000 as
``emit=batch`` does, and reports the growth of the process's resident memory (``/proc/self/
statm``) per entry (the native kernel at MIN_ARITY 4, the default, 8 and 16). Writes
``bench/results/windows_memory.json``. Issue 29's goal: at most 64 bytes per entry.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.bench_broker import announce_run

RESULTS = Path(__file__).parent / "results" / "windows_memory.json"
AGGREGATIONS = ("sum", "count", "max")


def resident_bytes() -> int:
    """The process's resident memory (``/proc/self/statm``)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def measure(kernel: str, keys: int, entries: int, min_arity: int) -> dict[str, Any]:
    """Build the windows on ``kernel`` (``native`` or ``python``) in this process and return
    the growth of its resident memory per entry."""
    import gc

    from app.settings import Settings, WindowSpec
    from stores.key_windows import KeyWindows, WindowConfig
    from stores.native_windows import NativeKeyWindows

    retention = entries
    settings = replace(
        Settings(),
        windows=(WindowSpec("all", retention),),
        retention=retention,
        aggregations=AGGREGATIONS,
        max_future_skew=None,
        max_wall_clock_skew=None,
    )
    config = WindowConfig.from_settings(settings)
    windows: Any = (
        NativeKeyWindows(config, emit="batch", min_arity=min_arity)
        if kernel == "native"
        else KeyWindows(config, emit="batch")
    )
    batch = [(f"key-{k}", 0, 0) for k in range(keys)]  # warm: keys, interned names
    windows.apply(batch, range(keys))
    windows.clear()
    gc.collect()
    before = resident_bytes()
    names = [f"key-{k}" for k in range(keys)]
    events = [(name, t, t % 1000 - 500) for t in range(entries) for name in names]
    for lo in range(0, len(events), 1000):
        piece = events[lo : lo + 1000]
        windows.apply(piece, range(len(piece)))
    del events, piece
    gc.collect()
    grown = resident_bytes() - before
    count = windows.entry_count()
    return {
        "kernel": kernel,
        "min_arity": min_arity if kernel == "native" else 4,
        "keys": keys,
        "entries": count,
        "bytes_per_entry": grown / count,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--entries", type=int, default=10_000, help="entries per key")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--min-arity", type=int, default=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        figures = measure(args.child, args.keys, args.entries, args.min_arity)
        print(json.dumps(figures))
        return
    run = announce_run("bench.windows_memory")
    results = []
    for kernel, arity in (("python", 4), ("native", 4), ("native", 8), ("native", 16)):
        command = [sys.executable, "-m", "bench.windows_memory", "--child", kernel]
        command += ["--keys", str(args.keys), "--entries", str(args.entries)]
        command += ["--min-arity", str(arity)]
        figures = json.loads(subprocess.run(command, check=True, capture_output=True).stdout)
        print(json.dumps(figures), flush=True)
        results.append(figures)
    document = {"command": run["command"], "date": run["machine"]["date"], "results": results}
    document["machine"] = run["machine"]
    RESULTS.write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()
