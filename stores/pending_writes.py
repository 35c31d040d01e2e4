"""The window store's coalesced local writes of a partition, in Python.

``PyPendingWrites`` is the pure-Python twin of ``stores._native.PendingWrites`` (used when the
native core does not write the store, ``stores.window_store._native_writes``): per entry id
its latest operation since the last write-out, ``puts[id]`` = its partial bytes or None
(deleted), and ``fresh``, the ids first put at a time after the store's horizon (not in the
local copy, so deleting one drops it). The store's Python write loops update ``puts`` and
``fresh`` directly; ``take`` hands a write-out its operations in entry id order
(``PySortedWrites``, the twin of ``stores._native.SortedWrites``). Both twins give the same
``items``, ``fresh_ids`` and write-outs (tests/test_store_writes.py).
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter


class PySortedWrites:
    """A write-out's operations in entry id order: ``fill(put, delete, start, stop)`` writes
    items ``start..stop`` in order, ``put(entry id, bytes)`` or ``delete(entry id)`` for None,
    and returns their number. O(p log p) to build."""

    def __init__(self, puts: dict[bytes, bytes | None]) -> None:
        self._items = sorted(puts.items(), key=itemgetter(0))

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, index: int) -> tuple[bytes, bytes | None]:
        return self._items[index]

    def fill(
        self,
        put: Callable[[bytes, bytes], object],
        delete: Callable[[bytes], object],
        start: int,
        stop: int,
    ) -> int:
        items = self._items[start:stop]
        for eid, data in items:
            if data is None:
                delete(eid)
            else:
                put(eid, data)
        return len(items)


class PyPendingWrites:
    """The coalesced local writes (see the module doc): ``puts`` and ``fresh``, updated by
    the store's Python write loops. O(1) per operation noted."""

    __slots__ = ("fresh", "puts")

    def __init__(self) -> None:
        self.puts: dict[bytes, bytes | None] = {}
        self.fresh: set[bytes] = set()

    def __len__(self) -> int:
        return len(self.puts)

    def items(self) -> list[tuple[bytes, bytes | None]]:
        """``(entry id, partial bytes or None)`` in entry id order."""
        return sorted(self.puts.items(), key=itemgetter(0))

    def fresh_ids(self) -> list[bytes]:
        """The fresh entries' ids in entry id order."""
        return sorted(self.fresh)

    def take(self) -> PySortedWrites:
        """The operations in entry id order, leaving this empty."""
        writes = PySortedWrites(self.puts)
        self.puts, self.fresh = {}, set()
        return writes


def forget(puts: dict[bytes, bytes | None], fresh: set[bytes], eid: bytes) -> None:
    """Note the deletion of entry ``eid``: dropped if it is ``fresh`` (not in the local copy),
    else a delete."""
    if eid in fresh:
        fresh.discard(eid)
        del puts[eid]
    else:
        puts[eid] = None
