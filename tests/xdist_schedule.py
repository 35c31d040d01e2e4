"""The xdist scheduling of ``--dist loadfile`` runs (``make test``): longest work first.

xdist's ``loadfile`` dispatches a file's tests as one unit, files with the most tests first, so
the files with a few long tests (a README session, Spark jobs, worker subprocesses) went last and
one of them made the tail of every run. ``SlowestFirstScheduling`` keeps the file units but
dispatches the files of ``SLOWEST_FILES`` first, in that order (measured, see bench/RESULTS.md
"Test suite time"), then the others as xdist orders them; the tests of a ``SPLIT_FILES`` file
are units of their own (dispatched where their file would be), so one long file spreads over the
workers. Only ``SPARK_WORKERS`` workers take the units of ``SPARK_FILES`` (each worker that does
starts a SparkSession, a JVM: the costliest fixture) while other work remains for the rest.
Ordering is O(u log u) for u units, once per run, and picking a unit O(u); every test still
runs exactly once.
"""

from __future__ import annotations

from typing import Any

from xdist.scheduler import LoadFileScheduling

# The files taking the longest on a worker, slowest first (per-file wall time of a pass).
SLOWEST_FILES = (
    "tests/test_spark_connector.py",
    "tests/test_spark_contract.py",
    "tests/test_kafka_security.py",
    "tests/test_kafka_broker.py",
    "tests/test_bench_goals.py",
    "tests/test_worker_stop.py",
    "tests/test_spark_options.py",
    "tests/test_spark_join.py",
    "tests/test_cli.py",
    "tests/test_baselines_trees.py",
    "tests/test_readme.py",
    "tests/test_state_guards.py",
    "tests/test_chaos.py",
    "tests/test_spark_schema.py",
    "tests/test_fiba.py",
    "tests/test_crash_recovery.py",
    "tests/test_peers.py",
    "tests/test_key_windows.py",
    "tests/test_window_store.py",
    "tests/test_spark_source.py",
    "tests/test_bench_smoke.py",
    "tests/test_broker_faults.py",
)
# Files whose tests are dispatched one by one: several long tests, no costly module fixture.
SPLIT_FILES = frozenset(
    {
        "tests/test_spark_connector.py",
        "tests/test_spark_contract.py",
        "tests/test_kafka_broker.py",
        "tests/test_cli.py",
        "tests/test_chaos.py",
    }
)

# The files whose tests use the session's SparkSession (tests/spark_fixtures.py).
SPARK_FILES = frozenset(
    {
        "tests/test_docs.py",
        "tests/test_kafka_security.py",
        "tests/test_spark_connector.py",
        "tests/test_spark_contract.py",
        "tests/test_spark_join.py",
        "tests/test_spark_options.py",
        "tests/test_spark_schema.py",
        "tests/test_spark_source.py",
    }
)
SPARK_WORKERS = 2


def file_of(nodeid: str) -> str:
    """The file part of a test id (``tests/test_x.py::test_y[p]`` -> ``tests/test_x.py``)."""
    return nodeid.split("::", 1)[0]


def dispatch_rank(scope: str) -> int:
    """Where a unit of ``scope`` goes in the dispatch order: the position of its file in
    ``SLOWEST_FILES``, or ``len(SLOWEST_FILES)`` for every other file (their order kept)."""
    file = file_of(scope)
    return SLOWEST_FILES.index(file) if file in SLOWEST_FILES else len(SLOWEST_FILES)


class SlowestFirstScheduling(LoadFileScheduling):
    """``loadfile`` with the dispatch order and the split files of the module docstring."""

    def __init__(self, config: Any, log: Any = None) -> None:
        super().__init__(config, log)
        self._ordered = False
        self._spark_nodes: set[Any] = set()

    def _split_scope(self, nodeid: str) -> str:
        file = file_of(nodeid)
        return nodeid if file in SPLIT_FILES else file

    def _assign_work_unit(self, node: Any) -> None:
        if not self._ordered:  # the work queue is complete before the first unit is assigned
            for scope in sorted(self.workqueue, key=dispatch_rank):
                self.workqueue.move_to_end(scope)
            self._ordered = True
        if node not in self._spark_nodes and len(self._spark_nodes) >= SPARK_WORKERS:
            without_spark = (s for s in self.workqueue if file_of(s) not in SPARK_FILES)
            scope = next(without_spark, None)
            if scope is not None:
                self.workqueue.move_to_end(scope, last=False)
        if file_of(next(iter(self.workqueue))) in SPARK_FILES:
            self._spark_nodes.add(node)
        super()._assign_work_unit(node)
