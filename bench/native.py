"""The native FiBA's speed against the Python FiBA, in one run: ``python -m bench.native``.

The papers' rounds on a window of n = 2^16 entries with ``sum`` (a round = one insert, one
evict, one query): in order; out of order at distance d (each insert has d younger entries:
the generator of tests/test_fiba_complexity.py); and bulk (per round, m younger entries by
``bulk_insert`` and the m oldest out by ``bulk_evict``, then a query; rates in entries).
Each is measured three ways: the native tree with the loop inside Rust (no Python call
measured; ``stores._native.bench_*``), the native tree through its Python API (one call per
operation, what the worker would pay), and the Python FiBA through the same loop, so the
ratios come from one run on one machine. Rates are
per wall second and per CPU second of the measuring thread (the machine is shared: the CPU
rate is what the code costs, the wall rate what it got); each figure is the median of
``--repetitions`` runs. Prints the command, the machine and its load, a table and the
verdict on the issue's goal (10M in-order rounds/s native; the authors' C++ does 21.6M), and
writes the results to ``bench/results/native_fiba.json``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import stores
from bench.run_frame import announce, offline_command, write_offline_results
from bench.timing import median_rates, wall_and_cpu_s
from stores.fiba import FiBA
from stores.monoids import SUM
from stores.native_fiba import NativeFiBA

RESULTS = Path(__file__).resolve().parent / "results" / "native_fiba.json"
GOAL_IN_ORDER = 10e6
AUTHORS_CPP_IN_ORDER = 21.6e6


def _filled(tree: Any, n: int, high: int | None = None, d: int = 0) -> Any:
    """``tree`` holding n entries of 1: times 0..n-d-1, and d times from ``high`` on."""
    tree.bulk_insert([(t, 1) for t in range(n - d)])
    if d:
        tree.bulk_insert([(high + j, 1) for j in range(d)])  # type: ignore[operator]
    return tree


def _in_order_loop(tree: Any, n: int, rounds: int) -> Callable[[], None]:
    def run() -> None:
        evict, insert, query = tree.evict, tree.insert, tree.query
        for t in range(n, n + rounds):
            evict(t - n)
            insert(t, 1)
            query()

    return run


def _out_of_order_loop(tree: Any, n: int, d: int, rounds: int) -> Callable[[], None]:
    def run() -> None:
        evict, insert, query = tree.evict, tree.insert, tree.query
        for low in range(n - d, n - d + rounds):
            evict(low - (n - d))
            insert(low, 1)
            query()

    return run


def _bulk_loop(tree: Any, n: int, m: int, rounds: int) -> Callable[[], None]:
    def run() -> None:
        start = n
        for _ in range(rounds):
            tree.bulk_insert([(t, 1) for t in range(start, start + m)])
            start += m
            tree.bulk_evict(start - n - 1)
            tree.query()

    return run


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every (workload, path) figure of the run."""
    native = stores.native()
    if native is None:
        raise SystemExit(f"bench.native: no native core in this build ({stores.build()})")
    n, d, m, arity, reps = args.n, args.d, args.m, args.min_arity, args.repetitions
    high = 1 << 40
    rows: list[dict[str, Any]] = []

    def add(workload: str, path: str, unit: str, units: float, samples: list, **extra: Any) -> None:
        rows.append(
            {"workload": workload, "path": path, "unit": unit, **median_rates(samples, units)}
            | extra
        )
        print(f"  {workload:<12} {path:<34} done", file=sys.stderr)

    def rust(function: Callable[..., tuple[float, int, int]], *call: int) -> list:
        """Runs of a Rust loop: its wall time (measured in Rust, without the fill) and this
        thread's CPU time less that of a run of no rounds (the fill)."""
        *head, _rounds, arity = call
        cpu = time.thread_time()
        function(*head, 0, arity)
        fill = time.thread_time() - cpu
        samples, combines = [], 0
        for _ in range(reps):
            cpu = time.thread_time()
            seconds, combines, _check = function(*call)
            samples.append((seconds, max(time.thread_time() - cpu - fill, 1e-9)))
        rows_extra["combines"] = combines
        return samples

    def python_api(make: Callable[[], Any], loop: Callable[[Any], Callable[[], None]]) -> list:
        return [wall_and_cpu_s(loop(make())) for _ in range(reps)]

    rows_extra: dict[str, Any] = {}
    rounds = args.rounds
    samples = rust(native.bench_in_order, n, rounds, arity)
    add("in order", "native, loop in Rust", "rounds", rounds, samples,
        combines_per_round=rows_extra["combines"] / rounds)  # fmt: skip
    for other in args.arities:
        if other != arity:
            samples = rust(native.bench_in_order, n, rounds, other)
            add("in order", f"native, loop in Rust, MIN_ARITY {other}", "rounds", rounds,
                samples, combines_per_round=rows_extra["combines"] / rounds)  # fmt: skip
    calls = args.python_rounds
    add("in order", "native, through the Python API", "rounds", calls,
        python_api(lambda: _filled(NativeFiBA(SUM, arity), n),
                   lambda tree: _in_order_loop(tree, n, calls)))  # fmt: skip
    add("in order", "Python FiBA", "rounds", calls,
        python_api(lambda: _filled(FiBA(SUM, arity), n),
                   lambda tree: _in_order_loop(tree, n, calls)))  # fmt: skip

    ooo = rounds // 4
    samples = rust(native.bench_out_of_order, n, d, ooo, arity)
    add(f"d = {d}", "native, loop in Rust", "rounds", ooo, samples,
        combines_per_round=rows_extra["combines"] / ooo)  # fmt: skip
    add(f"d = {d}", "native, through the Python API", "rounds", calls,
        python_api(lambda: _filled(NativeFiBA(SUM, arity), n, high, d),
                   lambda tree: _out_of_order_loop(tree, n, d, calls)))  # fmt: skip
    add(f"d = {d}", "Python FiBA", "rounds", calls,
        python_api(lambda: _filled(FiBA(SUM, arity), n, high, d),
                   lambda tree: _out_of_order_loop(tree, n, d, calls)))  # fmt: skip

    bulk_rounds = max(1, rounds // m // 2)
    samples = rust(native.bench_bulk, n, m, bulk_rounds, arity)
    add(f"bulk m = {m}", "native, loop in Rust", "entries", bulk_rounds * m, samples,
        combines_per_round=rows_extra["combines"] / bulk_rounds)  # fmt: skip
    python_bulk = max(1, calls // m)
    add(f"bulk m = {m}", "native, through the Python API", "entries", python_bulk * m,
        python_api(lambda: _filled(NativeFiBA(SUM, arity), n),
                   lambda tree: _bulk_loop(tree, n, m, python_bulk)))  # fmt: skip
    add(f"bulk m = {m}", "Python FiBA", "entries", python_bulk * m,
        python_api(lambda: _filled(FiBA(SUM, arity), n),
                   lambda tree: _bulk_loop(tree, n, m, python_bulk)))  # fmt: skip
    return rows


def _table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'workload':<15}{'path':<44}{'per wall s':>14}{'per CPU s':>14}{'x Python':>10}"]
    for row in rows:
        python = next(
            r for r in rows if r["workload"] == row["workload"] and r["path"].startswith("Python")
        )
        ratio = row["per_cpu_s"] / python["per_cpu_s"]
        lines.append(
            f"{row['workload']:<15}{row['path']:<44}"
            f"{row['per_wall_s'] / 1e6:>11.2f} M{row['per_cpu_s'] / 1e6:>11.2f} M{ratio:>9.1f}x"
            f"   {row['unit']}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.native", description=__doc__)
    parser.add_argument("--n", type=int, default=1 << 16, help="window size (entries)")
    parser.add_argument("--d", type=int, default=256, help="out-of-order distance")
    parser.add_argument("--m", type=int, default=1024, help="bulk size")
    parser.add_argument("--min-arity", type=int, default=4)
    parser.add_argument(
        "--arities", type=lambda v: [int(a) for a in v.split(",")], default=[4, 8, 16],
        help="MIN_ARITY values of the in-order Rust loop (besides --min-arity)",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=5_000_000, help="rounds in Rust")
    parser.add_argument("--python-rounds", type=int, default=200_000, help="through Python")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    run = announce(offline_command("bench.native", argv))
    print(f"build: {stores.build()}, MIN_ARITY {args.min_arity}, n = {args.n}, sum")
    rows = measure(args)
    print(_table(rows))
    in_order = rows[0]
    best = max(
        (r for r in rows if r["workload"] == "in order" and "Rust" in r["path"]),
        key=lambda r: r["per_cpu_s"],
    )
    met = in_order["per_cpu_s"] >= GOAL_IN_ORDER
    verdict = (
        f"goal {GOAL_IN_ORDER / 1e6:.0f}M in-order rounds/s native (MIN_ARITY {args.min_arity}): "
        f"{'met' if met else 'NOT met'} per CPU second ({in_order['per_cpu_s'] / 1e6:.2f}M; "
        f"{in_order['per_wall_s'] / 1e6:.2f}M per wall second on this load); best "
        f"{best['per_cpu_s'] / 1e6:.2f}M per CPU second ({best['path']}); the authors' C++: "
        f"{AUTHORS_CPP_IN_ORDER / 1e6:.1f}M"
    )
    print(verdict)
    extra = {"goal_in_order_rounds_per_s": GOAL_IN_ORDER, "goal_met": met, "verdict": verdict}
    write_offline_results(args.out, run, args, rows, **extra)


if __name__ == "__main__":
    main()
