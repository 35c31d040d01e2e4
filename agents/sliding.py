"""Exact sliding windows for your own Faust agents, kept by FiBA in a Faust table.

``SlidingWindows(app, name, windows=[...], retention=..., aggregations=[...])`` declares the
windows; ``add(key, ts, value)``, called while iterating a stream partitioned by ``key``,
inserts the value at ``ts`` (out of order is fine) and returns every window ``[S - w, S]`` of
the key at its partition's stream time ``S``; ``LateEvent`` (older than ``S - retention``) and
``FutureEvent`` (only with a ``max_future_skew``: beyond it after both ``S`` and the previous
``add``, so a pause costs at most one event) change nothing. ``get`` and ``range`` read one
window or any span. State: a Faust table of ``(key, t) -> partial`` entries (one changelog
record per ``add`` plus a tombstone per eviction), one FiBA per key in its store
(``stores.faust_sliding``); guarantee at-least-once, as any Faust table. Costs: ``add``
O(log d) plus O(log n_w) per window, evictions amortized O(1); ``get`` O(log n_w); ``range``
O(log n). Example: ``examples/clicks.py``; design: docs/design/faust-api.md.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from datetime import timedelta
from typing import Any

import faust
from faust.streams import current_event

from agents.faust_recovery import seek_before_resume
from stores.aggregations import AggregationError, validated_monoid
from stores.aggregations import named as entry_name
from stores.durations import parse_duration
from stores.faust_sliding import SlidingStore
from stores.monoids import compose
from stores.sliding_state import FutureEvent, KeyPartitionError, LateEvent, SlidingState

__all__ = [
    "AggregationError",
    "FutureEvent",
    "KeyPartitionError",
    "LateEvent",
    "SlidingTable",
    "SlidingWindows",
]


def composed_monoid(aggregations: Sequence[str | Any] | Mapping[str, str | Any]) -> Any:
    """One monoid for ``aggregations`` (``aggregation_parts``, composed)."""
    return compose(aggregation_parts(aggregations))


def aggregation_parts(
    aggregations: Sequence[str | Any] | Mapping[str, str | Any],
) -> dict[str, Any]:
    """The monoids of ``aggregations`` by result name: what the worker's ``aggregations``
    setting accepts (built-in names, ``module:attribute`` import paths,
    ``fiba_stream.monoids`` entry points, each named by itself or by ``name=`` before it) or
    monoid objects (named by their ``name``), or a mapping of result names to either. Each is
    checked as the worker checks it (``stores.aggregations.validated_monoid``: a custom monoid
    is spot-checked for associativity); ``AggregationError`` (a ``ValueError``) names a bad
    one."""
    if isinstance(aggregations, Mapping):
        named = list(aggregations.items())
    else:
        named = [
            entry_name(a) if isinstance(a, str) else (getattr(a, "name", None), a)
            for a in aggregations
        ]
    parts: dict[str, Any] = {}
    for name, spec in named:
        label = name if isinstance(name, str) and name else repr(spec)
        found = validated_monoid(spec, label)
        if not isinstance(name, str) or not name:
            raise AggregationError(
                f"aggregation {spec!r} needs a name (a 'name' attribute or a dict)"
            )
        if name in parts:
            raise AggregationError(f"two aggregations named {name!r}")
        parts[name] = found
    return parts


class SlidingTable(faust.Table):
    """A Faust table of ``(key, t) -> partial`` entries kept by a ``SlidingStore`` over
    ``sliding`` (a ``SlidingState``)."""

    def __init__(self, app: faust.App, *, state: SlidingState, **kwargs: Any) -> None:
        self.sliding = state
        super().__init__(app, **kwargs)

    def _new_store(self) -> SlidingStore:
        return SlidingStore(
            "memory://",
            self.app,
            self,
            state=self.sliding,
            table_name=self.name,
            key_type=self.key_type,
            key_serializer=self.key_serializer,
            value_serializer=self.value_serializer,
            value_type=self.value_type,
            loop=self.loop,
            options=self.options,
        )

    def info(self) -> Mapping[str, Any]:
        return {**super().info(), "state": self.sliding}


class SlidingWindows:
    """Sliding windows ``windows`` (names: durations) over the last ``retention`` of each
    key, with ``aggregations``; see the module doc for the semantics and guarantees.
    ``max_future_skew``: how far after the stream time and the previous event an event may be
    (default: any).
    ``partitions``: the table's partition count (default: the app's ``topic_partitions``),
    which must equal the source topic's."""

    def __init__(
        self,
        app: faust.App,
        name: str,
        *,
        windows: Sequence[str | int | timedelta],
        retention: str | int | timedelta,
        aggregations: Sequence[str | Any] | Mapping[str, str | Any],
        partitions: int | None = None,
        max_future_skew: str | int | timedelta | None = None,
    ) -> None:
        sizes = {
            w.strip() if isinstance(w, str) else f"{parse_duration(w)}ms": parse_duration(w)
            for w in windows
        }
        off = max_future_skew is None or max_future_skew == "off"
        skew = None if off else parse_duration(max_future_skew)
        parts = aggregation_parts(aggregations)
        self.state = SlidingState(
            compose(parts), sizes, parse_duration(retention), skew, parts=parts
        )
        self._to_state = self.state.monoid.to_state
        seek_before_resume(app)  # Faust 0.15.3 loses or repeats records otherwise
        self.table = app.tables.add(
            SlidingTable(
                app,
                state=self.state,
                name=name,
                partitions=partitions,
                beacon=app.tables.beacon,
                help=f"FiBA sliding windows {', '.join(sizes)}",
            )
        )

    def add(self, key: Hashable, ts: int, value: Any) -> dict[str, dict[str, Any]]:
        """Add ``value`` at time ``ts`` to ``key`` and return every window of ``key`` by window
        name. Call it while iterating a stream partitioned by ``key``. Raises ``LateEvent``
        (too old), ``FutureEvent`` (too far ahead), ``ValueError`` (a value the aggregations
        refuse, a time that is no int), ``KeyPartitionError``; nothing changes then."""
        event = current_event()
        if event is None:
            raise RuntimeError("SlidingWindows.add runs while iterating a stream (an agent)")
        table = self.table
        partition = table.partition_for_key(key)  # the event's; checks co-partitioning
        outcome = self.state.add(partition, key, ts, value)
        table.send_changelog(partition, (key, ts), self._to_state(outcome.partial))
        for evicted in outcome.evicted:
            table.send_changelog(partition, evicted, None, value_serializer="raw")
        return self.state.all_windows(key)

    def get(self, key: Hashable, window: str) -> dict[str, Any]:
        """Window ``window`` (a name given at creation) of ``key`` at its stream time."""
        return self.state.window(key, window)

    def range(self, key: Hashable, t_from: int, t_to: int) -> dict[str, Any]:
        """The aggregations over ``key``'s retained events with ``t_from <= t <= t_to``."""
        return self.state.range(key, t_from, t_to)

    def stream_time(self, key: Hashable) -> int | None:
        """The stream time ``S`` of ``key``'s partition (None: no event of ``key`` here)."""
        return self.state.stream_time(key)
