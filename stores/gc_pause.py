"""Keeping CPython's cyclic garbage collector out of the way of large window states.

The window state is millions of long-lived container objects, which every collection would
traverse again. ``paused_gc`` switches the collector off around a bulk build (nothing built is
garbage; optionally freezing the result when it ends); ``freeze_survivors`` collects once and
moves every live object to the permanent generation (``gc.freeze``), so that later collections
traverse only what was allocated since (the FiBA trees leave no reference cycle behind, so
freezing them loses nothing); ``PacedYoungCollections`` runs the young collections itself every
``YOUNG_COLLECTION_RECORDS`` records at a chunk boundary, in short pauses, instead of wherever
an allocation happens to cross CPython's threshold. Each call costs one collection of what is
not frozen (``paused_gc``: none). Measured pauses: ``bench/RESULTS.md`` ("Figures moved out of
the code").
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
    after the pause would start a young collection traversing the whole build, before any
    later freeze could spare it. Whatever cyclic garbage exists at that moment is frozen too
    and never reclaimed."""
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
    pause, repeated at every call while the build goes on). Returns whether it froze. For
    the worker's periodic freeze."""
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
