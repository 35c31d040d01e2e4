"""Pausing CPython's cyclic garbage collector around bulk builds.

A bulk build (restoring a partition's windows, building their FiBA indexes) allocates millions
of container objects that all stay alive. With the collector on, every few hundred allocations
trigger a young collection, and the growing heap is traversed again and again: at 10^6
restored entries that is about half of the index build (bench/worker_restore.py). The objects
built are reachable, so nothing is lost by not collecting during the build; the collector
resumes afterwards. The benchmarks (``bench.timing``) time their sections under the same
pause, so that a collection is not charged to whichever operation happened to trigger it. No
collection is forced on entry: a full collection of a large heap costs far more than the
sections it would protect.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Disable the cyclic collector for the ``with`` block, then restore its previous state.
    Nests: an inner pause leaves an outer one in force."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
