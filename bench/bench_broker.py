"""The broker a worker benchmark starts: ``--broker-kind embedded|kafka`` (``app.brokers.kinds``).

``bench_broker(kind)`` starts one for a ``with`` block and yields a ``BenchBroker``: its
bootstrap address, the ``broker_profile`` its clients use (``embedded`` on Tansu, ``kafka`` on
Apache Kafka) and its kind, for the results. ``add_broker_kind_option`` adds the option to an
argparse parser; ``results_path`` names a results file per kind (the embedded one keeps the
historical name).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.brokers.kinds import BROKER_KINDS, make_broker


@dataclass(frozen=True, slots=True)
class BenchBroker:
    """A running broker as a benchmark's clients see it."""

    bootstrap: str
    profile: str
    kind: str


def add_broker_kind_option(parser: argparse.ArgumentParser) -> None:
    """``--broker-kind`` (default ``embedded``) on ``parser``."""
    parser.add_argument(
        "--broker-kind",
        choices=sorted(BROKER_KINDS),
        default="embedded",
        help="the broker to start: embedded (Tansu, in memory) or kafka (Apache Kafka, KRaft)",
    )


@contextlib.contextmanager
def bench_broker(kind: str) -> Iterator[BenchBroker]:
    """A fresh broker of ``kind`` for the ``with`` block, stopped afterwards."""
    with make_broker(kind) as broker:
        yield BenchBroker(broker.bootstrap, broker.profile, kind)


def write_results(results: list[dict[str, Any]], path: Path, kind: str) -> None:
    """End a broker benchmark's run: print the load average after it, then write ``results``
    as JSON to ``results_path(path, kind)``."""
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"load average after (1, 5, 15 min): {load}")
    path.parent.mkdir(exist_ok=True)
    results_path(path, kind).write_text(json.dumps(results, indent=2) + "\n")


def results_path(path: Path, kind: str) -> Path:
    """``path`` for the embedded broker, ``<stem>_<kind><suffix>`` beside it for another."""
    return path if kind == "embedded" else path.with_name(f"{path.stem}_{kind}{path.suffix}")
