"""``spark_bridge.python_workers``: the interpreter a local Spark starts its Python workers with
leaves ``pyspark.zip`` out of their PYTHONPATH and keeps every other entry; it is written once
per interpreter into the cache, and only local masters use it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from spark_bridge.python_workers import is_local, worker_python

pytestmark = pytest.mark.once


def test_the_worker_interpreter_drops_only_the_pyspark_zip(tmp_path):
    path = worker_python(tmp_path)
    kept = ["/opt/a b/lib", "/srv/site.zip", "/x/python/lib/py4j-0.10.9.9-src.zip"]
    entries = ["/opt/spark/python/lib/pyspark.zip", kept[0], kept[1], kept[2]]
    done = subprocess.run(
        [path, "-c", "import os; print(os.environ['PYTHONPATH'])"],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(entries)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip().split(os.pathsep) == kept


def test_the_worker_interpreter_is_this_one_and_cached_per_interpreter(tmp_path, monkeypatch):
    monkeypatch.setenv("FIBA_CACHE_DIR", str(tmp_path))
    path = worker_python()
    assert path.startswith(str(tmp_path / "spark-python"))
    assert worker_python() == path
    done = subprocess.run(
        [path, "-c", "import sys; print(sys.executable)"], capture_output=True, text=True
    )
    assert done.stdout.strip() == sys.executable


@pytest.mark.parametrize(
    ("master", "local"),
    [
        ("local", True),
        ("local[2]", True),
        ("local[*]", True),
        ("local[2, 3]", True),
        ("spark://h:7077", False),
        ("yarn", False),
        ("localhost", False),
        (None, False),
    ],
)
def test_only_local_masters_use_it(master, local):
    assert is_local(master) is local
