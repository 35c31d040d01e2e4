"""What defines a partition's windows: ``WindowSpec`` and the ``WindowSettings`` Protocol.

Their own module, whose Protocol's annotations ``tests/test_layers.py`` reads to check what
each layer's settings Protocols declare; :mod:`stores.key_windows` re-exports both.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol


class WindowSpec(NamedTuple):
    """One configured sliding window: its name as written (``"5m"``) and its size in ms."""

    name: str
    size_ms: int


class WindowSettings(Protocol):
    """The settings that define a partition's windows (``app.settings.Settings`` is one)."""

    windows: tuple[WindowSpec, ...]
    retention: int
    max_future_skew: int | None
    max_wall_clock_skew: int | None
    resolution: int | None
    aggregations: tuple[str, ...]
    window_end: str
