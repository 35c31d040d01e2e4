"""How ``make test`` runs the suite on xdist workers: the dispatch order of ``--dist loadfile``
(tests/xdist_schedule.py) and the session brokers the workers share (tests/conftest.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

from tests.xdist_schedule import (
    SLOWEST_FILES,
    SPARK_FILES,
    SPARK_WORKERS,
    SPLIT_FILES,
    SlowestFirstScheduling,
)

ROOT = Path(__file__).resolve().parent.parent


class FakeNode:
    """An xdist worker as the scheduler sees it: it records the test ids sent to it."""

    def __init__(self, name: str, sent: list[tuple[str, str]], collection: list[str]) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self._sent, self._collection = sent, collection

    def send_runtest_some(self, indexes: list[int]) -> None:
        self._sent += [(self.gateway.id, self._collection[i]) for i in indexes]

    def shutdown(self) -> None:
        self.shutting_down = True


def initial_dispatch(collection: list[str], workers: int) -> list[tuple[str, str]]:
    """``(worker, test id)`` in the order the scheduler first sends them to ``workers`` nodes."""
    option = SimpleNamespace(tx=[f"{workers}*popen"], loadscopereorder=True)
    config = SimpleNamespace(option=option, getvalue=lambda name: getattr(option, name))
    scheduler = SlowestFirstScheduling(config)
    sent: list[tuple[str, str]] = []
    for i in range(workers):
        node = FakeNode(f"gw{i}", sent, collection)
        scheduler.add_node(node)
        scheduler.add_node_collection(node, collection)
    scheduler.schedule()
    return sent


def test_loadfile_sends_the_slowest_files_first_and_splits_the_split_files() -> None:
    split = next(f for f in SLOWEST_FILES if f in SPLIT_FILES)
    slow = next(f for f in SLOWEST_FILES[SLOWEST_FILES.index(split) :] if f not in SPLIT_FILES)
    many = [f"tests/test_many.py::test_{i}" for i in range(20)]  # xdist alone: most tests first
    collection = [*many, f"{slow}::test_a", f"{slow}::test_b", f"{split}::test_a"]
    collection.append(f"{split}::test_b")
    sent = initial_dispatch(collection, workers=2)
    # each worker starts on one test of the split file, then the slow file's unit comes
    assert sent[:2] == [("gw0", f"{split}::test_a"), ("gw1", f"{split}::test_b")]
    assert sent[2:4] == [("gw0", f"{slow}::test_a"), ("gw0", f"{slow}::test_b")]
    assert sent[4:] == [("gw1", test) for test in many]


def test_only_spark_workers_take_spark_files_while_other_work_remains() -> None:
    spark = next(f for f in SLOWEST_FILES if f in SPARK_FILES and f in SPLIT_FILES)
    others = [f"tests/test_many.py::test_{i}" for i in range(20)]
    workers = SPARK_WORKERS + 1
    sent = initial_dispatch([f"{spark}::test_{i}" for i in range(4)] + others, workers)
    assert {w for w, test in sent if test.startswith(spark)} == {
        f"gw{i}" for i in range(workers - 1)
    }
    assert [test for w, test in sent if w == f"gw{workers - 1}"] == others


SHARING_TEST = """
import os

def test_records_its_broker(kafka_bootstrap):
    with open(os.environ["SEEN"], "a") as seen:
        seen.write(f"{os.environ['PYTEST_XDIST_WORKER']} {kafka_bootstrap}\\n")
"""


def test_xdist_workers_share_one_session_broker_stopped_at_the_end(tmp_path: Path) -> None:
    """A run on two workers, a test file each: both get the same broker, the controller's,
    which no longer listens after the run."""
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["tests.conftest"]\n')
    for name in ("test_one.py", "test_two.py"):
        (tmp_path / name).write_text(textwrap.dedent(SHARING_TEST))
    seen = tmp_path / "seen.txt"
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP"}
    env |= {"TEST_BROKER_KINDS": "embedded", "SEEN": str(seen), "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-n",
            "2",
            "--dist",
            "loadfile",
            "-p",
            "no:cacheprovider",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    seen_by = dict(line.split() for line in seen.read_text().splitlines())
    assert sorted(seen_by) == ["gw0", "gw1"]
    assert seen_by["gw0"] == seen_by["gw1"]
    host, port = seen_by["gw0"].rsplit(":", 1)
    with socket.socket() as probe:
        assert probe.connect_ex((host, int(port))) != 0, "the shared broker still listens"
