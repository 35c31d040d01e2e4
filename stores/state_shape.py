"""What shapes a window store's contents, recorded with the state, checked before it is served.

A ``StateShape`` (the record layout's version, aggregations in order, windows, retention,
resolution, partial codec, partitions) is stored with the state: as the reserved record
``SHAPE_KEY`` of every changelog partition (the arbiter between the workers of an ``app_id``),
in the local copies and in ``state-shape.json``. A worker whose settings differ refuses to
start, or stops at the first partition it is given, with one line naming what changed
(``StateMismatch``); state written before shapes were recorded is adopted, and a shape
recorded before the layout had a version is version 1. Details: docs/design/window-store.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from stores.aggregations import stored_name
from stores.window_settings import WindowSettings

SHAPE_FILE = "state-shape.json"

STATE_FORMAT = "changelog-entries/1"
"""The version of the state's record layout (``stores.changelog``: one upsert per entry carrying
its deletions, tombstones, applied markers), a field of every shape. A shape recorded before the
field existed was written in version 1, so one without it is read as version 1 (adopted); a
state of another version is refused like one of other settings."""

RESET_HINT = (
    "run `fiba state reset --changelog` with the new settings to rebuild the state from the "
    "input (stop every worker of this app_id first), or use a new app_id"
)


_FIRST_FORMAT = "changelog-entries/1"


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
                ("format", STATE_FORMAT),
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
        if "format" not in dict(old.fields):  # recorded before the format had a version
            old = StateShape((("format", _FIRST_FORMAT), *old.fields))
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
