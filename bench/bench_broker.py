"""The broker a worker benchmark starts: ``--broker-kind embedded|kafka`` (``app.brokers.kinds``).

``bench_broker(kind)`` starts one for a ``with`` block (Apache Kafka warmed up: a fresh JVM's
compilers would otherwise charge the first cells measured, ``bench.broker_warmup``) and yields
a ``BenchBroker``: its bootstrap address, the ``broker_profile`` its clients use (``embedded``
on Tansu, ``kafka`` on Apache Kafka), its kind and process, for the results.
``add_broker_kind_option`` adds the option to an argparse parser; ``results_path`` names a
results file per kind (the embedded one keeps the historical name). ``announce_run`` prints a
run's command and machine at its start and ``write_results`` records them with the results at
its end.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.brokers.apache_kafka import SERVER_JVM_OPTIONS
from app.brokers.kinds import BROKER_KINDS, make_broker, options_keeping_old_records
from bench.broker_warmup import warm_up_sync
from bench.run_frame import announce, load_after, write_json

BENCH_BROKER_OPTIONS: dict[str, dict[str, Any]] = {
    "kafka": {"jvm_options": SERVER_JVM_OPTIONS, **options_keeping_old_records("kafka")}
}
"""``make_broker`` options of the benchmarks' brokers per kind: Apache Kafka's JVM as a server
runs it (``app.brokers.apache_kafka.SERVER_JVM_OPTIONS``; the tests' brokers start small), and
records of any age kept (the workloads' event times are from 1970: the aggregates, stamped
with them, went at Kafka's first retention check, 30 s after the start)."""


@dataclass(frozen=True, slots=True)
class BenchBroker:
    """A running broker as a benchmark's clients see it."""

    bootstrap: str
    profile: str
    kind: str
    pid: int | None = None
    """The broker's process when the benchmark started it (its CPU time), else None."""


def add_broker_kind_option(parser: argparse.ArgumentParser, default: str = "embedded") -> None:
    """``--broker-kind`` (default ``default``) on ``parser``."""
    parser.add_argument(
        "--broker-kind",
        choices=sorted(BROKER_KINDS),
        default=default,
        help="the broker to start: embedded (Tansu, in memory) or kafka (Apache Kafka, KRaft)",
    )


@contextlib.contextmanager
def bench_broker(kind: str) -> Iterator[BenchBroker]:
    """A fresh broker of ``kind`` (``BENCH_BROKER_OPTIONS``) for the ``with`` block, stopped
    afterwards; Apache Kafka warmed up first (``bench.broker_warmup``)."""
    with make_broker(kind, **BENCH_BROKER_OPTIONS.get(kind, {})) as broker:
        if kind == "kafka":
            started = time.monotonic()
            warm_up_sync(broker.bootstrap)
            print(f"broker warmed up in {time.monotonic() - started:.1f} s", flush=True)
        yield BenchBroker(broker.bootstrap, broker.profile, kind, broker.pid)


def announce_run(module: str) -> dict[str, Any]:
    """Start a broker benchmark's run: print its command (``python -m module`` and this
    process's arguments) and the machine (``bench.run_frame.announce``: CPU, cores, load
    average, date, code...); return both (``command``, ``machine``) for ``write_results``."""
    return announce(" ".join([f"python -m {module}", *sys.argv[1:]]))


def write_results(
    results: list[dict[str, Any]], path: Path, kind: str, run: dict[str, Any]
) -> None:
    """End a broker benchmark's run: print the load average after it, then write to
    ``results_path(path, kind)`` a JSON object: the run's ``command``, its start ``date``,
    the ``machine`` (``run`` from ``announce_run``), the ``load_after`` (1, 5, 15 min) and
    the ``results``."""
    document = {
        "command": run["command"],
        "date": run["machine"]["date"],
        "machine": run["machine"],
        "load_after": load_after(),
        "results": results,
    }
    write_json(results_path(path, kind), document)


def results_path(path: Path, kind: str) -> Path:
    """``path`` for the embedded broker, ``<stem>_<kind><suffix>`` beside it for another."""
    return path if kind == "embedded" else path.with_name(f"{path.stem}_{kind}{path.suffix}")
