"""Counting what only CPython's cyclic garbage collector would free.

The worker freezes its long-lived objects (``stores.gc_pause.freeze_survivors``): a frozen
object that later dies inside a reference cycle is never freed. FiBA nodes link to their
parents, so a tree or subtree dropped without being unlinked is such a cycle; the tests check
that every operation that drops one leaves none behind.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def cyclic_garbage() -> Iterator[list[object]]:
    """Run the ``with`` block with the collector off; on exit the yielded list holds every
    object that was unreachable then yet not freed by reference counting (the garbage of
    reference cycles made in the block)."""
    found: list[object] = []
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield found
        gc.collect()
        found.extend(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()
        gc.collect()
