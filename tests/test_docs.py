"""Every code block of the README and of ``docs/`` runs, or names real commands, as written.

A fenced block is ``python`` (executed here; the Faust example is ``examples/clicks.py``
verbatim, which ``tests/test_sliding_e2e.py`` runs as a worker; the Spark example runs against
the test broker), ``json`` (a record: an aggregate or an answer valid under its
JSON Schema in ``schemas/``, a range query the worker's parser takes, an input event),
``sh`` (each line a real command with options its parser accepts: ``fiba``
commands through the CLI itself, ``make`` targets of the Makefile, ``docker compose`` services
of ``docker-compose.yml``, ``spark-submit`` with the job's own options; the README's session is
run end to end by ``tests/test_readme.py``), ``mermaid`` (the module graph, checked by
``tests/test_module_graph.py``) or ``text`` (an illustration: output, formulas, no code).
Relative links must point at files that exist.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
KINDS = {"python", "sh", "json", "mermaid", "text"}
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)


def blocks(kind: str | None = None) -> list[tuple[str, str, str]]:
    """``(page, kind, code)`` of every fenced block (of ``kind``) of every page."""
    found = []
    for page in PAGES:
        for match in FENCE.finditer(page.read_text()):
            if kind is None or match.group(1) == kind:
                found.append((str(page.relative_to(ROOT)), match.group(1), match.group(2)))
    return found


def is_faust_example(code: str) -> bool:
    return code == (ROOT / "examples" / "clicks.py").read_text()


def is_spark_example(code: str) -> bool:
    return "spark_session(" in code


def test_every_block_is_of_a_checked_kind():
    assert len(blocks()) > 10
    assert {kind for _, kind, _ in blocks()} <= KINDS, [
        (page, kind) for page, kind, _ in blocks() if kind not in KINDS
    ]


@pytest.mark.parametrize(
    "page, code",
    [
        (page, code)
        for page, _, code in blocks("python")
        if not is_faust_example(code) and not is_spark_example(code)
    ],
)
def test_python_block_runs(page, code):
    exec(compile(code, page, "exec"), {"__name__": "docs_example"})


def test_the_faust_and_spark_examples_are_accounted_for():
    python = [code for _, _, code in blocks("python")]
    assert sum(map(is_faust_example, python)) == 1
    assert sum(map(is_spark_example, python)) == 1


# --- shell blocks --------------------------------------------------------------------------


def shell_commands() -> list[tuple[str, list[str]]]:
    """``(page, argv)`` of every command line of every ``sh`` block (comments, ``&`` and
    backslash continuations resolved)."""
    commands = []
    for page, _, code in blocks("sh"):
        for line in code.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip().rstrip("&").strip()
            if line and not line.startswith("#"):
                commands.append((page, shlex.split(line)))
    return commands


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([a-z][\w-]*):", text, flags=re.MULTILINE))


def compose_services() -> set[str]:
    return set(yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"])


def check_fiba(args: list[str]) -> None:
    """``fiba ARGS --help`` parses: the command exists and every option is one of its own."""
    from app.cli import cli

    result = CliRunner().invoke(cli, [*args, "--help"], prog_name="fiba")
    assert result.exit_code == 0, (args, result.output)
    assert "Usage:" in result.output, (args, result.output)


def check_compose(args: list[str]) -> None:
    """``docker compose [--profile P] VERB [-d] [--rm] [--scale S=N] [SERVICE [COMMAND...]]``:
    the service is one of the Compose file's, a ``fiba`` command a real one."""
    valued = {"--profile", "--scale"}
    rest = list(args)
    while rest and rest[0].startswith("-"):
        rest = rest[2:] if rest[0] in valued else rest[1:]
    verb, rest = rest[0], rest[1:]
    assert verb in {"up", "run", "exec", "down", "port", "logs"}, verb
    while rest and rest[0].startswith("-"):
        rest = rest[2:] if rest[0] in valued else rest[1:]
    if rest:
        assert rest[0] in compose_services(), rest[0]
        if rest[1:]:
            assert rest[1] == "fiba", rest
            check_fiba(rest[2:])


def check_command(argv: list[str]) -> None:
    assignments = []
    while argv and re.fullmatch(r"[A-Z_]+=.*", argv[0]):
        assignments, argv = [*assignments, argv[0]], argv[1:]
    for assignment in assignments:  # VAR=value before a command: each a real setting
        check_command(["export", assignment])
    program, *args = argv
    if program == "fiba":
        check_fiba(args)
    elif program == "make":
        assert set(args) <= make_targets(), args
    elif program == "export":
        from app.settings import load_settings

        name, _, value = args[0].partition("=")
        assert name.startswith("FIBA_")
        load_settings(environ={name: value})  # a real setting with a valid value
    elif argv[:2] == ["docker", "compose"]:
        check_compose(argv[2:])
    elif program == "spark-submit":
        script = next(a for a in args if a.endswith(".py"))
        assert (ROOT / script).is_file(), script
        check_fiba(["spark-join", *args[args.index(script) + 1 :]])
    else:
        raise AssertionError(f"no check for {program!r}: {argv}")


@pytest.mark.parametrize(
    "page, argv",
    shell_commands(),
    ids=[f"{p}:{' '.join(a)[:40]}" for p, a in shell_commands()],
)
def test_shell_command_is_real(page, argv):
    check_command(argv)


def test_a_wrong_command_or_option_is_caught():
    """The shell check is not a formality: a made-up option, command or target fails it."""
    for argv in (
        ["fiba", "worker", "--no-such-flag"],
        ["fiba", "no-such-command"],
        ["fiba", "spark-join", "--no-such-flag"],
        ["make", "no-such-target"],
        ["docker", "compose", "run", "--rm", "no-such-service"],
        ["export", "FIBA_NO_SUCH_SETTING=1"],
    ):
        with pytest.raises(Exception):  # noqa: B017 (an AssertionError or a ConfigError)
            check_command(argv)


# --- records ------------------------------------------------------------------------------


@pytest.mark.parametrize("page, code", [(page, code) for page, _, code in blocks("json")])
def test_json_block_is_a_valid_record(page, code):
    from agents.queries.parsing import parse_query
    from tests.test_output_schemas import validate

    record = json.loads(code)
    if "windows" in record:
        validate("aggregate", record)
    elif "result" in record:
        validate("answer", record)
    elif "query_id" in record:
        assert parse_query(code.encode()).query_id == record["query_id"]
    else:
        assert set(record) == {"ts", "value"}, record  # an input event


# --- links ---------------------------------------------------------------------------------


def test_relative_links_point_at_files():
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target and not (page.parent / target).exists():
                broken.append((str(page.relative_to(ROOT)), target))
    assert broken == []


PROJECT_FOLDERS = ("stores", "agents", "app", "spark_bridge", "bench", "tests", "examples")


def project_sources() -> list[Path]:
    """The project's Python modules: its own folders only, never a virtual environment
    (``.venv``, ``.venv-newest``) or a build tree beside them."""
    return sorted(
        path
        for folder in PROJECT_FOLDERS
        for path in (ROOT / folder).glob("**/*.py")
        if not {"build", "target"} & set(path.parts)
    )


def test_module_docstrings_point_at_pages_that_exist():
    """A module docstring links its design note by path (``docs/design/fiba.md``)."""
    import ast

    named = []
    for path in project_sources():
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        named += [(str(path.relative_to(ROOT)), m) for m in re.findall(r"docs/[\w/.-]+\.md", doc)]
    assert len(named) > 30
    assert [(p, m) for p, m in named if not (ROOT / m).is_file()] == []


MAX_MODULE_DOCSTRING_LINES = 20
LEFT_TO_THE_WINDOWS_CORE = {"stores/key_windows.py", "stores/monoids.py"}
"""Modules the native windows core rewrites (issue 30 item 4); their text is in docs/ already."""


def test_module_docstrings_are_short():
    """What a module is for, its semantics and costs; the essays live in docs/."""
    import ast

    long = []
    for path in project_sources():
        name = str(path.relative_to(ROOT))
        if name in LEFT_TO_THE_WINDOWS_CORE:
            continue
        lines = len((ast.get_docstring(ast.parse(path.read_text())) or "").splitlines())
        if lines > MAX_MODULE_DOCSTRING_LINES:
            long.append((name, lines))
    assert long == []


# --- the Spark example ---------------------------------------------------------------------


@pytest.mark.kafka
@pytest.mark.timeout(300)
def test_the_spark_example_reads_an_aggregates_topic(kafka_bootstrap, spark):
    """The Spark page's example, on the test broker and a topic of three aggregate records
    written in one batch (whose tail the embedded broker's ListOffsets hides)."""
    from tests.spark_fixtures import create_topic, produce, unique_topic

    ((page, code),) = [(p, c) for p, _, c in blocks("python") if is_spark_example(c)]
    topic = create_topic(kafka_bootstrap, unique_topic("docs"), 1)
    window = {"start": 0, "end": 300_000, "count": 1, "aggregates": {"sum": 2.0}}
    records = []
    for i in range(3):
        record = {"key": "k", "event_ts": 300_000 + i, "stream_time": 300_000 + i}
        record |= {"windows": {"5m": window}, "input_partition": 0, "input_offset": i}
        records.append((0, b"k", json.dumps(record).encode()))
    produce(kafka_bootstrap, topic, records)
    code = code.replace('"127.0.0.1:9092"', repr(kafka_bootstrap))
    code = code.replace('"fiba-aggregates"', repr(topic))
    namespace: dict = {"__name__": "docs_example"}
    exec(compile(code, page, "exec"), namespace)
    assert namespace["aggs"].count() == 3
    assert {"window_start", "window_end", "sum"} <= set(namespace["five"].columns)
    assert namespace["stream"].isStreaming
    assert namespace["five_stream"].columns == namespace["five"].columns
