"""Exact sliding windows for your own Faust agents, kept by FiBA in a Faust table.

::

    windows = SlidingWindows(app, "clicks", windows=["1m", "5m"], retention="1h",
                             aggregations=["count", "sum", my_monoid])

    @app.agent(clicks_topic)
    async def track(stream):
        async for user, click in stream.items():
            now = windows.add(user, click.ts, click.amount)  # {"1m": {...}, "5m": {...}}

Semantics. Times are ints (milliseconds, say; durations like ``"5m"`` are read as
milliseconds). Each partition of the stream has a stream time ``S``: the largest time added on
it. ``add(key, ts, value)`` adds ``value`` at ``ts`` (out of order is fine; equal times combine,
older first) unless ``ts < S - retention`` (``LateEvent``) or ``ts > S + max_future_skew``
(``FutureEvent``, when a skew is given), where nothing changes; then it evicts every
entry older than ``S - retention`` and returns every window of the key, the window of size
``w`` being the events of the key with ``S - w <= t <= S``. ``get(key, name)`` is one window,
``range(key, t_from, t_to)`` any span of the retained events, ``stream_time(key)`` the ``S``
they end at. Aggregations are what the worker's ``aggregations`` setting takes (built-in
names, ``module:attribute`` import paths, ``fiba_stream.monoids`` entry points) or your own
monoid objects (``identity``, ``lift``, ``combine`` associative, ``lower``; commutativity not
needed; partials JSON-safe or with ``to_state``/``from_state``), checked as the worker checks
them (a custom one is spot-checked for associativity at declaration); results are
``{name: value}``.

State. A Faust table (``SlidingTable``, changelog ``<app id>-<name>-changelog``) of entries
``(key, t) -> partial`` whose store (``stores.faust_sliding.SlidingStore``) keeps one FiBA per
key. It is partitioned like any Faust table: ``add`` must run while iterating a stream
partitioned by ``key`` (use ``group_by`` otherwise), and the entry goes to that partition.
Each ``add`` writes one changelog record (the entry at ``ts``) plus one tombstone per evicted
entry, O(1) amortized: never the window. Recovery and standby replicas (``table_standby_replicas``)
are Faust's, replaying those records into the trees; the app's recovery gets the input
partitions' seek moved before their resumption (``agents.faust_recovery``: Faust 0.15.3 loses or
repeats records there). The guarantee is a Faust table's:
at-least-once (events re-processed after a crash count again); exact only as far as Faust's
``processing_guarantee="exactly_once"`` (a broker with transactions) keeps the changelog and
the input offsets in one transaction, which faust-streaming 0.15.3 was measured not to do
(README, ``bench/RESULTS.md``).

Costs: ``add`` O(log d) for an insert at distance d from the young end of the key's tree, plus
O(log n_w) per window of n_w events (a suffix range query) and amortized O(1) evictions;
``get`` O(log n_w); ``range`` O(log n). Reads see this worker's partitions only.
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
    """One monoid for ``aggregations``: what the worker's ``aggregations`` setting accepts
    (built-in names, ``module:attribute`` import paths, ``fiba_stream.monoids`` entry points,
    each named by itself or by ``name=`` before it) or monoid objects (named by their
    ``name``), or a mapping of result names to either. Each is checked as the worker checks it
    (``stores.aggregations.validated_monoid``: a custom monoid is spot-checked for
    associativity); ``AggregationError`` (a ``ValueError``) names a bad one."""
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
    return compose(parts)


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
    ``max_future_skew``: how far after the stream time an event may be (default: any).
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
        skew = None if max_future_skew is None else parse_duration(max_future_skew)
        self.state = SlidingState(
            composed_monoid(aggregations), sizes, parse_duration(retention), skew
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
