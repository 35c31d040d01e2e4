"""What the agents need from exactly-once output (``app.transactions`` builds it): claiming
partitions, and a transaction per partition.

The pipeline claims a partition before it restores its state (the claim fences every earlier
owner, so the changelog it reads is final) and releases the partitions it no longer owns; the
query consumer claims before it reads committed query offsets and answers each fetched chunk
of a query partition in one transaction of that partition.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol


class NotOwned(Exception):
    """A transaction was asked for a partition this worker does not claim (any more)."""


class Transactions(Protocol):
    """Per-partition transactions (``app.transactions.PartitionTransactions``)."""

    async def claim(self, partition: int) -> None: ...

    async def keep_only(self, partitions: Iterable[int]) -> None: ...

    def transaction(self, partition: int) -> AbstractAsyncContextManager[Any]: ...
