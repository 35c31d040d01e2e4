"""``fiba worker`` whose Faust livelock detector is impatient, for tests/test_worker_health.py:
Faust's ``stream_processing_timeout`` (default 300 s) is ``STREAM_PROCESSING_TIMEOUT_S`` and its
commit interval (the detector runs every 2.5 of them; default 2.8 s) ``COMMIT_INTERVAL_S``, so a
false alarm such as ``Aiokafka has not sent fetch request for TP(...)``, even one that needs
the check to fall into the instants between a rebalance and the first fetch, shows in the
worker's log within a short test.

Run as ``python -m tests.impatient_worker`` with the worker's ``FIBA_*`` environment.
"""

from __future__ import annotations

from app.settings import load_settings
from app.worker import build_worker, serve

STREAM_PROCESSING_TIMEOUT_S = 6.0
"""Long enough that a worker starved of CPU by a loaded test run (two passes, Spark JVMs, brokers
and peer jobs on two cores) still fetches within it: a true alarm is not what the tests look for."""
COMMIT_INTERVAL_S = 0.1


def main() -> None:
    worker = build_worker(load_settings())
    worker.fiba.app.conf.stream_processing_timeout = STREAM_PROCESSING_TIMEOUT_S
    worker.fiba.app.conf.broker_commit_interval = COMMIT_INTERVAL_S
    serve(worker)


if __name__ == "__main__":
    main()
