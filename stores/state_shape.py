"""What shapes a window store's contents, recorded with the state, checked before it is served.

The entries of the window store (``stores.window_store``) are partials of the composed monoid
of ``aggregations`` in their configured order (an entry point named with its target,
``stores.aggregations.stored_name``), at window times rounded to ``resolution``,
kept for ``retention``, in one codec's bytes, one changelog partition per input partition;
``windows`` decide what every worker of an ``app_id`` answers. State written under one
``StateShape`` is meaningless under another (reordered aggregations swap their values; another
count makes the partials fail to unpack), so the shape is stored with the state and compared
before any of it is used:

- in the changelog, as the record ``SHAPE_KEY`` of every partition (written by the first
  restore that finds none; a reserved key survives compaction): the changelog is the arbiter
  between workers of one ``app_id``, so a worker started with other settings refuses the first
  partition it is given (``StateMismatch``) instead of serving it. (Rather than Faust's
  assignor metadata: the record outlives every worker, holds for workers started at any time,
  and needs no custom assignor; a newcomer given no partition serves no state anyway);
- in each local RocksDB copy under the same key (replayed from the changelog with the rest),
  and in ``<store root>/state-shape.json``, checked when the worker starts, before it joins
  the group (``check_local_shape``).

A state without a shape (written before shapes were recorded) is adopted as it is. The stored
form is canonical JSON of ``{field: text}``, so the refusal can say what changed
(``changes_from``). O(1) per check.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from stores.aggregations import stored_name
from stores.window_settings import WindowSettings

SHAPE_FILE = "state-shape.json"

RESET_HINT = (
    "run `fiba state reset --changelog` with the new settings to rebuild the state from the "
    "input (stop every worker of this app_id first), or use a new app_id"
)


class ShapeSettings(WindowSettings, Protocol):
    """The settings that shape the stored state (``app.settings.Settings`` is one)."""

    partitions: int


class StateMismatch(Exception):
    """Stored state has another shape than the settings; ``str(exc)`` is one line saying what
    changed and how to proceed."""


@dataclass(frozen=True, slots=True)
class StateShape:
    """The settings that shape the stored state, as ``{field: text}`` (see the module doc)."""

    fields: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, settings: ShapeSettings, codec_format: str) -> StateShape:
        """The shape of the state that ``settings`` and a codec of ``codec_format`` write."""
        resolution = settings.resolution
        return cls(
            (
                ("aggregations", ",".join(map(stored_name, settings.aggregations))),
                ("windows", ",".join(f"{w.name}={w.size_ms}ms" for w in settings.windows)),
                ("retention", f"{settings.retention}ms"),
                ("resolution", "exact" if resolution is None else f"{resolution}ms"),
                ("codec", codec_format),
                ("partitions", str(settings.partitions)),
            )
        )

    def encode(self) -> bytes:
        """Canonical JSON bytes (sorted keys): equal shapes have equal bytes."""
        return json.dumps(dict(self.fields), sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> StateShape:
        """Inverse of ``encode``; unreadable data is a shape of its own (it never matches)."""
        try:
            loaded = json.loads(data)
        except ValueError:
            loaded = None
        if not isinstance(loaded, dict):
            return cls((("format", "unreadable"),))
        return cls(tuple(sorted((str(k), str(v)) for k, v in loaded.items())))

    def changes_from(self, stored: StateShape) -> str:
        """``"aggregations changed from count,sum to sum,count; ..."``: every field that
        differs."""
        old, new = dict(stored.fields), dict(self.fields)
        return "; ".join(
            f"{name} changed from {old.get(name, 'unset')} to {new.get(name, 'unset')}"
            for name in sorted(old.keys() | new.keys())
            if old.get(name) != new.get(name)
        )

    def check(self, stored: bytes | None, where: str) -> None:
        """``StateMismatch`` when ``stored`` (encoded; ``None``: no shape recorded, adopted) is
        another shape than this one; ``where`` names the stored state in the message."""
        if stored is None:
            return
        old = StateShape.decode(stored)
        if dict(old.fields) == dict(self.fields):
            return
        raise StateMismatch(
            f"{where} was written with other settings ({self.changes_from(old)}): {RESET_HINT}"
        )


def check_local_shape(root: Path, shape: StateShape) -> None:
    """Compare the shape recorded in ``root`` (a window store's root) with ``shape``; record
    ``shape`` there when none is. ``StateMismatch`` on a difference."""
    path = root / SHAPE_FILE
    try:
        stored = path.read_bytes()
    except FileNotFoundError:
        root.mkdir(parents=True, exist_ok=True)
        path.write_bytes(shape.encode())
        return
    shape.check(stored, f"the local state in {root}")
