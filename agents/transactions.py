"""Exactly-once output (``processing_guarantee = "exactly_once"``): one Kafka transaction per
owned partition and hand-over.

``PartitionTransactions`` keeps one transactional producer per owned input partition (id
``<app_id>-eos-<partition>``): the partition's aggregates and dead letters, the window store's
changelog records with their applied offsets and the input progress go out in ONE transaction
per hand-over, and the query consumer's answers and offsets of query partition ``p`` on the same
producer. A new owner's ``claim`` fences the previous one (KIP-98 style, one id per partition:
aiokafka cannot build KIP-447's group fence) before it restores the changelog
``read_committed``, so state, input position and outputs agree after any crash. A failed
transaction is a crash. Price: one producer per owned partition (docs/benchmarks.md,
"Exactly-once"); ``check_transactions`` refuses a broker without transactions at start.
Design: docs/design/delivery.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError

from agents.batched_send import send_records
from agents.clients import client_options
from agents.config import WorkerSettings
from stores.changelog import ChangelogLink, ChangelogReading

logger = logging.getLogger(__name__)

TRANSACTION_TIMEOUT_MS = 30_000
"""How long the broker lets a transaction stay open before aborting it: bounds how long the
open transaction of a crashed worker holds back ``read_committed`` readers when nobody claims
its partition (a new owner aborts it at once)."""

PROGRESS_INTERVAL_S = 5.0
"""Seconds between two commits of a partition's input progress inside its transaction."""

TRANSACTION_APIS = {22: "InitProducerId", 24: "AddPartitionsToTxn", 26: "EndTxn"}
"""Kafka API keys a broker needs for transactions."""

CHECK_TIMEOUT_S = 15.0

OutputsRider = Callable[[int, AIOKafkaProducer], Awaitable[None]]
"""Sends the outputs queued for a source partition with the given (transactional) producer."""


class NotOwned(Exception):
    """A transaction was asked for a partition this worker does not claim (any more)."""


class NoTransactions(Exception):
    """The broker has no transactions; ``str(exc)`` is one line for the user."""


def transactional_id(settings: WorkerSettings, partition: int) -> str:
    """The transactional id of input partition ``partition``'s producer."""
    return f"{settings.app_id}-eos-{partition}"


async def check_transactions(settings: WorkerSettings, timeout: float = CHECK_TIMEOUT_S) -> None:
    """Return when the broker of ``settings`` runs transactions; else ``NoTransactions`` with
    the reason. Two steps: its API versions must include InitProducerId, AddPartitionsToTxn
    and EndTxn, then a producer with the transactional id ``<app_id>-eos-check`` must start
    (``InitProducerId`` answered) within ``timeout`` seconds: a broker may list the APIs and
    still fail them (the embedded one does)."""
    client = AIOKafkaClient(**client_options(settings), client_id=f"{settings.app_id}-eos-check")
    why = ""
    try:
        async with asyncio.timeout(timeout):
            await client.bootstrap()
            conn = await client._get_conn(client.get_random_node())
            versions = conn._versions if conn is not None else {}
    except (TimeoutError, KafkaError) as exc:
        why = f"its API versions could not be read ({exc!r})"
    finally:
        await client.close()
    missing = [name for key, name in TRANSACTION_APIS.items() if key not in versions]
    if not why and missing:
        why = f"it lacks the transaction APIs {', '.join(missing)}"
    if not why:
        why = await _init_producer_id_fails(settings, timeout)
    if why:
        raise NoTransactions(
            f"processing_guarantee=exactly_once needs a broker with transactions, and the one "
            f"at {','.join(settings.bootstrap_servers)} has none: {why} (use at_least_once on "
            "this broker)"
        )


async def _init_producer_id_fails(settings: WorkerSettings, timeout: float) -> str:
    """Why a transactional producer cannot start on the broker ("" when it can)."""
    producer = AIOKafkaProducer(
        **client_options(settings),
        transactional_id=f"{settings.app_id}-eos-check",
        client_id=f"{settings.app_id}-eos-check",
    )
    sender_log = logging.getLogger("aiokafka.producer.sender")
    level = sender_log.level
    sender_log.setLevel(logging.CRITICAL)  # its own line for the failure: ours says it all
    try:
        async with asyncio.timeout(timeout):
            await producer.start()
    except TimeoutError:
        return f"InitProducerId was not answered within {timeout:g} s"
    except KafkaError as exc:
        return f"InitProducerId failed ({exc!r})"
    finally:
        sender_log.setLevel(level)
        with contextlib.suppress(Exception):
            await producer.stop()
    return ""


class Transactions(Protocol):
    """What the pipeline and the query consumer use of ``PartitionTransactions``."""

    async def claim(self, partition: int) -> None: ...

    async def keep_only(self, partitions: Iterable[int]) -> None: ...

    def transaction(self, partition: int) -> AbstractAsyncContextManager[Any]: ...


class PartitionTransactions:
    """One transactional producer per claimed partition; see the module doc.

    ``riders`` send the outputs queued for a source partition inside its changelog
    transaction, and ``committed`` hear of each partition's commit; ``progress(partition)``
    gives the input position to commit to the monitoring group (None: nothing to commit).
    Transactions of one partition run one at a time.

    It is the window store's ``stores.changelog.ChangelogLink``: records are sent in
    transactions (``send_records``); reading back, tailing and standby assignments are those of
    ``base`` (the link it replaces, e.g. ``agents.kafka_changelog.FaustChangelog``).
    """

    def __init__(self, settings: WorkerSettings, base: ChangelogLink) -> None:
        self.settings = settings
        self.base = base
        self.riders: list[OutputsRider] = []
        self.committed: list[Callable[[int], None]] = []
        """Called with the partition after each committed transaction (the outputs' latency)."""
        self.progress: Callable[[int], int | None] = lambda partition: None
        self._producers: dict[int, AIOKafkaProducer] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._progress_at: dict[int, float] = {}
        self.commits = 0
        """Transactions committed (for the counters)."""

    def _lock(self, partition: int) -> asyncio.Lock:
        return self._locks.setdefault(partition, asyncio.Lock())

    @property
    def claimed(self) -> frozenset[int]:
        """The partitions whose producer is started."""
        return frozenset(self._producers)

    async def claim(self, partition: int) -> None:
        """Start ``partition``'s transactional producer, unless started (idempotent): its
        ``InitProducerId`` fences every earlier producer of the id and returns once their open
        transaction is aborted (or its commit completed). Call before reading anything a
        previous owner committed (the changelog, the committed query offsets)."""
        async with self._lock(partition):
            if partition in self._producers:
                return
            producer = AIOKafkaProducer(
                **client_options(self.settings),
                transactional_id=transactional_id(self.settings, partition),
                transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
                acks="all",
                enable_idempotence=True,
                linger_ms=5,
                max_batch_size=1 << 20,
                client_id=f"{self.settings.app_id}-eos-{partition}",
            )
            try:
                await producer.start()
            except BaseException:
                await producer.stop()
                raise
            self._producers[partition] = producer
            logger.info("partition %d claimed for exactly-once output", partition)

    async def release(self, partition: int) -> None:
        """Stop ``partition``'s producer (after the transaction in progress, if any)."""
        async with self._lock(partition):
            producer = self._producers.pop(partition, None)
            self._progress_at.pop(partition, None)
            if producer is not None:
                await producer.stop()

    async def keep_only(self, partitions: Iterable[int]) -> None:
        """Release every claimed partition not in ``partitions``."""
        for partition in sorted(set(self._producers) - set(partitions)):
            await self.release(partition)

    async def stop(self) -> None:
        """Release every partition; stop ``base``."""
        await self.keep_only(())
        await self.base.stop()

    @contextlib.asynccontextmanager
    async def transaction(self, partition: int) -> AsyncIterator[AIOKafkaProducer]:
        """``async with transaction(p) as producer``: a transaction of ``p``'s producer, begun
        on entry and committed on a normal exit (every record sent in it acknowledged); on an
        exception it is aborted and the producer dropped (``p`` is no longer claimed), and the
        exception raised. ``NotOwned`` when ``p`` is not claimed."""
        async with self._lock(partition):
            producer = self._producers.get(partition)
            if producer is None:
                raise NotOwned(f"partition {partition} is not claimed by this worker")
            await producer.begin_transaction()
            try:
                yield producer
                await producer.commit_transaction()
            except BaseException:
                del self._producers[partition]
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(producer.abort_transaction(), 5)
                with contextlib.suppress(Exception):
                    await producer.stop()
                raise
            self.commits += 1
            for committed in self.committed:
                committed(partition)

    # --- the window store's ChangelogProducer ---------------------------------------------------

    async def send_records(
        self, topic: str, partition: int, records: Sequence[tuple[bytes, bytes | None]]
    ) -> Awaitable[Any] | None:
        """One transaction of ``partition``: the riders' outputs of that source partition, the
        changelog ``records`` (to ``topic`` partition ``partition``) and, when due, the input
        progress. Returns once it is committed; the delivery of the last record (already
        acknowledged). The caller holds the partition (nothing is queued for it meanwhile)."""
        async with self.transaction(partition) as producer:
            for rider in self.riders:
                await rider(partition, producer)
            delivery = await send_records(producer, topic, partition, records)
            await self._commit_progress(partition, producer)
        return delivery

    async def flush(self) -> None:
        """Nothing to wait for: ``send_records`` returns once its transaction is committed."""

    async def start(self) -> None:
        """Start ``base`` (the producers start with ``claim``)."""
        await self.base.start()

    def reader(self) -> ChangelogReading:
        """``base``'s reader (``read_committed`` with exactly-once settings)."""
        return self.base.reader()

    def consumer(self, fetch_max_wait_ms: int) -> AIOKafkaConsumer:
        """``base``'s consumer for tailing standby partitions."""
        return self.base.consumer(fetch_max_wait_ms)

    def on_standbys(self, follow: Callable[[set[int]], Awaitable[None]]) -> None:
        """``base``'s standby assignments."""
        self.base.on_standbys(follow)

    async def _commit_progress(self, partition: int, producer: AIOKafkaProducer) -> None:
        """Every ``PROGRESS_INTERVAL_S``: the input position of ``partition`` to the monitoring
        group, in the open transaction."""
        now = time.monotonic()
        if now - self._progress_at.get(partition, 0.0) < PROGRESS_INTERVAL_S:
            return
        position = self.progress(partition)
        if position is None or position <= 0:
            return
        tp = TopicPartition(self.settings.input_topic, partition)
        await producer.send_offsets_to_transaction(
            {tp: (position, self.settings.web_url)}, self.settings.input_progress_group
        )
        self._progress_at[partition] = now
