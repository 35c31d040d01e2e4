"""Keeping CPython's cyclic garbage collector out of the way of large window states.

``paused_gc``: pausing the collector around bulk builds.

A bulk build (restoring a partition's windows, building their FiBA indexes) allocates millions
of container objects that all stay alive. With the collector on, every few hundred allocations
trigger a young collection, and the growing heap is traversed again and again: at 10^6
restored entries that is about half of the index build (bench/worker_restore.py). The objects
built are reachable, so nothing is lost by not collecting during the build; the collector
resumes afterwards. The benchmarks (``bench.timing``) time their sections under the same
pause, so that a collection is not charged to whichever operation happened to trigger it. No
collection is forced on entry: a full collection of a large heap costs far more than the
sections it would protect.

``freeze_survivors``: a full collection traverses every tracked container and visits every
object it references; with window state that is a few references per retained entry, about
0.1 s per 10^5 entries on the reference machine, spent in one synchronous pause whenever the
collector decides (ever more rarely, but ever longer, as the heap grows: seconds at 10^7).
``gc.freeze()`` moves the objects alive now to the permanent generation, which collections
skip; frozen objects are still freed by reference counting when they die. The FiBA indexes
leave no reference cycle behind: their removed subtrees are unlinked, and so is every whole
tree dropped (``FiBA.clear``: a key forgotten or loaded again, a released partition), tested
in tests/test_fiba.py and tests/test_key_windows.py; so freezing them loses nothing (a
dropped tree left linked would be lost for good: one such leak, in the worker benchmark's
pre-fill, held 575,000 objects). An object of another kind that is alive
at a freeze and later dies inside a reference cycle is not reclaimed (the worker's other
long-lived objects are its clients and services, which live as long as the process;
measured: after 40 s of ``emit=batch`` at about 7,000 events/s with a freeze every 2 s (or
every 0.5 s), unfreezing found 136 (154) such objects, mostly closed sockets and their
transports, nearly all from the start-up, out of 150,000 frozen ones). The
worker freezes after every partition restore and every ``FREEZE_INTERVAL_S`` seconds
(``agents.windows``; not while a restore is building: ``freeze_survivors_unless_paused``), so
a collection only ever traverses what was allocated since the last freeze.

``PacedYoungCollections``: CPython starts a young collection when the allocations of container
objects counted since the last one pass ``gc.get_threshold()[0]`` (700). Tuples taken from the
interpreter's free lists are not counted, yet they join the young generation: the window work
allocates mostly such tuples (the partials of every combine), so in the worker an automatic
young collection came only every ~900 events and then traversed thousands of tuples: a pause
of 2-5 ms (median 2.6 ms, 11 of them over 5 ms in 20 s) at whatever point the allocation
happened, in the middle of an HTTP request's turn, say. The worker instead collects the young
generation itself after every ``YOUNG_COLLECTION_RECORDS`` input records, at a chunk
boundary: the same work in pauses of about half a millisecond (median 0.6 ms, at most 1 ms),
after which the event loop gets its turn.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused_gc(freeze: bool = False) -> Iterator[None]:
    """Disable the cyclic collector for the ``with`` block, then restore its previous state.
    Nests: an inner pause leaves an outer one in force.

    ``freeze``: on leaving the block, freeze every tracked object (``gc.freeze``, no
    collection) before the collector resumes. A build's objects all sit in the youngest
    generation, whose allocation count is then far past its threshold: the first allocation
    after the pause would start a young collection traversing the whole build (1.6-2.7 s per
    partition of 2.5*10^6 entries, measured in the worker), before any later freeze could
    spare it. Whatever cyclic garbage exists at that moment is frozen too and never
    reclaimed."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        if was_enabled:
            gc.enable()


def freeze_survivors() -> None:
    """Collect the garbage there is now, then freeze every tracked object (``gc.freeze``), so
    that later collections skip them. The collection traverses the objects allocated since
    the last freeze only. (After a bulk build, ``paused_gc(freeze=True)`` freezes without
    collecting: a collection then would traverse the whole build.)"""
    gc.collect()
    gc.freeze()


def freeze_survivors_unless_paused() -> bool:
    """``freeze_survivors()``, unless the collector is off (a bulk build under ``paused_gc``
    in progress, which freezes its own result when it ends): then nothing, as a collection
    in the middle of the build would traverse everything built so far (in one synchronous
    pause of about a second per 4*10^5 entries, repeated at every call while the build goes
    on). Returns whether it froze. For the worker's periodic freeze."""
    if not gc.isenabled():
        return False
    freeze_survivors()
    return True


YOUNG_COLLECTION_RECORDS = 200
"""Input records between two paced young collections (``PacedYoungCollections``)."""


class PacedYoungCollections:
    """Young collections (``gc.collect(0)``) paced by the records processed, run where the
    caller calls ``collect_if_due`` (a chunk boundary), never while the collector is paused
    (a bulk build). Automatic collections stay on; they just rarely come due any more."""

    __slots__ = ("_pending", "every")

    def __init__(self, every: int = YOUNG_COLLECTION_RECORDS) -> None:
        self.every = every
        self._pending = 0

    def add(self, records: int) -> None:
        """Count ``records`` more processed records."""
        self._pending += records

    def collect_if_due(self) -> bool:
        """Collect the young generation if ``every`` records were added since the last
        collection (and the collector is on). Returns whether it collected."""
        if self._pending < self.every or not gc.isenabled():
            return False
        self._pending = 0
        gc.collect(0)
        return True
