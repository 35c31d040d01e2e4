"""The ``fiba`` command line: embedded broker, topics, worker, producer, tail, queries, demo.

This module is the ``fiba`` entry: the click group, the app's own commands, and the commands of
other modules assembled under it. Every command that talks to Kafka accepts ``--config PATH``
and the settings flags that concern it (``app.cli_base.with_settings``); a configuration error,
an unreachable broker, rejected credentials or a topic the broker's ACLs deny stops the command
with one line on stderr and exit code 2; other failures exit with 1. Heavy modules (aiokafka,
Faust, Spark, the benchmarks) are imported inside the commands, so ``fiba --help`` stays fast;
``state`` is ``app.state_cli``'s group, and ``bench``, ``spark-join`` and ``spark-read`` hand
their arguments to the click commands of ``bench.cli`` and ``spark_bridge.cli``, layers above,
imported by name only when run. The command modules import ``app.cli_base``, never this one.
Reference: docs/reference/cli.md.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import signal
import sys
import time
import uuid
from typing import IO, Any

import click

import stores
from app.cli_base import (
    CONNECTION_SETTINGS,
    DURATION,
    TIME,
    CliFailure,
    require_broker,
    require_free_port,
    require_topics,
    run_async,
    with_settings,
)
from app.settings import SETTINGS_HELP, Settings, setting_text
from app.state_cli import state
from app.wording import counted, were

TOPIC_SETTINGS = (
    "input_topic",
    "queries_topic",
    "aggregates_topic",
    "answers_topic",
    "dead_letter_topic",
)
TOPIC_CREATION_SETTINGS = (
    *CONNECTION_SETTINGS,
    "app_id",
    *TOPIC_SETTINGS,
    "partitions",
    "replication_factor",
)
INPUT_FORMAT_SETTINGS = ("input_topic", "key_field", "ts_field", "value_field")
DEMO_SETTINGS = (
    "partitions",
    "retention",
    "windows",
    "aggregations",
    "emit",
    "resolution",
    "max_future_skew",
    "log_level",
)
TAIL_TOPICS = {
    "input": "input_topic",
    "queries": "queries_topic",
    "aggregates": "aggregates_topic",
    "answers": "answers_topic",
    "dead-letters": "dead_letter_topic",
}
"""``fiba tail --topic`` short names -> the setting naming that topic (any other name is a
topic's own)."""

DELEGATED_COMMANDS = {
    "bench": ("bench.cli:bench", "Run the benchmarks (see `fiba bench --help`)."),
    "spark-join": (
        "spark_bridge.cli:spark_join",
        "As-of join of a batch dataset with the aggregates topic, on Spark.",
    ),
    "spark-read": (
        "spark_bridge.cli:spark_read",
        "Show a sample of an output topic as a Spark DataFrame.",
    ),
}
"""Commands of the layers above, imported by name when run: name -> ("module:click_command",
short help)."""
EXTRAS = {"bench": "bench", "spark-join": "spark", "spark-read": "spark"}
"""The optional dependency set (pyproject extra) each delegated command needs."""


# --- the group ---------------------------------------------------------------------------------


HELP_OPTIONS = ["-h", "--help"]


@click.group(context_settings={"help_option_names": HELP_OPTIONS, "max_content_width": 100})
@click.version_option(
    None,
    "-V",
    "--version",
    package_name="fiba-stream",
    prog_name="fiba",
    message=f"%(prog)s, version %(version)s (hot path: {stores.build()})",
)
@click.option(
    "--config",
    type=click.Path(dir_okay=False),
    help="TOML settings file for every command (a command's own --config wins)",
)
@click.pass_context
def cli(ctx: click.Context, config: str | None) -> None:
    """fiba-stream: exact out-of-order sliding-window aggregation over Kafka (FiBA on Faust)."""
    ctx.obj = {"config": config}


def main() -> None:
    """Console-script entry point ``fiba``."""
    cli(prog_name="fiba")


@cli.command()
@click.option(
    "--kind",
    type=click.Choice(["embedded", "kafka"]),
    default="embedded",
    show_default=True,
    help="embedded: Tansu, in memory; kafka: Apache Kafka (KRaft, log on disk)",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=None,
    help="port (default: the port of --broker; 0: a free one)",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="kafka: keep the log here and reuse it on the next run (default: a temporary dir)",
)
@with_settings("broker")
def broker(settings: Settings, kind: str, port: int | None, data_dir: str | None) -> None:
    """Run a broker on loopback until Ctrl-C or SIGTERM: Tansu (default) or Apache Kafka, whose
    jars are resolved from Maven Central on first use and cached."""
    from app.brokers.kinds import development_broker_options, make_broker
    from app.brokers.process import BrokerError, BrokerSetupError

    if port is None:
        port = int(settings.bootstrap_servers[0].rpartition(":")[2])
    require_free_port("127.0.0.1", port, f"the {kind} broker")
    if data_dir is not None and kind != "kafka":
        raise CliFailure("--data-dir is for --kind kafka (the embedded broker is memory only)", 2)
    server = make_broker(kind, **development_broker_options(kind, port, data_dir))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        click.echo(f"starting the {kind} broker on {server.bootstrap} ...")
        server.start()
        click.echo(f"{kind} broker on {server.bootstrap} (log: {server.log_path}); Ctrl-C stops it")
        click.echo(f"clients: --broker {server.bootstrap} --broker-profile {server.profile}")
        click.echo("records of any age are kept (no time-based retention: for development)")
        while server.running:
            time.sleep(0.5)
        raise CliFailure(f"the {kind} broker exited; see {server.log_path}")
    except BrokerSetupError as exc:
        raise CliFailure(str(exc), 2) from None
    except BrokerError as exc:
        raise CliFailure(str(exc)) from None
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


@cli.group()
def topics() -> None:
    """Manage the app's topics."""


@topics.command("create")
@click.option(
    "--topic",
    "names",
    multiple=True,
    metavar="NAME",
    help="create only this topic (repeatable), e.g. the topics of a Faust app of your own;"
    " the app's topics when none is given",
)
@click.option(
    "--compacted",
    "compacted",
    multiple=True,
    metavar="NAME",
    help="create this compacted topic, never expired, like a table's changelog (repeatable)",
)
@with_settings(*TOPIC_CREATION_SETTINGS)
def topics_create(settings: Settings, names: tuple[str, ...], compacted: tuple[str, ...]) -> None:
    """Create every topic of the app explicitly, or only the --topic/--compacted ones, with
    --partitions partitions (idempotent; a partition-count mismatch is an error)."""
    from app.topics import TopicError, create_topics, named_topic_specs

    require_broker(settings)
    specs = named_topic_specs(settings, names, compacted) if names or compacted else None
    try:
        outcomes = run_async(create_topics(settings, specs))
    except TopicError as exc:
        raise CliFailure(str(exc)) from None
    for outcome in outcomes:
        state = "created" if outcome.created else "exists "
        click.echo(f"{state} {outcome.name} ({counted(outcome.partitions, 'partition')})")


@topics.command("list")
@click.option("--internal", is_flag=True, help="also the broker's own __ topics")
@with_settings(*CONNECTION_SETTINGS)
def topics_list(settings: Settings, internal: bool) -> None:
    """Print every topic on the broker with its partition count."""
    from app.topic_info import list_topics

    require_broker(settings)
    for name, partitions in run_async(list_topics(settings, internal)).items():
        click.echo(f"{name}  ({counted(partitions, 'partition')})")


@topics.command("describe")
@click.argument("name")
@click.option("--all-configs", is_flag=True, help="every config the broker returns")
@with_settings(*CONNECTION_SETTINGS)
def topics_describe(settings: Settings, name: str, all_configs: bool) -> None:
    """Print a topic's partitions (leader, replicas, in-sync replicas, end offset: the Fetch
    high watermark) and its retention and size configs (--all-configs: every one)."""
    from app.topic_info import UnknownTopic, describe_topic

    require_broker(settings)
    try:
        info = run_async(describe_topic(settings, name, all_configs))
    except UnknownTopic as exc:
        raise CliFailure(str(exc)) from None
    click.echo(
        f"topic {info.name}: {counted(len(info.partitions), 'partition')},"
        f" {counted(info.records, 'record')}"
    )
    for p in info.partitions:
        click.echo(
            f"  partition {p.partition}  leader {p.leader}  replicas {list(p.replicas)}"
            f"  isr {list(p.isr)}  end offset {p.end_offset}"
        )
    for key, value in info.configs.items():
        click.echo(f"  {key} = {value}")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="one JSON object instead of a table")
@click.option(
    "--worker",
    "workers",
    multiple=True,
    metavar="URL",
    help="also ask this worker's /stats (repeatable; default: http://web_host:web_port); the"
    " broker names the others (Apache Kafka does, the embedded broker does not)",
)
@with_settings(*CONNECTION_SETTINGS, "app_id", "input_topic", "web_host", "web_port")
def status(settings: Settings, as_json: bool, workers: tuple[str, ...]) -> None:
    """Per input partition: owner, applied offset, end offset, lag and restore state.

    Read from the broker (the workers' group, the window-store changelog, the progress
    committed under <app_id>-input) and from the workers' GET /stats where they answer: it
    works with no worker alive. End offsets are Fetch high watermarks.
    """
    from app.status import StatusError, read_status
    from app.worker_http import local_web_url

    require_broker(settings)
    try:
        report = run_async(read_status(settings, workers or [local_web_url(settings)]))
    except StatusError as exc:
        raise CliFailure(str(exc)) from None
    if as_json:
        click.echo(json.dumps(report.to_json()))
        return
    click.echo(f"group {report.group}: {report.state}, {counted(len(report.members), 'member')}")
    rows = [("partition", "owner", "applied", "end", "lag", "restore", "applied from")]
    for p in report.partitions:
        rows.append(
            (
                str(p.partition),
                p.owner or "-",
                "-" if p.applied_offset is None else str(p.applied_offset),
                str(p.end_offset),
                str(p.lag),
                p.restore,
                p.applied_from or "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


@cli.command()
@with_settings(*SETTINGS_HELP)
def worker(settings: Settings) -> None:
    """Run a stream-processing worker (topics must exist: `fiba topics create`)."""
    from app.topics import missing_or_mismatched
    from app.worker import claim_local_state, run_worker
    from stores.state_lock import StateDirBusy, StateDirUnusable
    from stores.state_shape import StateMismatch

    require_free_port(settings.web_host, settings.web_port, "the worker's HTTP server")
    require_broker(settings)
    if settings.exactly_once:
        from agents.transactions import NoTransactions, check_transactions

        try:
            run_async(check_transactions(settings), report_outages=False)
        except NoTransactions as exc:
            raise CliFailure(str(exc), 2) from None
    problems = run_async(missing_or_mismatched(settings), report_outages=False)
    if problems:
        raise CliFailure("; ".join(problems) + " (run `fiba topics create` with these settings)")
    try:
        lock = claim_local_state(settings)  # held while the worker runs
    except (StateDirBusy, StateDirUnusable, StateMismatch) as refused:
        raise CliFailure(str(refused), 2) from None
    try:
        run_worker(settings)
    except StateMismatch as refused:  # a partition's state in the changelog
        raise CliFailure(str(refused), 2) from None
    finally:
        lock.release()


# --- produce -----------------------------------------------------------------------------------


@cli.command()
@click.argument("file", type=click.File("rb"), required=False)
@click.option("--generate", "count", type=click.IntRange(min=0), help="generate N events")
@click.option("--keys", type=click.IntRange(min=1), default=10, show_default=True)
@click.option(
    "--ooo-fraction",
    type=click.FloatRange(0, 1),
    default=0.2,
    show_default=True,
    help="fraction of out-of-order events",
)
@click.option(
    "--max-lateness",
    type=DURATION,
    default="30s",
    show_default=True,
    help="how far behind stream time an out-of-order event may be",
)
@click.option(
    "--interval",
    type=DURATION,
    default="100ms",
    show_default=True,
    help="event-time step between in-order events",
)
@click.option("--start", type=TIME, default=None, help="time of the first event (default: now)")
@click.option("--rate", type=click.FloatRange(min=0, min_open=True), help="events/s (default: max)")
@click.option("--seed", type=int, default=None, help="random seed (same seed, same events)")
@with_settings(*CONNECTION_SETTINGS, *INPUT_FORMAT_SETTINGS)
def produce(
    settings: Settings,
    file: IO[bytes] | None,
    count: int | None,
    keys: int,
    ooo_fraction: float,
    max_lateness: int,
    interval: int,
    start: int | None,
    rate: float | None,
    seed: int | None,
) -> None:
    """Send events to the input topic: the lines of FILE.jsonl ('-' = stdin) or --generate N.

    A FILE line is a JSON object whose key field (the key_field setting, else "key") is the
    Kafka key; with key_field unset, "key" is removed from the value. Generated events are
    {"<ts_field>": ms, "<value_field>": int} keyed key-0..key-K-1, a fraction of them out of
    order (app.generator). A record's Kafka timestamp is its integer event time, or this
    machine's clock for a time ahead of it (Apache Kafka refuses one more than an hour ahead).
    """
    from app.generator import generate_events
    from app.kafka_io import BadInputLine, event_record, file_records, send_records

    if (file is None) == (count is None):
        raise click.UsageError("give either FILE or --generate N")
    if count is not None:
        try:
            events = generate_events(
                count,
                keys=keys,
                ooo_fraction=ooo_fraction,
                max_lateness_ms=max_lateness,
                interval_ms=interval,
                start_ms=start if start is not None else int(time.time() * 1000),
                seed=seed,
            )
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        records = (event_record(e, settings) for e in events)
    else:
        records = file_records(file, settings)
    require_broker(settings)
    require_topics(settings, settings.input_topic)
    try:
        sent = run_async(send_records(settings, records, total=count, rate=rate))
    except BadInputLine as exc:
        raise CliFailure(
            f"{file.name}: {exc} ({counted(exc.sent, 'record')} before it {were(exc.sent)}"
            " sent; nothing after it)"
        ) from None
    click.echo(f"sent {counted(sent, 'record')} to {settings.input_topic}", err=True)


# --- tail --------------------------------------------------------------------------------------


@cli.command()
@click.option(
    "--topic",
    "which",
    default="aggregates",
    show_default=True,
    metavar="NAME",
    help=f"any topic by name, or one of the app's: {', '.join(TAIL_TOPICS)}",
)
@click.option("--from-beginning", is_flag=True, help="start at the oldest record, not the end")
@click.option("--limit", type=click.IntRange(min=1), help="stop after N records")
@click.option("--idle-timeout", type=DURATION, help="stop when nothing arrives for this long")
@with_settings(*CONNECTION_SETTINGS, *TOPIC_SETTINGS)
def tail(
    settings: Settings,
    which: str,
    from_beginning: bool,
    limit: int | None,
    idle_timeout: int | None,
) -> None:
    """Print the records of a topic as JSON lines (partition, offset, key, value, headers).

    Dead letters carry their reason headers (fiba.error.reason, fiba.error.detail, ...).
    Follows the topic until Ctrl-C, --limit or --idle-timeout.
    """
    from app.kafka_io import tail_topic

    require_broker(settings)
    topic = getattr(settings, TAIL_TOPICS[which]) if which in TAIL_TOPICS else which
    require_topics(settings, topic)

    def show(record: dict[str, Any]) -> None:
        click.echo(json.dumps(record, ensure_ascii=False))

    with contextlib.suppress(KeyboardInterrupt):
        run_async(
            tail_topic(
                settings,
                topic,
                show,
                from_beginning=from_beginning,
                limit=limit,
                idle_timeout_ms=idle_timeout,
            )
        )


# --- query -------------------------------------------------------------------------------------


@cli.command()
@click.argument("key")
@click.option("--from", "from_ts", type=TIME, help="range start (epoch ms or ISO-8601)")
@click.option("--to", "to_ts", type=TIME, help="range end, inclusive")
@click.option("--window", help="a configured window name (e.g. 5m) instead of --from/--to")
@click.option("--aggregations", help="comma-separated subset of the configured aggregations")
@click.option("--http", is_flag=True, help="ask the worker's HTTP endpoint, not the query topic")
@click.option("--timeout", type=DURATION, default="30s", show_default=True)
@with_settings(*CONNECTION_SETTINGS, "queries_topic", "answers_topic", "web_host", "web_port")
def query(
    settings: Settings,
    key: str,
    from_ts: int | None,
    to_ts: int | None,
    window: str | None,
    aggregations: str | None,
    http: bool,
    timeout: int,
) -> None:
    """Range query over KEY's retained events: --from T --to T, or --window NAME.

    Prints the answer as one JSON line; exit code 1 when the worker answered with an error.
    """
    from agents.records import RangeQuery

    if window is None and (from_ts is None or to_ts is None):
        raise click.UsageError("give --from and --to, or --window")
    if window is not None and (from_ts is not None or to_ts is not None):
        raise click.UsageError("--window excludes --from/--to")
    request = RangeQuery(
        query_id=uuid.uuid4().hex,
        key=key,
        from_ts=from_ts,
        to_ts=to_ts,
        window=window,
        aggregations=tuple(a.strip() for a in aggregations.split(",")) if aggregations else None,
    )
    if http:
        from app.worker_http import BadWorkerAnswer, WorkerUnreachable, http_ask

        try:
            answer = http_ask(settings, request, timeout / 1000)
        except WorkerUnreachable as exc:
            raise CliFailure(str(exc), 2) from None
        except BadWorkerAnswer as exc:
            raise CliFailure(str(exc)) from None
    else:
        from app.kafka_io import NoAnswer, ask

        require_broker(settings)
        require_topics(settings, settings.queries_topic, settings.answers_topic)
        try:
            answer = run_async(ask(settings, request, timeout / 1000))
        except NoAnswer as exc:
            raise CliFailure(str(exc)) from None
    click.echo(json.dumps(answer, ensure_ascii=False))
    if answer.get("error"):
        raise CliFailure(f"the worker answered with an error: {answer['error']}")


# --- demo --------------------------------------------------------------------------------------


@cli.command()
@click.option("--events", type=click.IntRange(min=1), default=2000, show_default=True)
@click.option("--keys", type=click.IntRange(min=1), default=5, show_default=True)
@click.option("--seed", type=int, default=7, show_default=True)
@click.option("--timeout", type=DURATION, default="180s", show_default=True)
@click.option(
    "--broker-kind",
    type=click.Choice(["embedded", "kafka"]),
    default="embedded",
    show_default=True,
    help="the broker the demo starts (see `fiba broker --kind`)",
)
@with_settings(*DEMO_SETTINGS)
def demo(
    settings: Settings, events: int, keys: int, seed: int, timeout: int, broker_kind: str
) -> None:
    """Run everything on a broker it starts (embedded by default): topics, a worker, an
    out-of-order stream, aggregates, dead letters and range queries; stops all it started."""
    from app.brokers.process import BrokerError, BrokerSetupError
    from app.demo import DemoError, Termination, run_demo

    termination = Termination()  # SIGTERM stops what the demo started, like Ctrl-C
    try:
        termination.install()
        summary = run_demo(
            settings,
            events=events,
            keys=keys,
            seed=seed,
            timeout=timeout / 1000,
            broker_kind=broker_kind,
            log=click.echo,
            termination=termination,
        )
    except BrokerSetupError as exc:
        raise CliFailure(str(exc), 2) from None
    except (DemoError, BrokerError) as exc:
        raise CliFailure(str(exc)) from None
    except KeyboardInterrupt:
        if not termination.received:
            raise
        click.echo("fiba: terminated; the demo's broker and worker are stopped", err=True)
        return  # ``end`` ends the process by SIGTERM
    finally:
        termination.end()
    if not summary.exact:
        raise CliFailure("some results differ from the brute-force check (see above)")


# --- config ------------------------------------------------------------------------------------


@cli.group()
def config() -> None:
    """Inspect the effective configuration."""


@config.command("show")
@with_settings(*SETTINGS_HELP, sources=True)
def config_show(settings: Settings, sources: dict[str, str]) -> None:
    """Print every setting's effective value and the layer it came from (default, the TOML
    file, environment FIBA_*, or a flag); secrets are masked."""
    width = max(map(len, SETTINGS_HELP))
    for name in SETTINGS_HELP:
        value = setting_text(name, getattr(settings, name))
        click.echo(f"{name:<{width}}  {value}  ({sources[name]})")


# --- commands of other modules -----------------------------------------------------------------


def _delegate(name: str, target: str, short_help: str) -> click.Command:
    """A command ``name`` that imports ``target`` ("module:command") only when run."""

    @click.command(
        name,
        help=short_help,
        add_help_option=False,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def command(args: tuple[str, ...]) -> None:
        module, _, attr = target.partition(":")
        try:
            real: click.Command = getattr(importlib.import_module(module), attr)
        except ImportError as exc:
            if name == "bench" and (exc.name or "").partition(".")[0] == "bench":
                raise CliFailure(
                    "`fiba bench` runs the benchmarks of a checkout of the repository, which"
                    " are not installed: in its root run `python -m bench ...` (or `make bench`)",
                    2,
                ) from None
            extra = EXTRAS[name]
            raise CliFailure(
                f"`fiba {name}` needs the [{extra}] extra ({exc.name} is missing):"
                f" pip install 'fiba-stream[{extra}]'",
                2,
            ) from None
        # obj carries `fiba --config PATH` to commands built with `with_settings`.
        real.main(
            list(args),
            prog_name=f"fiba {name}",
            obj=click.get_current_context().obj,
            help_option_names=HELP_OPTIONS,
        )

    return command


cli.add_command(state)
for _name, (_target, _help) in DELEGATED_COMMANDS.items():
    cli.add_command(_delegate(_name, _target, _help))


def command_names() -> set[str]:
    """Names of every ``fiba`` command, subcommands as "group sub" (e.g. "topics create")."""
    names = set()
    for name, command in cli.commands.items():
        names.add(name)
        if isinstance(command, click.Group):
            names.update(f"{name} {sub}" for sub in command.commands)
    return names


if __name__ == "__main__":
    main()
