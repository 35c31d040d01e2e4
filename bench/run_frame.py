"""The frame of a benchmark run: what it prints at its start and records at its end.

``announce`` prints a run's command and the machine (``bench.machine.describe_machine``) and
returns both for its results; ``load_after`` prints and returns the load average once the run
is done; ``write_json`` writes a results document. An offline benchmark (no broker:
``bench.native``, ``bench.native_io``, ``bench.fetch_decode``) names its command with
``offline_command`` and ends with ``write_offline_results``: ``{command, machine, load_after,
build, settings, results}`` and any extra fields. The broker benchmarks' frame
(``bench.bench_broker.announce_run``, ``write_results``) is built on the same pieces.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import stores
from bench.machine import describe_machine


def announce(command: str) -> dict[str, Any]:
    """Print ``command`` and the machine's facts, a ``name: value`` line each; return both
    (``command``, ``machine``) for the run's results."""
    machine = describe_machine()
    print(f"command: {command}")
    for name, value in machine.items():
        print(f"{name}: {value}")
    return {"command": command, "machine": machine}


def offline_command(module: str, argv: list[str] | None) -> str:
    """The shell command of an offline run: ``python -m module`` and ``argv`` (this
    process's arguments when ``argv`` is empty), quoted as a shell needs."""
    return shlex.join(["python", "-m", module, *(argv or sys.argv[1:])])


def load_after() -> str:
    """The load average now (1, 5, 15 min), printed and returned as ``"0.52 0.61 0.70"``."""
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"load average after (1, 5, 15 min): {load}")
    return load


def write_json(path: Path, document: dict[str, Any]) -> None:
    """Write ``document`` to ``path`` as indented JSON (its folders made if missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")


def write_offline_results(
    path: Path,
    run: dict[str, Any],
    args: argparse.Namespace,
    results: list[dict[str, Any]],
    **extra: Any,
) -> None:
    """End an offline run: print the load after it, write to ``path`` its ``command`` and
    ``machine`` (``run`` from ``announce``), the ``load_after``, the native core's ``build``,
    the ``settings`` (``args``, paths as strings), the ``results`` and ``extra``; print the
    file's path."""
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    document = {
        "command": run["command"],
        "machine": run["machine"],
        "load_after": load_after(),
        "build": stores.build(),
        "settings": settings,
        "results": results,
        **extra,
    }
    write_json(path, document)
    print(f"results: {os.path.relpath(path)}")
