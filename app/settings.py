"""The worker's configuration: one frozen ``Settings`` built from four layered sources.

Precedence, lowest to highest: defaults, a TOML file (``--config`` or ``FIBA_CONFIG``; keys at
the top level or in ``[fiba]``), environment variables ``FIBA_<NAME>``, CLI flags
``--<name-with-dashes>``; every setting has the same name in all four (``SETTINGS_HELP``).
Invalid values, unknown keys and inconsistent settings raise ``ConfigError`` naming the
setting and the layer it came from; every layer is checked, not only the winning one (a bad
value that a higher layer overrides is still an error). Every setting:
docs/reference/configuration.md.
"""

from __future__ import annotations

import os
import re
import ssl
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.connection import KafkaConnection
from stores import PURE_PYTHON_SWITCH
from stores.aggregations import AggregationError, aggregation_names, named, validated_monoid
from stores.durations import format_duration, parse_duration
from stores.key_windows import WindowSpec


class ConfigError(Exception):
    """A configuration that cannot be used; ``str(exc)`` is one clear line for the user."""


BROKER_PROFILES = ("kafka", "embedded")
EMIT_MODES = ("event", "batch", "changes")
WINDOW_ENDS = ("stream_time", "event_time")

PROCESSING_GUARANTEES = ("at_least_once", "exactly_once")
TIMESTAMP_SOURCES = ("field", "kafka")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER")
WORKER_CLIENT_ID_PREFIX = "fiba-worker@"
"""Prefix of a worker's Kafka client id (``Settings.worker_client_id``)."""

_HOST_PORT = re.compile(r"^[A-Za-z0-9_.\-]+(:\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](:\d{1,5})?$")


def parse_bootstrap_servers(value: str) -> tuple[str, ...]:
    """``host:port`` entries of a broker string: ``kafka://h1:9092,h2:9092`` or ``h1:9092;h2``.

    The ``kafka://`` scheme is optional; a missing port means 9092; a port outside 1-65535 is a
    ``ValueError``.
    """
    text = value.strip()
    if text.startswith("kafka://"):
        text = text[len("kafka://") :]
    servers = []
    for part in re.split(r"[,;]", text):
        entry = part.strip().rstrip("/")
        if not entry:
            continue
        if not _HOST_PORT.match(entry):
            raise ValueError(f"not a host:port: {entry!r}")
        if not re.search(r":\d+$", entry):
            entry = f"{entry}:9092"
        port = int(entry.rpartition(":")[2])
        if not 0 < port < 65536:
            raise ValueError(f"not a TCP port (1-65535): {port} in {entry!r}")
        servers.append(entry)
    if not servers:
        raise ValueError(f"no broker address in {value!r}")
    return tuple(servers)


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything a worker (and the CLI around it) needs; see the module docstring for sources.

    Durations are int milliseconds; ``windows`` keeps the configured order and names.
    """

    broker: str = "kafka://127.0.0.1:9092"
    broker_profile: str = "kafka"
    session_timeout: int | None = None
    security_protocol: str | None = None
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    app_id: str = "fiba"
    input_topic: str = "fiba-events"
    aggregates_topic: str = "fiba-aggregates"
    queries_topic: str = "fiba-queries"
    answers_topic: str = "fiba-answers"
    dead_letter_topic: str = "fiba-dead-letters"
    partitions: int = 4
    replication_factor: int = 1
    retention: int = 3_600_000
    windows: tuple[WindowSpec, ...] = (
        WindowSpec("1m", 60_000),
        WindowSpec("5m", 300_000),
        WindowSpec("1h", 3_600_000),
    )
    aggregations: tuple[str, ...] = ("count", "sum", "max", "mean", "pop_stddev")
    max_future_skew: int | None = None
    max_wall_clock_skew: int | None = 86_400_000
    resolution: int | None = None
    emit: str = "event"
    window_end: str = "stream_time"

    processing_guarantee: str = "at_least_once"
    batch_max_records: int = 1000
    batch_max_wait: int = 200
    key_field: str | None = None
    ts_field: str = "ts"
    value_field: str = "value"
    timestamp_source: str = "field"
    max_key_bytes: int = 1024
    max_value_bytes: int = 65536
    state_dir: Path = Path("./fiba-data")
    web_host: str = "127.0.0.1"
    web_port: int = 6066
    sweep_interval: int = 30_000
    standby_replicas: int = 0
    log_level: str = "info"

    @property
    def bootstrap_servers(self) -> tuple[str, ...]:
        """The ``host:port`` entries of ``broker`` (for aiokafka clients)."""
        return parse_bootstrap_servers(self.broker)

    @property
    def web_url(self) -> str:
        """The base URL of this worker's HTTP server, ``http://web_host:web_port`` (an IPv6
        address in brackets: ``http://[::1]:6066``)."""
        host = f"[{self.web_host}]" if ":" in self.web_host else self.web_host
        return f"http://{host}:{self.web_port}"

    @property
    def faust_broker(self) -> str:
        """``broker`` in Faust's URL form: ``kafka://h1:9092;h2:9092``."""
        return KafkaConnection.from_settings(self).faust_broker()

    @property
    def embedded(self) -> bool:
        """True with the embedded-broker profile (Tansu workarounds switched on)."""
        return self.broker_profile == "embedded"

    @property
    def exactly_once(self) -> bool:
        """True with ``processing_guarantee = "exactly_once"`` (``agents.transactions``)."""
        return self.processing_guarantee == "exactly_once"

    @property
    def isolation_level(self) -> str:
        """How the worker's own readers of the changelog, input and answers read: with
        exactly-once, ``read_committed`` (aborted transactions never seen), else
        ``read_uncommitted``."""
        return "read_committed" if self.exactly_once else "read_uncommitted"

    @property
    def outputs_isolation_level(self) -> str:
        """How readers of the output topics (``fiba tail``, the answers reader) read:
        ``read_committed``, so that an aborted exactly-once transaction is never seen (the
        same as ``read_uncommitted`` where no transaction is used); the embedded profile reads
        ``read_uncommitted`` (its broker has no transactions)."""
        return "read_uncommitted" if self.embedded else "read_committed"

    @property
    def worker_client_id(self) -> str:
        """The Kafka client id of the worker's Faust clients, ``fiba-worker@<web_url>``:
        DescribeGroups shows it, and ``fiba status`` asks that URL's ``/stats``."""
        return WORKER_CLIENT_ID_PREFIX + self.web_url

    @property
    def changelog_topic(self) -> str:
        """The changelog topic of the per-key window store."""
        return f"{self.app_id}-windows-changelog"

    @property
    def input_progress_group(self) -> str:
        """The consumer group under which the worker commits its input progress, for
        monitoring only (``agents.input_reader``)."""
        return f"{self.app_id}-input"

    @property
    def assignment_topic(self) -> str:
        """The empty topic, co-partitioned with the input, whose partitions Faust's assignor
        hands out to the workers (``agents.input_reader``)."""
        return f"{self.app_id}-assignment"

    @property
    def leader_topic(self) -> str:
        """Faust's leader-election topic (``faust.assignor.LeaderAssignor``), always empty."""
        return f"{self.app_id}-__assignor-__leader"

    @property
    def window_sizes(self) -> dict[str, int]:
        """Window name -> size in ms, in configured order."""
        return {w.name: w.size_ms for w in self.windows}


SETTINGS_HELP: dict[str, str] = {
    "broker": "Kafka bootstrap servers: host:port[,host:port...], kafka:// optional",
    "broker_profile": "kafka | embedded (Tansu workarounds: short timeouts, single batches)",
    "session_timeout": (
        "consumer-group session timeout (duration, >= 6s on Apache Kafka): how long a crashed "
        "worker's partitions wait before moving; unset: 60s, 5s with the embedded profile"
    ),
    "security_protocol": "PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL",
    "sasl_mechanism": "PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512 | GSSAPI | OAUTHBEARER",
    "sasl_username": "SASL user name",
    "sasl_password": "SASL password",
    "ssl_cafile": "CA certificate file (PEM)",
    "ssl_certfile": "client certificate file (PEM)",
    "ssl_keyfile": "client private key file (PEM)",
    "app_id": "consumer group id and prefix of internal topics",
    "input_topic": "topic of input events (key = aggregation key)",
    "aggregates_topic": "topic the per-event window aggregates are written to",
    "queries_topic": "topic of range queries (co-partitioned with the input)",
    "answers_topic": "topic the range-query answers are written to",
    "dead_letter_topic": "topic of rejected input (original bytes + reason headers)",
    "partitions": "partitions of the topics the app creates",
    "replication_factor": "replication factor of the topics the app creates",
    "retention": "R: how far behind stream time events are kept (duration)",
    "windows": "comma-separated window sizes, each <= retention (e.g. 1m,5m,1h)",
    "aggregations": "comma-separated aggregations: built-in names (stores.monoids), "
    "package.module:attribute import paths or fiba_stream.monoids entry points; "
    "name=aggregation gives one a name (spread=mymodule:SPREAD)",
    "max_future_skew": "an event further than this ahead of stream time AND of the "
    "partition's previous event is rejected: a lone outlier, never a whole stream resuming "
    "after a pause (duration; off: never)",
    "max_wall_clock_skew": "events further than this ahead of the worker's clock are rejected "
    "(duration; off: never, for replays)",
    "resolution": "pane size: event times are rounded down to it (duration; unset = exact)",
    "emit": "event | batch | changes",
    "window_end": "stream_time | event_time: each record's windows end at the partition's "
    "stream time, or at the event's own time",
    "processing_guarantee": (
        "at_least_once | exactly_once (outputs, changelog and offsets in one Kafka transaction "
        "per partition and chunk; needs a broker with transactions)"
    ),
    "batch_max_records": "largest batch in emit=batch",
    "batch_max_wait": "longest wait for a batch in emit=batch (duration)",
    "key_field": "field of the value holding the aggregation key (unset = Kafka key)",
    "ts_field": "field of the value holding the event time (epoch ms or ISO-8601)",
    "value_field": "field of the value holding the aggregated value",
    "timestamp_source": "field | kafka (the Kafka record timestamp is the event time)",
    "max_key_bytes": "larger keys go to the dead-letter topic",
    "max_value_bytes": "larger values go to the dead-letter topic",
    "state_dir": "directory of this worker's local state",
    "web_host": "interface of this worker's HTTP server",
    "web_port": "port of this worker's HTTP server",
    "sweep_interval": "period of the idle-key eviction sweep (duration)",
    "standby_replicas": "standby replicas of the window store",
    "log_level": "debug | info | warning | error | critical",
}


SECRET_SETTINGS = frozenset({"sasl_password"})
"""Settings never shown in clear (logs, ``fiba config show``)."""

ENV_PREFIX = "FIBA_"
CONFIG_ENV = "FIBA_CONFIG"
CACHE_DIR_ENV = "FIBA_CACHE_DIR"
"""Where downloaded jars (Apache Kafka's, Spark's Kafka connector; ``app.brokers.kafka_jars``)
live."""
NON_SETTING_ENV = frozenset({CONFIG_ENV, CACHE_DIR_ENV, PURE_PYTHON_SWITCH})
"""The ``FIBA_*`` variables that name no setting (the TOML file, the jar cache, the pure-Python
switch of ``stores``); any other unknown one is refused."""


def setting_text(name: str, value: Any) -> str:
    """``value`` of setting ``name`` written as it would be configured (durations with a unit,
    lists comma-separated, ``unset`` for None, secrets masked)."""
    if value is None:
        return "off" if _PARSERS[name] is _duration_or_off else "unset"
    if name in SECRET_SETTINGS:
        return "****"
    if name == "windows":
        return ",".join(w.name for w in value)
    if isinstance(value, tuple):
        return ",".join(value)
    if _PARSERS[name] in (
        parse_duration,
        _optional_duration,
        _duration_or_off,
        _positive_duration,
    ):
        return format_duration(value)
    return str(value)


def load_settings(
    config_file: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] = os.environ,
) -> Settings:
    """Build and validate ``Settings`` from defaults, TOML, environment and CLI overrides.

    Raises ``ConfigError`` (one clear message) on an unreadable file, an unknown TOML key,
    ``FIBA_*`` variable or override, or any invalid value.
    """
    return load_settings_with_sources(config_file, overrides, environ)[0]


def load_settings_with_sources(
    config_file: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] = os.environ,
) -> tuple[Settings, dict[str, str]]:
    """``load_settings`` plus, per setting, the layer its value came from: ``default``,
    ``<file>: <key>``, ``environment FIBA_<NAME>`` or ``--<flag>``."""
    layers: list[tuple[str, Any, str]] = []  # (setting, value, source), lowest layer first
    path = config_file if config_file is not None else environ.get(CONFIG_ENV) or None
    if path is not None:
        for name, value in _read_toml(Path(path)).items():
            layers.append((name, value, f"{path}: {name}"))
    unknown = sorted(
        variable
        for variable in environ
        if variable.startswith(ENV_PREFIX)
        and variable not in NON_SETTING_ENV
        and variable[len(ENV_PREFIX) :].lower() not in SETTINGS_HELP
    )
    if unknown:
        raise ConfigError(
            f"environment: unknown setting(s) {', '.join(unknown)} (every {ENV_PREFIX}* variable"
            f" but {' and '.join(sorted(NON_SETTING_ENV))} must name a setting)"
        )
    for name in SETTINGS_HELP:
        env_name = f"{ENV_PREFIX}{name.upper()}"
        if env_name in environ:
            layers.append((name, environ[env_name], f"environment {env_name}"))
    for flag, value in (overrides or {}).items():
        name = flag.lstrip("-").replace("-", "_")
        if name not in SETTINGS_HELP:
            raise ConfigError(f"unknown setting --{flag.lstrip('-').replace('_', '-')}")
        if value is not None:
            layers.append((name, value, f"--{name.replace('_', '-')}"))

    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name, value, source in layers:  # every layer parsed; the highest one wins
        try:
            values[name] = _PARSERS[name](value)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{source}: {exc}") from None
        sources[name] = source
    settings = Settings(**values)
    _validate(settings, sources)
    return settings, {name: sources.get(name, "default") for name in SETTINGS_HELP}


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            doc = tomllib.load(f)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    table = doc.pop("fiba", {})
    if not isinstance(table, dict):
        raise ConfigError(f"config file {path}: 'fiba' must be a table")
    merged = {**doc, **table}
    unknown = sorted(set(merged) - set(SETTINGS_HELP))
    if unknown:
        raise ConfigError(f"config file {path}: unknown setting(s) {', '.join(unknown)}")
    return merged


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value.strip()


def _optional_text(value: Any) -> str | None:
    text = _text(value)
    return text or None


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TypeError(f"expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    try:
        return int(_text(value))
    except ValueError:
        raise ValueError(f"expected an integer, got {value!r}") from None


def _at_least(low: int) -> Callable[[Any], int]:
    """A parser of integers >= ``low``."""

    def parse(value: Any) -> int:
        number = _int(value)
        if number < low:
            raise ValueError(f"must be >= {low}, got {number}")
        return number

    return parse


def _port(value: Any) -> int:
    number = _int(value)
    if not 0 < number < 65536:
        raise ValueError(f"must be a TCP port (1-65535), got {number}")
    return number


def _positive_duration(value: Any) -> int:
    duration = parse_duration(value)
    if duration <= 0:
        raise ValueError("must be a positive duration")
    return duration


def _path(value: Any) -> Path:
    text = _text(value)
    if "\0" in text:
        raise ValueError(f"a path cannot hold a NUL character: {value!r}")
    return Path(text)


def _optional_duration(value: Any) -> int | None:
    if isinstance(value, str) and not value.strip():
        return None
    return parse_duration(value)


def _is_off(value: Any) -> bool:
    """``"off"`` (any case): a limit switched off."""
    return isinstance(value, str) and value.strip().lower() == "off"


def _duration_or_off(value: Any) -> int | None:
    """A limit: a duration, or ``off`` (None: no limit)."""
    if _is_off(value):
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise ValueError(f"{exc}, or off for no limit") from None


def _names(value: Any) -> tuple[str, ...]:
    items = value if isinstance(value, list | tuple) else _text(value).split(",")
    names = tuple(_text(item) for item in items)
    if not names or any(not n for n in names):
        raise ValueError(f"expected a comma-separated list of names, got {value!r}")
    return names


def _windows(value: Any) -> tuple[WindowSpec, ...]:
    specs = []
    for name in _names(value):
        try:
            size = parse_duration(name)
        except ValueError as exc:
            raise ValueError(f"bad window {name!r}: {exc}") from None
        specs.append(WindowSpec(name, size))
    return tuple(specs)


def _choice(options: tuple[str, ...], upper: bool = False) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        text = _text(value)
        text = text.upper() if upper else text.lower()
        if text not in options:
            raise ValueError(f"{value!r} is not one of {', '.join(options)}")
        return text

    return parse


def _optional_choice(options: tuple[str, ...]) -> Callable[[Any], str | None]:
    parse = _choice(options, upper=True)
    return lambda value: parse(value) if _optional_text(value) else None


def _broker(value: Any) -> str:
    text = _text(value)
    parse_bootstrap_servers(text)
    return text


_PARSERS: dict[str, Callable[[Any], Any]] = {
    "broker": _broker,
    "broker_profile": _choice(BROKER_PROFILES),
    "session_timeout": _optional_duration,
    "security_protocol": _optional_choice(SECURITY_PROTOCOLS),
    "sasl_mechanism": _optional_choice(SASL_MECHANISMS),
    "sasl_username": _optional_text,
    "sasl_password": _optional_text,
    "ssl_cafile": _optional_text,
    "ssl_certfile": _optional_text,
    "ssl_keyfile": _optional_text,
    "app_id": _text,
    "input_topic": _text,
    "aggregates_topic": _text,
    "queries_topic": _text,
    "answers_topic": _text,
    "dead_letter_topic": _text,
    "partitions": _at_least(1),
    "replication_factor": _at_least(1),
    "retention": _positive_duration,
    "windows": _windows,
    "aggregations": _names,
    "max_future_skew": _duration_or_off,
    "max_wall_clock_skew": _duration_or_off,
    "resolution": _optional_duration,
    "emit": _choice(EMIT_MODES),
    "window_end": _choice(WINDOW_ENDS),
    "processing_guarantee": _choice(PROCESSING_GUARANTEES),
    "batch_max_records": _at_least(1),
    "batch_max_wait": _positive_duration,
    "key_field": _optional_text,
    "ts_field": _text,
    "value_field": _text,
    "timestamp_source": _choice(TIMESTAMP_SOURCES),
    "max_key_bytes": _at_least(1),
    "max_value_bytes": _at_least(1),
    "state_dir": _path,
    "web_host": _text,
    "web_port": _port,
    "sweep_interval": _positive_duration,
    "standby_replicas": _at_least(0),
    "log_level": _choice(LOG_LEVELS),
}
OFF_SETTINGS = frozenset(name for name, parse in _PARSERS.items() if parse is _duration_or_off)
"""The limits that take ``off`` (None: switched off, written ``off``)."""

_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._\-]{1,249}$")


def _validate(s: Settings, sources: Mapping[str, str]) -> None:
    """Cross-field checks; the message names where the offending value came from."""

    def fail(name: str, message: str) -> None:
        raise ConfigError(f"{sources.get(name, name)}: {message}")

    if not s.app_id or not _TOPIC_NAME.match(s.app_id):
        fail("app_id", f"{s.app_id!r} is not a valid group id / topic prefix")
    topics = (
        "input_topic",
        "aggregates_topic",
        "queries_topic",
        "answers_topic",
        "dead_letter_topic",
    )
    for name in topics:
        topic = getattr(s, name)
        if not _TOPIC_NAME.match(topic):
            fail(name, f"{topic!r} is not a valid Kafka topic name")
    names = [getattr(s, t) for t in topics]
    if len(set(names)) != len(names):
        fail("input_topic", f"the five topics must be distinct, got {', '.join(names)}")
    if s.session_timeout is not None and s.session_timeout <= 0:
        fail("session_timeout", "must be a positive duration (or unset for the default)")
    if s.resolution is not None and s.resolution <= 0:
        fail("resolution", "must be a positive duration (or unset for exact times)")
    if not s.windows:
        fail("windows", "at least one window is needed")
    window_names = [w.name for w in s.windows]
    if len(set(window_names)) != len(window_names):
        fail("windows", f"duplicate window name in {', '.join(window_names)}")
    for w in s.windows:
        if w.size_ms <= 0:
            fail("windows", f"window {w.name!r} must be longer than 0 ms")
        if w.size_ms > s.retention:
            fail("windows", f"window {w.name!r} is longer than the retention ({s.retention} ms)")
    try:
        names = aggregation_names(s.aggregations)
    except AggregationError as exc:
        fail("aggregations", str(exc))
    if len(set(names)) != len(names):
        fail("aggregations", f"duplicate aggregation name in {', '.join(s.aggregations)}")
    for entry in s.aggregations:
        try:
            validated_monoid(named(entry)[1], entry)
        except AggregationError as exc:
            fail("aggregations", str(exc))
    if s.sasl_mechanism and s.security_protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
        fail("sasl_mechanism", "needs security_protocol SASL_PLAINTEXT or SASL_SSL")
    if s.security_protocol in ("SSL", "SASL_SSL"):
        problem = _tls_files_problem(s)
        if problem is not None:
            fail(*problem)
    for name in ("ts_field", "value_field"):
        if not getattr(s, name):
            fail(name, "must not be empty")
    if not s.web_host:
        fail("web_host", "must not be empty (0.0.0.0 listens on every interface)")


def _tls_files_problem(s: Settings) -> tuple[str, str] | None:
    """The setting among ``ssl_cafile``, ``ssl_certfile`` and ``ssl_keyfile`` whose file cannot
    be read or loaded as PEM (as the clients load them: CA certificates, then the client
    certificate with its key), and why; None when all given ones load."""
    for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
        path = getattr(s, name)
        if path is not None and not Path(path).is_file():
            return name, f"{path!r} is not a file"
    try:
        context = ssl.create_default_context(cafile=s.ssl_cafile)
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        return "ssl_cafile", f"cannot load CA certificates (PEM) from {s.ssl_cafile!r}: {exc}"
    if s.ssl_certfile is not None:
        try:
            context.load_cert_chain(s.ssl_certfile, s.ssl_keyfile)
        except (OSError, ValueError) as exc:
            return "ssl_certfile", (
                f"cannot load the client certificate {s.ssl_certfile!r}"
                f" with key {s.ssl_keyfile or s.ssl_certfile!r} (PEM): {exc}"
            )
    return None
