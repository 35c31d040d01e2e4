"""Settings: parsing of each source, precedence between them, and one-line errors."""

from pathlib import Path

import pytest

from app.faust_app import faust_options
from app.settings import (
    ConfigError,
    Settings,
    WindowSpec,
    load_settings,
    parse_bootstrap_servers,
    parse_duration,
    setting_text,
)


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("250ms", 250),
        ("10s", 10_000),
        ("5m", 300_000),
        ("1h", 3_600_000),
        ("1d", 86_400_000),
        ("1500", 1500),
        (42, 42),
        (" 2 s ", 2000),
    ],
)
def test_parse_duration_units(text, ms):
    assert parse_duration(text) == ms


@pytest.mark.parametrize("text", ["", "5 minutes", "1.5s", "-3", "5w", True, -1])
def test_parse_duration_rejects(text):
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "servers"),
    [
        ("kafka://127.0.0.1:9092", ("127.0.0.1:9092",)),
        ("a:1,b:2", ("a:1", "b:2")),
        ("kafka://a:1;b", ("a:1", "b:9092")),
        ("localhost", ("localhost:9092",)),
    ],
)
def test_bootstrap_servers(text, servers):
    assert parse_bootstrap_servers(text) == servers


def test_defaults_without_any_source():
    s = load_settings(environ={})
    assert s == Settings()
    assert s.windows == (
        WindowSpec("1m", 60_000),
        WindowSpec("5m", 300_000),
        WindowSpec("1h", 3_600_000),
    )
    assert s.retention == 3_600_000 and s.resolution is None and s.emit == "event"
    assert s.faust_broker == "kafka://127.0.0.1:9092"
    assert s.changelog_topic == "fiba-windows-changelog"


def _toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fiba.toml"
    path.write_text(text)
    return path


def test_precedence_defaults_toml_env_cli(tmp_path):
    path = _toml(
        tmp_path, 'retention = "2h"\nwindows = "10s,2h"\nweb_port = 7000\napp_id = "from-toml"\n'
    )
    env = {"FIBA_WEB_PORT": "7001", "FIBA_APP_ID": "from-env"}
    s = load_settings(path, overrides={"app-id": "from-cli", "emit": None}, environ=env)
    assert s.retention == 7_200_000
    assert s.windows == (WindowSpec("10s", 10_000), WindowSpec("2h", 7_200_000))
    assert s.web_port == 7001
    assert s.app_id == "from-cli"
    assert s.emit == "event"


def test_config_path_from_environment_and_fiba_table(tmp_path):
    path = _toml(tmp_path, '[fiba]\nemit = "batch"\naggregations = ["count", "max"]\n')
    s = load_settings(environ={"FIBA_CONFIG": str(path)})
    assert s.emit == "batch"
    assert s.aggregations == ("count", "max")


def test_optional_settings_can_be_unset_and_set():
    s = load_settings(overrides={"resolution": "1s", "key_field": "device"}, environ={})
    assert s.resolution == 1000 and s.key_field == "device"
    s = load_settings(environ={"FIBA_RESOLUTION": "", "FIBA_KEY_FIELD": ""})
    assert s.resolution is None and s.key_field is None


def test_max_wall_clock_skew_is_a_day_a_duration_or_off():
    assert load_settings(environ={}).max_wall_clock_skew == 86_400_000
    assert (
        load_settings(environ={"FIBA_MAX_WALL_CLOCK_SKEW": "2h"}).max_wall_clock_skew == 7_200_000
    )
    assert load_settings(environ={"FIBA_MAX_WALL_CLOCK_SKEW": "OFF"}).max_wall_clock_skew is None
    assert (
        load_settings(overrides={"max_wall_clock_skew": "off"}, environ={}).max_wall_clock_skew
        is None
    )
    with pytest.raises(ConfigError, match="--max-wall-clock-skew: not a duration"):
        load_settings(overrides={"max_wall_clock_skew": "never"}, environ={})


def test_max_future_skew_is_off_by_default_and_takes_off_everywhere(tmp_path):
    """``off`` (no limit: a pause in event time rejects nothing) is the default and is
    accepted from TOML, the environment and the flags; a duration still works."""
    assert load_settings(environ={}).max_future_skew is None
    toml = tmp_path / "fiba.toml"
    toml.write_text('max_future_skew = "off"\n')
    assert load_settings(toml, environ={}).max_future_skew is None
    assert load_settings(environ={"FIBA_MAX_FUTURE_SKEW": "Off"}).max_future_skew is None
    overrides = {"max_future_skew": "off"}
    assert load_settings(overrides=overrides, environ={}).max_future_skew is None
    assert load_settings(environ={"FIBA_MAX_FUTURE_SKEW": "5m"}).max_future_skew == 300_000
    with pytest.raises(ConfigError, match=r"--max-future-skew: not a duration: 'never'.*or off"):
        load_settings(overrides={"max_future_skew": "never"}, environ={})


def test_limits_are_shown_as_durations_or_off():
    """``config show`` and ``-h`` write a limit as configured: ``1d``, not 86400000."""
    assert setting_text("max_wall_clock_skew", 86_400_000) == "1d"
    assert setting_text("max_wall_clock_skew", None) == "off"
    assert setting_text("max_future_skew", None) == "off"
    assert setting_text("max_future_skew", 300_000) == "5m"


@pytest.mark.parametrize(
    ("profile", "session_timeout", "session_s", "heartbeat_s"),
    [
        ("kafka", None, None, None),  # Faust's own defaults
        ("embedded", None, 5.0, 0.5),
        ("kafka", "6s", 6.0, 0.6),
        ("embedded", "8s", 8.0, 0.8),
    ],
)
def test_session_timeout_reaches_faust_on_either_profile(
    profile, session_timeout, session_s, heartbeat_s
):
    overrides = {"broker_profile": profile, "session_timeout": session_timeout}
    options = faust_options(load_settings(overrides=overrides, environ={}))
    assert options.get("broker_session_timeout") == session_s
    assert options.get("broker_heartbeat_interval") == heartbeat_s


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"windows": "5x"}, "bad window '5x'"),
        ({"windows": "2h"}, "longer than the retention"),
        ({"windows": "1m,1m"}, "duplicate window"),
        ({"emit": "sometimes"}, "not one of event, batch, changes"),
        ({"retention": "forever"}, "not a duration"),
        ({"web_port": "http"}, "expected an integer"),
        ({"web_port": 70000}, "TCP port"),
        ({"partitions": 0}, "must be >= 1"),
        ({"broker": "kafka://"}, "no broker address"),
        ({"broker_profile": "docker"}, "not one of kafka, embedded"),
        ({"session_timeout": "0s"}, "session-timeout: must be a positive duration"),
        ({"answers_topic": "fiba-events"}, "must be distinct"),
        ({"input_topic": "bad topic"}, "not a valid Kafka topic name"),
        ({"sasl_mechanism": "PLAIN"}, "needs security_protocol"),
        ({"aggregations": "sum,median"}, "unknown aggregation 'median'"),
        ({"aggregations": "sum,sum"}, "duplicate aggregation"),
        ({"no-such-flag": 1}, "unknown setting --no-such-flag"),
        ({"partitions": 4.5}, "partitions: expected an integer, got 4.5"),
        ({"broker": "h1:9092,h2:70000"}, "not a TCP port (1-65535): 70000 in 'h2:70000'"),
        ({"web_host": " "}, "--web-host: must not be empty"),
        ({"state_dir": "data\0dir"}, "--state-dir: a path cannot hold a NUL character"),
    ],
)
def test_invalid_values_raise_one_clear_config_error(overrides, fragment):
    with pytest.raises(ConfigError) as info:
        load_settings(overrides=overrides, environ={})
    message = str(info.value)
    assert fragment in message
    assert "\n" not in message


def test_error_names_its_source(tmp_path):
    with pytest.raises(ConfigError, match="environment FIBA_EMIT"):
        load_settings(environ={"FIBA_EMIT": "never"})
    path = _toml(tmp_path, 'emit = "never"\n')
    with pytest.raises(ConfigError, match=r"fiba\.toml: emit"):
        load_settings(path, environ={})


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("retention = ", "not valid TOML"),
        ("colour = 'blue'", "unknown setting(s) colour"),
        ("fiba = 3", "'fiba' must be a table"),
    ],
)
def test_bad_config_files(tmp_path, text, fragment):
    with pytest.raises(ConfigError) as info:
        load_settings(_toml(tmp_path, text), environ={})
    assert fragment in str(info.value)


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_settings(tmp_path / "absent.toml", environ={})


def test_the_fiba_variables_that_name_no_setting_are_not_refused(tmp_path):
    """``make test`` runs the suite with ``FIBA_PURE_PYTHON=1`` (``stores``' switch): every
    command must still load its settings."""
    env = {"FIBA_PURE_PYTHON": "1", "FIBA_CACHE_DIR": str(tmp_path), "FIBA_APP_ID": "x"}
    assert load_settings(environ=env).app_id == "x"


@pytest.mark.parametrize(
    ("toml", "environ", "overrides", "fragment"),
    [
        ('web_port = "abc"', {"FIBA_WEB_PORT": "6067"}, {}, "fiba.toml: web_port: expected an"),
        ("web_port = 70000", {}, {"web_port": "6067"}, "fiba.toml: web_port: must be a TCP port"),
        ("partitions = 0", {"FIBA_PARTITIONS": "2"}, {}, "fiba.toml: partitions: must be >= 1"),
        ("", {"FIBA_RETENTION": "soon"}, {"retention": "1h"}, "FIBA_RETENTION: not a duration"),
        ("", {"FIBA_EMIT": "never"}, {"emit": "batch"}, "FIBA_EMIT: 'never' is not one of"),
        ("", {"FIBA_BATCH_MAX_WAIT": "0s"}, {"batch_max_wait": "1s"}, "positive duration"),
    ],
)
def test_a_bad_value_is_reported_even_where_a_higher_layer_overrides_it(
    tmp_path, toml, environ, overrides, fragment
):
    """Every layer is validated (module doc of app.settings): the mistake is reported now,
    not the day its override goes away."""
    with pytest.raises(ConfigError) as info:
        load_settings(_toml(tmp_path, toml + "\n"), overrides=overrides, environ=environ)
    assert fragment in str(info.value)
