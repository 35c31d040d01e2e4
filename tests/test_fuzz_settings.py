"""Fuzzing the settings parser (issue 16, "Also build"): any environment variables, TOML file
or CLI overrides give a ``Settings`` the worker can build its parts from, or a ``ConfigError``
of one line (what the CLI prints before exiting with 2), never another exception."""

from __future__ import annotations

import json
import os
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.events import EventParser
from app.settings import SETTINGS_HELP, ConfigError, Settings, load_settings
from stores.key_windows import WindowConfig
from tests.test_fuzz_events import tricky_text

pytestmark = pytest.mark.timeout(300)

NAMES = sorted(SETTINGS_HELP)
DURATIONS = ["1", "0", "-1", "10s", "5m", "1h,5m", "99999999999999999999d", "1.5s", "\uff15s"]
OTHERS = ["count,sum", "bloom,argmax", "sum,sum", "event", "batch", "EMBEDDED", "kafka://h:1"]
OTHERS += ["h1:9092;h2", "[::1]:9092", "SASL_SSL", "plain", "x" * 300, "a b", "fiba-events"]
plausible = st.sampled_from(DURATIONS + OTHERS)
texts = st.one_of(st.text(max_size=20), plausible, tricky_text)
toml_values = st.one_of(
    texts.map(lambda t: json.dumps(t)),  # a TOML basic string (or invalid TOML: also fine)
    st.integers().map(str),
    st.floats(allow_nan=False).map(repr),
    st.sampled_from(["true", "false", "1979-05-27T07:32:00Z", "{}", "[]", "inf", "nan"]),
    st.lists(texts, max_size=3).map(json.dumps),
    st.lists(st.integers(), max_size=3).map(str),
)


def check(load) -> None:
    """``load()`` gives usable ``Settings`` or a one-line ``ConfigError``."""
    try:
        loaded = load()
    except ConfigError as exc:
        message = str(exc)
        assert message and "\n" not in message, message
        return
    assert isinstance(loaded, Settings)
    WindowConfig.from_settings(loaded)
    EventParser(loaded)
    assert loaded.bootstrap_servers and loaded.window_sizes


@settings(max_examples=300)
@given(st.dictionaries(st.sampled_from(NAMES), texts, max_size=6))
def test_any_environment_loads_or_is_one_config_error(values) -> None:
    environ = {f"FIBA_{name.upper()}": text for name, text in values.items()}
    check(lambda: load_settings(environ=environ))


@settings(max_examples=300)
@given(
    st.dictionaries(st.sampled_from([*NAMES, "nope"]), toml_values, max_size=6),
    st.booleans(),
    st.one_of(st.none(), st.binary(max_size=40)),
)
def test_any_toml_file_loads_or_is_one_config_error(values, in_table, raw) -> None:
    lines = ["[fiba]"] if in_table else []
    lines += [f"{name} = {value}" for name, value in values.items()]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "fiba.toml")
        with open(path, "wb") as f:
            f.write(raw if raw is not None else "\n".join(lines).encode("utf-8", "surrogatepass"))
        check(lambda: load_settings(config_file=path, environ={}))


@settings(max_examples=300)
@given(
    st.dictionaries(
        st.sampled_from([*NAMES, "no-such-flag"]),
        st.one_of(texts, st.integers(), st.none(), st.booleans(), st.lists(texts, max_size=2)),
        max_size=6,
    )
)
def test_any_cli_overrides_load_or_are_one_config_error(overrides) -> None:
    check(lambda: load_settings(overrides=overrides, environ={}))


def test_a_missing_config_file_is_one_config_error() -> None:
    check(lambda: load_settings(config_file="/nonexistent/fiba.toml", environ={}))
