"""The interpreter a local Spark starts its Python workers with.

Spark puts ``SPARK_HOME/python/lib/pyspark.zip`` first on its Python workers' PYTHONPATH, and
Python compiles a zip's modules at every start (no bytecode cache): about 3x the CPU of a
worker's start (0.9 s against 0.3 s on a loaded 2-core machine). Spark waits a fixed 10 s for a
Python worker it starts directly, as for a streaming Python data source, to connect back; on a
loaded machine the compile made it miss that ("Python worker failed to connect back").
``worker_python()`` is a small shell script running this interpreter with the zip left out of
PYTHONPATH, so the workers import the installed pyspark (the same release) from its cached
bytecode. It only makes sense where the workers run on this machine (a ``local`` master).
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path

from app.brokers.kafka_jars import cache_root

WORKER_PYTHON = """#!/bin/sh
# {executable} with SPARK_HOME/python/lib/pyspark.zip left out of PYTHONPATH (written by
# spark_bridge.python_workers): the installed pyspark loads from its cached bytecode.
set -f
kept=""
IFS=:
for entry in $PYTHONPATH; do
    case "$entry" in
        */python/lib/pyspark.zip) ;;
        *) kept="${{kept:+$kept:}}$entry" ;;
    esac
done
PYTHONPATH="$kept" exec "{executable}" "$@"
"""


def worker_python(folder: Path | None = None) -> str:
    """The path of an executable that runs this interpreter with ``pyspark.zip`` left out of
    PYTHONPATH (module docstring), written once into ``folder`` (default: a folder of the
    project's cache, ``FIBA_CACHE_DIR``, per interpreter) and replaced atomically."""
    text = WORKER_PYTHON.format(executable=sys.executable)
    if folder is None:
        digest = hashlib.sha256(sys.executable.encode()).hexdigest()[:12]
        folder = cache_root() / "spark-python" / digest
    path = folder / "python"
    if path.is_file() and os.access(path, os.X_OK) and path.read_text() == text:
        return str(path)
    folder.mkdir(parents=True, exist_ok=True)
    fd, staged = tempfile.mkstemp(dir=folder, prefix=".python-")
    with os.fdopen(fd, "w") as file:
        file.write(text)
    os.chmod(staged, 0o755)
    os.replace(staged, path)
    return str(path)


def is_local(master: str | None) -> bool:
    """Whether Spark ``master`` runs its executors in this process's machine (``local``,
    ``local[n]``, ``local[*]``, ``local[n, f]``)."""
    return master is not None and (master == "local" or master.startswith("local["))
