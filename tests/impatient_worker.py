"""``fiba worker`` whose Faust livelock detector checks every partition after seconds, not
minutes, for tests/test_worker_health.py: Faust's ``stream_processing_timeout`` (default
300 s) is ``STREAM_PROCESSING_TIMEOUT_S``, so a false alarm such as ``Aiokafka has not sent
fetch request for TP(...)`` would show in the worker's log within a short test.

Run as ``python -m tests.impatient_worker`` with the worker's ``FIBA_*`` environment.
"""

from __future__ import annotations

from app.settings import load_settings
from app.worker import build_worker, serve

STREAM_PROCESSING_TIMEOUT_S = 4.0


def main() -> None:
    worker = build_worker(load_settings())
    worker.fiba.app.conf.stream_processing_timeout = STREAM_PROCESSING_TIMEOUT_S
    serve(worker)


if __name__ == "__main__":
    main()
