"""``fiba state``: reset a worker's window state, or a partition's stream time.

``fiba state reset [--changelog] [--yes]`` deletes the local state of ``app_id`` under
``state_dir``; with ``--changelog`` it also deletes and recreates the changelog topic, so the
workers rebuild the state from the input with the current settings (the way to change
aggregations, windows, retention, resolution or partitions). ``fiba state reset-stream-time
--partition N [--after T]`` removes the entries of partition N later than T, locally and on
the changelog, so that a stream time poisoned by a wrong timestamp falls back. Stop the workers
first; both ask before deleting. Reference: docs/reference/cli.md and
docs/reference/operations.md.
"""

from __future__ import annotations

import asyncio
import shutil
import time

import click

from app.cli_base import (
    CONNECTION_SETTINGS,
    TIME,
    CliFailure,
    require_broker,
    run_async,
    with_settings,
)
from app.settings import Settings
from app.wording import are, counted
from stores.state_lock import StateDirBusy, StateDirLock, StateDirUnusable

RECREATE_TIMEOUT_S = 60.0
"""Longest wait for the deleted changelog to be gone so that it can be created again."""

STATE_SETTINGS = (
    *CONNECTION_SETTINGS,
    "app_id",
    "partitions",
    "replication_factor",
    "state_dir",
    "retention",
    "windows",
    "aggregations",
    "resolution",
    "max_wall_clock_skew",
)


@click.group(
    context_settings={"help_option_names": ["-h", "--help"]},
    short_help="Reset the window state or a partition's stream time.",
)
def state() -> None:
    """Reset a worker's window state (local and changelog) or a partition's stream time."""


def _locked(settings: Settings) -> StateDirLock:
    """The ``state_dir`` lock, taken; exit code 2 while a worker holds it (saying to stop it)
    or when the directory cannot be used."""
    lock = StateDirLock(settings.state_dir)
    try:
        lock.acquire()
    except StateDirBusy as busy:
        raise CliFailure(
            f"a worker is running on state_dir {busy.state_dir} (pid {busy.holder}):"
            " stop it first, the state cannot change under it",
            2,
        ) from None
    except StateDirUnusable as exc:
        raise CliFailure(str(exc), 2) from None
    return lock


@state.command("reset")
@click.option("--changelog", is_flag=True, help="also reset the changelog: rebuild from the input")
@click.option("--yes", is_flag=True, help="do not ask for confirmation")
@with_settings(*STATE_SETTINGS)
def reset(settings: Settings, changelog: bool, yes: bool) -> None:
    """Delete the local window state of app_id in state_dir (and, with --changelog, the
    changelog topic, recreated empty: the workers then rebuild the state from the input)."""
    local = settings.state_dir / settings.app_id
    what = f"the local state {local}"
    if changelog:
        what += f" and the changelog topic {settings.changelog_topic} (rebuilt from the input)"
    lock = _locked(settings)
    try:
        if changelog:
            _refuse_running_workers(settings)
        if not yes:
            click.confirm(f"Delete {what}?", abort=True)
        shutil.rmtree(local, ignore_errors=True)
        if changelog:
            run_async(_recreate_changelog(settings))
    finally:
        lock.release()
    click.echo(f"deleted {what}")


@state.command("reset-stream-time")
@click.option("--partition", type=click.IntRange(min=0), required=True, help="input partition")
@click.option(
    "--after",
    type=TIME,
    default=None,
    help="remove entries later than this (default: now + max_wall_clock_skew)",
)
@click.option("--yes", is_flag=True, help="do not ask for confirmation")
@with_settings(*STATE_SETTINGS)
def reset_stream_time(settings: Settings, partition: int, after: int | None, yes: bool) -> None:
    """Remove partition N's entries later than --after (default: now + max_wall_clock_skew),
    locally and on the changelog, so that its stream time falls back to the youngest one
    left. Stop the worker owning the partition first."""
    if partition >= settings.partitions:
        raise CliFailure(
            f"--partition {partition}: there {are(settings.partitions)}"
            f" {counted(settings.partitions, 'partition')}",
            2,
        )
    if after is None:
        after = int(time.time() * 1000) + (settings.max_wall_clock_skew or 0)
    lock = _locked(settings)
    try:
        _refuse_running_workers(settings)
        if not yes:
            click.confirm(
                f"Remove the entries of partition {partition} later than {after}?", abort=True
            )
        removed, before, now = run_async(_remove_entries_after(settings, partition, after))
    finally:
        lock.release()
    click.echo(
        f"partition {partition}: {counted(removed, 'entry', 'entries')} later than {after}"
        " removed; "
        f"stream time {before} -> {now}"
    )


def _refuse_running_workers(settings: Settings) -> None:
    """Exit code 2 when the broker is unreachable, 1 while workers of ``app_id`` are members of
    its group (not checked on the embedded broker, which keeps listing members that left)."""
    require_broker(settings)
    members = 0 if settings.embedded else run_async(_group_members(settings))
    if members:
        raise CliFailure(
            f"{counted(members, 'worker')} of app_id {settings.app_id} {are(members)} running:"
            f" stop {'it' if members == 1 else 'them'} first"
        )


async def _group_members(settings: Settings) -> int:
    """Members of the workers' consumer group (``app_id``) now."""
    from aiokafka.admin import AIOKafkaAdminClient

    from agents.clients import client_options

    admin = AIOKafkaAdminClient(**client_options(settings))
    await admin.start()
    try:
        responses = await admin.describe_consumer_groups([settings.app_id])
    finally:
        await admin.close()
    return sum(
        len(group[5])
        for response in responses
        for group in response.groups
        if group[1] == settings.app_id
    )


async def _recreate_changelog(settings: Settings) -> None:
    """Delete the changelog topic and create it again, empty, with its spec; the creation is
    retried while the broker still reports it (a deletion finishes asynchronously)."""
    from aiokafka.admin import AIOKafkaAdminClient

    from agents.clients import client_options
    from app.topics import create_topics, topic_specs

    spec = next(s for s in topic_specs(settings) if s.name == settings.changelog_topic)
    admin = AIOKafkaAdminClient(**client_options(settings))
    await admin.start()
    try:
        await admin.delete_topics([spec.name])
    finally:
        await admin.close()
    deadline = time.monotonic() + RECREATE_TIMEOUT_S
    while not (await create_topics(settings, [spec]))[0].created:
        if time.monotonic() > deadline:
            raise CliFailure(f"the changelog topic {spec.name} was not deleted in time; try again")
        await asyncio.sleep(0.5)


async def _remove_entries_after(
    settings: Settings, partition: int, after: int
) -> tuple[int, int | None, int | None]:
    """Evict ``partition``'s entries later than ``after`` through a ``WindowStore`` (local
    deletions and changelog tombstones, flushed); ``(entries removed, stream time before,
    stream time after)``. O(entries of the partition)."""
    from agents.kafka_changelog import KafkaChangelog
    from stores.key_windows import WindowConfig
    from stores.state_shape import StateMismatch
    from stores.window_store import MarshalStateCodec, WindowStore

    config = WindowConfig.from_settings(settings)
    store = WindowStore(settings, MarshalStateCodec(config.composed), KafkaChangelog(settings))
    await store.start()
    try:
        try:
            restored = await store.restore(partition)
        except StateMismatch as exc:
            raise CliFailure(str(exc), 2) from None
        removed, youngest = 0, []
        for key, pairs in restored.windows.items():
            doomed = [t for t, _ in pairs if t > after]
            if doomed:
                store.evict(partition, key, doomed)
                removed += len(doomed)
            kept = [t for t, _ in pairs if t <= after]
            if kept:
                youngest.append(kept[-1])
        before = max((pairs[-1][0] for pairs in restored.windows.values()), default=None)
    finally:
        await store.stop()
    return removed, before, max(youngest, default=None)
