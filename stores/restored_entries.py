"""The in-memory entries of a window-store restore, replayed and turned into windows natively.

A restore gathers ``entry id -> partial bytes`` (a local copy's items, then the changelog
replayed on top: the last record of an entry wins, tombstones and the deletions inside upserts
remove it), then turns them into ``{key: [(time, partial), ...]}`` in time order, decoding each
partial once. ``restored_entries()`` gives the native ``stores._native.RestoredEntries`` when
the native core is installed (a fetched record batch replayed in one call, the sort, grouping and
``marshal`` decoding of the built-in partials in one more), else ``PyEntries``, the same in
Python. Both replay by ``stores.changelog.replay_changelog``'s rules and decode to the objects
the codec's ``decode`` gives (tests/test_restored_entries.py); a batch or partial the native
code does not know (compressed batch, an object outside its ``marshal`` subset) goes through the
Python path. Costs: docs/design/window-store.md ("How a restore runs").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import groupby, repeat
from operator import itemgetter, sub
from typing import Any, Protocol

import stores
from stores.changelog import ChangelogRecord, FetchedBatch, replay_changelog

MARSHAL_FORMAT = "marshal-state/1"
"""The codec format whose partials the native code decodes itself
(``stores.window_store.MarshalStateCodec``)."""
_TIME_BIAS = 1 << 63
_KEY_PREFIX = itemgetter(slice(None, -8))


class RestoredEntries(Protocol):
    """``entry id -> partial bytes`` of one restore; ``PyEntries`` or the native twin."""

    def __len__(self) -> int: ...

    def put(self, key: bytes, value: bytes) -> None: ...

    def delete(self, key: bytes) -> None: ...

    def pop(self, key: bytes) -> bytes | None: ...

    def extend(self, items: Iterable[tuple[bytes, bytes]]) -> None: ...

    def replay_batch(
        self, data: bytes, pos: int, size: int, min_offset: int, applied: int
    ) -> tuple[int, int] | None: ...

    def windows(
        self, decode: Callable[[bytes], Any], marshal: bool
    ) -> dict[str, list[tuple[int, Any]]]: ...

    def sorted_items(self, start: int, stop: int) -> list[tuple[bytes, bytes]]: ...


def restored_entries() -> RestoredEntries:
    """Empty entries: native when the native core is installed, else ``PyEntries``."""
    native = stores.native()
    return native.RestoredEntries() if native is not None else PyEntries()


def replay_batches(
    entries: RestoredEntries, batches: Iterable[Iterable[ChangelogRecord]], applied: int
) -> tuple[int, int]:
    """Replay record ``batches`` (in order) into ``entries``: each ``FetchedBatch`` in one
    ``replay_batch`` call when ``entries`` can, else record by record. Returns ``(applied
    offset, records replayed)``. O(records + deleted times)."""
    replayed = 0
    for batch in batches:
        done = None
        if isinstance(batch, FetchedBatch):
            done = entries.replay_batch(
                batch.data, batch.pos, batch.size, batch.min_offset, applied
            )
        if done is None:
            done = replay_changelog(batch, applied, entries.put, entries.delete)
        applied, count = done
        replayed += count
    return applied, replayed


class PyEntries:
    """``RestoredEntries`` in Python: a dict, sorted once by ``windows``."""

    def __init__(self) -> None:
        self._map: dict[bytes, bytes] = {}
        self._sorted: list[bytes] | None = None

    def __len__(self) -> int:
        return len(self._map)

    def put(self, key: bytes, value: bytes) -> None:
        self._map[key] = value

    def delete(self, key: bytes) -> None:
        self._map.pop(key, None)

    def pop(self, key: bytes) -> bytes | None:
        return self._map.pop(key, None)

    def extend(self, items: Iterable[tuple[bytes, bytes]]) -> None:
        self._map.update(items)

    def replay_batch(
        self, data: bytes, pos: int, size: int, min_offset: int, applied: int
    ) -> tuple[int, int] | None:
        """None: the caller replays the batch's records (``replay_changelog``)."""
        return None

    def windows(
        self, decode: Callable[[bytes], Any], marshal: bool
    ) -> dict[str, list[tuple[int, Any]]]:
        """Grouped by key, each key's ``(time, partial)`` list in time order; one sort of the
        entry ids, C-level maps per key, one ``decode_many`` per key when ``decode`` is a
        bound method of a codec that has it. ``marshal`` is the native twin's hint only."""
        codec = getattr(decode, "__self__", None)
        decode_many = getattr(codec, "decode_many", None)
        if decode_many is None:

            def decode_many(data: list[bytes]) -> list[Any]:
                return [decode(d) for d in data]

        ids = self._sorted = sorted(self._map)
        partial_bytes = self._map.__getitem__
        windows: dict[str, list[tuple[int, Any]]] = {}
        for prefix, group in groupby(ids, _KEY_PREFIX):
            eids = list(group)
            time_bytes = map(itemgetter(slice(len(prefix), None)), eids)
            times = map(sub, map(int.from_bytes, time_bytes), repeat(_TIME_BIAS))
            partials = decode_many(list(map(partial_bytes, eids)))
            windows[prefix[4:].decode()] = list(zip(times, partials, strict=True))
        return windows

    def sorted_items(self, start: int, stop: int) -> list[tuple[bytes, bytes]]:
        """The entries ``start`` to ``stop`` in entry id order, after ``windows``."""
        if self._sorted is None:
            raise RuntimeError("windows() was not called")
        ids = self._sorted[start:stop]
        return list(zip(ids, map(self._map.__getitem__, ids), strict=True))
