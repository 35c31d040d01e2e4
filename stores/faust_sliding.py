"""A Faust table store keeping ``(key, t) -> partial`` entries as FiBA sliding windows.

``SlidingStore`` is the storage driver of a ``faust.Table`` over a
``stores.sliding_state.SlidingState``: the table's entries are ``(key, t)`` pairs with the
monoid's JSON states as values, kept as one FiBA per key; Faust does the changelog (one record
per changed entry, a tombstone per eviction), recovery and standby replicas through
``apply_changelog_batch`` (idempotent replay). Applied changelog offsets are kept in memory, as
Faust's memory store does. One changelog record costs one ``put`` or ``remove``, O(log d).
Design: docs/design/faust-api.md.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, MutableMapping
from typing import Any

from faust.stores.base import Store
from faust.streams import current_event
from faust.types import TP, EventT

from stores.sliding_state import SlidingState


class SlidingEntries(MutableMapping):
    """The store's entries as a mapping ``(key, t) -> state`` (what ``faust.Table`` sees)."""

    def __init__(self, state: SlidingState) -> None:
        self._state = state
        self._to_state = getattr(state.monoid, "to_state", _same)
        self._from_state = getattr(state.monoid, "from_state", _same)

    def __getitem__(self, entry: Any) -> Any:
        key, t = _split(entry)
        partial = self._state.entry(key, t)
        if partial is None:
            raise KeyError(entry)
        return self._to_state(partial)

    def __setitem__(self, entry: Any, value: Any) -> None:
        key, t = _split(entry)
        partition = self._state.partition_of(key)
        if partition is None:
            event = current_event()
            if event is None:
                raise TypeError("set a new key's entry while iterating a stream")
            partition = event.message.partition
        self._state.put(partition, key, t, self._from_state(value))

    def __delitem__(self, entry: Any) -> None:
        key, t = _split(entry)
        partition = self._state.partition_of(key)
        if partition is None or not self._state.remove(partition, key, t):
            raise KeyError(entry)

    def __iter__(self) -> Iterator[tuple[Hashable, int]]:
        return ((key, t) for key, t, _ in self._state.entries())

    def __len__(self) -> int:
        return len(self._state)

    def clear(self) -> None:
        self._state.clear()


class SlidingStore(Store):
    """Faust storage driver of a sliding-window table (see the module doc); ``sliding`` is the
    ``SlidingState`` it keeps."""

    def __init__(self, url: Any, app: Any, table: Any, *, state: SlidingState, **kwargs: Any):
        super().__init__(url, app, table, **kwargs)
        self.sliding = state
        self.data = SlidingEntries(state)
        self._offsets: dict[TP, int] = {}

    def apply_changelog_batch(
        self,
        batch: Iterable[EventT],
        to_key: Callable[[Any], Any],
        to_value: Callable[[Any], Any],
    ) -> None:
        """Apply changelog records in order: a value sets its entry, a tombstone deletes it."""
        state = self.sliding
        from_state = self.data._from_state
        offsets = self._offsets
        for event in batch:
            message = event.message
            key, t = _split(to_key(event.key))
            if message.value is None:
                state.remove(message.partition, key, t)
            else:
                state.put(message.partition, key, t, from_state(to_value(event.value)))
            tp = message.tp
            if message.offset > offsets.get(tp, -1):
                offsets[tp] = message.offset

    def persisted_offset(self, tp: TP) -> int | None:
        """The last changelog offset applied or written here for ``tp`` (None: none)."""
        return self._offsets.get(tp)

    def set_persisted_offset(self, tp: TP, offset: int) -> None:
        if offset > self._offsets.get(tp, -1):
            self._offsets[tp] = offset

    async def on_recovery_completed(self, active_tps: set[TP], standby_tps: set[TP]) -> None:
        """Drop the partitions that are neither active nor standby here."""
        kept = {tp.partition for tp in active_tps | standby_tps}
        for partition in self.sliding.partitions():
            if partition not in kept:
                self.sliding.drop_partition(partition)
        for tp in list(self._offsets):
            if tp.partition not in kept:
                del self._offsets[tp]

    def reset_state(self) -> None:
        """Nothing on disk to remove."""

    async def backup_partition(
        self, tp: Any, flush: bool = True, purge: bool = False, keep: int = 1
    ) -> None:
        """No backups of memory."""

    def restore_backup(self, tp: Any, latest: bool = True, backup_id: int = 0) -> None:
        """No backups of memory."""


def _same(x: Any) -> Any:
    return x


def _split(entry: Any) -> tuple[Hashable, int]:
    """``(key, t)`` of a table key; ``TypeError`` for anything else."""
    if not (isinstance(entry, tuple | list) and len(entry) == 2 and type(entry[1]) is int):
        raise TypeError(f"a sliding-window table key is (key, int time), got {entry!r}")
    key = entry[0]
    return (tuple(key) if isinstance(key, list) else key), entry[1]
