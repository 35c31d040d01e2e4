"""``fiba demo``: the whole job end to end on a broker it starts, checked by brute force.

``run_demo(settings, broker_kind=...)`` starts a broker of that kind, creates the topics,
starts one worker subprocess, produces a keyed out-of-order stream (``app.generator``) and five
bad records, reads the aggregates and dead letters and asks a few range queries over the topic
and over HTTP, then checks each against a brute-force recomputation and returns a
``DemoSummary``. It stops everything it started, also on error, Ctrl-C or SIGTERM. Reference:
docs/reference/cli.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.records import (
    DLQ_REASON,
    EVENT_TS,
    FROM,
    REASON_BAD_VALUE,
    REASON_FUTURE,
    REASON_LATE,
    REASON_MALFORMED_JSON,
    REASON_MISSING_FIELD,
    STREAM_TIME,
    TO,
    WINDOW_COUNT,
    WINDOWS,
    AggregateRecord,
    RangeQuery,
    dumps,
)
from app.brokers.kinds import make_broker, options_keeping_old_records
from app.brokers.process import free_port, stop_process
from app.generator import Event, generate_events
from app.kafka_io import ask, event_record, record_as_dict, send_records, start_consumer
from app.settings import OFF_SETTINGS, SETTINGS_HELP, Settings
from app.topics import create_topics
from app.wording import counted
from app.worker_http import BadWorkerAnswer, WorkerUnreachable, http_ask

DEMO_START_MS = 1_700_000_000_000
"""Event time of the first generated event (fixed, so a seed gives the same demo)."""


class DemoError(RuntimeError):
    """The demo could not run to its end; ``str(exc)`` says why (with the worker's log tail)."""


@dataclass
class DemoSummary:
    """What the demo saw; ``exact`` when every check passed (``mismatches`` lists the rest)."""

    events: int
    bad_records: int
    aggregates: int
    final: dict[str, AggregateRecord] = field(default_factory=dict)
    dead_letters: Counter[str] = field(default_factory=Counter)
    answers: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """(channel, answer) pairs; the channel is "topic" or "http"."""
    mismatches: list[str] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return not self.mismatches


@dataclass
class Termination:
    """SIGTERM for ``fiba demo`` (installed before it starts anything): like Ctrl-C, a
    ``KeyboardInterrupt`` in the main thread, so that ``run_demo`` stops what it started; but
    not while that stop is under way (``stopping``), which then runs to its end. ``received``
    stays set even if the interrupt was lost (raised inside a ``__del__``, which ignores
    exceptions): ``end`` then still ends the process as terminated, once all is stopped."""

    received: bool = False
    stopping: bool = False

    def install(self) -> None:
        """Handle SIGTERM in this process (main thread only) until ``end``."""
        signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self.received = True
        if not self.stopping:
            raise KeyboardInterrupt

    def end(self) -> None:
        """Give SIGTERM its default action back (what is started is stopped: it may kill
        now) and, if one was received, end this process by it (exit status 143 in a shell)."""
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if self.received:
            sys.stdout.flush()
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGTERM)


def settings_environ(settings: Settings) -> dict[str, str]:
    """``FIBA_*`` variables that make a worker load exactly ``settings`` (unset ones omitted)."""
    env = {}
    for name in SETTINGS_HELP:
        value = getattr(settings, name)
        if value is None and name in OFF_SETTINGS:
            value = "off"  # unset would mean its default
        if value is None:
            continue
        if name == "windows":
            text = ",".join(w.name for w in value)
        elif name == "aggregations":
            text = ",".join(value)
        else:
            text = str(value)
        env[f"FIBA_{name.upper()}"] = text
    return env


def bad_records(events: Sequence[Event], settings: Settings) -> list[tuple[bytes, bytes, str]]:
    """Records the worker must reject, as (key, value, expected dead-letter reason).

    The late and future events use the key of the newest event, whose partition's stream time
    is therefore the stream's newest time when they arrive. The future one is beyond
    ``max_future_skew`` when that is set, else a day past ``max_wall_clock_skew`` from now; with
    both off no time is future, and there is none.
    """
    newest = max(events, key=lambda e: e.ts)
    key = newest.key.encode()
    ts, value = settings.ts_field, settings.value_field
    late = newest.ts - settings.retention - 60_000
    bad = [
        (key, b'{"' + ts.encode() + b'": 1, "broken', REASON_MALFORMED_JSON),
        (key, dumps({ts: newest.ts}), REASON_MISSING_FIELD),
        (key, dumps({ts: newest.ts, value: "many"}), REASON_BAD_VALUE),
        (key, dumps({ts: late, value: 1}), REASON_LATE),
    ]
    if settings.max_future_skew is not None:
        future = newest.ts + settings.max_future_skew + 60_000
    elif settings.max_wall_clock_skew is not None:
        future = max(newest.ts, int(time.time() * 1000)) + settings.max_wall_clock_skew + 86_400_000
    else:
        return bad
    return [*bad, (key, dumps({ts: future, value: 1}), REASON_FUTURE)]


def expected_windows(
    record: AggregateRecord, key_events: Sequence[Event], settings: Settings
) -> dict[str, dict[str, Any]]:
    """Brute force: count (and sum, max when configured) of each window of ``record`` at its
    stream time, over ``key_events``, the events of ``record``'s key (all of them must already
    be counted in ``record``). O(len(key_events)) per window."""
    out = {}
    for name, size in settings.window_sizes.items():
        values = [
            e.value for e in key_events if record.stream_time - size <= e.ts <= record.stream_time
        ]
        got: dict[str, Any] = {WINDOW_COUNT: len(values)}
        if "sum" in settings.aggregations:
            got["sum"] = sum(values)
        if "max" in settings.aggregations and values:
            got["max"] = max(values)
        out[name] = got
    return out


def observed_windows(record: AggregateRecord, expected: dict[str, dict[str, Any]]) -> dict:
    """The fields of ``record`` that ``expected`` has, in the same shape."""
    out = {}
    for name, fields in expected.items():
        window = record.windows.get(name)
        if window is None:
            out[name] = None
            continue
        shown = {WINDOW_COUNT: window.count}
        for agg in fields.keys() - {WINDOW_COUNT}:
            shown[agg] = window.aggregates.get(agg)
        out[name] = shown
    return out


def run_demo(
    settings: Settings | None = None,
    *,
    events: int = 2000,
    keys: int = 5,
    seed: int = 7,
    ooo_fraction: float = 0.2,
    max_lateness_ms: int = 30_000,
    interval_ms: int = 250,
    timeout: float = 180.0,
    broker_kind: str = "embedded",
    log: Callable[[str], Any] = print,
    termination: Termination | None = None,
) -> DemoSummary:
    """Run the demo (module docstring) and return its summary; ``log`` gets progress lines.

    ``settings`` supplies the aggregation settings (windows, aggregations, retention, emit,
    partitions, ...); the broker, profile, app id, state dir and web port are the demo's own.
    Raises ``DemoError`` when a step fails or the results do not arrive within ``timeout``
    seconds, ``app.brokers.process.BrokerError`` when the broker does not start. With
    ``termination`` (installed), a SIGTERM cannot cut short the final stop of the worker and the
    broker.
    """
    base = settings or Settings()
    workdir = Path(tempfile.mkdtemp(prefix="fiba-demo-"))
    broker = make_broker(
        broker_kind, log_path=workdir / "broker.log", **options_keeping_old_records(broker_kind)
    )
    worker: subprocess.Popen[bytes] | None = None
    try:
        log(f"starting the {broker_kind} broker ...")
        broker.start()
        demo = dataclasses.replace(
            base,
            broker=broker.bootstrap,
            broker_profile=broker.profile,
            app_id=f"fiba-demo-{uuid.uuid4().hex[:6]}",
            state_dir=workdir / "state",
            web_host="127.0.0.1",
            web_port=free_port(),
        )
        demo.state_dir.mkdir()
        lateness = min(max_lateness_ms, demo.retention // 2)
        log(
            f"broker on {demo.broker};"
            f" creating topics ({counted(demo.partitions, 'partition')} each)"
        )
        asyncio.run(create_topics(demo))
        worker = start_worker(demo, workdir / "worker.log")
        log(f"worker started (pid {worker.pid}, log {workdir / 'worker.log'})")
        stream = list(
            generate_events(
                events,
                keys=keys,
                ooo_fraction=ooo_fraction,
                max_lateness_ms=lateness,
                interval_ms=interval_ms,
                start_ms=DEMO_START_MS,
                seed=seed,
            )
        )
        bad = bad_records(stream, demo)
        log(
            f"producing {counted(events, 'event')} over {counted(keys, 'key')}"
            f" ({ooo_fraction:.0%} out of order, up to {lateness} ms late)"
            f" and {counted(len(bad), 'bad record')}"
        )
        asyncio.run(send_records(demo, [event_record(e, demo) for e in stream], progress=False))
        asyncio.run(send_records(demo, [(k, v, None) for k, v, _ in bad], progress=False))
        summary = asyncio.run(collect(demo, stream, bad, worker, workdir, timeout, log))
        report(summary, demo, log)
        return summary
    finally:
        if termination is not None:
            termination.stopping = True
        if worker is not None:
            stop_worker(worker)
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def start_worker(
    settings: Settings,
    log_path: Path,
    module: Sequence[str] = ("app.cli", "worker"),
    extra_env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """``fiba worker`` for ``settings`` in a subprocess (own session), output to ``log_path``;
    ``module``: another ``python -m`` command line to run with the same environment, plus
    ``extra_env``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIBA_")}
    env.update(settings_environ(settings), **(extra_env or {}))
    with open(log_path, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", *module],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )


def stop_worker(worker: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    """SIGTERM the worker, SIGKILL it after ``timeout`` seconds."""
    stop_process(worker, timeout)


def log_tail(path: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of a log file (empty if it is missing)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


async def collect(
    settings: Settings,
    stream: Sequence[Event],
    bad: Sequence[tuple[bytes, bytes, str]],
    worker: subprocess.Popen[bytes],
    workdir: Path,
    timeout: float,
    log: Callable[[str], Any],
) -> DemoSummary:
    """Read aggregates and dead letters until every check passes (or ``timeout``), then ask
    range queries; the summary lists whatever still differs."""
    summary = DemoSummary(events=len(stream), bad_records=len(bad), aggregates=0)
    aggregates = await start_consumer(settings, settings.aggregates_topic)
    dead_letters = await start_consumer(settings, settings.dead_letter_topic)
    deadline = time.monotonic() + timeout
    by_key: dict[str, list[Event]] = {}
    for event in stream:
        by_key.setdefault(event.key, []).append(event)
    log("waiting for the worker's aggregates and dead letters ...")
    try:
        await aggregates.seek_to_beginning()
        await dead_letters.seek_to_beginning()
        while True:
            for records in (await aggregates.getmany(timeout_ms=200)).values():
                for record in records:
                    final = AggregateRecord.from_json(record_as_dict(record)["value"])
                    summary.final[final.key] = final
                    summary.aggregates += 1
            for records in (await dead_letters.getmany(timeout_ms=50)).values():
                for record in records:
                    headers = record_as_dict(record).get("headers") or {}
                    summary.dead_letters[headers.get(DLQ_REASON, "no reason header")] += 1
            summary.mismatches = final_mismatches(summary, by_key, bad, settings)
            if not summary.mismatches:
                break
            if worker.poll() is not None:
                raise DemoError(
                    f"the worker exited with code {worker.returncode}; its log ends with:\n"
                    + log_tail(workdir / "worker.log")
                )
            if time.monotonic() > deadline:
                log(f"timed out after {timeout:g}s waiting for exact results")
                return summary
    finally:
        await aggregates.stop()
        await dead_letters.stop()
    log(
        f"every key exact ({counted(len(by_key), 'key')});"
        " asking range queries (query topic and HTTP) ..."
    )
    for query in sample_queries(summary, settings):
        wait = max(1.0, deadline - time.monotonic())
        answers = [("topic", await ask(settings, query, wait))]
        try:
            answers.append(("http", http_ask(settings, query, wait)))
        except (WorkerUnreachable, BadWorkerAnswer) as exc:
            summary.mismatches.append(str(exc))
        for channel, answer in answers:
            summary.answers.append((channel, answer))
            want = sum(
                1
                for e in stream
                if e.key == query.key and answer.get(FROM, 0) <= e.ts <= answer.get(TO, -1)
            )
            exact_times = settings.resolution is None
            if answer.get("error") or (exact_times and answer.get(WINDOW_COUNT) != want):
                summary.mismatches.append(f"{channel} answer {answer} (brute-force count {want})")
    return summary


def final_mismatches(
    summary: DemoSummary,
    by_key: dict[str, list[Event]],
    bad: Sequence[tuple[bytes, bytes, str]],
    settings: Settings,
) -> list[str]:
    """What still differs from the brute-force truth (empty when everything is exact);
    ``by_key`` holds the produced events of each key."""
    wrong = []
    for key, key_events in sorted(by_key.items()):
        final = summary.final.get(key)
        if final is None:
            wrong.append(f"{key}: no aggregate yet")
            continue
        if settings.resolution is not None:
            continue
        last = max(key_events, key=lambda e: e.ts)
        if final.stream_time < last.ts:
            wrong.append(f"{key}: stream time {final.stream_time} < newest event {last.ts}")
            continue
        expected = expected_windows(final, key_events, settings)
        observed = observed_windows(final, expected)
        if observed != expected:
            wrong.append(f"{key}: windows {observed}, brute force {expected}")
    want = Counter(reason for _, _, reason in bad)
    if summary.dead_letters != want:
        wrong.append(f"dead letters {dict(summary.dead_letters)}, expected {dict(want)}")
    return wrong


def sample_queries(summary: DemoSummary, settings: Settings) -> list[RangeQuery]:
    """For up to three keys: the smallest window, and the last 30 s (at most the retention)
    up to the key's stream time."""
    queries = []
    span = min(30_000, settings.retention)
    smallest = min(settings.windows, key=lambda w: w.size_ms).name
    for final in list(summary.final.values())[:3]:
        queries.append(RangeQuery(uuid.uuid4().hex, final.key, window=smallest))
        queries.append(
            RangeQuery(
                uuid.uuid4().hex,
                final.key,
                from_ts=final.stream_time - span,
                to_ts=final.stream_time,
            )
        )
    return queries


def report(summary: DemoSummary, settings: Settings, log: Callable[[str], Any]) -> None:
    """Print the final aggregates, dead letters, answers and the verdict."""
    log(f"\n{counted(summary.aggregates, 'aggregate record')}; the last one of each key:")
    for key in sorted(summary.final):
        final = summary.final[key]
        log(f"  {key}  {STREAM_TIME}={final.stream_time}  {EVENT_TS}={final.event_ts}")
        for name, window in final.windows.items():
            log(f"    {name:>5}: {_aggregates(window.count, window.aggregates)}")
    log(f"\ndead letters by reason: {dict(sorted(summary.dead_letters.items()))}")
    if summary.answers:
        log("\nrange queries [from, to]:")
        for channel, answer in summary.answers:
            result = _aggregates(answer.get(WINDOW_COUNT), answer.get("result") or {})
            span = f"[{answer.get(FROM)}, {answer.get(TO)}]"
            log(f"  {channel:>5} {answer.get('key')} {span}: {result}")
    if summary.exact:
        log(
            f"\nexact: every key's {WINDOWS} and every answer match a brute-force recomputation"
            f" of the {counted(summary.events, 'event')};"
            f" {counted(summary.bad_records, 'bad record')} dead-lettered"
        )
    else:
        log("\nNOT exact:")
        for line in summary.mismatches:
            log(f"  {line}")


def _aggregates(count: Any, aggregates: dict[str, Any]) -> str:
    """``count=.. sum=.. max=..``: the aggregates, led by the count unless it is one of them."""
    shown = aggregates if "count" in aggregates else {"count": count, **aggregates}
    return "  ".join(f"{name}={_short(value)}" for name, value in shown.items())


def _short(value: Any) -> str:
    """A number shown with at most 6 significant digits; anything else as is."""
    return f"{value:.6g}" if isinstance(value, float) else str(value)
