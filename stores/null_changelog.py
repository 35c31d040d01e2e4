"""A changelog that keeps nothing: the window store's port (``stores.changelog.ChangelogLink``)
in memory, for a store run without Kafka (``bench.batch_share``, the store's tests).

``NullChangelog`` drops every record handed over (``send_records`` returns no delivery) and
reads back partitions that hold nothing (``EmptyReading``: a restore finds no records). It
reports no standby partitions, so the store never asks it for a tailing ``consumer`` (it has
none). Every call is O(1).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any

from aiokafka import TopicPartition

from stores.changelog import ChangelogRecord


class EmptyReading:
    """A ``stores.changelog.ChangelogReading`` of partitions with no records."""

    position = 0

    async def __aenter__(self) -> EmptyReading:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None

    async def read(
        self, tp: TopicPartition, start: int, timeout: float = 30.0
    ) -> AsyncIterator[list[Iterable[ChangelogRecord]]]:
        """Yield nothing: the partition is read to its (empty) end at once."""
        for _ in ():
            yield []


class NullChangelog:
    """A ``ChangelogLink`` that drops what it is handed and has nothing to read back."""

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def send_records(
        self, topic: str, partition: int, records: Sequence[tuple[bytes, bytes | None]]
    ) -> Awaitable[Any] | None:
        """Drop ``records``; no delivery to wait for."""
        return None

    async def flush(self) -> None:
        return None

    def reader(self) -> EmptyReading:
        return EmptyReading()

    def on_standbys(self, follow: Callable[[set[int]], Awaitable[None]]) -> None:
        """Never call ``follow``: there are no standby partitions."""
        return None
