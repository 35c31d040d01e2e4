"""``python -m bench.native``: a tiny run prints the command, machine, table and verdict and
writes its results (the figures themselves are the benchmark's, not a test's)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import stores
from bench import native


@pytest.mark.skipif(stores.native() is None, reason=f"no native core ({stores.build()})")
def test_a_tiny_run_reports_every_workload_and_writes_its_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "native.json"
    args = ["--n", "512", "--d", "16", "--m", "64", "--rounds", "3000"]
    native.main([*args, "--python-rounds", "300", "--repetitions", "1", "--out", str(out)])
    printed = capsys.readouterr().out
    assert printed.startswith("command: python -m bench.native --n 512")
    assert "load average" in printed and "goal 10M in-order rounds/s native" in printed
    results = json.loads(out.read_text())
    for workload in ("in order", "d = 16", "bulk m = 64"):
        paths = {row["path"] for row in results["results"] if row["workload"] == workload}
        assert {"native, loop in Rust", "native, through the Python API"} <= paths
        assert "Python FiBA" in paths
    assert all(row["per_cpu_s"] > 0 and row["per_wall_s"] > 0 for row in results["results"])


@pytest.mark.skipif(stores.native() is None, reason=f"no native core ({stores.build()})")
def test_the_rust_loops_measure_rounds_on_a_window_of_n_entries() -> None:
    """Each Rust loop of ``bench.native`` starts from its window of n ones (out of order: d of
    them at the young end) and keeps n entries through its rounds: every query sums to n."""
    core: Any = stores.native()
    n, rounds = 300, 50
    assert core.bench_in_order(n, rounds, 4)[2] == n * rounds
    assert core.bench_out_of_order(n, 16, rounds, 4)[2] == n * rounds
    assert core.bench_bulk(n, 20, rounds, 4)[2] == n * rounds
