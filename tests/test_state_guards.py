"""What a worker refuses before it serves any state: a ``state_dir`` another worker holds (a
lock held for the process's life), local state written with other settings, and, as a
newcomer to a group, the partitions whose changelog shape record says other settings. Each
refusal is one ``fiba: ...`` line and exit code 2, with real ``fiba worker`` processes."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.brokers.process import free_port
from app.cli import cli
from app.demo import log_tail, settings_environ, start_worker, stop_worker
from app.settings import Settings, WindowSpec
from app.topics import create_topics
from stores.changelog import encode_upsert, entry_id
from stores.key_windows import KeyWindows, WindowConfig
from stores.window_store import MarshalStateCodec
from tests.test_crash_recovery import BASE, applied_offsets, wait_until, worker_settings
from tests.test_window_store import write_changelog

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]


def run_fiba_worker(
    settings: Settings, timeout: float, slow_shutdown_s: float | None = None
) -> subprocess.CompletedProcess[str]:
    """``fiba worker`` for ``settings`` in a subprocess that must exit within ``timeout`` s;
    with ``slow_shutdown_s``, its shutdown is that much slower (``tests.slow_shutdown_worker``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIBA_")}
    env.update(settings_environ(settings))
    module = "app.cli"
    if slow_shutdown_s is not None:
        env["SLOW_SHUTDOWN_S"] = str(slow_shutdown_s)
        module = "tests.slow_shutdown_worker"
    return subprocess.run(
        [sys.executable, "-m", module, "worker"],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def refusal(result: subprocess.CompletedProcess[str], started: bool = False) -> str:
    """The one line of a refusal: exit code 2, the line last on stderr, alone unless the worker
    had ``started`` (then its log comes before), and no traceback."""
    assert result.returncode == 2, result.stderr[-3000:]
    lines = result.stderr.splitlines()
    assert lines[-1].startswith("fiba: "), result.stderr[-3000:]
    assert len(lines) == 1 or started, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return lines[-1]


def test_one_worker_per_state_dir_and_no_state_of_other_settings(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path
) -> None:
    settings = worker_settings(kafka_bootstrap, embedded_profile, tmp_path / "a", partitions=2)
    asyncio.run(create_topics(settings))
    log = tmp_path / "a.log"
    first = start_worker(settings, log)
    try:
        wait_until(lambda: len(applied_offsets(settings, first, log)) == 2, 90, "a owns all")
        # a second worker on the same state_dir (another web port) is refused at once
        line = refusal(run_fiba_worker(replace(settings, web_port=free_port()), 60))
        assert f"state_dir {settings.state_dir} is in use by another process" in line
        assert f"pid {first.pid}" in line
        # the state commands refuse while a worker of the app is in its group (checked with
        # the kafka profile: the embedded broker keeps listing members that left)
        elsewhere = replace(settings, broker_profile="kafka", state_dir=tmp_path / "c")
        for command in (["reset", "--changelog"], ["reset-stream-time", "--partition", "0"]):
            result = CliRunner().invoke(
                cli, ["state", *command, "--yes"], env=settings_environ(elsewhere)
            )
            assert result.exit_code == 1, result.output
            assert f"1 worker of app_id {settings.app_id} is running" in result.stderr
        # a newcomer with another window joins the group, is given a partition whose
        # changelog says otherwise, and stops with one line instead of serving it
        newcomer = replace(
            settings,
            state_dir=tmp_path / "b",
            web_port=free_port(),
            windows=(WindowSpec("5m", 300_000),),
        )
        line = refusal(run_fiba_worker(newcomer, 150), started=True)
        assert "windows changed from 1m=60000ms,1h=3600000ms to 5m=300000ms" in line, line
        assert "fiba state reset --changelog" in line
        wait_until(lambda: len(applied_offsets(settings, first, log)) == 2, 90, "a owns all again")
    finally:
        stop_worker(first)
    assert first.returncode == 0, log_tail(log)
    # restarted with the aggregations reordered: refused by its local state before it starts
    line = refusal(run_fiba_worker(replace(settings, aggregations=("sum", "count")), 60))
    assert "aggregations changed from count,sum to sum,count" in line
    assert f"the local state in {settings.state_dir / settings.app_id}" in line


def test_a_state_without_shape_that_other_aggregations_cannot_read_stops_the_worker(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path
) -> None:
    """A changelog written before shapes were recorded (no shape record) with the default
    aggregations, read by a worker with ``count,min,sum``: the partials do not fit, and the
    worker stops with one line instead of retrying the restore forever, in order, even if its
    shutdown is slow (longer than the ~1 s in which a crash, which it is not, would let the
    Faust consumer's thread close its event loop before the worker stops it: "Event loop is
    closed" with a traceback)."""
    settings = worker_settings(kafka_bootstrap, embedded_profile, tmp_path / "s", partitions=1)
    asyncio.run(create_topics(settings))
    written = WindowConfig.from_settings(replace(settings, aggregations=Settings().aggregations))
    windows, codec = KeyWindows(written), MarshalStateCodec(written.composed)
    records = []
    for offset in range(20):
        accepted = windows.accept("k", BASE + 1_000 * offset, float(offset))
        value = encode_upsert(offset, (), codec.encode(accepted.partial))
        records.append((entry_id("k", accepted.time), value))

    asyncio.run(write_changelog(settings, records))
    line = refusal(
        run_fiba_worker(
            replace(settings, aggregations=("count", "min", "sum")), 150, slow_shutdown_s=3.0
        ),
        started=True,
    )
    assert "the state of partition 0 cannot be read with these settings" in line, line


def test_a_state_dir_that_cannot_be_created_is_one_line_and_exit_2(
    kafka_bootstrap: str, embedded_profile: bool, tmp_path: Path
) -> None:
    """A ``state_dir`` under a file (or without permission) is a configuration error: the
    worker and the state commands stop with one line naming it, not a traceback."""
    (tmp_path / "a-file").write_text("not a directory\n")
    state_dir = tmp_path / "a-file" / "state"
    settings = worker_settings(kafka_bootstrap, embedded_profile, state_dir, partitions=1)
    asyncio.run(create_topics(settings))
    line = refusal(run_fiba_worker(settings, 60))
    assert line == f"fiba: state_dir {state_dir} cannot be used: Not a directory ({state_dir})"
    result = CliRunner().invoke(cli, ["state", "reset", "--yes"], env=settings_environ(settings))
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == line
