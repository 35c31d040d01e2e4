"""A progress bar of the Spark jobs a block runs (tasks done / tasks of the stages seen).

``spark_progress(spark)`` is a context manager: while its block runs, a daemon thread polls the
SparkContext's status tracker every ``interval`` seconds and shows a tqdm bar on stderr. Spark
does not know a block's future jobs, so the bar counts the tasks of every stage it has seen
running since the block began (the total grows as stages start); when the block ends, one last
poll finds them all complete and the bar is left at 100 %. Stages skipped (their shuffle output
reused) never run and never count; a stage that starts and ends between two polls is missed by
both counts. Off when stderr is not a terminal (a log or a pipe would keep every redraw).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pyspark.sql import SparkSession

SETTLE_S = 2.0
"""How long the last poll waits for the tracker to count the block's last tasks (Spark's
listener bus delivers task ends asynchronously, usually within milliseconds)."""


class StageTasks:
    """The tasks of the stages seen running so far (``poll``), done and in total."""

    def __init__(self, spark: SparkSession) -> None:
        self.tracker = spark.sparkContext.statusTracker()
        self.seen: set[int] = set()
        self.active: list[int] = []

    def poll(self) -> tuple[int, int]:
        """(completed tasks, tasks) over every stage seen so far, the active ones added now.

        One status tracker call per stage seen: O(stages of the block)."""
        self.active = sorted(self.tracker.getActiveStageIds())
        self.seen.update(self.active)
        done = total = 0
        for stage_id in self.seen:
            info = self.tracker.getStageInfo(stage_id)
            if info is not None:
                done += info.numCompletedTasks
                total += info.numTasks
        return done, total


def _show(bar: Any, tasks: StageTasks) -> tuple[int, int]:
    done, total = tasks.poll()
    if total:
        bar.total = total
        bar.n = done
        bar.set_postfix_str("stages " + ",".join(map(str, tasks.active)) if tasks.active else "")
        bar.refresh()
    return done, total


@contextmanager
def spark_progress(
    spark: SparkSession, *, enabled: bool = True, interval: float = 0.5, desc: str = "spark"
) -> Iterator[None]:
    """Show the progress of the block's Spark stages on stderr while it runs (see module)."""
    if not enabled or not sys.stderr.isatty():
        yield
        return
    from tqdm import tqdm

    stop = threading.Event()
    tasks = StageTasks(spark)
    bar = tqdm(desc=desc, unit="task", file=sys.stderr, leave=False)

    def watch() -> None:
        while not stop.wait(interval):
            _show(bar, tasks)

    thread = threading.Thread(target=watch, name="spark-progress", daemon=True)
    thread.start()
    finished = False
    try:
        yield
        finished = True
    finally:
        stop.set()
        thread.join()
        if finished and tasks.seen:  # every stage seen has completed: 100 %
            deadline = time.monotonic() + SETTLE_S
            done, total = _show(bar, tasks)
            while done < total and time.monotonic() < deadline:
                time.sleep(interval / 10)
                done, total = _show(bar, tasks)
            bar.leave = True
        bar.close()
