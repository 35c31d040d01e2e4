"""``builds``: the FiBA core compiled (mypyc) against its pure-Python build, in one process.

Issue 20: in-order rounds (evict oldest + insert + query, sum) at least 3x the pure-Python
build, out-of-order rounds (inserts d from the young end) and bulk batch rounds (``bulk_evict``
then ``bulk_insert`` of m entries, one query) no slower. The pure-Python build is the same
source loaded beside the compiled one (``stores.load_pure``), each tree over its own build's
``sum`` monoid, and every workload's repetitions are interleaved, so the ratios come from one
run on one machine state. Without a compiled build (no compiler at install time, or
``FIBA_PURE_PYTHON=1``) both rows measure pure Python and the findings say so. With
``--baseline REV`` the pure-Python core of git revision ``REV`` (its ``stores/fiba.py`` over its
``stores/monoids.py``) is measured in the same run too, and both current builds are compared
with it (issue 20's "today").
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from bench.config import BenchConfig
from bench.experiments.common import log2_label
from bench.report import ExperimentResult, Finding, subplots
from bench.timing import Workload, gc_paused
from bench.workloads import AdversarialWindow

IN_ORDER_TARGET = 3.0
BULK_M = 1024
OUT_OF_ORDER_D = 256


ROOT = Path(__file__).resolve().parents[2]


def revision_exists(revision: str) -> bool:
    """Whether ``revision`` names a commit of the repository this benchmark lives in."""
    done = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"],
        cwd=ROOT,
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


def _load_revision(revision: str, name: str) -> ModuleType:
    """Module ``name`` (``stores.fiba`` or ``stores.monoids``) as pure Python from the source
    of git revision ``revision``, as a module of its own, ``<revision>:<name>``."""
    path = name.replace(".", "/") + ".py"
    source = subprocess.run(
        ["git", "show", f"{revision}:{path}"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    module = ModuleType(f"{revision}:{name}")
    sys.modules[module.__name__] = module  # dataclasses look their module up while it executes
    exec(compile(source, f"{revision}:{path}", "exec"), module.__dict__)
    return module


def _builds(baseline: str | None) -> dict[str, tuple[ModuleType, ModuleType]]:
    """``(fiba module, monoids module)`` per build label; the current pure build last."""
    import stores.fiba
    import stores.monoids

    builds = {stores.build().partition("+")[0]: (stores.fiba, stores.monoids)}  # (mypyc part)
    if baseline:
        builds[f"pure Python at {baseline}"] = (
            _load_revision(baseline, "stores.fiba"),
            _load_revision(baseline, "stores.monoids"),
        )
    builds["pure Python"] = (stores.load_pure("stores.fiba"), stores.load_pure("stores.monoids"))
    return builds


def run(config: BenchConfig) -> ExperimentResult:
    """Rounds/s in order and out of order, entries/s of bulk batch rounds, per build."""
    n = config.pick(2**16, 2**12)
    result = ExperimentResult(
        "builds",
        f"FiBA (min_arity 4, sum) compiled vs pure Python, n={log2_label(n)}",
        ["operation", "build", "per_second", "ns_each", "spread", "cpu_share", "speedup"],
        draw=_draw,
    )
    per_op = {"round d=0": 1, f"round d={OUT_OF_ORDER_D}": 1, f"bulk m={BULK_M}": BULK_M}
    workloads: dict[tuple[str, str], Workload] = {}
    for label, (fiba, monoids) in _builds(config.baseline).items():
        with gc_paused():
            for operation, d in (("round d=0", 0), (f"round d={OUT_OF_ORDER_D}", OUT_OF_ORDER_D)):
                window = AdversarialWindow(fiba.FiBA(monoids.monoid("sum"), 4), n, d)
                workloads[operation, label] = Workload(window.rounds, max_count=2_000_000)
            window = AdversarialWindow(fiba.FiBA(monoids.monoid("sum"), 4), n)
            workloads[f"bulk m={BULK_M}", label] = Workload(
                _batch_rounds(window), max_count=100_000
            )
    measured = config.throughputs(workloads)
    labels = list(dict.fromkeys(label for _, label in workloads))
    for operation in per_op:
        base = measured[operation, labels[-1]].ops_per_second
        for label in labels:
            tp = measured[operation, label]
            result.add(
                operation=operation,
                build=label,
                per_second=tp.ops_per_second * per_op[operation],
                ns_each=tp.ns_per_op / per_op[operation],
                spread=tp.spread,
                cpu_share=tp.cpu_share,
                speedup=tp.ops_per_second / base,
            )
    result.notes.append(
        "per_second: rounds/s, or entries/s for bulk (m entries evicted and m inserted per "
        "batch round); speedup: against the pure-Python build measured beside it"
    )
    _findings(result, labels[0])
    if config.baseline:
        _baseline_findings(result, labels[0], labels[1], list(per_op))
    return result


def _baseline_findings(
    result: ExperimentResult, loaded: str, baseline: str, operations: list[str]
) -> None:
    """The loaded build and the current pure one against the baseline's pure build."""

    def ratio(operation: str, label: str) -> float:
        return result.value("speedup", operation=operation, build=label) / result.value(
            "speedup", operation=operation, build=baseline
        )

    result.findings.append(
        Finding(
            f"in-order rounds {loaded} >= {IN_ORDER_TARGET:g}x {baseline} (issue 20)",
            f"{ratio('round d=0', loaded):.2f}x",
            ratio("round d=0", loaded) >= IN_ORDER_TARGET,
        )
    )
    for operation in operations:
        result.findings.append(
            Finding(
                f"{operation}: pure Python no slower than {baseline}",
                f"{ratio(operation, 'pure Python'):.2f}x",
                ratio(operation, "pure Python") >= 1.0,
            )
        )


def _batch_rounds(window: AdversarialWindow) -> Callable[[int], None]:
    """``count`` batch rounds of ``BULK_M`` entries through the bulk operations."""

    def run(count: int) -> None:
        window.batch_rounds(count, BULK_M, bulk_evict=True, bulk_insert=True)

    return run


def _findings(result: ExperimentResult, loaded: str) -> None:
    def speedup(operation: str) -> float:
        return result.value("speedup", operation=operation, build=loaded)

    compiled = loaded == "compiled"
    suffix = "" if compiled else f" (the {loaded} build is loaded: nothing compiled to compare)"
    result.findings.append(
        Finding(
            f"in-order rounds compiled >= {IN_ORDER_TARGET:g}x pure Python (issue 20)",
            f"{speedup('round d=0'):.2f}x{suffix}",
            compiled and speedup("round d=0") >= IN_ORDER_TARGET,
        )
    )
    for operation in (f"round d={OUT_OF_ORDER_D}", f"bulk m={BULK_M}"):
        result.findings.append(
            Finding(
                f"{operation}: compiled no slower than pure Python",
                f"{speedup(operation):.2f}x{suffix}",
                compiled and speedup(operation) >= 1.0,
            )
        )


def _draw(result: ExperimentResult):
    operations = list(dict.fromkeys(str(r["operation"]) for r in result.rows))
    figure, axes = subplots(len(operations), title=result.title)
    for axis, operation in zip(axes, operations, strict=False):
        rows = result.select(operation=operation)
        axis.bar([str(r["build"]) for r in rows], [float(r["per_second"]) for r in rows])
        axis.set_title(operation, fontsize="small")
        axis.set_ylabel("entries per second" if operation.startswith("bulk") else "rounds/s")
        for index, row in enumerate(rows):
            axis.annotate(f"{float(row['speedup']):.2f}x", (index, float(row["per_second"])))
    return figure
