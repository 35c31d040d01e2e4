"""A progress bar of the running Spark jobs (tasks done / tasks of the active stages).

``spark_progress(spark)`` is a context manager: while its block runs, a daemon thread polls the
SparkContext's status tracker every ``interval`` seconds and shows a tqdm bar on stderr.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession


def _active_tasks(spark: SparkSession) -> tuple[int, int, list[int]]:
    """(completed tasks, total tasks, stage ids) over the currently active stages."""
    tracker = spark.sparkContext.statusTracker()
    done = total = 0
    stage_ids = list(tracker.getActiveStageIds())
    for stage_id in stage_ids:
        info = tracker.getStageInfo(stage_id)
        if info is not None:
            done += info.numCompletedTasks
            total += info.numTasks
    return done, total, stage_ids


@contextmanager
def spark_progress(
    spark: SparkSession, *, enabled: bool = True, interval: float = 0.5, desc: str = "spark"
) -> Iterator[None]:
    """Show the progress of Spark's active stages on stderr while the block runs."""
    if not enabled:
        yield
        return
    from tqdm import tqdm

    stop = threading.Event()

    def watch() -> None:
        with tqdm(desc=desc, unit="task", file=sys.stderr, leave=False) as bar:
            while not stop.wait(interval):
                done, total, stages = _active_tasks(spark)
                if stages:
                    bar.total = total
                    bar.n = done
                    bar.set_postfix_str("stages " + ",".join(map(str, stages)))
                    bar.refresh()

    thread = threading.Thread(target=watch, name="spark-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
