"""The progress bar of ``fiba spark-join`` / ``spark-read``: it ends at 100 % of the tasks of the
stages it saw, and stays off when stderr is not a terminal."""

from __future__ import annotations

import io
import sys
import time

import pytest

from spark_bridge.progress import spark_progress

pytestmark = pytest.mark.spark


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def slow_identity(x: int) -> int:
    time.sleep(0.3)
    return x


def test_the_bar_ends_at_100_percent_and_only_on_a_terminal(spark, monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with spark_progress(spark, interval=0.05, desc="job"):
        assert spark.sparkContext.parallelize(range(8), 4).map(slow_identity).count() == 8
    last = terminal.getvalue().split("\r")[-1]
    assert last.startswith("job: 100%") and " 4/4 " in last, terminal.getvalue()

    log = io.StringIO()  # not a terminal: every redraw would stay in it
    monkeypatch.setattr(sys, "stderr", log)
    with spark_progress(spark, interval=0.05, desc="job"):
        spark.sparkContext.parallelize(range(8), 4).map(slow_identity).count()
    assert log.getvalue() == ""
