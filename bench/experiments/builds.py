"""``builds``: the FiBA core compiled (mypyc) against its pure-Python build, in one process.

Issue 20: in-order rounds (evict oldest + insert + query, sum) at least 3x the pure-Python
build, out-of-order rounds (inserts d from the young end) and bulk batch rounds (``bulk_evict``
then ``bulk_insert`` of m entries, one query) no slower. The pure-Python build is the same
source loaded beside the compiled one (``stores.load_pure``), each tree over its own build's
``sum`` monoid, and every workload's repetitions are interleaved, so the ratios come from one
run on one machine state. Without a compiled build (no compiler at install time, or
``FIBA_PURE_PYTHON=1``) both rows measure pure Python and the findings say so.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from bench.config import BenchConfig
from bench.experiments.common import log2_label
from bench.report import ExperimentResult, Finding, subplots
from bench.timing import Workload, gc_paused
from bench.workloads import AdversarialWindow

IN_ORDER_TARGET = 3.0
BULK_M = 1024
OUT_OF_ORDER_D = 256


def _builds() -> dict[str, tuple[ModuleType, ModuleType]]:
    """``(fiba module, monoids module)`` per build label."""
    import stores.fiba
    import stores.monoids

    return {
        stores.build(): (stores.fiba, stores.monoids),
        "pure Python": (stores.load_pure("stores.fiba"), stores.load_pure("stores.monoids")),
    }


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
    for label, (fiba, monoids) in _builds().items():
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
    return result


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
