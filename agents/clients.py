"""Kafka client plumbing shared by the CLI tools and the worker: connection options, reachability,
end offsets, fetches that survive a failure.

``client_options`` (aiokafka arguments with the security passthrough), ``check_reachable``
(fail fast with one line: no broker, rejected credentials), ``refusal``/``topic_refused`` (the
broker's refusals as one line), ``end_offsets`` (ListOffsets on Kafka, the Fetch high watermark
on the embedded profile), ``topic_partitions`` (never auto-creating a topic), ``fetch`` (a
failed fetch is retried, logged by ``RepeatedFailures``: a failure repeated at every retry once
in a while) and ``throttle_failed_metadata_updates`` (no busy loop while no broker is
reachable: a growing backoff; listeners hear of each update). Each function:
docs/reference/operations.md.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from collections.abc import Callable, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.conn import create_conn
from aiokafka.errors import (
    AuthenticationFailedError,
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    KafkaError,
    SaslAuthenticationFailed,
    TopicAuthorizationFailedError,
)
from aiokafka.protocol.metadata import MetadataRequest

from agents.config import WorkerSettings
from agents.connection import KafkaConnection

logger = logging.getLogger(__name__)

FETCH_RETRY_S = 0.1
"""Seconds before fetching again after a failed fetch (``fetch``)."""

FAILURE_REPORT_S = 30.0
"""At most one line per this many seconds for a failure repeated at every retry
(``RepeatedFailures``)."""

MAX_METADATA_BACKOFF_S = 1.0
"""The longest pause of a client between two failed metadata updates: the backoff starts at the
client's ``retry_backoff_ms`` and doubles with each failure in a row up to this, so a client
finds a broker that is back within this long."""

MetadataListener = Callable[[AIOKafkaClient, bool], None]
"""Called with a client and whether its metadata update just succeeded."""

_metadata_listeners: list[MetadataListener] = []


TOPIC_AUTHORIZATION_FAILED = TopicAuthorizationFailedError.errno

SASL_WARNING = "Sending username and password in the clear"
"""aiokafka's warning on every SASL PLAIN connection without TLS, kept out of the probe of
``check_reachable`` (the clients that follow log it)."""


class BrokerUnreachable(Exception):
    """No bootstrap server accepted a connection; ``str(exc)`` is one clear line."""


class CredentialsRejected(BrokerUnreachable):
    """The broker rejected the SASL credentials (or the handshake did not finish)."""


def refusal(exc: BaseException) -> str | None:
    """One line saying what the broker refused, for its authentication and authorization
    errors (``None`` for any other error)."""
    subject = ", ".join(str(arg) for arg in exc.args) or "?"
    if isinstance(exc, (SaslAuthenticationFailed, AuthenticationFailedError)):
        return f"the broker rejected the credentials: {subject}"
    if isinstance(exc, TopicAuthorizationFailedError):
        return f"not authorised for topic {subject} (the broker's ACLs deny this user)"
    if isinstance(exc, GroupAuthorizationFailedError):
        return f"not authorised for consumer group {subject} (the broker's ACLs deny this user)"
    if isinstance(exc, ClusterAuthorizationFailedError):
        return f"not authorised for a cluster operation: {subject}"
    return None


def client_options(settings: WorkerSettings) -> dict[str, Any]:
    """aiokafka client keyword arguments (bootstrap servers, security) of ``settings``
    (``agents.connection.KafkaConnection.aiokafka_options``)."""
    return KafkaConnection.from_settings(settings).aiokafka_options()


def check_reachable(settings: WorkerSettings, timeout: float = 3.0) -> None:
    """Return when one bootstrap server accepts a TCP connection (and, with SASL or TLS, the
    handshakes on it succeed); else ``BrokerUnreachable`` (``CredentialsRejected`` for a failed
    handshake).

    Tries each server in turn with ``timeout`` seconds each; the handshakes take one
    connection of their own, run on an event loop of its own (call this outside a running loop).
    """
    reasons = []
    for server in settings.bootstrap_servers:
        host, _, port = server.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
                pass
        except OSError as exc:
            reasons.append(f"{server}: {exc.strerror or exc}")
            continue
        if settings.sasl_mechanism or settings.security_protocol in ("SSL", "SASL_SSL"):
            asyncio.run(authenticate(settings, host.strip("[]"), int(port), timeout))
        return
    raise BrokerUnreachable(f"cannot reach the Kafka broker ({'; '.join(reasons)})")


async def authenticate(settings: WorkerSettings, host: str, port: int, timeout: float) -> None:
    """Open and close one connection to ``host:port`` with the security options of
    ``settings``; ``CredentialsRejected`` saying why when the TLS handshake fails (e.g. a
    certificate not signed by ``ssl_cafile``), the broker rejects the credentials or the
    handshakes do not finish within ``timeout`` seconds."""
    options = client_options(settings)
    del options["bootstrap_servers"]
    user = settings.sasl_username
    conn_logger = logging.getLogger("aiokafka.conn")
    quiet = _DropMessage(SASL_WARNING)
    conn_logger.addFilter(quiet)
    try:
        conn = await asyncio.wait_for(
            create_conn(host, port, request_timeout_ms=int(timeout * 1000), **options), timeout
        )
        conn.close()
    except ssl.SSLError as exc:
        why = getattr(exc, "verify_message", None) or exc.reason or str(exc)
        raise CredentialsRejected(
            f"TLS handshake with {host}:{port} failed: {why} (check ssl_cafile)"
        ) from None
    except (TimeoutError, KafkaError, OSError) as exc:
        why = refusal(exc) or f"no SASL handshake with {host}:{port} ({exc!r})"
        raise CredentialsRejected(f"{why} (user {user!r}, {settings.sasl_mechanism})") from None
    finally:
        conn_logger.removeFilter(quiet)


class _DropMessage(logging.Filter):
    """A logging filter dropping the records whose message starts with ``prefix``."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefix)


async def end_offsets(
    consumer: AIOKafkaConsumer,
    partitions: Sequence[TopicPartition],
    settings: WorkerSettings,
    timeout: float = 10.0,
) -> dict[TopicPartition, int]:
    """The end offset (offset of the next record to be written) of each assigned partition.

    With the embedded profile: ``high_watermarks`` (the embedded broker's ListOffsets is wrong).
    """
    if not settings.embedded:
        return dict(await consumer.end_offsets(list(partitions)))
    return await high_watermarks(consumer, partitions, timeout)


async def high_watermarks(
    consumer: AIOKafkaConsumer, partitions: Sequence[TopicPartition], timeout: float = 10.0
) -> dict[TopicPartition, int]:
    """The high watermark of each assigned partition, from Fetch responses (correct on every
    broker): seek the partitions to their beginning and fetch until every high watermark is
    known (records fetched on the way are discarded; the caller seeks afterwards). Raises
    ``TimeoutError`` when one stays unknown for ``timeout`` seconds. One fetch per partition
    when the broker answers at once."""
    await consumer.seek_to_beginning(*partitions)
    deadline = time.monotonic() + timeout
    while any(consumer.highwater(tp) is None for tp in partitions):
        if time.monotonic() > deadline:
            raise TimeoutError("no high watermark from the broker for " + str(list(partitions)))
        await consumer.getmany(*partitions, timeout_ms=200, max_records=1)
        await asyncio.sleep(0)
    return {tp: int(consumer.highwater(tp)) for tp in partitions}


async def read_to_end(settings: WorkerSettings, topic: str) -> list[ConsumerRecord]:
    """Every record of ``topic`` (``settings.partitions`` partitions) from its start up to its
    end (``end_offsets``: the profile's way), sorted by partition and offset, read as
    ``settings.outputs_isolation_level`` (aborted transactions never seen). O(records)."""
    consumer = AIOKafkaConsumer(
        **client_options(settings),
        enable_auto_commit=False,
        isolation_level=settings.outputs_isolation_level,
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(settings.partitions)]
        consumer.assign(tps)
        ends = await end_offsets(consumer, tps, settings)
        for tp in tps:
            consumer.seek(tp, 0)
        records: list[ConsumerRecord] = []
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            for tp, batch in (await consumer.getmany(timeout_ms=500, max_records=50_000)).items():
                records.extend(r for r in batch if r.offset < ends[tp])
        return sorted(records, key=lambda r: (r.partition, r.offset))
    finally:
        await consumer.stop()


async def topic_partitions(consumer: AIOKafkaConsumer, topic: str) -> set[int] | None:
    """The partition numbers of ``topic``, ``None`` when it does not exist.

    Read from one metadata answer for every topic. ``consumer.partitions_for_topic`` is not
    enough: it reads the consumer's own metadata, which on Apache Kafka covers only the topics
    the consumer tracks (none for a group-less consumer before its first assignment); aiokafka
    has no public call returning the full answer, hence its client's ``fetch_all_metadata``.
    """
    cluster = await consumer._client.fetch_all_metadata()
    if topic not in cluster.topics():
        return None
    return set(cluster.partitions_for_topic(topic) or ())


async def topic_refused(client: AIOKafkaClient, topic: str) -> bool:
    """True when the broker's ACLs deny this client ``topic`` (a metadata answer for every
    topic leaves such topics out, as if missing). One metadata request naming ``topic`` with
    auto-creation off: never use it on a broker that ignores that flag (the embedded one).
    ``client`` is a started consumer's or producer's aiokafka client."""
    answer = await client.send(
        client.get_random_node(), MetadataRequest([topic], allow_auto_topic_creation=False)
    )
    return any(
        name == topic and code == TOPIC_AUTHORIZATION_FAILED for code, name, *_ in answer.topics
    )


class RepeatedFailures:
    """The log of a retried operation (``what``): a failure is logged with its traceback, the
    same failure again (same type and message) at every retry only as one line with its count,
    at most once per ``FAILURE_REPORT_S``, and the first success after failures as one line.
    (A fetch failing at every retry logged a traceback ten times a second, burying the log.)
    O(1) per call; ``clock`` is for tests."""

    def __init__(self, what: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.what = what
        self._clock = clock
        self._kind: tuple[str, str] | None = None
        self._count = 0
        self._since_report = 0
        self._reported_at = 0.0

    def failed(self, exc: BaseException) -> None:
        """Log ``exc``, raised by the operation (call from its ``except`` block)."""
        kind = (type(exc).__name__, str(exc))
        now = self._clock()
        self._count += 1
        if kind != self._kind:
            self._kind, self._since_report, self._reported_at = kind, 0, now
            logger.error("%s failed; retrying", self.what, exc_info=exc)
            return
        self._since_report += 1
        if now - self._reported_at >= FAILURE_REPORT_S:
            logger.error(
                "%s still failing (%s, %d times in %.0f s): %s",
                self.what,
                kind[0],
                self._since_report,
                now - self._reported_at,
                kind[1],
            )
            self._since_report, self._reported_at = 0, now

    def succeeded(self) -> None:
        """The operation worked: after failures, say so once and start afresh."""
        if self._count:
            logger.warning("%s works again after %d failed attempts", self.what, self._count)
            self._kind, self._count = None, 0


async def fetch(
    consumer: AIOKafkaConsumer, failures: RepeatedFailures, **getmany_args: Any
) -> dict[TopicPartition, list[ConsumerRecord]] | None:
    """``consumer.getmany(**getmany_args)``, or ``None`` after a failed fetch (e.g. a partition
    unassigned by a rebalance while its fetch was in flight): the failure goes to ``failures``
    and ``FETCH_RETRY_S`` pass before the caller fetches again."""
    try:
        fetched = await consumer.getmany(**getmany_args)
    except Exception as exc:
        failures.failed(exc)
        await asyncio.sleep(FETCH_RETRY_S)
        return None
    failures.succeeded()
    return fetched


def on_metadata_update(listener: MetadataListener) -> None:
    """Call ``listener(client, updated)`` after every metadata update of every client of the
    process (once ``throttle_failed_metadata_updates`` is installed), before the backoff of a
    failed one. Listeners must be quick and must not raise."""
    if listener not in _metadata_listeners:
        _metadata_listeners.append(listener)


def throttle_failed_metadata_updates() -> None:
    """Make a failed metadata update of every ``AIOKafkaClient`` return only after a backoff:
    the client's ``retry_backoff_ms``, doubled with each failure in a row, at most
    ``MAX_METADATA_BACKOFF_S``. Idempotent; affects the whole process.

    Why: when no broker answers (a broker restart), aiokafka's producer and fetcher ask for a
    new update as soon as one fails, and each refused connection asks again: every client
    spins, keeping a core busy and logging errors without pause, for as long as the outage
    lasts. Callers waiting for the update wait the backoff along with it, so retries
    (of metadata, fetches, produce requests) pace themselves; a successful update is not
    delayed and resets the backoff. O(listeners) per update.
    """
    update = AIOKafkaClient._metadata_update
    if getattr(update, "throttled", False):
        return

    async def throttled_update(client: AIOKafkaClient, *args: Any) -> bool:
        updated = await update(client, *args)
        for listener in _metadata_listeners:
            listener(client, updated)
        failures = 0 if updated else getattr(client, "_fiba_failed_updates", 0) + 1
        client._fiba_failed_updates = failures  # type: ignore[attr-defined]
        if not updated:
            backoff = client._retry_backoff * 2 ** min(failures - 1, 16)
            await asyncio.sleep(min(backoff, MAX_METADATA_BACKOFF_S))
        return updated

    throttled_update.throttled = True  # type: ignore[attr-defined]
    AIOKafkaClient._metadata_update = throttled_update  # type: ignore[method-assign]
