"""What every ``fiba`` command module shares: failures, the settings flags, the checks.

``CliFailure`` is a failure reported as one ``fiba: ...`` line with an exit code (2 for a
configuration error, an unreachable broker, rejected credentials or a port in use; 1 for the
rest). ``with_settings`` gives a command ``--config`` and the flags of the settings it names
(precedence: defaults < TOML < ``FIBA_*`` environment < flags; ``fiba --config`` is the
default file). ``run_async`` runs a coroutine and turns Kafka errors into such failures;
``TIME`` and ``DURATION`` are the click parameter types of times and durations. The command
modules (``app.cli``, ``app.state_cli``, ``spark_bridge.cli``) import it; it imports none of
them. Reference: docs/reference/cli.md.
"""

from __future__ import annotations

import asyncio
import functools
import socket
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import IO, Any, TypeVar

import click

from app.settings import (
    SETTINGS_HELP,
    ConfigError,
    Settings,
    load_settings_with_sources,
    setting_text,
)
from stores.durations import parse_duration

T = TypeVar("T")

CONNECTION_SETTINGS = (
    "broker",
    "broker_profile",
    "security_protocol",
    "sasl_mechanism",
    "sasl_username",
    "sasl_password",
    "ssl_cafile",
    "ssl_certfile",
    "ssl_keyfile",
)


class CliFailure(click.ClickException):
    """A failure reported as one ``fiba: ...`` line on stderr with ``exit_code``."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"fiba: {self.message}", err=True)


# --- settings ----------------------------------------------------------------------------------


def flag(name: str) -> str:
    """The CLI flag of setting ``name``: ``input_topic`` -> ``--input-topic``."""
    return "--" + name.replace("_", "-")


def load(config: str | None, overrides: dict[str, Any]) -> tuple[Settings, dict[str, str]]:
    """``load_settings_with_sources`` with a ``ConfigError`` turned into exit code 2."""
    try:
        return load_settings_with_sources(config, overrides)
    except ConfigError as exc:
        raise CliFailure(str(exc), exit_code=2) from None


def with_settings(
    *names: str, sources: bool = False
) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Decorate a command with ``--config`` and the flags of settings ``names``.

    The command receives the loaded ``Settings`` as its first argument instead of the flags
    (with ``sources``, also the layer of each setting as its second, see
    ``app.settings.load_settings_with_sources``).
    """

    def decorate(command: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(command)
        def run(*args: Any, config: str | None, **kwargs: Any) -> T:
            if config is None:
                config = (click.get_current_context().find_root().obj or {}).get("config")
            overrides = {name: kwargs.pop(name) for name in names}
            settings, layers = load(config, overrides)
            if sources:
                return command(settings, layers, *args, **kwargs)
            return command(settings, *args, **kwargs)

        defaults = Settings()
        for name in reversed(names):
            default = setting_text(name, getattr(defaults, name))
            run = click.option(
                flag(name),
                name,
                default=None,
                metavar="VALUE",
                help=f"{SETTINGS_HELP[name]} [env FIBA_{name.upper()}; default: {default}]",
            )(run)
        return click.option(
            "--config",
            type=click.Path(dir_okay=False),
            help="TOML settings file (keys at top level or in [fiba]); default: `fiba --config`,"
            " else env FIBA_CONFIG",
        )(run)

    return decorate


def require_broker(settings: Settings) -> None:
    """Stop with exit code 2 when no bootstrap server of ``settings`` is reachable or the broker
    rejects its credentials."""
    from agents.clients import BrokerUnreachable, CredentialsRejected, check_reachable

    try:
        check_reachable(settings)
    except CredentialsRejected as exc:
        raise CliFailure(str(exc), 2) from None
    except BrokerUnreachable as exc:
        raise CliFailure(f"{exc}; is it running? (`fiba broker` starts one)", 2) from None


def require_topics(settings: Settings, *topics: str) -> None:
    """Stop with one line (exit code 1) when one of ``topics`` does not exist, before anything
    is sent or read: the one check of every command that names a topic
    (``app.kafka_io.existing_partitions``; a producer would otherwise wait for the topic's
    metadata until its request timeout, or auto-create it on some brokers)."""
    from app.kafka_io import require_topics as check

    run_async(check(settings, topics))


def require_free_port(host: str, port: int, what: str) -> None:
    """Stop with exit code 2 when ``host:port`` cannot be listened on (another process holds
    it, or the address is not this machine's), before anything is started. The probe socket
    sets SO_REUSEADDR like the real servers do, so a port in TIME_WAIT is not a false alarm."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
            probe.listen(1)
    except OSError as exc:
        raise CliFailure(f"cannot listen on {host}:{port} for {what}: {exc.strerror}", 2) from None


def run_async(coro: Coroutine[Any, Any, T], report_outages: bool = True) -> T:
    """Run ``coro``; Kafka connection errors and the broker's refusals (credentials, ACLs)
    become exit code 2, a missing topic and other Kafka errors 1. While the broker does not
    answer, the clients retry with backoff and, with ``report_outages``, the command says so
    once per interval (``app.broker_outage``; not in a worker's process, whose log keeps
    aiokafka's records)."""
    from aiokafka.errors import KafkaConnectionError, KafkaError

    from agents.clients import refusal
    from app.broker_outage import watch_broker_outages
    from app.kafka_io import MissingTopic

    if report_outages:
        watch_broker_outages(lambda line: click.echo(f"fiba: {line}", err=True))
    try:
        return asyncio.run(coro)
    except MissingTopic as exc:
        raise CliFailure(str(exc)) from None
    except KafkaConnectionError as exc:
        raise CliFailure(f"cannot reach the Kafka broker: {exc}", 2) from None
    except KafkaError as exc:
        refused = refusal(exc)
        if refused is not None:
            raise CliFailure(refused, 2) from None
        raise CliFailure(f"Kafka error: {exc}") from None


def parse_time(value: str) -> int:
    """Epoch milliseconds of an integer or an ISO-8601 time (naive times are UTC)."""
    text = value.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"{value!r} is neither epoch ms nor an ISO-8601 time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


class TimeParam(click.ParamType):
    """A click parameter of epoch ms or ISO-8601 time."""

    name = "TIME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        return value if isinstance(value, int) else parse_time(str(value))


class DurationParam(click.ParamType):
    """A click parameter of a duration ("250ms", "30s", "5m", "1h", "1d", or integer ms)."""

    name = "DURATION"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


TIME = TimeParam()
DURATION = DurationParam()
