"""The ``bench`` command: ``python -m bench <experiment> [--quick] [--monoids ...]``.

Also mounted in the project CLI as ``fiba bench``. Every run prints the exact command that
reproduces it, the machine, then per experiment a table, notes, and findings (targets met or
not, ratios against the baselines measured in the same run), and writes ``<name>.csv`` and
``<name>.png`` under ``--out`` (default ``bench/results``, or ``bench/results/quick`` with
``--quick``), and the whole printed report as ``report-<experiment>.txt``. Progress goes to
stderr, the report to stdout.
"""

from __future__ import annotations

import os
import shlex
import statistics
import time
from pathlib import Path

import click

from bench.algorithms import load_monoid
from bench.config import DEFAULT_MONOIDS, BenchConfig
from bench.experiments import EXPERIMENTS
from bench.machine import describe_machine
from bench.report import Finding, format_result, write_result
from bench.timing import CLOCKS

RESULTS_DIR = Path(__file__).resolve().parent / "results"
CONTENDED_SHARE = 0.8


def _monoid_names(_ctx: click.Context, _param: click.Parameter, value: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in value.split(",") if part.strip())
    if not names:
        raise click.BadParameter("give at least one monoid name")
    for name in names:
        try:
            load_monoid(name)
        except (KeyError, ValueError) as error:
            raise click.BadParameter(str(error)) from error
    return names


def _display_path(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return str(path)


def reproduce_command(experiment: str, config: BenchConfig) -> str:
    """The command line that repeats this run, every setting spelled out."""
    words = ["python", "-m", "bench", experiment]
    if config.quick:
        words.append("--quick")
    words += [
        "--monoids",
        ",".join(config.monoids),
        "--repetitions",
        str(config.repetitions),
        "--seconds",
        str(config.seconds),
        "--clock",
        config.clock,
        "--seed",
        str(config.seed),
        "--out",
        _display_path(config.out),
    ]
    return shlex.join(words)


@click.command("bench", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("experiment", type=click.Choice([*EXPERIMENTS, "all"]))
@click.option("--quick", is_flag=True, help="Small sizes and few repetitions (about 2 minutes).")
@click.option(
    "--monoids",
    default=",".join(DEFAULT_MONOIDS),
    show_default=True,
    callback=_monoid_names,
    help="Comma-separated aggregation monoids (the rounds experiment always uses sum).",
)
@click.option(
    "--repetitions",
    type=click.IntRange(min=1),
    default=None,
    help="Timed repetitions per point, median reported [default: 5, quick: 3].",
)
@click.option(
    "--seconds",
    type=click.FloatRange(min=0.001),
    default=None,
    help="Target duration of one timed repetition [default: 0.05, quick: 0.01].",
)
@click.option(
    "--clock",
    type=click.Choice(list(CLOCKS)),
    default="wall",
    show_default=True,
    help="wall: perf_counter_ns; cpu: this thread's CPU time (for a machine shared with "
    "other busy processes).",
)
@click.option("--seed", type=int, default=2026, show_default=True, help="Realistic generator seed.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory for CSV and PNG files [default: bench/results, quick: bench/results/quick].",
)
def bench(
    experiment: str,
    quick: bool,
    monoids: tuple[str, ...],
    repetitions: int | None,
    seconds: float | None,
    clock: str,
    seed: int,
    out: Path | None,
) -> None:
    """Run one benchmark EXPERIMENT of the sliding-window aggregators, or all of them."""
    config = BenchConfig(
        out=(out or (RESULTS_DIR / "quick" if quick else RESULTS_DIR)).resolve(),
        quick=quick,
        monoids=monoids,
        repetitions=repetitions or (3 if quick else 5),
        seconds=seconds or (0.01 if quick else 0.05),
        seed=seed,
        clock=clock,
        log=lambda message: click.echo(message, err=True),
    )
    lines: list[str] = []

    def say(text: str) -> None:
        click.echo(text)
        lines.append(text)

    say(f"command: {reproduce_command(experiment, config)}")
    for key, value in describe_machine().items():
        say(f"{key}: {value}")
    names = list(EXPERIMENTS) if experiment == "all" else [experiment]
    findings: list[tuple[str, Finding]] = []
    shares: list[float] = []
    started, cpu_started = time.perf_counter(), time.process_time()
    for name in names:
        began, began_cpu = time.perf_counter(), time.process_time()
        result = EXPERIMENTS[name](config)
        written = write_result(result, config.out)
        say("")
        say(format_result(result))
        say(f"wrote {', '.join(_display_path(p) for p in written)}")
        say(
            f"{name} took {time.perf_counter() - began:.1f} s "
            f"(CPU {time.process_time() - began_cpu:.1f} s)"
        )
        findings += [(name, f) for f in result.findings if f.met is not None]
        shares += [float(r["cpu_share"]) for r in result.rows if "cpu_share" in r]
    if findings:
        say("\n== targets")
        for name, finding in findings:
            say(f"[{finding.verdict()}] {name}: {finding.claim}: {finding.measured}")
    if config.clock == "wall" and shares and statistics.median(shares) < CONTENDED_SHARE:
        say(
            f"\nwarning: the machine was busy (median CPU share {statistics.median(shares):.2f} "
            "of wall time): wall-clock figures and ratios are unreliable; rerun on an idle "
            "machine or with --clock cpu"
        )
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    say(f"\ntotal {wall:.1f} s (CPU {cpu:.1f} s)")
    config.out.mkdir(parents=True, exist_ok=True)
    report = config.out / f"report-{experiment}.txt"
    report.write_text("\n".join(lines) + "\n")
    click.echo(f"wrote {_display_path(report)}")
